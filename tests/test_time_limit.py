"""--time-limit: the best plan found comes back as feasible, with the proven bound and the gap; the
limit is a finite number of seconds above zero; no plan in time exits 3."""

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from factory import random_problem
from rigfiles import tiny_rig

from solver import planner
from solver.cli import cli
from solver.plan import feasible
from solver.planner import plan_rig
from solver.report import to_json
from solver.solvers import Limits, Solution


def big_problem():
    p = random_problem(1, n_layers=128, n_gpus=16, experts=96, order="auto", tight=0.9)
    ones = np.ones(16, dtype=np.int64)
    return dataclasses.replace(p, min_layers=ones, max_layers=ones * 128, miss_ms=190.0)


def test_stopped_proof_is_feasible_with_bound_and_gap():
    p = big_problem()
    seen = []
    r = plan_rig(p, Limits(time_limit=0.05, workers=2, progress=lambda *a: seen.append(a)))
    assert r.status == "feasible"
    assert r.plan is not None and feasible(p, r.plan)
    d = to_json(r)
    assert d["status"] == "feasible" and d["solver"]["proven_optimal"] is False
    bound = d["solver"]["bound"]
    assert bound is not None and bound <= d["window_ms"] + 1e-9  # a minimisation: below the plan's window
    assert d["solver"]["gap"] >= 0
    assert all(what == "window ms" and b <= inc + 1e-9 for what, inc, b in seen)


def test_stopped_proof_of_held_mass_has_a_bound_above_the_plan():
    """Issue 8.3: a free-order plan stopped by the limit reports a proven bound, never null."""
    p = dataclasses.replace(big_problem(), objective="mass")
    r = plan_rig(p, Limits(time_limit=0.05, workers=1))
    d = to_json(r)
    assert d["status"] == "feasible"
    assert d["solver"]["bound"] is not None and d["solver"]["bound"] >= d["held_mass"] - 1e-9
    assert d["solver"]["gap"] is not None and d["solver"]["gap"] >= 0


def test_generous_limit_still_proves_small_rigs():
    p = random_problem(3, n_layers=12, n_gpus=3, experts=8, tight=1.2)
    r = plan_rig(p, Limits(time_limit=60, workers=2))
    assert r.status == "optimal" and to_json(r)["solver"]["gap"] == 0.0


def test_the_clock_starts_with_the_command_not_the_solve():
    """Issue 11.5: time spent before planning (reading files, building tables) counts against the
    limit, so a limit already spent answers with the best plan at hand, unproven."""
    p = big_problem()
    spent = Limits(time_limit=5.0, workers=1, started=time.perf_counter() - 10.0)
    r = plan_rig(p, spent)
    assert r.status == "feasible" and r.plan is not None and feasible(p, r.plan)
    d = to_json(r)
    assert d["solver"]["bound"] is not None and d["solver"]["bound"] <= d["window_ms"] + 1e-9
    assert plan_rig(p, Limits(time_limit=60.0, workers=1)).status == "optimal"


# the command line: what a time limit may be, and no exit 0 without a plan


def run_cli(*args: str | Path):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_usage_line(res) -> str:
    assert res.exit_code == 2 and res.stdout == "", (res.exit_code, res.output)
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    return res.stderr


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "infinity", "1e400", "-1", "0", "-0", "ten"])
def test_a_time_limit_that_is_not_a_finite_positive_number_is_a_usage_error(tmp_path, value):
    rig = tiny_rig(tmp_path)
    assert "--time-limit" in one_usage_line(run_cli(rig, "--time-limit", value, "--json"))


@pytest.mark.parametrize(
    "args",
    [
        ["--budget", "nan"],
        ["--budget", "inf"],
        ["--budget", "-1"],
        ["--sweep", "--sweep-limit", "nan"],
        ["--sweep", "--sweep-limit", "inf"],
        ["--sweep", "--sweep-limit", "0"],
        ["--sweep", "--network-ms", "nan"],
    ],
)
def test_bench_seconds_are_finite(args):
    assert args[-2] in one_usage_line(run_cli("bench", *args))


def test_a_small_time_limit_still_runs(tmp_path):
    res = run_cli(tiny_rig(tmp_path), "--time-limit", "1e-9", "--json")
    assert res.exit_code in (0, 3), res.output
    assert (res.exit_code == 0) == (json.loads(res.stdout)["status"] in ("optimal", "feasible"))


def test_no_plan_in_time_exits_3_with_the_reason(tmp_path, monkeypatch):
    """A solve that found nothing before the limit (status unknown) is no plan: exit 3, never 0."""
    rig = tiny_rig(tmp_path)
    monkeypatch.setattr(planner, "solve_plan", lambda arcs, limits: Solution("cp-sat", "unknown"))
    res = run_cli(rig, "--json", "--time-limit", "1")
    assert res.exit_code == 3
    got = json.loads(res.stdout)
    assert got["status"] == "unknown" and got["stages"] == [] and "time limit ran out" in got["reason"]
    res = run_cli(rig, "--time-limit", "1")
    assert res.exit_code == 3 and "unknown: the time limit ran out before any placement" in res.stdout
