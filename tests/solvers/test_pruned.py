"""Lagrangian bounds and the pruned free-order solve: every bound holds for every plan, and the
pruned solve returns exhaustive enumeration's plan, ties and all, with either exact solver inside."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.engines import build_table
from solver.engines.strata import StrataFields
from solver.planning import classes
from solver.planning.build import build_arcs
from solver.planning.planner import plan_rig
from solver.report.planview import to_json
from solver.solvers import Limits, Solution, hostsplit, lagrange, stage_key, windows
from solver.solvers.arcs import subset
from solver.solvers.cpsat import least_top_stage, solve_cpsat
from solver.solvers.exhaustive import _orders, solve_exhaustive
from solver.solvers.paths import path_minimax
from solver.solvers.policy import Policy
from solver.solvers.pruned import applies, solve_pruned
from solver.solvers.route import dp_hint, exact_dp, exact_on
from tests.helpers.enginefactory import random_engine_problem
from tests.helpers.factory import random_problem
from tests.helpers.tiers import examples


def cpsat_inner(arcs, limits, hint):
    """CP-SAT as the pruned path's exact solver on each cut table."""
    return solve_cpsat(arcs, limits, hint=hint)


#: The class-count DP never answers first, so the pruned path does.
NO_DP_FIRST = Policy(dp_first_work=0)


def hosted(p, hosts: list[int] | None):
    """``p`` with its GPUs on hosts (None: one machine); the network hop differs from the hand-off."""
    if hosts is None:
        return p
    names = list(dict.fromkeys(hosts))
    return dataclasses.replace(
        p,
        gpu_host=np.array([names.index(h) for h in hosts], dtype=np.int64),
        host_names=[f"h{h}" for h in names],
        network_handoff_ms=2.0,
    )


def small_free_order(draw: st.DrawFn, objectives: list[str]):
    """A small free-order rig (2-4 GPUs, sometimes two alike) of one of ``objectives``."""
    k = draw(st.integers(2, 4))
    return random_problem(
        seed=draw(st.integers(0, 10**6)),
        n_layers=draw(st.integers(2 * k + 1, 9)),
        n_gpus=k,
        experts=draw(st.integers(1, 6)),
        order="auto",
        objective=draw(st.sampled_from(objectives)),
        tight=draw(st.floats(0.8, 2.0)),
        twins=draw(st.booleans()),
    )


@st.composite
def free_orders(draw: st.DrawFn):
    """Small free-order rigs of every objective, sometimes with identical GPUs or several hosts."""
    p = small_free_order(draw, ["time", "mass", "throughput"])
    hosts = draw(st.one_of(st.none(), st.lists(st.integers(0, 1), min_size=p.n_gpus, max_size=p.n_gpus)))
    return hosted(p, hosts)


def every_plan(arcs):
    """Arc numbers of every placement (host runs kept), one array per plan."""
    idx, n = arcs.index(), arcs.n_layers
    for order, _ in _orders(arcs):
        for cuts in itertools.combinations(range(1, n), len(order) - 1):
            bounds = (0, *cuts, n)
            ids = [idx[g, bounds[s], bounds[s + 1]] for s, g in enumerate(order)]
            if min(ids) >= 0:
                yield np.array(ids)


def weight(arcs):
    return -arcs.mass if arcs.objective == "mass" else arcs.time


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(free_orders(), st.booleans())
def test_every_plan_is_within_the_bound_and_each_arcs_through_value(p, targeted):
    arcs = build_arcs(p, build_table(p))
    plans = list(every_plan(arcs)) if len(arcs) else []
    w = weight(arcs)
    target = int(min(w[ids].sum() for ids in plans)) if plans and targeted else None
    prices = lagrange.prices(arcs, w, target) if len(arcs) else None
    if prices is None:
        assert not plans
        return
    through = lagrange.through(arcs, w, prices)
    for ids in plans:
        value = int(w[ids].sum())
        assert prices.bound <= value
        assert (through[ids] <= value).all()


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(free_orders(), st.sampled_from(["exact_on", "cp-sat"]))
def test_pruned_solve_returns_the_exhaustive_plan(p, inner_name):
    arcs = build_arcs(p, build_table(p))
    want = solve_exhaustive(arcs)
    if not applies(arcs):
        assert want.status == "infeasible"
        return
    inner = exact_on if inner_name == "exact_on" else cpsat_inner
    got = solve_pruned(arcs, Limits(workers=1), dp_hint(arcs), inner, least_top=least_top_stage)
    if got is None:  # no relaxed path covers the layers: no plan at all
        assert want.status == "infeasible"
        return
    assert (got.status, got.gpus, got.cuts) == (want.status, want.gpus, want.cuts)


