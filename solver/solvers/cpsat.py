"""The product's solver: CP-SAT's lexicographic chain of levels over the path model.

The objective is lexicographic, solved as a chain of levels: held mass (mass objective) or the
slowest stage (throughput objective: min-max, by bisection on a threshold with feasibility
solves), time (every plan within the best whole 1e-6 ms ties), the plan's spare KV (max-min, the
same way; no solve when no arc limits it), then the ties: every tied plan enumerated where they
are few, else the bottleneck, the cut list and the GPU order (free order) one at a time. After
each level its proven value is kept as a constraint and the table is pruned
(``solver.solvers.cpchain``); the model is ``solver.solvers.cpmodel``'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
from ortools.sat.python import cp_model

from solver.problem.scales import MASS_SCALE
from solver.solvers import Limits, Solution, Work, relaxed_bound, stage_key
from solver.solvers.arcs import Arcs, Objective
from solver.solvers.cpchain import ANY_PLAN, Chain, Fix, feasible, prune, start, threshold
from solver.solvers.cpmodel import bound_time, bound_total, plan_time, read, time_expr, time_slack
from solver.solvers.policy import POLICY, Policy


def solve_cpsat(
    arcs: Arcs, limits: Limits | None = None, hint: Solution | None = None, policy: Policy = POLICY
) -> Solution:
    """The exact plan by CP-SAT, or the best found when ``limits.time_limit`` stops the proof.

    Idle GPUs make each GPU's arcs at most one (as given, a stage's successor runs on a later
    GPU); host runs in a free order are constraints (``solver.solvers.cpmodel``). With idle GPUs
    the arc bounds of ``best_through`` and ``relaxed_bound`` count exactly k stages, so arcs are
    pruned by the best path over any arcs instead (``paths.through_any``), and no relaxed bound is
    reported. When idle GPUs meet hosts whose network hop differs from the hand-off, each host
    entry costs time outside the arcs: the host runs' entry indicators carry it in every time sum
    (``time_expr``)."""
    t0 = time.perf_counter()
    limits = limits or Limits()
    chain = start(arcs, limits, hint, t0, policy)
    bound = None
    done = len(arcs) > 0
    if done and arcs.objective is Objective.MASS:
        if chain.chosen is not None:
            prune(chain, lambda a: a.mass, "max", int(arcs.mass[chain.chosen].sum()))
        best_mass = chain.step(lambda m, x, a: a.mass, "max", progress=True)
        done = best_mass is not None
        if done:
            bound = best_mass / MASS_SCALE
            chain.fixes.append(lambda m, x, a, v=best_mass: bound_total(m, a.mass, v, cp_model.INT_MAX))
            prune(chain, lambda a: a.mass, "max", best_mass)
        elif chain.bound is not None:
            bound = chain.bound / MASS_SCALE
    if done and arcs.objective is Objective.THROUGHPUT:
        top, lowest = _stage_level(chain)
        done = top is not None
        bound = (top if done else lowest) / 10**6 if lowest is not None else None
    if done:
        if chain.chosen is not None and arcs.objective is not Objective.MASS:
            cap = arcs.time_cap(plan_time(arcs, chain.chosen))
            prune(chain, lambda a: a.time, "min", cap + time_slack(arcs))
        best_time = _time_level(chain, progress=arcs.objective is Objective.TIME)
        done = best_time is not None
        if arcs.objective is Objective.TIME:
            bound = arcs.window_ms(best_time) if done else _ms(arcs, chain.bound)
        if done:
            cap = arcs.time_cap(best_time)
            chain.fixes.append(lambda m, x, a, v=cap: bound_time(m, a, v))
            prune(chain, lambda a: a.time, "min", cap + time_slack(arcs))
    done = done and _spare_level(chain) and _tie_breaks(chain)
    wall_ms, work = (time.perf_counter() - t0) * 1e3, Work(solves=chain.solves)
    if chain.chosen is None:
        return Solution("cp-sat", "infeasible" if chain.proven else "unknown", wall_ms=wall_ms, work=work)
    gpus, cuts = read(arcs, chain.chosen)
    status = "optimal" if done and chain.proven else "feasible"
    if bound is None or status == "feasible":
        bound = arcs.objective.tighter(bound, relaxed_bound(arcs))
    return Solution("cp-sat", status, gpus, cuts, bound, wall_ms=wall_ms, work=work)


def _time_level(chain: Chain, progress: bool) -> int | None:
    """The smallest window key: a plan's summed time there, or None if stopped or infeasible.

    Plans compare in whole 1e-6 ms, so CP-SAT need not prove the fine optimum inside the best key
    (on rigs of near-equal plans that proof ran past 20 s for a 5e-13 gap): it stops within a key
    of its bound, and when the bound does not settle the incumbent's key, one feasibility solve
    asks for a plan a key better.
    """
    a = chain.root
    while True:
        state, value = chain.solve(time_expr, "min", progress, gap=a.coarse - 1)
        if state == "infeasible":
            chain.proven = chain.chosen is None
        if state != "optimal":
            return None
        bound = chain.last_bound
        if abs(bound) < 2**52 and a.time_key(math.ceil(bound)) >= a.time_key(value):
            return value
        below = a.time_cap(value) - a.coarse  # the largest summed time of a key one smaller
        chain.fixes.append(lambda m, x, arcs, v=below: bound_time(m, arcs, v))
        state = feasible(chain, np.ones(len(chain.arcs), dtype=bool))
        chain.fixes.pop()
        if state == "infeasible":
            return value
        if state == "stopped":
            chain.proven = False
            return None


def forced_time(arcs: Arcs, g: int, limits: Limits, policy: Policy = POLICY) -> tuple[bool, int | None]:
    """(proven, the summed time of the best plan that uses GPU ``g``), entries included, plans ranked
    by (mass, time) as the objective's first level ranks them; None: no plan uses it. The same
    figure as ``solver.solvers.subsetdp.forced_times``, for rigs beyond that DP; not proven when the
    deadline stops it."""
    chain = start(arcs, limits, None, time.perf_counter(), policy)

    def use(m: cp_model.CpModel, x: list, a: Arcs) -> None:
        m.add(cp_model.LinearExpr.sum([x[i] for i in np.flatnonzero(a.gpu == g)]) == 1)

    chain.fixes.append(use)
    if arcs.objective is Objective.MASS:
        state, most = chain.solve(lambda m, x, a: a.mass, "max")
        if state != "optimal":
            return state == "infeasible", None
        chain.fixes.append(lambda m, x, a, v=most: bound_total(m, a.mass, v, cp_model.INT_MAX))
    best = _time_level(chain, progress=False)
    return chain.proven, best


def least_top_stage(arcs: Arcs, limits: Limits, hint: Solution | None, policy: Policy = POLICY) -> int | None:
    """The throughput objective's first level alone: the smallest slowest-stage key of any plan,
    proven; None when the deadline stops it or no plan exists (the whole solve then says which)."""
    chain = start(arcs, limits, hint, time.perf_counter(), policy)
    top, _ = _stage_level(chain)
    return top if chain.proven else None


def _stage_level(chain: Chain) -> tuple[int | None, int | None]:
    """Throughput: the smallest max stage key of any plan (min-max, by bisection on a threshold).

    Returns (the proven key or None, a proven lower bound on it or None when nothing is known).
    """
    root = chain.root
    keys = stage_key(root)
    if chain.chosen is None:
        state = feasible(chain, np.ones(len(chain.arcs), dtype=bool))
        if state != "optimal":
            return None, None
    values = np.unique(keys[chain.ids])
    return threshold(chain, values, lambda a, v: keys[chain.ids] <= v, lambda plan: keys[plan].max())


def _spare_level(chain: Chain) -> bool:
    """The largest plan spare KV (max-min) among the plans tied so far; False if stopped.

    Free when no arc limits the spare (one value, no solve)."""
    spare = chain.root.spare
    values = np.unique(spare[chain.ids])[::-1]
    if len(values) == 1:
        return True
    got, _ = threshold(chain, values, lambda a, v: a.spare >= v, lambda plan: spare[plan].min())
    return got is not None


def _ms(arcs: Arcs, bound: float | None) -> float | None:
    return None if bound is None else arcs.window_ms(int(bound))


def _enumerate_ties(chain: Chain) -> bool | None:
    """Find every plan in the tie set by repeated solves, each excluding the plans found so far.

    True: the set had at most ``policy.max_ties`` plans and ``chain.chosen`` is now the best of them by the
    tie-breaks (bottleneck, cuts, order), proven by exhaustion. False: too many ties, carry on
    with the levels. None: the deadline stopped it. Each solve has the objective level's shape
    (min time), which CP-SAT proves fast, unlike the min-max bottleneck level.
    """
    found = [chain.chosen]
    fixes = list(chain.fixes)
    while len(found) <= chain.policy.max_ties:
        chain.fixes = fixes + [_exclude(chain, plan) for plan in found]
        state, _ = chain.solve(lambda m, x, a: a.time, "min", gap=ANY_PLAN)
        if state == "stopped":
            chain.fixes, chain.chosen = fixes, found[0]
            return None
        if state == "infeasible":
            break
        found.append(chain.chosen)
    chain.fixes = fixes
    if len(found) > chain.policy.max_ties:
        chain.chosen = found[0]
        return False
    root = chain.root

    def key(plan: np.ndarray) -> tuple:
        gpus, cuts = read(root, plan)
        return int(root.bottleneck[plan].max()), cuts, gpus

    chain.chosen = min(found, key=key)
    return True


def _exclude(chain: Chain, plan: np.ndarray) -> Fix:
    """A no-good: the arcs of ``plan`` are not all chosen again."""

    def fix(m: cp_model.CpModel, x: list, a: Arcs) -> None:
        ids = np.flatnonzero(np.isin(chain.ids, plan))
        m.add(sum(x[i] for i in ids) <= len(plan) - 1)

    return fix


def _bottleneck_descent(chain: Chain) -> bool:
    """Lower the bottleneck while some tied plan has a smaller one; True once it is proven.

    Each round keeps only arcs below the incumbent's bottleneck and asks for the best time: a
    plan within the tie set there is a better incumbent, and none proves the bottleneck. This
    stays a min-time model, where the min-max form of the level took CP-SAT minutes on 16 GPUs.
    """
    while True:
        worst = int(chain.root.bottleneck[chain.chosen].max())
        arcs, ids, chosen = chain.arcs, chain.ids, chain.chosen
        chain.keep(arcs.bottleneck < worst, spare_chosen=False)
        state, _ = chain.solve(lambda m, x, a: a.time, "min", gap=ANY_PLAN)
        if state == "stopped":
            chain.arcs, chain.ids = arcs, ids
            chain.chosen = chain.chosen if chain.chosen is not None else chosen
            return False
        if state == "infeasible":
            chain.arcs, chain.ids, chain.chosen = arcs, ids, chosen
            chain.keep(arcs.bottleneck <= worst)
            return True


def _tie_breaks(chain: Chain) -> bool:
    """Bottleneck, then cut list, then GPU order; False if the time limit cut the chain short."""
    settled = _enumerate_ties(chain)
    if settled is not False:
        return bool(settled)

    if not _bottleneck_descent(chain):
        return False
    fixed = chain.arcs.order != "auto" and not chain.arcs.idle  # then the cuts fix the GPUs
    return _cut_descent(chain) and (fixed or _order_descent(chain))


def _cut_descent(chain: Chain) -> bool:
    """The smallest cut list, fixed one cut at a time from the left.

    With the stages before it fixed, the next cut is the smallest end of the arc that starts where
    they stop: one min solve whose coefficients are layer numbers (a binary-weighted objective over
    all boundaries took CP-SAT minutes on 16 GPUs). With idle GPUs a tied plan whose list ends there
    comes first (list order), asked by one feasibility solve.
    """
    at, n = 0, chain.arcs.n_layers
    while at < n:
        a = chain.arcs
        last = (a.start == at) & (a.end == n)
        if a.idle and last.any() and ((a.start == at) & ~last).any():  # ending the list is smallest
            state = feasible(chain, (a.start != at) | last)
            if state == "stopped":
                return False
            if state == "optimal":
                chain.keep((a.start != at) | last)
                return True
            chain.keep(~last)
        best = _smallest(chain, at, lambda a: a.end)
        if best is None:
            return False
        a = chain.arcs
        chain.keep(((a.start != at) | (a.end == best)) & ~((a.start > at) & (a.start < best)))
        at = best
    return True


def _order_descent(chain: Chain) -> bool:
    """With the cuts fixed, the smallest GPU order, fixed one stage at a time from the first."""
    _, cuts = read(chain.root, chain.chosen)
    for p in (0, *cuts):
        best = _smallest(chain, p, lambda a: a.gpu)
        if best is None:
            return False
        a = chain.arcs
        chain.keep((a.start == p) == (a.gpu == best))
    return True


def _smallest(chain: Chain, at: int, key: Callable[[Arcs], np.ndarray]) -> int | None:
    """The smallest ``key`` (end, or GPU) of the arc starting at ``at`` over the plans still tied.

    A choice of one needs no solve; None if the deadline stopped the solve.
    """
    a = chain.arcs
    options = np.unique(key(a)[a.start == at])
    if len(options) == 1:
        return int(options[0])
    state, value = chain.solve(lambda m, x, a: np.where(a.start == at, key(a), 0), "min")
    return int(value) if state == "optimal" else None
