"""The product path (DP first, CP-SAT where only it can answer) on rigs full of ties.

These rigs took CP-SAT minutes to break ties on; the exact DP settles the whole chain in passes.
No wall times are asserted: each must come back optimal with no CP-SAT solve, and the expected
plans are worked out by hand. Random rigs check the product path against exhaustive enumeration.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from solver.engines import build_table
from solver.planning.build import build_arcs
from solver.planning.classes import solve_plan
from solver.planning.planner import plan_rig
from solver.planning.resolve import load_problem
from solver.solvers import Limits
from solver.solvers.exhaustive import solve_exhaustive
from tests.helpers.tiers import examples
from tests.solvers.test_agreement import problems

RIGS = Path(__file__).resolve().parents[1] / "rigs"


@pytest.mark.parametrize(
    ("rig", "cuts", "gpus"),
    [
        # 9 equal cards, everything fits: every split ties at 65 ms; the smallest bottleneck is
        # 15 layers (9 x 15 >= 130), and the smallest cut list then starts at 130 - 8 x 15 = 10
        ("ties-9x130", [10, *range(25, 130, 15)], list(range(9))),
        # the same over 42 layers with a free order: 5 layers at most, first cut 42 - 8 x 5 = 2
        ("ties-9x42-auto", [2, *range(7, 42, 5)], list(range(9))),
        # 10 cards that differ only in memory, which all of them have to spare: one class of GPUs
        ("distinct-10x130-auto", list(range(13, 130, 13)), list(range(10))),
        # 10 cards whose memory differs where it matters (long ranges): ten classes, 1,024 states;
        # every card holds 13 layers and all their experts, so 13 each in rig order wins
        pytest.param("mem-10x130-auto", list(range(13, 130, 13)), list(range(10)), marks=pytest.mark.slow),
    ],
)
def test_tie_rigs_are_proven_by_the_dp_without_a_solve(rig, cuts, gpus):
    r = plan_rig(load_problem(RIGS / f"{rig}.yaml"), Limits(workers=1))
    assert r.status == "optimal" and r.solution.name == "dp"
    assert r.solution.work.solves == 0
    assert (r.plan.cuts, r.plan.gpus) == (cuts, gpus)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_product_path_matches_exhaustive_enumeration(p):
    arcs = build_arcs(p, build_table(p))
    got, ex = solve_plan(arcs, Limits(workers=1)), solve_exhaustive(arcs)
    assert (got.status, got.gpus, got.cuts) == (ex.status, ex.gpus, ex.cuts)