def distinct_cards(seed: int, k: int, n_layers: int, objective: str):
    """k GPUs of k different speeds and sizes: beyond the plain DP's first pick, so the pruned path
    answers; the class-count DP (2^k states) still checks it."""
    p = random_problem(seed, n_layers=n_layers, n_gpus=k, experts=12, order="auto", objective=objective)
    rng = np.random.default_rng(seed)
    ones = np.ones(k, dtype=np.int64)
    return dataclasses.replace(
        p,
        layer_ms=np.round(rng.uniform(0.4, 2.0, k), 3),
        min_layers=ones,
        max_layers=ones * n_layers,
        engine_fields=StrataFields(miss_ms=190.0),
    )


@pytest.mark.slow
def test_the_product_prunes_larger_free_orders_and_agrees_with_the_dp():
    """9 distinct cards x 60 layers, with the DP-first threshold at zero so the pruned path (and
    CP-SAT inside it) answers what the DP answers on these rigs in the product."""
    for seed, objective in itertools.product(range(3), ["time", "mass", "throughput"]):
        p = distinct_cards(seed, 9, 60, objective)
        r = plan_rig(p, Limits(workers=1), policy=NO_DP_FIRST)
        assert r.solution.work.pruned_arcs is not None, "the pruned path answered"
        assert r.solution.work.pruned_arcs < len(r.arcs)
        want = exact_dp(r.arcs)
        assert (r.status, r.solution.gpus, r.solution.cuts) == (want.status, want.gpus, want.cuts)


@st.composite
def hosted_free_orders(draw: st.DrawFn):
    """Small free-order rigs over two or three hosts, time or mass."""
    p = small_free_order(draw, ["time", "mass"])
    k = p.n_gpus
    hosts = draw(st.lists(st.integers(0, 2), min_size=k, max_size=k).filter(lambda h: len(set(h)) > 1))
    return hosted(p, hosts)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosted_free_orders())
