"""The host/idle DP's states with the order as given: the last GPU used.

GPU g may follow any state before it. Each pass keeps, per boundary, the best over the states of g's
own host (no entry: hosts are contiguous in rig order) and over the others (plus ``entry_units``),
so it takes one step per GPU: k steps a pass, not k^2, so a thousand GPUs plan in seconds.
``solver.solvers.subsetdp`` runs the chain over them.
"""

from __future__ import annotations

import numpy as np

from solver.solvers import check_deadline
from solver.solvers.arcs import Arcs, by_gpu
from solver.solvers.paths import BIG, NONE, arcs_by_start, best_per, merge, nothing, on_cuts, pick


class AsGiven:
    """The order as given: the state is the last GPU used (0: none, g + 1: GPU g), and GPU g may
    follow any state before it. Each pass keeps, per boundary, the best over the states of g's own
    host (no entry: hosts are contiguous in rig order) and over the others (plus ``entry_units``),
    so it takes one step per GPU. Tables are (k + 1, L + 1) arrays of mass and time."""

    def __init__(self, arcs: Arcs, deadline: float | None = None):
        self.arcs, self.deadline = arcs, deadline
        self.k, self.n = arcs.n_gpus, arcs.n_layers
        self.host = arcs.hosts
        self.new_host = np.r_[True, self.host[1:] != self.host[:-1]]  # GPU g opens a run of its host
        self.by_gpu = by_gpu(arcs)
        self.entry = arcs.entry_units

    def terminal(self) -> np.ndarray:
        """Per state, whether a plan may end there: some GPU used (all of them without idle GPUs)."""
        out = np.zeros(self.k + 1, dtype=bool)
        out[1:] = self.arcs.idle
        out[self.k] = True
        return out

    def _enter(self, m: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values plus one host entry, where reachable."""
        return m, np.where(m >= 0, t + self.entry, t)

    def forward(self, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Best (mass, time) of covering [0, b) with the last GPU used g, at row g + 1 (row 0: none)."""
        a, k, size = self.arcs, self.k, self.n + 1
        fm = np.full((k + 1, size), NONE, dtype=np.int64)
        ft = np.full((k + 1, size), BIG, dtype=np.int64)
        fm[0, 0], ft[0, 0] = 0, 0
        same, other = nothing(size), (fm[0], ft[0])
        for g in range(k):
            if g % 64 == 0:
                check_deadline(self.deadline)
            if self.new_host[g]:
                other, same = merge(*other, *same), nothing(size)
            pm, pt = merge(*same, *self._enter(*other))
            ids = self.by_gpu[g]
            ids = ids[allowed[ids] & (pm[a.start[ids]] >= 0)]
            if len(ids):
                src = a.start[ids]
                fm[g + 1], ft[g + 1] = best_per(
                    a.end[ids], pm[src] + a.mass[ids], pt[src] + a.time[ids], size
                )
                same = merge(*same, fm[g + 1], ft[g + 1])
        return fm, ft

    def backward(self, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Best (mass, time) from (state, boundary) to the end, same rows as ``forward``."""
        a, k, size = self.arcs, self.k, self.n + 1
        bm = np.full((k + 1, size), NONE, dtype=np.int64)
        bt = np.full((k + 1, size), BIG, dtype=np.int64)
        ends = self.terminal()
        bm[ends, self.n], bt[ends, self.n] = 0, 0
        run, after = (
            nothing(size),
            nothing(size),
        )  # best steps by GPUs of g's host run from g, of later runs
        for g in range(k - 1, -1, -1):
            if g % 64 == 0:
                check_deadline(self.deadline)
            if g + 1 < k and self.new_host[g + 1]:
                run, after = nothing(size), merge(*after, *run)
            ids = self.by_gpu[g]
            ids = ids[allowed[ids] & (bm[g + 1, a.end[ids]] >= 0)]
            if len(ids):
                dst = a.end[ids]
                step = best_per(
                    a.start[ids], bm[g + 1, dst] + a.mass[ids], bt[g + 1, dst] + a.time[ids], size
                )
                run = merge(*run, *step)
            if g > 0 and not self.new_host[g]:  # state g: the last GPU g - 1 shares g's run
                m, t = merge(*run, *self._enter(*after))
            else:
                m, t = self._enter(*merge(*run, *after))
            bm[g], bt[g] = merge(m, t, bm[g], bt[g])
        return bm, bt

    def best(self, table: tuple[np.ndarray, np.ndarray]) -> tuple[int, tuple[int, int]] | None:
        """(the final state, its (mass, time)) of the best whole plan in a forward table, or None."""
        fm, ft = table
        m = np.where(self.terminal(), fm[:, self.n], NONE)
        if (m < 0).all():
            return None
        state = int(np.lexsort((ft[:, self.n], -m))[0])
        return state, (int(fm[state, self.n]), int(ft[state, self.n]))

    def _prev(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """The states that may come before GPU g, and the entry each step to g pays."""
        prev = np.arange(g + 1)
        enters = (prev == 0) | (self.host[np.maximum(prev - 1, 0)] != self.host[g])
        return prev, np.where(enters, self.entry, 0)

    def trace(self, table: tuple[np.ndarray, np.ndarray], allowed: np.ndarray, state: int) -> tuple:
        """A plan whose value is ``table``'s at (``state``, L), traced back: (GPUs, cuts)."""
        a = self.arcs
        fm, ft = table
        b, m, t = self.n, int(fm[state, self.n]), int(ft[state, self.n])
        stages: list[tuple[int, int]] = []
        while state:
            g = state - 1
            prev, entry = self._prev(g)
            ids = self.by_gpu[g]
            for i in ids[allowed[ids] & (a.end[ids] == b)]:
                src, pm, pt = int(a.start[i]), m - int(a.mass[i]), t - int(a.time[i]) - entry
                hit = (fm[prev, src] == pm) & (ft[prev, src] == pt)
                if hit.any():
                    j = int(np.argmax(hit))
                    stages.append((g, src))
                    state, b, m, t = int(prev[j]), src, pm, int(pt[j])
                    break
        stages.reverse()
        return [g for g, _ in stages], [start for _, start in stages[1:]]

    def _lead(self, fm: np.ndarray, ft: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per GPU g, the best of ``(fm, ft)`` (one value per state) over the states g may follow,
        its entry included: the running bests of ``forward`` on a single boundary."""
        pm = np.full(self.k, NONE, dtype=np.int64)
        pt = np.full(self.k, BIG, dtype=np.int64)
        same, other = (NONE, BIG), (int(fm[0]), int(ft[0]))
        for g in range(self.k):
            if self.new_host[g]:
                other, same = pick(other, same), (NONE, BIG)
            entered = (other[0], other[1] + self.entry) if other[0] >= 0 else (NONE, BIG)
            pm[g], pt[g] = pick(same, entered)
            same = pick(same, (int(fm[g + 1]), int(ft[g + 1])))
        return pm, pt

    def cuts(self, allowed: np.ndarray, good) -> list[int]:
        """Smallest cut list among plans meeting ``good``: ending the list beats any further cut.

        The front holds the best value reached at the last cut per state; each GPU's best start
        from it (``_lead``) is all a step needs, the same options the free order's loop lists."""
        a, n, k = self.arcs, self.n, self.k
        bm, bt = self.backward(allowed)
        by_start = arcs_by_start(a, allowed)
        front_m = np.full(k + 1, NONE, dtype=np.int64)
        front_t = np.full(k + 1, BIG, dtype=np.int64)
        front_m[0], front_t[0] = 0, 0
        at, cuts = 0, []
        while True:
            check_deadline(self.deadline)
            pm, pt = self._lead(front_m, front_t)
            ids = by_start[at]
            g, end = a.gpu[ids], a.end[ids]
            sm, st = pm[g] + a.mass[ids], pt[g] + a.time[ids]
            rm, rt = bm[g + 1, end], bt[g + 1, end]
            ok = (pm[g] >= 0) & (rm >= 0) & good(sm + rm, st + rt)
            if (ok & (end == n)).any():
                return cuts
            at = int(end[ok].min())
            pick = ok & (end == at)
            front_m, front_t = best_per(g[pick] + 1, sm[pick], st[pick], k + 1)
            cuts.append(at)

    def order(self, allowed: np.ndarray, cuts: list[int], good) -> list[int]:
        """With the cuts fixed, the smallest GPU order among plans meeting ``good``."""
        a = self.arcs
        fixed = allowed & on_cuts(a, cuts)
        bm, bt = self.backward(fixed)
        by_start = arcs_by_start(a, fixed)
        last, m, t, gpus = -1, 0, 0, []
        for at in [0, *cuts]:
            ids = by_start[at]
            ids = ids[a.gpu[ids] > last]
            ids = ids[np.argsort(a.gpu[ids], kind="stable")]
            g, end = a.gpu[ids], a.end[ids]
            enters = (last < 0) | (self.host[g] != self.host[max(last, 0)])
            cost = t + a.time[ids] + np.where(enters, self.entry, 0)
            ok = (bm[g + 1, end] >= 0) & good(m + a.mass[ids] + bm[g + 1, end], cost + bt[g + 1, end])
            i = int(np.argmax(ok))
            last, m, t = int(g[i]), m + int(a.mass[ids[i]]), int(cost[i])
            gpus.append(last)
        return gpus

    def forced(self, gpus: list[int]) -> dict[int, tuple[int, int] | None]:
        """Per GPU, the best (mass, time) of a plan that uses it: forward and backward values meet at
        the state "last GPU g"."""
        every = np.ones(len(self.arcs), dtype=bool)
        (fm, ft), (bm, bt) = self.forward(every), self.backward(every)
        out: dict[int, tuple[int, int] | None] = {}
        for g in gpus:
            ok = (fm[g + 1] >= 0) & (bm[g + 1] >= 0)
            if not ok.any():
                out[g] = None
                continue
            m, t = (fm[g + 1] + bm[g + 1])[ok], (ft[g + 1] + bt[g + 1])[ok]
            i = int(np.lexsort((t, -m))[0])
            out[g] = (int(m[i]), int(t[i]))
        return out
