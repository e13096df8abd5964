"""Objective throughput minimises the slowest stage's stage_ms, then the window; JSON and the
table report stage_ms per stage and bottleneck_ms."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.engines.strata import miss_ms
from solver.planning.planner import plan_rig
from solver.planning.resolve import load_problem
from solver.problem.rangewalk import walk_range
from solver.report.planview import to_json
from solver.solvers import Limits
from tests.solvers.test_time_limit import big_problem

BOX = Path(__file__).resolve().parents[2] / "rigs" / "box.yaml"


def solve_json(*args: str) -> dict:
    result = CliRunner().invoke(cli, [str(BOX), "--json", "--workers", "1", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("order", ["as-given", "auto"])
def test_throughput_plan_reports_its_stages_and_beats_the_time_plan_on_them(order):
    thr = solve_json("--objective", "throughput", "--order", order)
    tim = solve_json("--objective", "time", "--order", order)
    p = load_problem(BOX)
    for d in (thr, tim):
        for s in d["stages"]:  # strata's stage_ms: compute plus miss_ms times the mass it does not hold
            w = walk_range(p, s["gpu"], s["start"], s["end"])
            unheld = float(p.mass[w.visible].sum()) - float(p.mass[w.held].sum())
            assert s["stage_ms"] == pytest.approx(s["compute_ms"] + miss_ms(p) * unheld, rel=1e-12)
        assert d["bottleneck_ms"] == max(s["stage_ms"] for s in d["stages"])
    assert thr["objective"] == "throughput" and thr["status"] == "optimal"
    assert thr["bottleneck_ms"] <= tim["bottleneck_ms"] + 1e-6
    assert tim["window_ms"] <= thr["window_ms"] + 1e-6
    assert thr["solver"]["bound"] == pytest.approx(thr["bottleneck_ms"], abs=1e-6)


def test_table_has_a_stage_column():
    result = CliRunner().invoke(cli, [str(BOX), "--objective", "throughput", "--workers", "1"])
    assert result.exit_code == 0 and "stage" in result.stdout and "objective throughput" in result.stdout


def test_stopped_throughput_proof_reports_a_bound_below_the_plan():
    p = dataclasses.replace(big_problem(), objective="throughput")
    r = plan_rig(p, Limits(time_limit=0.2, workers=1))
    d = to_json(r)
    assert d["status"] in ("feasible", "optimal")
    assert d["solver"]["bound"] is not None and d["solver"]["bound"] <= d["bottleneck_ms"] + 1e-6
