"""Exhaustive enumeration oracle: score every placement, for small cases only.

C(L-1, k-1) cut lists, times k! GPU orders when the order is free. Each placement's key is
(-mass, max stage key, time key, -spare, bottleneck, cuts, order), compared lexicographically
(mass is 0 unless the objective is mass, the stage key 0 unless it is throughput); placements that
leave more expert bytes in host memory than ``host_limit`` are left out.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from solver.arcs import Arcs
from solver.solvers import Limits, Solution, TooLarge, stage_key

MAX_PLACEMENTS = 3_000_000


def count_placements(arcs: Arcs) -> int:
    """How many placements enumeration would score."""
    orders = math.factorial(arcs.n_gpus) if arcs.order == "auto" else 1
    return math.comb(arcs.n_layers - 1, arcs.n_gpus - 1) * orders


def solve_exhaustive(arcs: Arcs, limits: Limits | None = None) -> Solution:
    """The exact plan by scoring every placement."""
    t0 = time.perf_counter()
    n, k = arcs.n_layers, arcs.n_gpus
    total = count_placements(arcs)
    if total > MAX_PLACEMENTS:
        raise TooLarge(f"{total:,} placements is over the {MAX_PLACEMENTS:,} exhaustive search scores")
    idx = arcs.index()
    stage_keys = stage_key(arcs)
    cut_lists = list(itertools.combinations(range(1, n), k - 1))
    combos = np.array(cut_lists, dtype=np.int64).reshape(len(cut_lists), k - 1)
    bounds = np.column_stack([np.zeros(len(combos), np.int64), combos, np.full(len(combos), n)])
    orders = itertools.permutations(range(k)) if arcs.order == "auto" else [tuple(range(k))]
    rows = []
    for order in orders:
        ids = np.column_stack([idx[g, bounds[:, s], bounds[:, s + 1]] for s, g in enumerate(order)])
        ok = (ids >= 0).all(axis=1)
        if not ok.any():
            continue
        if arcs.host_limit is not None:
            ok[ok] = arcs.host[ids[ok]].sum(axis=1) <= arcs.host_limit
        ids = ids[ok]
        mass = arcs.mass[ids].sum(axis=1)
        top = stage_keys[ids].max(axis=1) if arcs.objective == "throughput" else np.zeros(len(ids), np.int64)
        key = arcs.time_key(arcs.time[ids].sum(axis=1))
        spare = arcs.spare[ids].min(axis=1)
        bottleneck = arcs.bottleneck[ids].max(axis=1)
        rank = np.repeat(np.array(order)[None, :], len(ids), axis=0)
        rows.append(np.column_stack([-mass, top, key, -spare, bottleneck, combos[ok], rank]))
    table = np.concatenate(rows) if rows else np.zeros((0, 0), dtype=np.int64)
    if not len(table):
        return Solution("exhaustive", "infeasible", info={"wall_ms": (time.perf_counter() - t0) * 1e3})
    best = table[np.lexsort(table.T[::-1])[0]]
    cuts = tuple(int(c) for c in best[5 : 5 + k - 1])
    gpus = tuple(int(g) for g in best[5 + k - 1 :])
    bound = None
    return Solution(
        "exhaustive",
        "optimal",
        gpus,
        cuts,
        bound,
        info={"wall_ms": (time.perf_counter() - t0) * 1e3, "placements": total},
    )
