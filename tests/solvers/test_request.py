"""The request objective on random small llama.cpp rigs: DP, CP-SAT and enumeration agree on its
table, the pipelined prompt is settled to enumeration's answer, and the chosen plan's reported
request_ms is both the table's objective and the least over every placement the engine predicts."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.engines import build_table, evaluate
from solver.engines.llamacpp.prompt import PromptModel
from solver.planning.build import build_arcs
from solver.planning.planner import plan_rig
from solver.problem.placement import feasible
from solver.solvers import Limits, plan_arcs
from solver.solvers.cpsat import solve_cpsat
from solver.solvers.exhaustive import settle, solve_exhaustive
from solver.solvers.pipeline import makespan, plan_times
from solver.solvers.route import exact_dp
from tests.helpers.enginefactory import random_engine_problem, with_engine_fields
from tests.helpers.tiers import examples


def request_problem(seed: int, k: int, n: int, generate: int, prompt: int, ubatch: int, idle: bool):
    """A random llama.cpp rig with a prompt model whose PCIe copies, compute and decode trade."""
    p = random_engine_problem(seed, "llama.cpp", n_layers=n, n_gpus=k, experts=4)
    rng = np.random.default_rng(seed + 31)
    f = p.engine_fields
    expert_bytes = np.zeros(n)
    np.add.at(expert_bytes, f.unit_layer, f.unit_bytes)
    experts = np.maximum(p.experts, 1)
    pm = PromptModel(
        flops=rng.choice([2e3, 5e3, 1e4], k),
        pcie=rng.choice([200.0, 1e3, 5e3], k),
        dense=rng.integers(1, 20, n).astype(np.float64),
        expert=expert_bytes * 0.2,
        attention=rng.integers(0, 2, n).astype(np.float64) * 1e-3,
        tokens_share=np.where(p.experts > 0, 4 / experts, 0.0),
        expert_bytes=expert_bytes,
        prompt=prompt,
        n_ubatch=ubatch,
        min_batch=int(rng.choice([1, 4, 64])),
        cpu_flops=float(rng.choice([1e3, 1e4])),
    )
    p = with_engine_fields(p, prompt=pm, n_ubatch=ubatch)
    return dataclasses.replace(p, objective="request", generate=generate, idle_gpus=idle)


@st.composite
def requests(draw: st.DrawFn):
    k = draw(st.integers(1, 3))
    return request_problem(
        seed=draw(st.integers(0, 10**6)),
        k=k,
        n=draw(st.integers(2 * k + 1, 8)),
        generate=draw(st.integers(1, 40)),
        prompt=draw(st.integers(1, 64)),
        ubatch=draw(st.sampled_from([4, 8, 16, 64])),
        idle=draw(st.booleans()) if k > 1 else False,
    )


def key(s):
    return s.status, s.gpus, s.cuts


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_solvers_agree_and_the_pipeline_is_settled(p):
    arcs = build_arcs(p, build_table(p))
    additive = dataclasses.replace(arcs, prompt=None)  # every prompt stage after stage
    dp, cp = exact_dp(additive), solve_cpsat(additive, Limits(workers=1))
    assert key(dp) == key(cp) == key(solve_exhaustive(additive))
    truth = solve_exhaustive(arcs)  # scores the pipelined makespan itself
    assert key(settle(arcs, dp)) == key(settle(arcs, cp)) == key(truth)


def _request_units(arcs, gpus, cuts) -> int:
    ids = plan_arcs(arcs, gpus, cuts)
    return arcs.const_time + int(plan_times(arcs, ids[None, :])[0])


@pytest.mark.slow
@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_reported_request_ms_is_the_objective_and_the_least(p):
    r = plan_rig(p, Limits(workers=1))
    if r.plan is None:
        return
    got = r.plan.request_ms(p.generate)
    units = _request_units(r.arcs, tuple(r.plan.gpus), tuple(r.plan.cuts))
    tol = 1e-6 * max(1.0, got)
    assert got == pytest.approx(units / r.arcs.time_scale, rel=1e-9, abs=tol)
    best = np.inf  # every placement the engine allows, priced by its own prediction
    sizes = range(1, p.n_gpus + 1) if p.idle_gpus else [p.n_gpus]
    for s in sizes:
        for gpus in itertools.combinations(range(p.n_gpus), s):
            for cuts in itertools.combinations(range(1, p.n_layers), s - 1):
                plan = evaluate(p, gpus, cuts)
                if feasible(p, plan) and all(stage.fits for stage in plan.stages):
                    best = min(best, plan.request_ms(p.generate))
    assert got <= best + 2e-6 * max(1.0, best)


def test_makespan_overlaps_micro_batches():
    # two stages of 3 and 1 units, three micro-batches: 3 + 3 + 3 + 1 units
    rows = np.array([[[3, 3, 3], [1, 1, 1]]])
    assert makespan(rows).tolist() == [10]
    assert makespan(rows[:, ::-1]).tolist() == [10]  # 1 + 3 + 3 + 3
    assert makespan(np.array([[[2, 5]]])).tolist() == [7]  # one stage: the sum
