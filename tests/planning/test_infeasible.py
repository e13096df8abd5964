"""Infeasible rigs get a reason that names the binding fact."""

import dataclasses

import numpy as np

from solver.planning.planner import plan_rig
from solver.solvers import Limits
from tests.helpers.factory import random_problem
from tests.problem.test_arithmetic import tiny


def reason(p) -> str:
    r = plan_rig(p, Limits(workers=1))
    assert r.status == "infeasible" and r.plan is None
    return r.reason


def test_more_gpus_than_layers():
    p = tiny(
        free=np.array([10**6, 10**6, 10**6, 10**6]),
        reserve=np.zeros(4, np.int64),
        layer_ms=np.ones(4),
        min_layers=np.ones(4, np.int64),
        max_layers=np.full(4, 3),
        gpu_names=list("ABCD"),
    )
    assert "4 GPUs but the model only 3 layers" in reason(p)


def test_gpu_that_cannot_hold_its_minimum():
    p = tiny(free=np.array([1000, 60]))  # B runs at least layer 2: 7 + 13 + 50 = 70 bytes
    msg = reason(p)
    assert msg.startswith("GPU 1 (B) cannot hold its minimum of 1 layer")


def test_capacity_in_layers():
    # each GPU may run at most one layer: two GPUs cannot cover three layers
    p = tiny(max_layers=np.array([1, 1]))
    assert "max_layers add up to 2, fewer than the model's 3" in reason(p)


def test_longest_ranges_that_fit():
    # memory lets A hold at most 1 layer and B at most 1 layer of the 3
    p = tiny(free=np.array([100 + 7 + 11 + 100 + 100, 7 + 13 + 200]), last_stage_bytes=13)
    msg = reason(p)
    assert "can hold at most 2 of the 3 layers" in msg


def test_core_names_the_conflicting_rules():
    # both fit the 3 layers alone but not any split between them, so a minimal core is reported
    for seed in range(200):
        p = random_problem(seed, n_layers=7, n_gpus=3, tight=0.5)
        r = plan_rig(p, Limits(workers=1))
        if r.status == "infeasible" and r.reason.startswith("no split respects"):
            assert "relaxing any one of them makes a plan possible" in r.reason
            assert "GPU" in r.reason or "first_stage_min_layers" in r.reason
            return
    raise AssertionError("no random rig needed the CP-SAT core explanation")


def test_feasible_once_a_named_rule_is_relaxed():
    """Relaxing the memory of a GPU named in the core makes the rig plannable."""
    for seed in range(200):
        p = random_problem(seed, n_layers=7, n_gpus=3, tight=0.5)
        r = plan_rig(p, Limits(workers=1))
        if r.status == "infeasible" and "'s memory" in r.reason and "layer limits" not in r.reason:
            named = [g for g in range(3) if f"GPU {g} (G{g})'s memory" in r.reason]
            free = p.free.copy()
            free[named] = 10**9
            assert plan_rig(dataclasses.replace(p, free=free), Limits(workers=1)).status == "optimal"
            return
    raise AssertionError("no random rig had a memory-only core")
