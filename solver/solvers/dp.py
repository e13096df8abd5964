"""Dynamic programming oracle: exact for any per-stage objective.

Fixed order: ``F[s+1][b] = best_a F[s][a] + W[s][a][b]`` over stages, O(k L^2). Free order: the
same over states that count the GPUs used of each class (GPUs with identical arcs are
interchangeable), at most 2^k states and as few as k + 1 when every GPU is alike. Costs are pairs
(mass, time) compared lexicographically (more mass first, then less time; mass is 0 unless the
objective is mass). The other levels run as further passes over restricted arcs: the throughput
objective's max stage and the bottleneck by binary search on a threshold (min-max), the plan's
spare KV likewise (max-min), then greedy cut and GPU choices checked against best completions
computed backwards.

``host_limit`` is a knapsack side constraint the path DP cannot carry exactly. The DP answers when
its unconstrained lexicographic optimum meets the limit (then it is also the constrained answer)
and raises TooLarge otherwise; ``solver.solvers.route`` then asks another solver. It does not take
plans that differ in the GPUs they use (``Arcs.subsets``: ``solver.solvers.subsetdp`` does).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from solver.solvers import Limits, Solution, Stopped, check_host, stage_key, usable
from solver.solvers.arcs import Arcs
from solver.solvers.dpgraph import Graph
from solver.solvers.paths import first_value, on_cuts, path_minimax
from solver.solvers.policy import POLICY, Policy


def solve_dp(arcs: Arcs, limits: Limits | None = None, policy: Policy = POLICY) -> Solution:
    """The exact plan by dynamic programming; TooLarge where ``refusal`` says why not.

    ``limits``' deadline stops it: once the objective is settled, "feasible" with a plan of it
    traced back through its pass (the bound is the objective; the tie-breaks are what is left),
    before that "unknown"."""
    t0 = time.perf_counter()
    graph = Graph(arcs, None if limits is None else limits.deadline(t0), policy)
    found: list[Solution] = []
    try:
        got = _settle(graph, found)
    except Stopped:
        got = dataclasses.replace(found[-1], status="feasible") if found else Solution("dp", "unknown")
    return dataclasses.replace(got, wall_ms=(time.perf_counter() - t0) * 1e3)


def _settle(graph: Graph, found: list[Solution]) -> Solution:
    """The whole chain; ``found`` gets a plan of the objective as soon as it is settled."""
    arcs = graph.arcs
    allowed = np.ones(len(arcs), dtype=bool)
    top = 0
    if arcs.objective.minmax:
        keys = stage_key(arcs)
        top = graph.minimax(keys, allowed)
        if top is None:
            return Solution("dp", "infeasible")
        allowed = keys <= top
    first = graph.forward(allowed)
    best = graph.best_plan(allowed, table=first)
    if best is None:
        return Solution("dp", "infeasible")
    mass_star, time_star, plan = best
    cap = arcs.time_cap(time_star)
    bound = objective_bound(arcs, top, mass_star, time_star)
    traced = Solution("dp", "optimal", *graph.placement(plan), bound)
    if usable(arcs, traced) is not None:  # what a stop returns: a plan of the objective, within the limit
        found.append(traced)

    def good(m: int | np.ndarray, t: int | np.ndarray) -> bool | np.ndarray:
        return (m == mass_star) & (t <= cap)

    if graph.free_order:  # many levels: the tie passes below run over the tied plans' nodes only
        graph.narrow(first, allowed, good)

    def tied(mask: np.ndarray) -> bool:
        got = graph.optimum(mask)
        return got is not None and bool(good(*got))

    spares = np.unique(arcs.spare[allowed])[::-1]  # largest first: the most spare a tied plan keeps
    spare = first_value(spares, lambda v: tied(allowed & (arcs.spare >= v)))
    if len(spares) > 1:
        allowed &= arcs.spare >= spare
        plan = graph.best_plan(allowed)[2]  # a tied plan with that spare
    # the smallest bottleneck of a tied plan lies between a path bound and that of the plan found,
    # and on the rigs measured is most often that plan's own
    low, high = path_minimax(arcs, arcs.bottleneck, allowed), int(arcs.bottleneck[plan].max())
    values = np.unique(arcs.bottleneck[allowed & (arcs.bottleneck >= low) & (arcs.bottleneck <= high)])
    worst = first_value(values, lambda b: tied(allowed & (arcs.bottleneck <= b)), last_likely=True)
    allowed &= arcs.bottleneck <= worst
    cuts = _greedy_cuts(graph, allowed, good)
    gpus = _greedy_order(graph, allowed, cuts, good)
    check_host(arcs, gpus, cuts)
    return Solution("dp", "optimal", tuple(gpus), tuple(cuts), bound)


def objective_bound(arcs: Arcs, top: int, mass_star: int, time_star: int) -> float:
    """The proven optimum in the objective's own units: the slowest stage's ms (throughput, ``top`` in
    whole 1e-6 ms), the held mass, or the window ms."""
    value = top if arcs.objective.minmax else mass_star if arcs.objective.maximises else time_star
    return arcs.objective.in_units(arcs, value)


def _greedy_cuts(graph: Graph, allowed: np.ndarray, good) -> list[int]:
    """Smallest cut list among plans meeting ``good``, keeping every state that can still finish."""
    a, n = graph.arcs, graph.arcs.n_layers
    back = graph.backward(allowed)
    states = {graph.levels[0]: (0, 0)}
    at, cuts = 0, []
    while at < n:
        options = []
        for level, (pm, pt) in states.items():
            for nxt, link in graph.leaving(level):
                if nxt not in back:
                    continue
                ids = graph.by_link[link]
                ids = ids[allowed[ids] & (a.start[ids] == at)]
                bm, bt = back[nxt]
                total_m = pm + a.mass[ids] + bm[a.end[ids]]
                ok = (bm[a.end[ids]] >= 0) & good(total_m, pt + a.time[ids] + bt[a.end[ids]])
                options += [(int(a.end[i]), nxt, pm + int(a.mass[i]), pt + int(a.time[i])) for i in ids[ok]]
        at = min(o[0] for o in options)
        states = {}
        for end, nxt, m, t in options:
            if end == at and (nxt not in states or (-m, t) < (-states[nxt][0], states[nxt][1])):
                states[nxt] = (m, t)
        if at < n:
            cuts.append(at)
    return cuts


def _greedy_order(graph: Graph, allowed: np.ndarray, cuts: list[int], good) -> list[int]:
    """With the cuts fixed, the smallest GPU order among plans meeting ``good``."""
    a = graph.arcs
    bounds = np.array([0, *cuts, a.n_layers])
    fixed = allowed & on_cuts(a, cuts)
    back = graph.backward(fixed)
    level, m, t, gpus = graph.levels[0], 0, 0, []
    for s in range(len(bounds) - 1):
        options = []
        for nxt, link in graph.leaving(level):
            ids = graph.by_link[link]
            ids = ids[fixed[ids] & (a.start[ids] == bounds[s])]
            if len(ids) and nxt in back:
                options.append((graph.gpu_of(level, link), nxt, int(ids[0])))
        for g, nxt, i in sorted(options):  # smallest GPU first
            bm, bt = back[nxt]
            if bm[a.end[i]] >= 0 and good(m + a.mass[i] + bm[a.end[i]], t + a.time[i] + bt[a.end[i]]):
                level, m, t = nxt, m + int(a.mass[i]), t + int(a.time[i])
                gpus.append(g)
                break
    return gpus
