"""CP-SAT, DP and exhaustive enumeration must return the same plan on the same integer table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.engines import build_table
from solver.planning.build import build_arcs
from solver.planning.classes import solve_plan
from solver.planning.resolve import load_problem
from solver.problem.scales import SPARE_UNLIMITED
from solver.solvers import Limits, TooLarge, plan_arcs
from solver.solvers.arcs import gpu_classes
from solver.solvers.cpsat import solve_cpsat
from solver.solvers.exhaustive import solve_exhaustive
from solver.solvers.policy import Policy
from solver.solvers.route import dp_hint, dp_in_order, exact_dp
from tests.helpers.factory import random_problem
from tests.helpers.tiers import examples

ROOT = Path(__file__).resolve().parents[2]


def answers(p, workers: int = 1, policy: Policy | None = None):
    arcs = build_arcs(p, build_table(p))
    return arcs, [
        solve_exhaustive(arcs),
        exact_dp(arcs),
        solve_cpsat(arcs, Limits(workers=workers), policy=policy or Policy()),
    ]


def same(sols) -> bool:
    return len({(s.status, s.gpus, s.cuts) for s in sols}) == 1


@st.composite
def problems(draw: st.DrawFn):
    """Random small rigs, mostly feasible: enough layers for the GPUs' minimums, most of the time."""
    k = draw(st.integers(1, 4))
    return random_problem(
        seed=draw(st.integers(0, 10**6)),
        n_layers=draw(st.integers(min(2 * k + 1, 9), 9)),
        n_gpus=k,
        experts=draw(st.integers(1, 6)),
        order=draw(st.sampled_from(["as-given", "auto"])),
        objective=draw(st.sampled_from(["time", "mass", "throughput"])),
        tight=draw(st.floats(0.7, 2.0)),  # the tight end still gives infeasible rigs
        twins=draw(st.booleans()),
    )


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_three_solvers_agree_on_random_small_rigs(p):
    arcs, sols = answers(p)
    assert same(sols), [(s.name, s.status, s.gpus, s.cuts) for s in sols]
    ex = sols[0]
    if ex.found:
        # every stage of the plan is an arc of the table: a placement the table allows
        assert (plan_arcs(arcs, ex.gpus, ex.cuts) >= 0).all()


@st.composite
def side_levels(draw: st.DrawFn):
    """A random rig's arcs with random spare KV per arc (a few values, so plans tie on the objective
    and differ in spare, or unlimited) and a host-memory limit that binds or not (or none)."""
    p = draw(problems())
    arcs = build_arcs(p, build_table(p))
    rng = np.random.default_rng(draw(st.integers(0, 10**6)))
    n = arcs.n_layers + 1  # a stage's spare depends on its GPU (identical GPUs alike) and range
    table = rng.integers(0, 4, (arcs.n_gpus, n, n))
    table[rng.random(table.shape) < 0.3] = SPARE_UNLIMITED
    spare = table[gpu_classes(arcs)[arcs.gpu], arcs.start, arcs.end]
    limit = None
    if len(arcs) and draw(st.booleans()):
        limit = int(draw(st.floats(0.1, 1.2)) * arcs.n_gpus * float(np.median(arcs.host)))
    return dataclasses.replace(arcs, spare=spare.astype(np.int64), host_limit=limit)


@pytest.mark.slow
@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(side_levels())
def test_spare_and_host_limit_agree(arcs):
    """CP-SAT and exhaustive enumeration agree with the spare level and the host-memory limit; the DP
    agrees whenever it answers (it refuses when its unconstrained optimum breaks the limit)."""
    ex, cp = solve_exhaustive(arcs), solve_cpsat(arcs, Limits(workers=1))
    assert (cp.status, cp.gpus, cp.cuts) == (ex.status, ex.gpus, ex.cuts)
    # the product path: the DP, or CP-SAT hinted by a DP plan that may break the limit
    product = solve_plan(arcs, Limits(workers=1))
    assert (product.status, product.gpus, product.cuts) == (ex.status, ex.gpus, ex.cuts)
    try:
        dp = exact_dp(arcs)
    except TooLarge:
        assert arcs.host_limit is not None
        return
    assert (dp.status, dp.gpus, dp.cuts) == (ex.status, ex.gpus, ex.cuts)
    if ex.found and arcs.host_limit is not None:
        assert arcs.host[plan_arcs(arcs, ex.gpus, ex.cuts)].sum() <= arcs.host_limit


@pytest.mark.parametrize("seed", [s if s < 3 else pytest.param(s, marks=pytest.mark.slow) for s in range(12)])
def test_cpsat_matches_dp_on_larger_rigs(seed):
    """Seeds 0-2 (the quick tier's) cover each objective; 0-5 each objective in both orders."""
    p = random_problem(
        seed,
        n_layers=30 + seed,
        n_gpus=4 + seed % 3,
        experts=24,
        tight=0.9,
        order="auto" if seed % 2 else "as-given",
        objective=("time", "mass", "throughput")[seed % 3],
    )
    arcs = build_arcs(p, build_table(p))
    dp, cp = exact_dp(arcs), solve_cpsat(arcs, Limits(workers=2))
    assert (dp.status, dp.gpus, dp.cuts) == (cp.status, cp.gpus, cp.cuts)


@pytest.mark.parametrize("rig", sorted((ROOT / "rigs").glob("*.yaml")), ids=lambda p: p.stem)
@pytest.mark.parametrize("objective", ["time", "mass", "throughput"])
def test_shipped_rigs_agree(rig, objective):
    from solver.planning.resolve import Overrides

    p = load_problem(rig, Overrides(objective=objective))
    arcs = build_arcs(p, build_table(p))
    cp = solve_cpsat(arcs, Limits(workers=2), hint=dp_hint(arcs))  # seeded as `solve` seeds it
    assert cp.status == "optimal"
    if arcs.order == "as-given" or arcs.n_gpus <= 8:
        dp = exact_dp(arcs)
        assert (dp.gpus, dp.cuts) == (cp.gpus, cp.cuts)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_tie_break_levels_agree_without_enumeration(p):
    """With tie-set enumeration off, CP-SAT's bottleneck, cut and order descents give the same plan."""
    _, sols = answers(p, policy=Policy(max_ties=0))
    assert same(sols), [(s.name, s.status, s.gpus, s.cuts) for s in sols]


@pytest.mark.parametrize("seed", range(20))
def test_dp_in_the_chosen_order_confirms_free_order_plans(seed):
    """The --check oracle for free orders over 12 GPUs: the DP with CP-SAT's GPU order fixed."""
    p = random_problem(seed, n_layers=9, n_gpus=4, experts=5, order="auto", tight=1.2, twins=seed % 2 == 0)
    arcs = build_arcs(p, build_table(p))
    cp = solve_cpsat(arcs, Limits(workers=1))
    if not cp.found:
        return
    fixed = dp_in_order(arcs, cp.gpus)
    assert (fixed.status, fixed.gpus, fixed.cuts) == (cp.status, cp.gpus, cp.cuts)
