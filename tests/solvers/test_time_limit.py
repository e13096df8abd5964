"""--time-limit: the best plan found comes back as feasible, with the proven bound and the gap; the
limit is a finite number of seconds above zero; no plan in time exits 3."""

import dataclasses
import itertools
import json
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.engines import build_table, evaluate
from solver.engines.strata import StrataFields
from solver.planning import classes
from solver.planning.build import build_arcs
from solver.planning.planner import plan_rig
from solver.problem.placement import feasible
from solver.problem.problem import Problem
from solver.report.planview import to_json
from solver.solvers import (
    Limits,
    Solution,
    Stopped,
    cpmodel,
    cpsat,
    dpgraph,
    plan_arcs,
    relaxed_bound,
    stage_key,
    subsetfree,
    subsetgiven,
)
from solver.solvers.exhaustive import solve_exhaustive
from solver.solvers.policy import Policy
from solver.solvers.route import exact_dp
from tests.helpers.factory import random_problem
from tests.helpers.rigfiles import tiny_rig


def big_problem():
    p = random_problem(1, n_layers=128, n_gpus=16, experts=96, order="auto", tight=0.9)
    ones = np.ones(16, dtype=np.int64)
    return dataclasses.replace(
        p, min_layers=ones, max_layers=ones * 128, engine_fields=StrataFields(miss_ms=190.0)
    )


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
    """A free-order plan stopped by the limit reports a proven bound, never null."""
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
    """Time spent before planning (reading files, building tables) counts against the
    limit, so a limit already spent answers with the best plan at hand, unproven."""
    p = big_problem()
    spent = Limits(time_limit=5.0, workers=1, started=time.perf_counter() - 10.0)
    r = plan_rig(p, spent)
    assert r.status == "feasible" and r.plan is not None and feasible(p, r.plan)
    d = to_json(r)
    assert d["solver"]["bound"] is not None and d["solver"]["bound"] <= d["window_ms"] + 1e-9
    assert plan_rig(p, Limits(time_limit=60.0, workers=1)).status == "optimal"


def idle_rig(seed: int) -> Problem:
    """A small random rig with idle GPUs allowed, as given or free, over one or two hosts."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))
    order = "as-given" if seed % 2 else "auto"
    p = random_problem(
        seed,
        n_layers=int(rng.integers(3, 8)),
        n_gpus=k,
        order=order,
        objective=["time", "mass", "throughput"][seed % 3],
        tight=float(rng.choice([0.8, 1.5, 3.0])),
        twins=bool(seed % 4 == 1),
    )
    hosts = np.sort(rng.integers(0, 2, k)) if order == "as-given" else rng.integers(0, 2, k)
    names = list(dict.fromkeys(hosts.tolist()))
    return dataclasses.replace(
        p,
        idle_gpus=True,
        gpu_host=np.array([names.index(h) for h in hosts], dtype=np.int64),
        host_names=[f"h{h}" for h in names],
        network_handoff_ms=float(rng.choice([0.0, 0.3, 4.0])),
    )


def objective_key(arcs, gpus, cuts) -> tuple[int, int, int]:
    """A plan's objective as the DP and enumeration rank it: (-mass, slowest stage key, time key)."""
    ids = plan_arcs(arcs, gpus, cuts)
    top = int(stage_key(arcs)[ids].max()) if arcs.objective == "throughput" else 0
    return -int(arcs.mass[ids].sum()), top, int(arcs.time_key(cpmodel.plan_time(arcs, ids)))


@pytest.mark.parametrize("idle", [pytest.param(True, marks=pytest.mark.slow), False])
def test_a_stopped_dp_returns_a_plan_of_the_optimum_or_unknown(monkeypatch, idle):
    """The DP (with idle GPUs, the host/idle DP) stopped at its n-th look at the clock, for every n
    until it finishes: before the objective is settled it answers unknown; after, a feasible plan
    of the optimum (the bound is the objective itself, only the tie-breaks are left); unstopped,
    enumeration's plan."""
    stops = {"unknown": 0, "feasible": 0}
    for seed in range(40):
        p = dataclasses.replace(idle_rig(seed), idle_gpus=idle)
        if not idle:  # every GPU used: hosts would make it the host DP's, so one machine
            p = dataclasses.replace(p, gpu_host=None, host_names=["local"], network_handoff_ms=None)
        arcs = build_arcs(p, build_table(p))
        want, full = solve_exhaustive(arcs), exact_dp(arcs)
        for n in itertools.count():
            looks = itertools.count()

            def check(deadline, looks=looks, n=n) -> None:
                if next(looks) >= n:
                    raise Stopped

            for passes in (subsetfree, subsetgiven, dpgraph):
                monkeypatch.setattr(passes, "check_deadline", check)
            got = exact_dp(arcs, Limits(time_limit=60.0))
            monkeypatch.undo()
            if got.status in ("optimal", "infeasible"):
                assert (got.status, got.gpus, got.cuts) == (want.status, want.gpus, want.cuts)
                break
            stops[got.status] += 1
            if got.status == "feasible":
                assert feasible(p, evaluate(p, got.gpus, got.cuts))
                assert objective_key(arcs, got.gpus, got.cuts) == objective_key(arcs, want.gpus, want.cuts)
                assert got.bound == full.bound
            else:
                assert got.status == "unknown" and not got.gpus
    assert stops["unknown"] > 10 and stops["feasible"] > 10  # both kinds of stop are met


