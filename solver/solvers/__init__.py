"""Solvers over one Arcs table, all with the signature ``solve(arcs, limits) -> Solution``.

Every exact solver returns the same plan: the best objective key, then the smallest bottleneck,
the smallest cut list and (free order) the smallest GPU order; see ``solver.solvers.arcs``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solver.solvers.arcs import Arcs, Objective
from solver.solvers.arcs import stage_key as stage_key
from solver.solvers.paths import any_path, stage_tables


@dataclass(frozen=True)
class Limits:
    """What a solve may spend: wall seconds (None = until proven), CP-SAT workers, a seed.

    ``started`` is the ``time.perf_counter()`` at which the time limit's clock started (the command's
    start, so reading the files and building the tables count); None: when the solve starts.
    ``progress(what, incumbent, bound)`` is called on each improving solution of the objective.
    """

    time_limit: float | None = None
    workers: int = 2
    seed: int = 0
    progress: Callable[[str, float, float], None] | None = None
    started: float | None = None

    def deadline(self, now: float) -> float | None:
        """The ``time.perf_counter()`` by which to answer; ``now`` starts the clock if nothing did."""
        if self.time_limit is None:
            return None
        return (now if self.started is None else self.started) + self.time_limit

    def left(self, now: float) -> float | None:
        """Seconds left before the deadline (None: no limit), never below zero."""
        end = self.deadline(now)
        return None if end is None else max(0.0, end - time.perf_counter())


@dataclass(frozen=True)
class Work:
    """What a solve did, for the report and the benchmarks (None: not this solver's)."""

    solves: int = 0  # CP-SAT solves (0: a DP or enumeration answered)
    pruned_arcs: int | None = None  # arcs the pruned path's last cut kept
    cut_by: str | None = None  # what cut the table: "lagrange", "host split" or "windows"


@dataclass(frozen=True)
class Solution:
    """A solver's answer: the GPU of each stage and the cut points, with how sure it is.

    status: optimal | feasible | infeasible | heuristic | unknown. ``bound`` is the proven bound on
    the objective (window ms for time, held mass for mass) when the solver proves one. ``reason``:
    why there is no answer, where the solver can say (the proportional split).
    """

    name: str
    status: str
    gpus: tuple[int, ...] = ()
    cuts: tuple[int, ...] = ()
    bound: float | None = None
    wall_ms: float = 0.0
    reason: str | None = None
    work: Work = Work()

    @property
    def found(self) -> bool:
        return self.status in ("optimal", "feasible") and bool(self.gpus)


class TooLarge(Exception):
    """This oracle cannot take a problem of this size (say why in the message)."""


class Stopped(Exception):
    """The deadline passed during a pass; the solver that raised it answers with what it has."""


def check_deadline(deadline: float | None) -> None:
    """Raise Stopped once ``time.perf_counter()`` is past ``deadline`` (None: never)."""
    if deadline is not None and time.perf_counter() > deadline:
        raise Stopped


def plan_arcs(arcs: Arcs, gpus: tuple[int, ...], cuts: tuple[int, ...]) -> np.ndarray:
    """Arc numbers of a plan's stages, -1 for a stage that is not a feasible arc.

    Bounds outside 0..L never index the table (numpy would wrap a negative one onto another arc).
    """
    idx = arcs.index()
    bounds = (0, *cuts, arcs.n_layers)
    n = arcs.n_layers

    def arc(g: int, a: int, b: int) -> int:
        return int(idx[g, a, b]) if 0 <= a < b <= n and 0 <= g < arcs.n_gpus else -1

    return np.array([arc(g, bounds[s], bounds[s + 1]) for s, g in enumerate(gpus)], dtype=np.int64)


def usable(arcs: Arcs, plan: Solution | None) -> np.ndarray | None:
    """A plan's arc numbers when it is a plan of this table within the host-memory limit, else None:
    what may stand as an incumbent or a known value, whose value then prunes arcs."""
    if plan is None or not plan.found:
        return None
    ids = plan_arcs(arcs, plan.gpus, plan.cuts)
    if (ids < 0).any() or (arcs.host_limit is not None and arcs.host[ids].sum() > arcs.host_limit):
        return None
    return ids


def check_host(arcs: Arcs, gpus: list[int] | tuple[int, ...], cuts: list[int] | tuple[int, ...]) -> None:
    """TooLarge when a DP's unconstrained optimum leaves more expert bytes in host memory than the
    limit allows: a path DP cannot carry that knapsack constraint, so it declines."""
    if arcs.host_limit is None:
        return
    host = int(arcs.host[plan_arcs(arcs, tuple(gpus), tuple(cuts))].sum())
    if host > arcs.host_limit:
        raise TooLarge(
            f"the DP's unconstrained optimum leaves {host:,} bytes in host memory, over the limit of "
            f"{arcs.host_limit:,}; the DP cannot carry that limit"
        )


def relaxed_bound(arcs: Arcs) -> float | None:
    """A proven bound on the objective from a path pass over k stages, cheap at any size.

    With the order as given, stage s is GPU s and the pass is exact; with a free order it lets a GPU
    repeat, a relaxation. With idle GPUs a plan has any number of stages: the pass takes paths of
    any length (``paths.any_path``). It ignores ``host_limit``, which only makes plans worse. Window ms
    for time, held mass for mass, the slowest stage's ms for throughput (a min-max pass); None when
    no path covers the layers.
    """
    objective = arcs.objective
    pass_ = (objective.weight(arcs), 0, objective.worst, objective.better, objective.combine)
    reach = any_path(arcs, *pass_) if arcs.idle else stage_tables(arcs, *pass_)[-1]
    if reach[arcs.n_layers] == objective.worst:
        return None
    value = int(reach[arcs.n_layers])
    if arcs.idle and objective is Objective.TIME:  # each host run costs entry_units: 1 to n_hosts runs
        value += arcs.entry_units * (1 if arcs.entry_units > 0 else arcs.n_hosts)
    return objective.in_units(arcs, value)
