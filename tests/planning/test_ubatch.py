"""``--ubatch auto`` chooses the micro-batch a full plan at every candidate would, and the request
objective's options are checked before any planning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.planning.planner import plan_rig
from solver.planning.resolve import Overrides, load_problems, ubatch_candidates
from solver.planning.ubatch import plan_auto
from solver.solvers import Limits

ROOT = Path(__file__).resolve().parents[2]


def test_candidates_stop_at_the_first_that_holds_the_prompt():
    assert ubatch_candidates(2048, 32768) == [256, 512, 1024, 2048]
    assert ubatch_candidates(3000, 32768) == [256, 512, 1024, 2048, 4096]
    assert ubatch_candidates(100, 32768) == [256]
    assert ubatch_candidates(20000, 32768) == [256, 512, 1024, 2048, 4096, 8192]
    assert ubatch_candidates(20000, 1000) == [256, 512, 1024]


def brute(rig: Path, ov: Overrides):
    """Plan every candidate to the end; the best by the module's rule, from the plans' own figures."""
    auto, problems = load_problems(rig, ov)
    assert auto
    rows = []
    for p in problems:
        r = plan_rig(p, Limits(workers=1))
        plan = r.plan
        n = p.engine_fields.n_ubatch
        if plan is None:
            continue
        if p.objective == "request":
            rows.append((round(plan.request_ms(p.generate) * 1e6), n, plan.cuts))
        else:
            rows.append((round(plan.window_ms * 1e6), -plan.prompt.tokens_per_s, n, plan.cuts))
    best = min(rows)
    return best[-2], best[-1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rig", "ov"),
    [
        ("llama-mix", Overrides()),
        ("two-hosts", Overrides()),
        ("llama-mix", Overrides(objective="request", generate=64)),
        ("two-hosts", Overrides(objective="request", generate=256)),
    ],
)
def test_auto_is_the_best_full_plan(rig, ov):
    path = ROOT / "rigs" / f"{rig}.yaml"
    ov = Overrides(**{**ov.__dict__, "n_ubatch": "auto"})
    _, problems = load_problems(path, ov)
    r = plan_auto(problems, Limits(workers=1))
    assert (r.problem.engine_fields.n_ubatch, r.plan.cuts) == brute(path, ov)
    chosen = [c for c in r.candidates if c.n_ubatch == r.problem.engine_fields.n_ubatch]
    assert chosen and chosen[0].window_ms == pytest.approx(r.plan.window_ms)


def run(*args: str):
    return CliRunner().invoke(cli, [*args, "--json", "--workers", "1"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--objective", "request"], "--generate"),
        (["--objective", "request", "--generate", "40000"], "context"),
        (["--objective", "request", "--generate", "8", "--engine", "strata"], "no prompt"),
        (["--ubatch", "auto", "--engine", "strata"], "no micro-batch"),
        (["--ubatch", "sixteen"], "auto"),
    ],
)
def test_request_and_auto_refuse_what_they_cannot_plan(args, says):
    res = run(str(ROOT / "rigs" / "llama-mix.yaml"), *args)
    assert res.exit_code == 2, res.output
    assert says in res.output


def test_request_json_reports_its_objective():
    res = run(str(ROOT / "rigs" / "llama-mix.yaml"), "--objective", "request", "--generate", "64")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["objective"] == "request" and out["generate"] == 64
    assert out["request_ms"] == pytest.approx(out["ttft_ms"] + 64 * out["window_ms"])
    assert out["solver"]["bound"] == pytest.approx(out["request_ms"])


def test_rig_key_auto_plans_every_candidate_and_other_commands_take_512(tmp_path):
    text = (ROOT / "rigs" / "llama-mix.yaml").read_text()
    text = text.replace("../models/", f"{ROOT}/models/") + "n_ubatch: auto\n"
    rig = tmp_path / "auto.yaml"
    rig.write_text(text)
    from solver.planning.resolve import load_problem

    assert load_problem(rig).engine_fields.n_ubatch == 512
    auto, problems = load_problems(rig)
    assert auto and [p.engine_fields.n_ubatch for p in problems] == [256, 512, 1024, 2048]
    res = run(str(rig))
    assert res.exit_code == 0, res.output
    assert [c["n_ubatch"] for c in json.loads(res.output)["ubatch_candidates"]] == [256, 512, 1024, 2048]
