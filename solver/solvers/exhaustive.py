"""Exhaustive enumeration oracle: score every placement, for small cases only.

C(L-1, k-1) cut lists, times k! GPU orders when the order is free. With idle GPUs every
non-empty subset of GPUs in each order, with C(L-1, s-1) cut lists for s stages; orders that split
a host's stages into two runs are left out, and each host run adds ``entry_units`` to the time.
Cut lists and orders of different lengths compare as Python lists (padded with -1: a list that
ends is smaller than any longer one it starts). Each placement's key is
(-mass, max stage key, time key, -spare, bottleneck, cuts, order), compared lexicographically
(mass is 0 unless the objective is mass, the stage key 0 unless it is throughput); placements that
leave more expert bytes in host memory than ``host_limit`` are left out. A request table's plans that
pipeline their prompt take its makespan (``solver.solvers.pipeline``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time

import numpy as np

from solver.solvers import Limits, Solution, TooLarge, plan_arcs, stage_key
from solver.solvers.arcs import Arcs, subset
from solver.solvers.pipeline import plan_times
from solver.solvers.policy import POLICY, Policy


def count_placements(arcs: Arcs) -> int:
    """How many placements enumeration would score."""
    k, n = arcs.n_gpus, arcs.n_layers
    sizes = range(1, k + 1) if arcs.idle else [k]
    if arcs.order == "auto":
        return sum(math.perm(k, s) * math.comb(n - 1, s - 1) for s in sizes)
    return sum(math.comb(k, s) * math.comb(n - 1, s - 1) for s in sizes)


def _orders(arcs: Arcs):
    """Every GPU sequence a plan may use, host runs kept."""
    k = arcs.n_gpus
    sizes = range(1, k + 1) if arcs.idle else [k]
    pick = itertools.permutations if arcs.order == "auto" else itertools.combinations
    host = arcs.hosts
    for s in sizes:
        for order in pick(range(k), s):
            runs = [int(host[g]) for i, g in enumerate(order) if i == 0 or host[g] != host[order[i - 1]]]
            if len(runs) == len(set(runs)):
                yield order, len(runs)


def _rows(
    arcs: Arcs, ids: np.ndarray, runs: int, combos: np.ndarray, order: tuple[int, ...], stage_keys: np.ndarray
) -> np.ndarray:
    """The keys of the placements ``ids`` (plans, stages) of one GPU order, cut lists ``combos``."""
    k, s = arcs.n_gpus, len(order)
    mass = arcs.mass[ids].sum(axis=1)
    top = stage_keys[ids].max(axis=1) if arcs.objective.minmax else np.zeros(len(ids), np.int64)
    key = arcs.time_key(plan_times(arcs, ids) + arcs.entry_units * runs)
    spare = arcs.spare[ids].min(axis=1)
    bottleneck = arcs.bottleneck[ids].max(axis=1)
    cut_cols = np.full((len(ids), k - 1), -1, dtype=np.int64)
    cut_cols[:, : s - 1] = combos
    rank = np.full((len(ids), k), -1, dtype=np.int64)
    rank[:, :s] = np.array(order)[None, :]
    return np.column_stack([-mass, top, key, -spare, bottleneck, cut_cols, rank])


def plan_key(arcs: Arcs, gpus: tuple[int, ...], cuts: tuple[int, ...]) -> tuple[int, ...]:
    """One placement's key, as enumeration ranks it (the module docstring)."""
    ids = plan_arcs(arcs, gpus, cuts)[None, :]
    hosts = arcs.hosts[list(gpus)]
    runs = 1 + int(np.count_nonzero(hosts[1:] != hosts[:-1]))
    combos = np.array([cuts], dtype=np.int64).reshape(1, len(cuts))
    return tuple(int(v) for v in _rows(arcs, ids, runs, combos, tuple(gpus), stage_key(arcs))[0])


def solve_exhaustive(arcs: Arcs, limits: Limits | None = None, policy: Policy = POLICY) -> Solution:
    """The exact plan by scoring every placement (at most ``policy.max_placements``)."""
    t0 = time.perf_counter()
    n, k = arcs.n_layers, arcs.n_gpus
    total = count_placements(arcs)
    if total > policy.max_placements:
        raise TooLarge(f"{total:,} placements is over the {policy.max_placements:,} exhaustive search scores")
    idx = arcs.index()
    stage_keys = stage_key(arcs)
    rows = []
    cut_sets: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for order, runs in _orders(arcs):
        s = len(order)
        if s not in cut_sets:
            cut_lists = list(itertools.combinations(range(1, n), s - 1))
            combos = np.array(cut_lists, dtype=np.int64).reshape(len(cut_lists), s - 1)
            ends = np.column_stack([np.zeros(len(combos), np.int64), combos, np.full(len(combos), n)])
            cut_sets[s] = combos, ends
        combos, bounds = cut_sets[s]
        ids = np.column_stack([idx[g, bounds[:, i], bounds[:, i + 1]] for i, g in enumerate(order)])
        ok = (ids >= 0).all(axis=1)
        if not ok.any():
            continue
        if arcs.host_limit is not None:
            ok[ok] = arcs.host[ids[ok]].sum(axis=1) <= arcs.host_limit
        rows.append(_rows(arcs, ids[ok], runs, combos[ok], order, stage_keys))
    table = np.concatenate(rows) if rows else np.zeros((0, 0), dtype=np.int64)
    if not len(table):
        return Solution("exhaustive", "infeasible", wall_ms=(time.perf_counter() - t0) * 1e3)
    best = table[np.lexsort(table.T[::-1])[0]]
    cuts = tuple(int(c) for c in best[5 : 5 + k - 1] if c >= 0)
    gpus = tuple(int(g) for g in best[5 + k - 1 :] if g >= 0)
    bound = None
    return Solution(
        "exhaustive",
        "optimal",
        gpus,
        cuts,
        bound,
        wall_ms=(time.perf_counter() - t0) * 1e3,
    )


def settle(arcs: Arcs, solution: Solution, limits: Limits | None = None, policy: Policy = POLICY) -> Solution:
    """The path solvers' answer on a request table, set against the best plan that pipelines its
    prompt (enumerated on the arcs that leave nothing in host memory); unchanged on other tables.
    Past ``policy.max_placements`` such placements the answer comes back unproven, with the reason."""
    if arcs.prompt is None or arcs.prompt.shape[1] < 2 or not solution.found or not (arcs.host == 0).any():
        return solution
    resident = subset(arcs, arcs.host == 0)
    try:
        piped = solve_exhaustive(resident, limits, policy)
    except TooLarge as exc:
        return dataclasses.replace(
            solution,
            status="feasible",
            reason=f"plans that keep every expert on the GPUs pipeline the prompt and are scored one by "
            f"one: {exc}",
        )
    if not piped.found:
        return solution
    if plan_key(arcs, piped.gpus, piped.cuts) < plan_key(arcs, solution.gpus, solution.cuts):
        return dataclasses.replace(solution, gpus=piped.gpus, cuts=piped.cuts, bound=None)
    return solution
