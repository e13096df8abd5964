"""Lagrangian bounds for a free order: a plan's weight, relaxed so a GPU may repeat, priced per class.

A plan in a free order is a path of k arcs from layer 0 to layer L that uses every GPU once, and
each host's GPUs run one after another. The relaxation keeps the hosts exact, a DP over
(hosts done, boundary) in which a host covers one range with exactly as many arcs as it has GPUs,
but lets those arcs be any of the host's GPUs, repeats allowed. Lagrangian prices put "every GPU
once" back: class c (identical GPUs on one host, ``solver.solvers.arcs.gpu_classes``) gets a price
``lam[c]``, subtracted from each of its arcs and added back ``mult[c]`` times. For every price vector

    min over relaxed paths of sum (weight - lam[class]) + sum_c mult[c] * lam[c]

is a lower bound on every plan's summed weight (a plan takes exactly mult[c] arcs of class c, so its
prices cancel). Subgradient steps raise the bound towards the optimum; on the sweep's 16 different
cards x 128 layers it comes within 0.1 % of it, where the plain k-arc path bound was 72 % below. The
same passes run backwards bound the best plan through each arc (``through``), so arcs that belong to
no plan within some value can be dropped exactly (``solver.solvers.pruned``).

Shapes: ``n = L + 1`` boundaries, ``c`` classes, ``H`` hosts; a host's relaxed step is an (n, n)
min-plus matrix. The steps iterate in float64; the bound and the per-arc values are then computed
again with the prices rounded to integers (any prices give a valid bound), every value an integer
below 2^53, so they are exact.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from solver.problem.scales import EXACT_FLOAT
from solver.solvers.arcs import Arcs, gpu_classes
from solver.solvers.policy import POLICY, Policy


@dataclass(frozen=True)
class Prices:
    """A Lagrangian bound: integer prices ``lam`` (c,) in the weight's units, and the bound."""

    lam: np.ndarray
    bound: int


