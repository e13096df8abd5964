"""Plans over a fixed list of GPU orders: an engine that runs only some orders (vLLM over Ray across
hosts) is planned exactly by the DP in each allowed order, the best by the whole tie chain.

The chain is the planner's: the objective (time in whole 1e-6 ms, or held mass then time, or the
slowest stage then time), then the largest spare KV, the smallest bottleneck, the smallest cut list,
the smallest GPU order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from solver.solvers import Solution, TooLarge, plan_arcs, stage_key
from solver.solvers.arcs import Arcs

Solver = Callable[[Arcs], Solution]


def in_order(arcs: Arcs, gpus: tuple[int, ...], solve: Solver) -> Solution:
    """``solve`` with stage s on GPU ``gpus[s]``: GPUs renumbered by stage, the answer mapped back."""
    stage_of = np.empty(arcs.n_gpus, dtype=np.int64)
    stage_of[list(gpus)] = np.arange(arcs.n_gpus)
    hosts = arcs.hosts[list(gpus)]  # stage s runs on GPU gpus[s], on its host
    got = solve(dataclasses.replace(arcs, gpu=stage_of[arcs.gpu], order="as-given", twins=[], gpu_host=hosts))
    return dataclasses.replace(got, gpus=tuple(gpus[s] for s in got.gpus))


def rank(arcs: Arcs, sol: Solution) -> tuple:
    """The tie chain's key of a plan (smaller is better)."""
    ids = plan_arcs(arcs, sol.gpus, sol.cuts)
    time = int(arcs.time_key(int(arcs.time[ids].sum())))
    if arcs.objective.maximises:
        head: tuple = (-int(arcs.mass[ids].sum()), time)
    elif arcs.objective.minmax:
        head = (int(stage_key(arcs)[ids].max()), time)
    else:
        head = (time,)
    return (*head, -int(arcs.spare[ids].min()), int(arcs.bottleneck[ids].max()), sol.cuts, sol.gpus)


def solve_in_orders(arcs: Arcs, orders: list[tuple[int, ...]], solve: Solver, name: str) -> Solution:
    """The best plan over ``orders`` (each a GPU per stage) by ``solve`` in each; infeasible (from
    the solver ``name``) when none has one."""
    best: Solution | None = None
    for gpus in orders:
        try:
            got = in_order(arcs, gpus, solve)
        except TooLarge:  # a host-memory limit the DP's optimum breaks
            continue
        if got.found and (best is None or rank(arcs, got) < rank(arcs, best)):
            best = got
    if best is None:
        return Solution(name, "infeasible")
    return dataclasses.replace(best, status="optimal")
