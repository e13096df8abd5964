"""The one integer table every solver reads: feasible (GPU, start, end) arcs and their weights.

Scaling (see README, "Numerical honesty"). Times are integers of ``1/time_scale`` ms, where
``time_scale`` is 10^12 unless the rig is so large that CP-SAT's objective could overflow, then a
smaller power of ten (never below 10^6). The weights are built from per-layer and per-pair
integers, so two plans that are equal in exact arithmetic (same compute, same held pairs) get
equal integers:

- ``layer_units[g] = round(layer_ms[g] * time_scale)``; an arc's compute is ``n * layer_units[g]``
- ``miss_units[r]  = round(miss_ms * mass[r] * time_scale)``; an arc saves the sum over its held pairs
- ``mass_units[r]  = round(mass[r] * 10^12)``; an arc's mass is the sum over its held pairs

(strata's pairs; llama.cpp's expert tensors the same way with their CPU ms; see solver.engines).

A plan's window is ``const_time + sum of arc time``. The tie rule compares windows in whole units of
1e-6 ms, so the time objective's key is that total rounded (half up) to ``coarse`` = time_scale /
10^6 units; all plans with the best key tie and go to the tie-breaks. Held mass compares exactly
in units of 1e-12. Then the smallest bottleneck (``n * layer_units[g]``), then the smallest cut
list, then the smallest GPU order.

The objective (``Objective``) decides only the first level: time, the least window; mass, the most
held mass, then the least window; throughput, the least slowest stage (``stage_key``, a min-max
level), then the least window.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from solver.problem.scales import MASS_SCALE


class Objective(str, Enum):
    """The objective of a table (a ``str``, so it compares equal to the name a rig gives)."""

    TIME = "time"
    MASS = "mass"
    THROUGHPUT = "throughput"

    @property
    def maximises(self) -> bool:
        """Whether its first level is a largest sum (held mass); the others are least values."""
        return self is Objective.MASS

    @property
    def minmax(self) -> bool:
        """Whether its first level is a least largest stage rather than a sum (throughput)."""
        return self is Objective.THROUGHPUT

    @property
    def better(self) -> np.ufunc:
        """The ufunc that keeps the better of two first-level values."""
        return np.maximum if self.maximises else np.minimum

    @property
    def worst(self) -> int:
        """A first-level value every plan beats: unreachable in the passes."""
        return int(np.iinfo(np.int64).min if self.maximises else np.iinfo(np.int64).max)

    def weight(self, arcs: Arcs) -> np.ndarray:
        """Each arc's first-level weight in table units: its time, held mass or stage key."""
        if self is Objective.MASS:
            return arcs.mass
        return stage_key(arcs) if self.minmax else arcs.time

    def combine(self, so_far: np.ndarray | int, weight: np.ndarray) -> np.ndarray:
        """A path's first-level value after one more arc: the sum, or (min-max) the larger."""
        return np.maximum(so_far, weight) if self.minmax else so_far + weight

    def in_units(self, arcs: Arcs, value: int) -> float:
        """A first-level value in the objective's own units: the window ms (from summed arc time),
        the held mass, or the slowest stage's ms (from a stage key in whole 1e-6 ms)."""
        if self is Objective.MASS:
            return value / MASS_SCALE
        if self.minmax:
            return value / 10**6
        return arcs.window_ms(value)

    def tighter(self, a: float | None, b: float | None) -> float | None:
        """The tighter of two valid bounds on the objective (either may be None)."""
        if a is None or b is None:
            return b if a is None else a
        return min(a, b) if self.maximises else max(a, b)


