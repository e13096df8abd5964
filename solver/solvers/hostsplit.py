"""Exact best plan through every arc of a free order over several hosts, by splitting at the hosts.

A rig keeps each host's GPUs in one run of stages, so a plan is an order of hosts, a range of
layers per host, and inside each host an order of its own GPUs over its range. The hosts are
independent once their ranges are fixed, so the optimum splits in two exact DPs:

- per host h, ``inside[st][x, y]``: the least summed weight covering layers [x, y) with the
  multiset ``st`` of h's GPUs (states count the GPUs used per class, identical GPUs alike), a
  min-plus matrix product per added GPU: a few hundred (L+1)^3 products per host;
- over host sets, ``F[S][p]`` (hosts S cover [0, p)) and ``B[S][p]`` (the others cover [p, L)).

The best plan through an arc of class c at [a, b) on host h is then

    min over S without h, states st of h: E[S, st, a] + weight + X[S, st + c, b]

with ``E[S, st, a] = min_x F[S][x] + inside[st][x, a]`` (h entered at x, st used before a) and
``X[S, st', b] = min_y inside[rest(st')][b, y] + B[S + h][y]`` (the rest of h, then the other
hosts). These are exact, not relaxed: cut at the optimum's tie set, the table keeps only arcs of
tied plans, and CP-SAT then settles the tie-breaks on a handful of arcs
(``solver.solvers.pruned``). Sums run in float64 over integers below 2^53, so they are exact.
"""

from __future__ import annotations

import math

import numpy as np

from solver.problem.scales import EXACT_FLOAT
from solver.solvers.arcs import Arcs, gpu_classes
from solver.solvers.paths import Radix
from solver.solvers.policy import POLICY, Policy


def _product(a: np.ndarray, c: np.ndarray, op: np.ufunc) -> np.ndarray:
    """(n, n) product ``out[x, y] = min_k op(a[x, k], c[k, y])`` (min-plus, or min-max for a
    bottleneck), in row blocks of bounded size."""
    n = a.shape[0]
    out = np.empty((n, c.shape[1]))
    step = max(1, 2**22 // (n * c.shape[1]))
    for lo in range(0, n, step):
        out[lo : lo + step] = op(a[lo : lo + step, :, None], c[None]).min(axis=1)
    return out


def exact_through(
    arcs: Arcs, weight: np.ndarray, op: np.ufunc = np.add, policy: Policy = POLICY
) -> tuple[int, np.ndarray] | None:
    """(the least summed ``weight`` of any plan, per arc the least of a plan through it), int64; a
    huge value where no plan uses the arc. ``op`` np.maximum: the least largest ``weight`` instead
    (the throughput objective's slowest stage). None when the tables would be too large, the sums
    could outgrow exact float64 integers, or the table is not a free order over several hosts."""
    if arcs.order != "auto" or arcs.idle or arcs.n_hosts < 2 or 2**arcs.n_hosts > policy.split_max_host_sets:
        return None
    if float(np.abs(weight).max(initial=0)) * (arcs.n_gpus + 2) * 4 >= EXACT_FLOAT:
        return None
    n = arcs.n_layers + 1
    cls = gpu_classes(arcs)
    n_cls = int(cls.max()) + 1
    mult = np.bincount(cls, minlength=n_cls)
    cls_host = np.zeros(n_cls, dtype=np.int64)
    cls_host[cls] = arcs.hosts
    blocks = np.full((n_cls, n, n), np.inf)
    blocks[cls[arcs.gpu], arcs.start, arcs.end] = weight.astype(np.float64)
    hosts = arcs.n_hosts
    members = [np.flatnonzero(cls_host == h).tolist() for h in range(hosts)]
    if any(math.prod(int(mult[c]) + 1 for c in m) * n * n > policy.split_max_cells for m in members):
        return None  # (Python ints: the states of 64 classes overflow int64)
    layout = [(r.stride, r.counts) for r in (Radix(mult[m]) for m in members)]
    none = 0.0 if op is np.add else -np.inf  # what covering nothing weighs
    inside = [
        _inside(blocks, m, stride, counts, mult, n, op, none) for m, (stride, counts) in zip(members, layout)
    ]
    full = (1 << hosts) - 1
    f = np.full((full + 1, n), np.inf)
    b = np.full((full + 1, n), np.inf)
    f[0, 0], b[full, n - 1] = none, none
    for s in range(full + 1):  # S only grows, so numeric order is a topological order
        if (f[s] < np.inf).any():
            for h in range(hosts):
                if not s >> h & 1:
                    np.minimum(f[s | 1 << h], op(f[s][:, None], inside[h][-1]).min(axis=0), out=f[s | 1 << h])
    for s in range(full, -1, -1):
        for h in range(hosts):
            if not s >> h & 1 and (b[s | 1 << h] < np.inf).any():
                np.minimum(b[s], op(inside[h][-1], b[s | 1 << h][None, :]).min(axis=1), out=b[s])
    best = f[full, n - 1]
    if not best < np.inf:
        return None
    out = np.full(len(arcs), np.inf)
    arc_cls = cls[arcs.gpu]
    for h in range(hosts):
        stride, counts = layout[h]
        sets = [s for s in range(full + 1) if not s >> h & 1]
        rest = len(counts) - 1 - np.arange(len(counts))  # the state of the GPUs not yet used
        enter = np.stack([op(f[s][None, :, None], inside[h]).min(axis=1) for s in sets])  # (S, st, n)
        leave = np.stack([op(inside[h][rest], b[s | 1 << h][None, None, :]).min(axis=2) for s in sets])
        for i, c in enumerate(members[h]):
            st = np.flatnonzero(counts[:, i] < mult[c])
            every = np.flatnonzero(arc_cls == c)
            step = max(1, 2**22 // (len(sets) * len(st)))  # about 32 MiB per temporary
            for lo in range(0, len(every), step):
                on = every[lo : lo + step]
                head = enter[:, st][:, :, arcs.start[on]]  # (S, states, arcs)
                tail = leave[:, st + stride[i]][:, :, arcs.end[on]]
                out[on] = op(op(head, tail).min(axis=(0, 1)), weight[on])
    through = np.full(len(arcs), np.iinfo(np.int64).max // 2, dtype=np.int64)
    used = np.isfinite(out)
    through[used] = out[used].astype(np.int64)
    return int(best), through


def _inside(
    blocks: np.ndarray,
    members: list[int],
    stride: np.ndarray,
    counts: np.ndarray,
    mult: np.ndarray,
    n: int,
    op: np.ufunc,
    none: float,
) -> np.ndarray:
    """(states, n, n): the least weight covering [x, y) with each state's GPUs of one host, in any
    order (state 0 covers nothing: ``none`` on the diagonal)."""
    table = np.full((len(counts), n, n), np.inf)
    np.fill_diagonal(table[0], none)
    for st in range(len(counts)):
        if not (table[st] < np.inf).any():
            continue
        for i, c in enumerate(members):
            if counts[st, i] < mult[c]:
                nxt = st + int(stride[i])
                np.minimum(table[nxt], _product(table[st], blocks[c], op), out=table[nxt])
    return table