class Relaxation:
    """The relaxed plans of one table: per host, its classes' arcs as (n, n) blocks.

    ``cls`` (k,) class of each GPU, ``mult`` (c,) GPUs per class, ``host`` (c,) host group of each
    class and ``size`` (H,) GPUs per host group (one group when hosts are not kept exact)."""

    def __init__(self, arcs: Arcs, weight: np.ndarray, max_hosts: int):
        self.arcs, self.n = arcs, arcs.n_layers + 1
        self.cls = gpu_classes(arcs)
        self.n_cls = int(self.cls.max()) + 1
        self.mult = np.bincount(self.cls, minlength=self.n_cls)
        hosts = arcs.hosts if arcs.n_hosts <= max_hosts else np.zeros(arcs.n_gpus, dtype=np.int64)
        self.host = np.zeros(self.n_cls, dtype=np.int64)
        self.host[self.cls] = hosts
        self.size = np.bincount(hosts)
        self.weight = weight
        self.blocks = np.full((self.n_cls, self.n, self.n), np.inf)
        self.blocks[self.cls[arcs.gpu], arcs.start, arcs.end] = weight.astype(np.float64)
        self.full = (1 << len(self.size)) - 1

    def _steps(self, lam: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per host group, the priced (n, n) step (best arc of its classes) and that arc's class."""
        out = []
        for h in range(len(self.size)):
            own = np.flatnonzero(self.host == h)
            priced = self.blocks[own] - lam[own][:, None, None]
            out.append((priced.min(axis=0), own[priced.argmin(axis=0)]))
        return out

    def forward(self, steps: list) -> tuple[np.ndarray, dict]:
        """F (2^H, n): least priced weight covering [0, p) with the host set S done, each host one
        run of as many arcs as it has GPUs; and each (S, h) run's boundary values after i arcs,
        (size[h] + 1, n)."""
        f = np.full((self.full + 1, self.n), np.inf)
        f[0, 0] = 0.0
        runs: dict[tuple[int, int], np.ndarray] = {}
        for done in _by_size(len(self.size)):
            for h in range(len(self.size)):
                sets = [s for s in done if not s >> h & 1 and np.isfinite(f[s]).any()]
                if not sets:
                    continue
                v = [f[sets]]
                for _ in range(self.size[h]):
                    v.append((v[-1][:, :, None] + steps[h][0][None]).min(axis=1))
                chain = np.stack(v, axis=1)  # (sets, size + 1, n)
                for j, s in enumerate(sets):
                    runs[s, h] = chain[j]
                    np.minimum(f[s | 1 << h], chain[j, -1], out=f[s | 1 << h])
        return f, runs

    def backward(self, steps: list) -> tuple[np.ndarray, dict]:
        """B (2^H, n): least priced weight covering [p, L) with the hosts outside S; and each (S, h)
        run's values i arcs before its end, (size[h] + 1, n), where S excludes h."""
        b = np.full((self.full + 1, self.n), np.inf)
        b[self.full, -1] = 0.0
        runs: dict[tuple[int, int], np.ndarray] = {}
        for done in reversed(_by_size(len(self.size))):
            for h in range(len(self.size)):
                sets = [s for s in done if not s >> h & 1 and np.isfinite(b[s | 1 << h]).any()]
                if not sets:
                    continue
                u = [b[[s | 1 << h for s in sets]]]
                for _ in range(self.size[h]):
                    u.append((steps[h][0][None] + u[-1][:, None, :]).min(axis=2))
                chain = np.stack(u, axis=1)
                for j, s in enumerate(sets):
                    runs[s, h] = chain[j]
                    np.minimum(b[s], chain[j, -1], out=b[s])
        return b, runs

    def used(self, steps: list, f: np.ndarray, runs: dict) -> np.ndarray:
        """Arcs per class on one best relaxed path, traced back from (all hosts, L)."""
        used = np.zeros(self.n_cls)
        s, p = self.full, self.n - 1
        while s:
            inside = [h for h in range(len(self.size)) if s >> h & 1 and (s ^ 1 << h, h) in runs]
            h = min(inside, key=lambda h: runs[s ^ 1 << h, h][-1, p])
            chain, (step, pick) = runs[s ^ 1 << h, h], steps[h]
            for i in range(self.size[h], 0, -1):
                a = int(np.argmin(chain[i - 1] + step[:, p]))
                used[pick[a, p]] += 1
                p = a
            s ^= 1 << h
        return used

    def exact(self, lam: np.ndarray) -> bool:
        """Whether every sum the passes form stays an integer float64 adds exactly."""
        top = np.abs(self.weight).max(initial=0) + np.abs(lam).max(initial=0)
        return float(top) * (self.arcs.n_gpus + 2) * 2 < EXACT_FLOAT


def _by_size(hosts: int) -> list[list[int]]:
    """Host sets grouped by how many hosts they hold, smallest first."""
    groups: list[list[int]] = [[] for _ in range(hosts + 1)]
    for s in range(1 << hosts):
        groups[s.bit_count()].append(s)
    return groups[:-1]


def prices(
    arcs: Arcs,
    weight: np.ndarray,
    target: int | None = None,
    deadline: float | None = None,
    policy: Policy = POLICY,
) -> Prices | None:
    """Prices that raise the relaxed bound on sum ``weight`` (minimised) towards the optimum.

    ``target`` is a known plan's value, if any (it sets the step size; without one the bound plus
    0.1 % stands in for it). The steps stop at ``deadline`` (a ``time.perf_counter()``), the
    bound so far still valid. None when no relaxed path covers the layers, or when the sums could
    outgrow exact float64 integers.
    """
    r = Relaxation(arcs, weight, policy.lagrange_max_hosts)
    lam = np.zeros(r.n_cls)
    best, best_lam, factor, stale = -np.inf, lam, 2.0, 0
    for steps in range(1, policy.lagrange_steps + 1):
        step = r._steps(lam)
        f, runs = r.forward(step)
        if not np.isfinite(f[r.full, -1]):
            return None
        value = f[r.full, -1] + r.mult @ lam
        if steps == 1 or value > best + 1e-9 * abs(best):
            best, best_lam, stale = value, lam.copy(), 0
        else:
            stale += 1
            if stale >= policy.lagrange_patience:
                factor, stale = factor / 2, 0
        grad = r.mult - r.used(step, f, runs)
        if (
            not grad.any()
            or factor < policy.lagrange_min_factor
            or (deadline is not None and time.perf_counter() > deadline)
        ):
            break  # the relaxed path is a plan (the bound is its value), or the steps have settled
        goal = target if target is not None and target > best else best + 1e-3 * abs(best) + 1.0
        lam = lam + factor * (goal - value) / (grad @ grad) * grad
    lam_int = np.rint(best_lam).astype(np.int64)
    if not r.exact(lam_int):
        return None
    f, _ = r.forward(r._steps(lam_int.astype(np.float64)))
    return Prices(lam_int, int(f[r.full, -1]) + int(r.mult @ lam_int))


def through(arcs: Arcs, weight: np.ndarray, p: Prices, policy: Policy = POLICY) -> np.ndarray:
    """Per arc, a lower bound on sum ``weight`` of any plan that uses it, shape (arcs,), int64.

    The least over the host sets S before the arc's host and the arcs i before it in its host's run
    of ``forward run[S, h][i][start] + (weight - lam) + backward run[S, h][size - 1 - i][end]``,
    plus the prices' total; a huge value where no relaxed path passes the arc."""
    r = Relaxation(arcs, weight, policy.lagrange_max_hosts)
    lam = p.lam.astype(np.float64)
    step = r._steps(lam)
    _, fwd = r.forward(step)
    _, bwd = r.backward(step)
    cost = weight - lam[r.cls[arcs.gpu]]
    best = np.full(len(arcs), np.inf)
    arc_host = r.host[r.cls[arcs.gpu]]
    for (s, h), head in fwd.items():
        if (s, h) not in bwd:
            continue
        tail, on = bwd[s, h], np.flatnonzero(arc_host == h)
        for i in range(r.size[h]):
            got = head[i][arcs.start[on]] + cost[on] + tail[r.size[h] - 1 - i][arcs.end[on]]
            best[on] = np.minimum(best[on], got)
    total = float(r.mult @ p.lam)
    big = np.iinfo(np.int64).max // 2
    return np.where(np.isfinite(best), best + total, big).astype(np.int64)