def test_host_split_gives_the_exact_best_plan_through_every_arc(p):
    arcs = build_arcs(p, build_table(p))
    plans = list(every_plan(arcs)) if len(arcs) else []
    w = weight(arcs)
    got = hostsplit.exact_through(arcs, w) if len(arcs) else None
    if not plans:
        assert got is None
        return
    best, through = got
    assert best == min(int(w[ids].sum()) for ids in plans)
    want = np.full(len(arcs), np.iinfo(np.int64).max // 2)
    for ids in plans:
        np.minimum.at(want, ids, int(w[ids].sum()))
    assert (through == want).all()
    keys = stage_key(arcs)  # the min-max form: the throughput objective's slowest stage
    top, top_through = hostsplit.exact_through(arcs, keys, np.maximum)
    assert top == min(int(keys[ids].max()) for ids in plans)
    want[:] = np.iinfo(np.int64).max // 2
    for ids in plans:
        np.minimum.at(want, ids, int(keys[ids].max()))
    assert (top_through == want).all()


@pytest.mark.slow
def test_the_host_split_agrees_with_the_host_dp_on_larger_rigs():
    """7 distinct cards over 2 hosts x 40 layers: the exact host/idle DP still takes it, and the
    split's cut (solved by CP-SAT) must return its plan, ties and all."""
    for seed, objective in itertools.product(range(2), ["time", "mass", "throughput"]):
        p = hosted(distinct_cards(seed, 7, 40, objective), [0, 0, 0, 1, 1, 1, 1])
        arcs = build_arcs(p, build_table(p))
        got = solve_pruned(arcs, Limits(workers=1), None, cpsat_inner, least_top=least_top_stage)
        assert got is not None and got.work.cut_by == "host split"
        assert got.work.pruned_arcs < len(arcs) / 10
        want = exact_dp(arcs)
        assert (got.status, got.gpus, got.cuts) == (want.status, want.gpus, want.cuts)


def test_check_confirms_a_host_split_plan_in_its_gpu_order():
    """--check beyond the host/idle DP (its size limit lowered here) replays the DP in the chosen order."""
    p = hosted(distinct_cards(5, 7, 40, "time"), [0, 0, 0, 1, 1, 1, 1])
    r = plan_rig(p, Limits(workers=1), check=True, policy=Policy(max_subset_steps=10))
    assert r.status == "optimal" and r.solution.work.cut_by == "host split"
    assert r.oracle.name == "dp in the chosen GPU order" and r.oracle.agrees


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["llama.cpp", "vllm"])
def test_the_pruned_path_agrees_with_the_dp_under_every_engine(engine):
    """llama.cpp's CPU-held tensors and vLLM's spare-KV level through the cut: 7 distinct cards x 30."""
    for seed, objective in zip(range(6), ["time", "mass", "throughput"] * 2, strict=True):
        p = random_engine_problem(
            seed, engine, n_layers=30, n_gpus=7, order="auto", objective=objective, tight=1.5
        )
        p = dataclasses.replace(p, layer_ms=np.round(np.random.default_rng(seed).uniform(0.4, 2.0, 7), 3))
        arcs = build_arcs(p, build_table(p))
        got, want = classes.solve_plan(arcs, Limits(workers=1), NO_DP_FIRST), exact_dp(arcs)
        assert got.work.pruned_arcs is not None or not len(arcs)
        assert (got.status, got.gpus, got.cuts) == (want.status, want.gpus, want.cuts)


