"""Dynamic programming oracle: exact for any per-stage objective.

Fixed order: ``F[s+1][b] = best_a F[s][a] + W[s][a][b]`` over stages, O(k L^2). Free order: the
same over subsets of used GPUs (a bitmask), O(2^k k L^2). Costs are pairs (mass, time) compared
lexicographically (more mass first, then less time; mass is 0 under the time objective). The
tie-breaks run as further passes: a binary search on the bottleneck, then greedy cut and GPU
choices checked against best completions computed backwards.
"""

from __future__ import annotations

import time

import numpy as np

from solver.arcs import Arcs
from solver.solvers import Limits, Solution, TooLarge

MAX_GPUS_FREE_ORDER = 12
NONE = -1  # mass of an unreachable state


def _best(target: np.ndarray, mass: np.ndarray, cost: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per target index, the lexicographic best (max mass, then min time); -1 mass = none."""
    best_m = np.full(size, NONE, dtype=np.int64)
    best_t = np.zeros(size, dtype=np.int64)
    ok = mass >= 0
    if ok.any():
        target, mass, cost = target[ok], mass[ok], cost[ok]
        order = np.lexsort((cost, -mass, target))
        first = np.unique(target[order], return_index=True)[1]
        pick = order[first]
        best_m[target[pick]] = mass[pick]
        best_t[target[pick]] = cost[pick]
    return best_m, best_t


class _Graph:
    """Levels of the DP (stage number, or set of used GPUs) and the arcs between them."""

    def __init__(self, arcs: Arcs):
        self.arcs = arcs
        self.free_order = arcs.order == "auto"
        k = arcs.n_gpus
        if self.free_order and k > MAX_GPUS_FREE_ORDER:
            raise TooLarge(f"the free-order DP takes at most {MAX_GPUS_FREE_ORDER} GPUs, not {k}")
        self.by_gpu = [np.flatnonzero(arcs.gpu == g) for g in range(k)]
        self.levels = list(range(2**k)) if self.free_order else list(range(k + 1))
        self.final = self.levels[-1]

    def leaving(self, level: int) -> list[tuple[int, np.ndarray]]:
        """(next level, arc numbers) for the arcs that can follow a state at ``level``."""
        if not self.free_order:
            return [(level + 1, self.by_gpu[level])] if level < self.arcs.n_gpus else []
        return [(level | 1 << g, ids) for g, ids in enumerate(self.by_gpu) if not level >> g & 1]

    def entering(self, level: int) -> list[tuple[int, np.ndarray]]:
        """(previous level, arc numbers) for the arcs that lead into ``level``."""
        if not self.free_order:
            return [(level - 1, self.by_gpu[level - 1])] if level > 0 else []
        return [(level ^ 1 << g, ids) for g, ids in enumerate(self.by_gpu) if level >> g & 1]

    def forward(self, allowed: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Best (mass, time) from the start to every (level, boundary)."""
        return self._sweep(allowed, self.levels, self.entering, self.arcs.start, self.arcs.end, 0)

    def backward(self, allowed: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Best (mass, time) from every (level, boundary) to the end."""
        levels = self.levels[::-1]
        return self._sweep(allowed, levels, self.leaving, self.arcs.end, self.arcs.start, self.arcs.n_layers)

    def _sweep(
        self, allowed: np.ndarray, levels: list[int], links, src: np.ndarray, dst: np.ndarray, origin: int
    ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """One DP pass over ``levels``: a state's best is the best of its linked states plus an arc.

        ``links(level)`` gives (linked level, arc numbers); an arc carries the linked state's value
        from its ``src`` boundary to its ``dst`` boundary. Forward: src = start, dst = end.
        """
        a, n = self.arcs, self.arcs.n_layers + 1
        first = np.full(n, NONE, dtype=np.int64)
        first[origin] = 0
        table = {levels[0]: (first, np.zeros(n, dtype=np.int64))}
        for level in levels[1:]:
            parts = []
            for linked, ids in links(level):
                if linked not in table:
                    continue
                ids = ids[allowed[ids]]
                lm, lt = table[linked]
                parts.append(
                    (
                        dst[ids],
                        np.where(lm[src[ids]] >= 0, lm[src[ids]] + a.mass[ids], NONE),
                        lt[src[ids]] + a.time[ids],
                    )
                )
            if parts:
                best = _best(*(np.concatenate(x) for x in zip(*parts)), n)
                if (best[0] >= 0).any():
                    table[level] = best
        return table

    def optimum(self, allowed: np.ndarray) -> tuple[int, int] | None:
        """Best (mass, time) of a whole plan using only ``allowed`` arcs."""
        table = self.forward(allowed)
        if self.final not in table or table[self.final][0][-1] < 0:
            return None
        return int(table[self.final][0][-1]), int(table[self.final][1][-1])


def solve_dp(arcs: Arcs, limits: Limits | None = None) -> Solution:
    """The exact plan by dynamic programming (free order: at most 12 GPUs)."""
    t0 = time.perf_counter()
    graph = _Graph(arcs)
    every = np.ones(len(arcs), dtype=bool)
    best = graph.optimum(every)
    if best is None:
        return Solution("dp", "infeasible", info={"wall_ms": (time.perf_counter() - t0) * 1e3})
    mass_star, time_star = best
    cap = arcs.time_cap(time_star)

    def good(m: int | np.ndarray, t: int | np.ndarray) -> bool | np.ndarray:
        return (m == mass_star) & (t <= cap)

    levels = np.unique(arcs.bottleneck)
    lo, hi = 0, len(levels) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        got = graph.optimum(arcs.bottleneck <= levels[mid])
        if got is not None and good(*got):
            hi = mid
        else:
            lo = mid + 1
    allowed = arcs.bottleneck <= levels[lo]
    cuts = _greedy_cuts(graph, allowed, good)
    gpus = _greedy_order(graph, allowed, cuts, good)
    bound = arcs.window_ms(time_star) if arcs.objective == "time" else mass_star / 10**12
    return Solution(
        "dp",
        "optimal",
        tuple(gpus),
        tuple(cuts),
        bound,
        info={"wall_ms": (time.perf_counter() - t0) * 1e3},
    )


def _greedy_cuts(graph: _Graph, allowed: np.ndarray, good) -> list[int]:
    """Smallest cut list among plans meeting ``good``, keeping every state that can still finish."""
    a, n = graph.arcs, graph.arcs.n_layers
    back = graph.backward(allowed)
    states = {graph.levels[0]: (0, 0)}
    at, cuts = 0, []
    while at < n:
        options = []
        for level, (pm, pt) in states.items():
            for nxt, ids in graph.leaving(level):
                if nxt not in back:
                    continue
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


def _greedy_order(graph: _Graph, allowed: np.ndarray, cuts: list[int], good) -> list[int]:
    """With the cuts fixed, the smallest GPU order among plans meeting ``good``."""
    a = graph.arcs
    bounds = np.array([0, *cuts, a.n_layers])
    stage = np.searchsorted(bounds, a.start)
    fixed = allowed & (bounds[np.minimum(stage, len(bounds) - 1)] == a.start)
    fixed &= bounds[np.minimum(stage + 1, len(bounds) - 1)] == a.end
    back = graph.backward(fixed)
    level, m, t, gpus = graph.levels[0], 0, 0, []
    for s in range(len(bounds) - 1):
        for nxt, ids in graph.leaving(level):  # in GPU order
            ids = ids[fixed[ids] & (a.start[ids] == bounds[s])]
            if not len(ids) or nxt not in back:
                continue
            i = int(ids[0])
            bm, bt = back[nxt]
            if bm[a.end[i]] >= 0 and good(m + a.mass[i] + bm[a.end[i]], t + a.time[i] + bt[a.end[i]]):
                level, m, t = nxt, m + int(a.mass[i]), t + int(a.time[i])
                gpus.append(int(a.gpu[i]))
                break
    return gpus
