"""Exact DP where plans differ in the GPUs they use: idle GPUs allowed, or a free order over hosts.

A state is what decides which GPU may run the next stage and what its boundary costs: with the order
as given, the last GPU used (the used GPUs keep rig order and hosts are contiguous, so host runs hold
by themselves); with a free order, how many GPUs of each class (identical arcs, one host) are used and
the host of the last one (the next GPU must be new, on that host or on one not yet entered).
``F[state][b]`` is the best (mass, time) of covering layers [0, b); a step adds an arc of an allowed
GPU plus ``entry_units`` when it enters a host (see ``solver.solvers.arcs``). The tie-break chain runs as in
``solver.solvers.dp``: the throughput objective's max stage, spare KV and bottleneck by bisection on
thresholds, then the smallest cut list (a list that ends is smaller than any longer one it starts)
and the smallest GPU order, chosen greedily against best completions computed backwards.

With the order as given, GPU g may follow any earlier GPU, so a pass keeps running bests over the
states before g (those of g's own host, reached without an entry, and the rest) and takes one step
per GPU: k steps a pass, not k^2, so a thousand GPUs plan in seconds. A free order's states grow as
2^k for k distinct GPUs (far fewer when many are alike); beyond ``Policy.max_subset_steps``
transitions per pass it raises TooLarge (``refusal`` says why).

Every pass checks ``limits``' deadline. Stopped once the objective is settled, the answer is a plan
of that objective traced back through the objective's pass, "feasible" with the objective as its
bound (the tie-breaks are what is left); stopped before, "unknown".
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from solver.solvers import Limits, Solution, Stopped, TooLarge, check_host, stage_key, usable
from solver.solvers.arcs import Arcs
from solver.solvers.dp import objective_bound
from solver.solvers.paths import first_value
from solver.solvers.policy import POLICY, Policy
from solver.solvers.subsetfree import FreeOrder, host_classes
from solver.solvers.subsetgiven import AsGiven


def subset_steps_for(order: str, mult: list[int], hosts: int) -> int:
    """Transitions per pass: k with the order as given (one step per GPU); with a free order the
    class-count states (``mult`` GPUs in each class) times (hosts + 1) last hosts times the classes."""
    if order == "as-given":
        return sum(mult)
    return math.prod(m + 1 for m in mult) * (hosts + 1) * len(mult)


def subset_steps(arcs: Arcs) -> int:
    """Transitions per pass of this table's rig."""
    mult = np.bincount(host_classes(arcs)).tolist() if arcs.order == "auto" else [arcs.n_gpus]
    return subset_steps_for(arcs.order, mult, arcs.n_hosts)


def refusal(arcs: Arcs, policy: Policy = POLICY) -> str | None:
    """Why the host/idle DP does not take this table, or None: with the order as given, a rig order
    that splits a host's GPUs; with a free order, more transitions per pass than ``policy`` allows."""
    if arcs.order == "as-given":
        hosts = arcs.hosts
        if 1 + int(np.count_nonzero(hosts[1:] != hosts[:-1])) != arcs.n_hosts:
            return "the host/idle DP takes a rig order that keeps each host's GPUs together"
        return None
    steps = subset_steps(arcs)
    if steps > policy.max_subset_steps:
        return (
            f"the host/idle DP takes at most {policy.max_subset_steps:,} transitions per pass, "
            f"not {steps:,} ({arcs.n_gpus} GPUs in a free order)"
        )
    return None


def _states(arcs: Arcs, deadline: float | None, policy: Policy = POLICY) -> FreeOrder | AsGiven:
    """The DP's states for this table; TooLarge where ``refusal`` says why not."""
    why = refusal(arcs, policy)
    if why is not None:
        raise TooLarge(why)
    return AsGiven(arcs, deadline) if arcs.order == "as-given" else FreeOrder(arcs, deadline)


def solve_subsets(arcs: Arcs, limits: Limits | None = None, policy: Policy = POLICY) -> Solution:
    """The exact plan of a rig with idle GPUs or a free order over hosts (see the module doc).

    ``limits``' deadline stops it: "feasible" with a plan of the settled objective, else "unknown"."""
    t0 = time.perf_counter()
    states = _states(arcs, (limits or Limits()).deadline(t0), policy)
    found: list[Solution] = []
    try:
        got = _settle(states, found)
    except Stopped:
        if not found:
            return Solution("dp", "unknown", wall_ms=(time.perf_counter() - t0) * 1e3)
        got = dataclasses.replace(found[-1], status="feasible")
    return dataclasses.replace(got, wall_ms=(time.perf_counter() - t0) * 1e3)


def _settle(states: FreeOrder | AsGiven, found: list[Solution]) -> Solution:
    """The whole chain; ``found`` gets a plan of the objective as soon as it is settled."""
    arcs = states.arcs
    allowed = np.ones(len(arcs), dtype=bool)
    table = states.forward(allowed)
    best = states.best(table)
    if best is None:
        return Solution("dp", "infeasible")
    top = 0
    if arcs.objective.minmax:
        keys = stage_key(arcs)
        top = first_value(
            np.unique(keys), lambda v: states.best(states.forward(allowed & (keys <= v))) is not None
        )
        allowed &= keys <= top
        table = states.forward(allowed)
        best = states.best(table)
    state, (mass_star, time_star) = best
    cap = arcs.time_cap(time_star)
    bound = objective_bound(arcs, top, mass_star, time_star)
    traced = Solution("dp", "optimal", *map(tuple, states.trace(table, allowed, state)), bound)
    if usable(arcs, traced) is not None:  # what a stop returns: a plan of the objective, within the limit
        found.append(traced)

    def good(m: int | np.ndarray, t: int | np.ndarray) -> bool | np.ndarray:
        return (m == mass_star) & (t <= cap)

    def tied(mask: np.ndarray) -> bool:
        got = states.best(states.forward(mask))
        return got is not None and bool(good(*got[1]))

    spares = np.unique(arcs.spare[allowed])[::-1]
    spare = first_value(spares, lambda v: tied(allowed & (arcs.spare >= v)))
    allowed &= arcs.spare >= spare
    values = np.unique(arcs.bottleneck[allowed])
    worst = first_value(values, lambda b: tied(allowed & (arcs.bottleneck <= b)))
    allowed &= arcs.bottleneck <= worst
    cuts = states.cuts(allowed, good)
    gpus = states.order(allowed, cuts, good)
    check_host(arcs, gpus, cuts)
    return Solution("dp", "optimal", tuple(gpus), tuple(cuts), bound)


def forced_times(
    arcs: Arcs, gpus: list[int], deadline: float | None = None, policy: Policy = POLICY
) -> dict[int, int | None] | None:
    """For each GPU in ``gpus``, the summed time (entries included) of the best plan that uses it,
    by (mass, time) as the objective's first level ranks plans; None if no plan can use it.

    What an idle GPU would have cost (the report compares it with the plan's); None for the whole
    answer when ``deadline`` stops it."""
    try:
        got = _states(arcs, deadline, policy).forced(gpus)
    except Stopped:
        return None
    return {g: None if v is None else v[1] for g, v in got.items()}