def test_a_stopped_idle_plan_beyond_the_dp_is_feasible_or_unknown_never_a_wrong_optimum(monkeypatch):
    """Free orders with idle GPUs beyond the host/idle DP (its size limit lowered) go to CP-SAT,
    hinted by the DP in rig order. With the limit already spent, with CP-SAT's models too large for
    the time left, and with ample time, each answer is enumeration's plan, a feasible plan with a
    bound on the optimum, or unknown with a reason."""
    small = Policy(max_subset_steps=0)
    build = cpmodel.build

    def late(arcs, deadline=None):
        raise Stopped

    seen = set()
    for seed in range(0, 24, 2):  # the free orders of idle_rig
        p = idle_rig(seed)
        arcs = build_arcs(p, build_table(p))
        want = solve_exhaustive(arcs)
        for spent, written in ((10.0, build), (0.0, late), (0.0, build)):
            monkeypatch.setattr(cpmodel, "build", written)
            r = plan_rig(
                p, Limits(time_limit=10.0, workers=1, started=time.perf_counter() - spent), policy=small
            )
            seen.add(r.status)
            if r.status in ("optimal", "infeasible"):
                got = r.solution
                assert (got.status, got.gpus, got.cuts) == (want.status, want.gpus, want.cuts)
            elif r.status == "feasible":
                assert feasible(p, r.plan)
                d = to_json(r)
                assert d["solver"]["bound"] is not None and d["solver"]["gap"] >= 0
                best, bound = evaluate(p, want.gpus, want.cuts), d["solver"]["bound"]
                if p.objective == "time":  # the bound holds for the optimum, which the plan cannot beat
                    assert bound <= best.window_ms + 1e-9 <= r.plan.window_ms + 2e-9
                elif p.objective == "mass":
                    assert bound >= best.held_mass - 1e-9 >= r.plan.held_mass - 2e-9
                else:
                    assert bound <= best.bottleneck_ms + 1e-6
            else:
                assert r.status == "unknown" and r.plan is None and r.reason
    assert {"optimal", "feasible", "unknown"} <= seen


def test_a_model_that_cannot_be_written_in_time_is_given_up():
    """Past the deadline CP-SAT's model is not written at all: the chain stops, nothing proven."""
    p = big_problem()
    arcs = build_arcs(p, build_table(p))
    with pytest.raises(Stopped):
        cpmodel.build(arcs, deadline=time.perf_counter() - 1.0)
    got = cpsat.solve_cpsat(arcs, Limits(time_limit=1.0, workers=1, started=time.perf_counter() - 5.0))
    assert got.status == "unknown" and not got.gpus


def test_the_relaxed_bound_with_idle_gpus_holds_for_the_optimum():
    """With idle GPUs the relaxed bound takes paths of any length (and each host run's entry): it
    never passes enumeration's optimum, under every objective."""
    checked = 0
    for seed in range(60):
        p = idle_rig(seed)
        arcs = build_arcs(p, build_table(p))
        want = solve_exhaustive(arcs)
        if not want.found:
            continue
        best, bound = evaluate(p, want.gpus, want.cuts), relaxed_bound(arcs)
        if p.objective == "time":
            assert bound <= best.window_ms + 1e-9
        elif p.objective == "mass":
            assert bound >= best.held_mass - 1e-9
        else:
            assert bound <= best.bottleneck_ms + 1e-6
        checked += 1
    assert checked > 30


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
    stopped = Solution("cp-sat", "unknown")
    monkeypatch.setattr(classes, "solve_plan", lambda arcs, limits, policy, chosen: stopped)
    res = run_cli(rig, "--json", "--time-limit", "1")
    assert res.exit_code == 3
    got = json.loads(res.stdout)
    assert got["status"] == "unknown" and got["stages"] == [] and "time limit ran out" in got["reason"]
    res = run_cli(rig, "--time-limit", "1")
    assert res.exit_code == 3 and "unknown: the time limit ran out before any placement" in res.stdout