def stage_key(arcs: Arcs) -> np.ndarray:
    """Each arc's ``stage`` time in whole units of 1e-6 ms, halves up: the throughput objective's key."""
    return (arcs.stage + arcs.coarse // 2) // arcs.coarse


@dataclass(frozen=True)
class Arcs:
    """Feasible arcs, shape (n,) each: ``gpu``, ``start``, ``end`` and integer weights.

    time: arc compute minus the miss time its cache saves (units of 1/time_scale ms)
    mass: held mass (units of 1e-12); bottleneck: arc compute (units of 1/time_scale ms)
    stage: the stage's own time, compute plus the miss time of its layers' traffic it does not
        hold (units of 1/time_scale ms; ``stage_ms``, the throughput objective's max)
    spare: spare KV tokens of the stage (resident engines), SPARE_UNLIMITED when its
        layers keep no per-token KV; larger is better, the plan's is the minimum over stages
    host: bytes of its layers' experts the stage leaves in host memory; a plan's sum is bounded
        by ``host_limit`` (bytes, None = no limit), a side constraint every solver must respect

    Idle GPUs and hosts: ``gpu_host`` (k,) is each GPU's machine; with ``idle`` a plan may
    leave GPUs out. Hand-offs stay exact in the same sums: with idle GPUs every arc's ``time``
    carries one ``handoff_ms`` and ``const_time`` one less, so s stages pay s - 1 hand-offs; each
    run of one host's stages beyond the first pays ``network - handoff`` more. Without idle GPUs
    every host has one run and that total is in ``const_time``; with them each run costs
    ``entry_units`` (``const_time`` holds minus one of them, a plan has at least one run).

    One request's time (llama.cpp's ``request`` objective, minimised as time): ``prompt`` (a, J) is
    each arc's time on each of the prompt's J micro-batches, whose row sum ``time`` holds beside the
    decode windows. A plan of two or more stages that all leave nothing in host memory (``host`` 0)
    overlaps the micro-batches across its stages (llama.cpp's pipeline parallelism): its prompt takes
    the flow shop's makespan (``solver.solvers.pipeline``) instead of the sum.
    """

    n_layers: int
    n_gpus: int
    order: str
    objective: Objective
    first_stage_min_layers: int
    layer_ms: np.ndarray
    gpu: np.ndarray
    start: np.ndarray
    end: np.ndarray
    time: np.ndarray
    mass: np.ndarray
    bottleneck: np.ndarray
    const_time: int
    time_scale: int
    twins: list[tuple[int, int]]
    stage: np.ndarray
    spare: np.ndarray
    host: np.ndarray
    host_limit: int | None = None
    gpu_host: np.ndarray | None = None
    idle: bool = False
    entry_units: int = 0
    prompt: np.ndarray | None = None

    @property
    def hosts(self) -> np.ndarray:
        """Host index of each GPU, shape (k,)."""
        return self.gpu_host if self.gpu_host is not None else np.zeros(self.n_gpus, dtype=np.int64)

    @property
    def n_hosts(self) -> int:
        return int(self.hosts.max(initial=0)) + 1

    @property
    def subsets(self) -> bool:
        """True when plans differ in which GPUs they use or must keep host runs: idle GPUs allowed,
        or a free order over several hosts. The class-count DP and CP-SAT's model do not cover it."""
        return self.idle or (self.order == "auto" and self.n_hosts > 1)

    @property
    def coarse(self) -> int:
        """Fine time units per 1e-6 ms."""
        return self.time_scale // 10**6

    def __len__(self) -> int:
        return len(self.gpu)

    def index(self) -> np.ndarray:
        """``idx[g, a, b]`` = arc number, or -1 where (g, a, b) is not an arc; shape (k, L+1, L+1)."""
        n = self.n_layers + 1
        idx = np.full((self.n_gpus, n, n), -1, dtype=np.int64)
        idx[self.gpu, self.start, self.end] = np.arange(len(self))
        return idx

    def time_key(self, time: int | np.ndarray) -> int | np.ndarray:
        """The whole number of 1e-6 ms a plan's window rounds to, from its summed arc time."""
        half = self.coarse // 2
        return (self.const_time + time + half) // self.coarse

    def time_cap(self, best_time: int) -> int:
        """Largest summed arc time whose key equals that of ``best_time``: the tie set's edge."""
        key = self.time_key(best_time)
        return key * self.coarse + self.coarse - 1 - self.coarse // 2 - self.const_time

    def window_ms(self, time: int) -> float:
        """A summed arc time as a window in ms (for bounds; plans report exact floats)."""
        return (self.const_time + time) / self.time_scale


def subset(arcs: Arcs, keep: np.ndarray) -> Arcs:
    """The same table restricted to the arcs where ``keep`` is True."""
    return dataclasses.replace(
        arcs,
        gpu=arcs.gpu[keep],
        start=arcs.start[keep],
        end=arcs.end[keep],
        time=arcs.time[keep],
        mass=arcs.mass[keep],
        bottleneck=arcs.bottleneck[keep],
        stage=arcs.stage[keep],
        spare=arcs.spare[keep],
        host=arcs.host[keep],
        prompt=None if arcs.prompt is None else arcs.prompt[keep],
    )


def by_gpu(arcs: Arcs) -> list[np.ndarray]:
    """Arc numbers of each GPU, ascending: one sort, where a scan of the table per GPU costs k
    passes over it (seconds on a thousand GPUs)."""
    order = np.argsort(arcs.gpu, kind="stable")
    cut = np.searchsorted(arcs.gpu[order], np.arange(arcs.n_gpus + 1))
    return [order[cut[g] : cut[g + 1]] for g in range(arcs.n_gpus)]


def gpu_classes(arcs: Arcs) -> np.ndarray:
    """Class of each GPU, shape (k,): identical GPUs (the ``twins`` chains) share one, numbered from 0."""
    cls = np.arange(arcs.n_gpus)
    for i, j in arcs.twins:
        cls[j] = cls[i]
    return np.unique(cls, return_inverse=True)[1]


def free_order_states(arcs: Arcs) -> int:
    """How many states the exact free-order pass needs: the ways to have used some of each class."""
    return math.prod(int(m) + 1 for m in np.bincount(gpu_classes(arcs)))
