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
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from solver.objective import Objective
from solver.problem import Problem
from solver.scales import COARSE_TIME_SCALE, COEFF_BUDGET, FINE_TIME_SCALE

if TYPE_CHECKING:
    from solver.engines import Table


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


def _time_scale(p: Problem, n_arcs: int) -> int:
    """Largest power of ten <= 10^12 that keeps CP-SAT's objective sums within COEFF_BUDGET.

    problem.resolve refuses rigs where even 10^6 would not fit, so files never reach the error.
    """
    worst_ms = p.worst_window_ms
    scale = FINE_TIME_SCALE
    while scale > COARSE_TIME_SCALE and worst_ms * scale * max(n_arcs, 1) >= COEFF_BUDGET:
        scale //= 10
    if worst_ms * scale * max(n_arcs, 1) >= COEFF_BUDGET:
        raise ValueError("the rig's times are too large to score in whole units of 1e-6 ms")
    return scale


def _reachable(
    keep: np.ndarray, gpu: np.ndarray, start: np.ndarray, end: np.ndarray, p: Problem
) -> np.ndarray:
    """Keep only arcs on some path from layer 0 to layer L of at most k arcs.

    With the order as given, stage s is GPU s, so reachability is tracked per stage and each
    stage's arcs are visited once; a free order repeats whole passes until nothing changes.
    """
    n, k = p.n_layers, p.n_gpus
    layered = p.order == "as-given" and not p.idle_gpus
    stage = gpu if layered else np.zeros_like(gpu)
    nxt = stage + 1 if layered else stage
    rows = k + 1 if layered else 1
    fwd = np.zeros((rows, n + 1), dtype=bool)
    bwd = np.zeros((rows, n + 1), dtype=bool)
    fwd[0, 0] = True
    bwd[rows - 1, n] = True
    if layered:
        by_stage = np.split(
            np.flatnonzero(keep)[np.argsort(gpu[keep], kind="stable")],
            np.cumsum(np.bincount(gpu[keep], minlength=k))[:-1],
        )
        for s in range(k):
            ids = by_stage[s]
            fwd[s + 1, end[ids[fwd[s, start[ids]]]]] = True
        for s in range(k - 1, -1, -1):
            ids = by_stage[s]
            bwd[s, start[ids[bwd[s + 1, end[ids]]]]] = True
        return keep & fwd[stage, start] & bwd[nxt, end]
    ids = np.flatnonzero(keep)
    for _ in range(k):
        before = fwd.sum() + bwd.sum()
        fwd[0, end[ids[fwd[0, start[ids]]]]] = True
        bwd[0, start[ids[bwd[0, end[ids]]]]] = True
        if fwd.sum() + bwd.sum() == before:
            break
    return keep & fwd[stage, start] & bwd[nxt, end]


def build_arcs(p: Problem, table: Table) -> Arcs:
    """Prune the engine's (GPU, range) table to the arcs a feasible plan can use and weigh them."""
    n, k = p.n_layers, p.n_gpus
    g, a, b = np.nonzero(table.room >= 0)
    length = b - a
    minlen = np.where(a == 0, np.maximum(p.min_layers[g], p.first_stage_min_layers), p.min_layers[g])
    keep = (length >= minlen) & (length <= p.max_layers[g])
    first_min = np.maximum(p.min_layers, p.first_stage_min_layers)
    if p.idle_gpus:  # any subset of the others may cover the rest
        others_max = p.max_layers.sum() - p.max_layers[g]
        keep &= a + (n - b) <= others_max
    elif p.order == "as-given":
        head_min = np.concatenate([[0], np.cumsum(np.r_[first_min[:1], p.min_layers[1:]])])[g]
        head_max = np.concatenate([[0], np.cumsum(p.max_layers)])[g]
        tail = np.concatenate([np.cumsum(p.min_layers[::-1])[::-1], [0]])
        tail_max = np.concatenate([np.cumsum(p.max_layers[::-1])[::-1], [0]])
        keep &= (a == 0) == (g == 0)
        keep &= (b == n) == (g == k - 1)
        keep &= (a >= head_min) & (a <= head_max)
        keep &= (n - b >= tail[g + 1]) & (n - b <= tail_max[g + 1])
    else:
        others_min = p.min_layers.sum() - p.min_layers[g]
        others_max = p.max_layers.sum() - p.max_layers[g]
        keep &= (a + (n - b) >= others_min) & (a + (n - b) <= others_max)
        keep &= (k > 1) | ((a == 0) & (b == n))
    keep = _reachable(keep, g, a, b, p) if keep.any() else keep
    g, a, b = g[keep], a[keep], b[keep]
    scale = _time_scale(p, len(g))
    objective = Objective(p.objective)
    w = table.weigh(g, a, b, scale, objective.maximises)
    hop = round(p.handoff_ms * scale)
    entry = round(p.network_ms * scale) - hop if len(p.host_names) > 1 else 0
    hosts = len(set(p.hosts.tolist()))
    if p.idle_gpus:
        time = w.time + hop
        const = table.const_units(scale) - hop - entry
    else:
        time = w.time
        const = table.const_units(scale) + hop * (k - 1) + entry * (hosts - 1)
    return Arcs(
        n_layers=n,
        n_gpus=k,
        order=p.order,
        objective=objective,
        first_stage_min_layers=p.first_stage_min_layers,
        layer_ms=p.layer_ms,
        gpu=g,
        start=a,
        end=b,
        time=time,
        mass=w.mass,
        bottleneck=w.gpu,
        const_time=const,
        time_scale=scale,
        twins=_twins(p),
        stage=w.gpu + w.missed,
        spare=w.spare,
        host=w.host,
        host_limit=p.host_memory,
        gpu_host=p.hosts.astype(np.int64),
        idle=p.idle_gpus,
        entry_units=entry if p.idle_gpus else 0,
    )


