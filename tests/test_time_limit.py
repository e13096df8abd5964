"""--time-limit: the best plan found comes back as feasible, with the proven bound and the gap."""

import dataclasses
import time

import numpy as np
from factory import random_problem

from solver.plan import feasible
from solver.planner import plan_rig
from solver.report import to_json
from solver.solvers import Limits


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