@st.composite
def one_host_free_orders(draw: st.DrawFn):
    """Small free-order rigs on one machine, some with identical GPUs (their class counts)."""
    return small_free_order(draw, ["throughput"])


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(one_host_free_orders(), st.booleans())
def test_window_passes_give_the_least_top_and_the_exact_best_time_through_every_arc(p, known):
    """The capacity windows leave out no plan within the threshold: the min-max passes find the
    least slowest stage of every plan, and the min-plus passes the best time through each arc."""
    arcs = build_arcs(p, build_table(p))
    plans = list(every_plan(arcs)) if len(arcs) else []
    keys = stage_key(arcs)
    if not plans:  # none at all: the passes prove it
        if len(arcs):
            top, proven = windows.least_top(arcs, keys, 0, None, None)
            assert top is None and proven > keys.max()
        return
    tops = [int(keys[ids].max()) for ids in plans]
    high = int(np.random.default_rng(len(arcs)).choice(tops)) if known else None
    low = path_minimax(arcs, keys, np.ones(len(arcs), dtype=bool))
    top, proven = windows.least_top(arcs, keys, low, high, None)
    assert (top, proven) == (min(tops), min(tops))
    sub = subset(arcs, keys <= top)
    within = list(every_plan(sub))
    best, through = windows.exact_through(sub, sub.time, None)
    assert best == min(int(sub.time[ids].sum()) for ids in within)
    want = np.full(len(sub), np.iinfo(np.int64).max // 2)
    for ids in within:
        np.minimum.at(want, ids, int(sub.time[ids].sum()))
    assert (through == want).all()


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(one_host_free_orders())
def test_window_passes_stopped_by_the_deadline_keep_a_valid_lower_bound(p):
    arcs = build_arcs(p, build_table(p))
    plans = list(every_plan(arcs)) if len(arcs) else []
    if not plans:
        return
    keys = stage_key(arcs)
    low = path_minimax(arcs, keys, np.ones(len(arcs), dtype=bool))
    top, proven = windows.least_top(arcs, keys, low, None, deadline=0.0)
    assert top is None and low <= proven <= min(int(keys[ids].max()) for ids in plans)
    assert windows.exact_through(arcs, arcs.time, deadline=0.0) is None


@pytest.mark.slow
def test_the_throughput_objective_cuts_by_windows_and_agrees_with_the_dp():
    """10 distinct cards x 48 layers (the class-count DP still takes them), DP-first off: the least
    slowest stage by the window passes, the cut by the exact best time through each arc within it."""
    for seed in range(3):
        p = distinct_cards(seed, 10, 48, "throughput")
        arcs = build_arcs(p, build_table(p))
        got, want = classes.solve_plan(arcs, Limits(workers=1), NO_DP_FIRST), exact_dp(arcs)
        assert got.work.cut_by == "windows" and got.work.pruned_arcs < len(arcs) / 50
        assert (got.status, got.gpus, got.cuts) == (want.status, want.gpus, want.cuts)


@pytest.mark.slow
def test_pruned_solve_under_binding_host_memory_limits_returns_the_exhaustive_plan():
    """The exact cuts (host split, windows) leave the host-memory limit out: an answer they lose to
    it falls back to the rounds, never stands as the optimum or as infeasible. Small free orders,
    some over two hosts, each under limits that change its exhaustive plan."""
    binding = hosts = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        k = int(rng.integers(2, 5))
        p = random_problem(
            seed,
            n_layers=int(rng.integers(2 * k + 1, 10)),
            n_gpus=k,
            experts=int(rng.integers(1, 7)),
            order="auto",
            objective=["time", "mass", "throughput"][seed % 3],
            tight=float(rng.uniform(0.8, 2.0)),
            twins=bool(seed % 2),
        )
        p = hosted(p, rng.integers(0, 2, k).tolist() if seed % 4 else None)
        arcs = build_arcs(p, build_table(p))
        if not applies(arcs):
            continue
        free = solve_exhaustive(arcs)
        for share in (0.1, 0.3, 0.5):
            limited = dataclasses.replace(arcs, host_limit=int(share * arcs.host.max() * k))
            want = solve_exhaustive(limited)
            if (want.gpus, want.cuts) == (free.gpus, free.cuts):
                continue
            binding, hosts = binding + 1, hosts + (arcs.n_hosts > 1)
            got = solve_pruned(
                limited, Limits(workers=1), dp_hint(limited), exact_on, least_top=least_top_stage
            )
            got = got or Solution("none", "infeasible")  # None: no relaxed path covers the layers
            assert (got.status, got.gpus, got.cuts) == (want.status, want.gpus, want.cuts), (seed, share)
            product = classes.solve_plan(limited, Limits(workers=1))  # the DP refuses; the cut answers
            assert (product.status, product.gpus, product.cuts) == (want.status, want.gpus, want.cuts)
    assert binding > 20 and hosts > 5


@pytest.mark.parametrize(
    "objective", [*(pytest.param(o, marks=pytest.mark.slow) for o in ("time", "mass")), "throughput"]
)
def test_a_free_order_of_more_than_63_distinct_cards_is_planned_within_the_limit(objective):
    """Class-count states are products over the classes: 66 distinct cards make 2^66 of them, past
    int64. Counted exactly, every exact pass declines the rig, and the limit's answer is a feasible
    plan with a bound."""
    p = random_problem(4, n_layers=70, n_gpus=66, experts=4, order="auto", objective=objective, tight=3.0)
    ones = np.ones(66, dtype=np.int64)
    speeds = np.round(np.random.default_rng(4).uniform(0.4, 2.0, 66), 6)
    p = dataclasses.replace(p, layer_ms=speeds, min_layers=ones, max_layers=ones * 70)
    r = plan_rig(p, Limits(time_limit=1.0, workers=1))
    assert r.status in ("feasible", "optimal") and r.plan is not None
    assert to_json(r)["solver"]["bound"] is not None