def _twins(p: Problem) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, of identical GPUs next in rig order within their class."""
    if p.order != "auto":
        return []
    keys = [
        (
            int(p.free[g]),
            int(p.reserve[g]),
            float(p.layer_ms[g]),
            int(p.min_layers[g]),
            int(p.max_layers[g]),
            int(p.hosts[g]),
            *(() if p.speed is None else (float(p.speed.bandwidth[g]), bool(p.speed.given[g]))),
        )
        for g in range(p.n_gpus)
    ]
    last: dict[tuple, int] = {}
    out = []
    for g, key in enumerate(keys):
        if key in last:
            out.append((last[key], g))
        last[key] = g
    return out


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
    )


def best_through(arcs: Arcs, weight: np.ndarray, sense: str, exact_states: int) -> np.ndarray:
    """For each arc, a bound on the total ``weight`` of any whole plan that uses it, shape (n,).

    ``sense`` "min" gives a lower bound, "max" an upper bound. With the order as given, stage s is
    GPU s and the bound is exact (a forward and a backward pass over the layered graph). With a
    free order the passes count stages but let a GPU repeat, which relaxes the plan and keeps the
    bound valid; a free order of at most ``exact_states`` class-count states gets the exact best
    plan through each arc instead (``_through_by_classes``). Used to drop arcs that cannot be part
    of any plan within a proven tie set.
    """
    n, k = arcs.n_layers, arcs.n_gpus
    worst = np.iinfo(np.int64).max // 4 * (1 if sense == "min" else -1)
    better = np.minimum if sense == "min" else np.maximum
    if arcs.order == "auto" and free_order_states(arcs) <= exact_states:
        return _through_by_classes(arcs, weight, worst, better)
    stage = arcs.gpu if arcs.order == "as-given" else None
    fwd = np.full((k + 1, n + 1), worst, dtype=np.int64)
    bwd = np.full((k + 1, n + 1), worst, dtype=np.int64)
    fwd[0, 0] = 0
    bwd[k, n] = 0
    for s in range(k):
        on = np.ones(len(arcs), dtype=bool) if stage is None else stage == s
        reach = on & (fwd[s, arcs.start] != worst)
        better.at(fwd[s + 1], arcs.end[reach], fwd[s, arcs.start[reach]] + weight[reach])
    for s in range(k - 1, -1, -1):
        on = np.ones(len(arcs), dtype=bool) if stage is None else stage == s
        reach = on & (bwd[s + 1, arcs.end] != worst)
        better.at(bwd[s], arcs.start[reach], bwd[s + 1, arcs.end[reach]] + weight[reach])
    through = fwd[:k, arcs.start] + weight[None, :] + bwd[1:, arcs.end]
    dead = (fwd[:k, arcs.start] == worst) | (bwd[1:, arcs.end] == worst)
    through[dead] = worst
    if stage is not None:
        return through[stage, np.arange(len(arcs))]
    return through.min(axis=0) if sense == "min" else through.max(axis=0)


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


def _through_by_classes(arcs: Arcs, weight: np.ndarray, worst: int, better: np.ufunc) -> np.ndarray:
    """Exact best whole plan through each arc with a free order.

    A state counts how many GPUs of each class (identical GPUs are interchangeable) cover layers
    [0, p): ``fwd[S, p]`` is the best weight of that, ``bwd[S, p]`` of covering [p, L) with the rest.
    States are mixed-radix numbers, so using one more GPU of class c adds ``stride[c]``.
    """
    n = arcs.n_layers
    cls = gpu_classes(arcs)
    mult = np.bincount(cls)
    stride = np.concatenate([[1], np.cumprod(mult + 1)[:-1]])
    states = int(np.prod(mult + 1))
    counts = (np.arange(states)[:, None] // stride[None, :]) % (mult + 1)[None, :]
    rep = [np.flatnonzero(arcs.gpu == np.flatnonzero(cls == c)[0]) for c in range(len(mult))]
    fwd = np.full((states, n + 1), worst, dtype=np.int64)
    bwd = np.full((states, n + 1), worst, dtype=np.int64)
    fwd[0, 0] = 0
    bwd[states - 1, n] = 0
    for st in range(states):
        for c in np.flatnonzero(counts[st] < mult):
            ids = rep[c][fwd[st, arcs.start[rep[c]]] != worst]
            better.at(fwd[st + stride[c]], arcs.end[ids], fwd[st, arcs.start[ids]] + weight[ids])
    for st in range(states - 1, -1, -1):
        for c in np.flatnonzero(counts[st] > 0):
            ids = rep[c][bwd[st, arcs.end[rep[c]]] != worst]
            better.at(bwd[st - stride[c]], arcs.start[ids], bwd[st, arcs.end[ids]] + weight[ids])
    out = np.full(len(arcs), worst, dtype=np.int64)
    for g in range(arcs.n_gpus):
        c = cls[g]
        open_ = np.flatnonzero(counts[:, c] < mult[c])
        every = np.flatnonzero(arcs.gpu == g)
        step = max(1, 2**22 // max(len(open_), 1))  # about 32 MiB per temporary
        for lo in range(0, len(every), step):
            ids = every[lo : lo + step]
            head = fwd[open_[:, None], arcs.start[ids][None, :]]
            tail = bwd[(open_ + stride[c])[:, None], arcs.end[ids][None, :]]
            total = np.where((head == worst) | (tail == worst), worst, head + weight[ids][None, :] + tail)
            out[ids] = total.min(axis=0) if better is np.minimum else total.max(axis=0)
    return out
