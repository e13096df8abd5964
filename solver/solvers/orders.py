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
from solver.solvers.arcs import Arcs, subset

Solver = Callable[[Arcs], Solution]


class AnyOrder(tuple):
    """GPUs a plan uses, all of them, in the order the solver chooses (each host's stages one run):
    an item of an engine's allowed orders that stands for every order of these GPUs."""


def in_order(arcs: Arcs, gpus: tuple[int, ...], solve: Solver) -> Solution:
    """``solve`` using exactly the GPUs ``gpus``: stage s on GPU ``gpus[s]``, or (an ``AnyOrder``)
    in the order ``solve`` chooses. GPUs are renumbered by position, the answer mapped back.

    With idle GPUs the table is cut to the arcs of ``gpus`` and planned as a table without idle GPUs:
    its constant takes the hand-off every arc carries back and one ``entry_units`` per host run, which
    ``gpus`` fixes (in a stage order, its host changes; in any order, each host once).
    """
    free = isinstance(gpus, AnyOrder)
    gpus = tuple(int(g) for g in gpus)
    position = np.full(arcs.n_gpus, -1, dtype=np.int64)
    position[list(gpus)] = np.arange(len(gpus))
    hosts = arcs.hosts[list(gpus)]
    table = subset(arcs, position[arcs.gpu] >= 0) if len(gpus) < arcs.n_gpus else arcs
    const = arcs.const_time
    if arcs.idle:
        runs = len(set(hosts.tolist())) if free else 1 + int(np.count_nonzero(hosts[1:] != hosts[:-1]))
        const += arcs.entry_units * runs
    used = np.unique(hosts, return_inverse=True)[1].astype(np.int64)  # hosts numbered from 0
    got = solve(
        dataclasses.replace(
            table,
            n_gpus=len(gpus),
            gpu=position[table.gpu],
            order="auto" if free else "as-given",
            twins=[],
            gpu_host=used,
            idle=False,
            entry_units=0,
            const_time=const,
        )
    )
    return dataclasses.replace(got, gpus=tuple(gpus[s] for s in got.gpus))


def rank(arcs: Arcs, sol: Solution) -> tuple:
    """The tie chain's key of a plan (smaller is better)."""
    from solver.solvers.cpmodel import plan_time  # with CP-SAT, whose import a DP route skips

    ids = plan_arcs(arcs, sol.gpus, sol.cuts)
    time = int(arcs.time_key(plan_time(arcs, ids)))
    if arcs.objective.maximises:
        head: tuple = (-int(arcs.mass[ids].sum()), time)
    elif arcs.objective.minmax:
        head = (int(stage_key(arcs)[ids].max()), time)
    else:
        head = (time,)
    return (*head, -int(arcs.spare[ids].min()), int(arcs.bottleneck[ids].max()), sol.cuts, sol.gpus)


def solve_in_orders(arcs: Arcs, orders: list[tuple[int, ...]], solve: Solver, name: str) -> Solution:
    """The best plan over ``orders`` (each a GPU per stage, or an ``AnyOrder`` of GPUs) by ``solve``
    in each; infeasible (from the solver ``name``) when none has one."""
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
