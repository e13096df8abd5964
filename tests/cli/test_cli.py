"""The command line: every exit code, the JSON object, error messages, exports."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import solver.solvers.route
from solver.cli import cli
from solver.solvers import Solution
from tests.helpers.rigfiles import tiny_rig

ROOT = Path(__file__).resolve().parents[2]
BOX = str(ROOT / "rigs" / "box.yaml")


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args))
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def test_box_json_has_the_spec_keys_and_adds_up():
    code, out, err = run(BOX, "--json")
    assert code == 0 and err == ""
    d = json.loads(out)
    for key in (
        "rig",
        "model",
        "objective",
        "status",
        "window_ms",
        "held_mass",
        "held_pairs",
        "cuts",
        "stages",
        "baseline",
        "solver",
    ):
        assert key in d
    assert (d["rig"], d["model"], d["objective"], d["status"]) == (
        "box",
        "Qwen3-Next-80B-A3B",
        "time",
        "optimal",
    )
    stages = d["stages"]
    assert [s["gpu"] for s in stages] == [0, 1, 2, 3]
    assert [s["start"] for s in stages[1:]] == d["cuts"]
    assert stages[0]["start"] == 0 and stages[-1]["end"] == 48
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(stages))
    for s in stages:
        for key in (
            "name",
            "room_bytes",
            "cache_bytes",
            "held_pairs",
            "visible_pairs",
            "held_mass",
            "compute_ms",
        ):
            assert key in s
        assert 0 <= s["cache_bytes"] <= s["room_bytes"]
        assert s["held_pairs"] <= s["visible_pairs"]
        assert s["cache_bytes"] == s["held_pairs"] * 2044723  # 1.95 MiB per expert, rounded down
    assert d["held_pairs"] == sum(s["held_pairs"] for s in stages)
    assert d["held_mass"] == pytest.approx(sum(s["held_mass"] for s in stages))
    window = sum(s["compute_ms"] for s in stages) + 190 * (1 - d["held_mass"])
    assert d["window_ms"] == pytest.approx(window)
    base = d["baseline"]
    assert set(base) >= {"name", "cuts", "feasible", "window_ms", "held_mass", "held_pairs"}
    assert base["name"] == "proportional" and len(base["cuts"]) == 3
    assert d["window_ms"] <= base["window_ms"]  # never worse than the proportional baseline
    sol = d["solver"]
    assert sol["name"] == "dp" and sol["proven_optimal"] is True and sol["gap"] == 0.0
    assert sol["bound"] == pytest.approx(d["window_ms"], rel=1e-9)
    assert sol["table_ms"] <= sol["wall_ms"]
    assert "oracle" not in d


def test_check_reports_agreement():
    code, out, _ = run(BOX, "--json", "--check")
    d = json.loads(out)
    assert code == 0 and d["oracle"]["agrees"] is True
    assert d["oracle"]["window_ms"] == pytest.approx(d["window_ms"])


def test_check_disagreement_exits_4(monkeypatch):
    def wrong(arcs, limits=None, policy=None):
        return Solution("exhaustive", "optimal", tuple(range(arcs.n_gpus)), (2, 3, 4), wall_ms=0.0)

    monkeypatch.setattr(solver.solvers.route, "solve_exhaustive", wrong)  # the box's oracle; the DP plans it
    code, out, _ = run(BOX, "--json", "--check")
    assert code == 4
    assert json.loads(out)["oracle"]["agrees"] is False


def test_table_output(tmp_path):
    code, out, _ = run(BOX)
    assert code == 0
    for text in ("RTX 3060", "RTX 5060 Ti", "proportional", "window", "optimal (proven)", "held mass"):
        assert text in out


def test_infeasible_exits_3_with_a_reason(tmp_path):
    rig = tiny_rig(tmp_path, gpus=[{"free": 100, "layer_ms": 1.0}, {"free": 100, "layer_ms": 1.0}])
    code, out, _ = run(str(rig), "--json")
    d = json.loads(out)
    assert code == 3
    assert d["status"] == "infeasible" and d["cuts"] == [] and d["stages"] == []
    assert d["reason"].startswith("GPU 0 cannot hold its minimum of 1 layer")
    code, out, _ = run(str(rig))
    assert code == 3 and "infeasible" in out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "gpus:\n  - free: 12 GiB\n    layer_ms: 1\n  - free: twelve\n    layer_ms: 1\n",
            "rig.yaml:4: gpus[1].free: expected a size like '11.2 GiB'",
        ),
        (
            "gpus:\n  - free: 12 GiB\n    layer_ms: 1\n    colour: red\n",
            "rig.yaml:4: gpus[0]: unknown key 'colour' (expected one of: name, free, ",
        ),
        ("gpus:\n  - free: 12 GiB\n", "rig.yaml:2: gpus[0]: needs layer_ms, or both sms and clock_ghz"),
        ("gpus: [\n", "rig.yaml:2: YAML syntax error"),
        ("order: sideways\ngpus:\n  - {free: 1 GiB, layer_ms: 1}\n", "rig.yaml:1: order: "),
        (
            "gpus:\n  - {free: 1 GiB, layer_ms: -1}\n",
            "rig.yaml:2: gpus[0].layer_ms: input should be greater than 0",
        ),
    ],
)
def test_bad_rig_exits_2_with_file_line_and_key(tmp_path, text, expected):
    rig = tmp_path / "bad" / "rig.yaml"
    rig.parent.mkdir()
    rig.write_text(text)
    code, out, err = run(str(rig), "--model", str(tiny_rig(tmp_path).parent / "model.yaml"))
    assert code == 2 and out == ""
    assert expected in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_missing_rig_and_bad_options(tmp_path):
    code, _, err = run(str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml: no such file" in err
    code, _, err = run(BOX, "--objective", "speed")
    assert code == 2 and "Invalid value" in err


def test_unknown_model_key_names_the_model_file(tmp_path):
    rig = tiny_rig(tmp_path, model_extra={"expert_byts": 5})
    code, _, err = run(str(rig))
    assert (
        code == 2
        and "model.yaml:" in err
        and "unknown key 'expert_byts' (did you mean 'expert_bytes'?)" in err
    )


def test_strata_export_matches_the_plan():
    code, out, _ = run(BOX, "--json", "--export", "strata")
    assert code == 0
    d = json.loads(out)
    cuts = ",".join(map(str, d["cuts"]))
    assert d["export"] == {
        "engine": "strata",
        "shell": "posix",
        "lines": [f"--layer-split {cuts}", f'"layer_split": [{cuts.replace(",", ", ")}]'],
    }


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llama.cpp"])
def test_export_for_another_engine_is_refused(engine):
    code, out, err = run(BOX, "--export", engine)
    assert code == 2 and out == ""
    assert f"the plan is for engine strata; plan with --engine {engine}" in err


def test_objective_and_order_overrides():
    _, out, _ = run(BOX, "--json", "--objective", "mass", "--order", "auto")
    d = json.loads(out)
    assert d["objective"] == "mass" and d["order"] == "auto" and d["status"] == "optimal"
    _, out_time, _ = run(BOX, "--json", "--order", "auto")
    assert d["held_mass"] >= json.loads(out_time)["held_mass"] - 1e-12


def test_context_override_changes_room():
    _, small, _ = run(BOX, "--json", "--context", "0")
    _, large, _ = run(BOX, "--json", "--context", "65536")
    assert json.loads(small)["held_pairs"] > json.loads(large)["held_pairs"]


def test_console_script_runs_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe garbage")
    res = subprocess.run([sys.executable, "-m", "solver.cli", str(bad)], capture_output=True, text=True)
    assert res.returncode == 2 and "not UTF-8" in res.stderr and "Traceback" not in res.stderr
