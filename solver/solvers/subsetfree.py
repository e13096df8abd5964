"""The host/idle DP's states for a free order: class counts and the last host, one mixed-radix number.

A state is (counts of GPUs used per class, last host + 1): identical GPUs on one host are
interchangeable (``host_classes``), and a class's next GPU is its next unused member in rig order (so
the smallest GPU order comes first). The next GPU must be new, on the last host or on one not yet
entered; entering a host adds ``entry_units``. ``solver.solvers.subsetdp`` runs the chain over them.
"""

from __future__ import annotations

import numpy as np

from solver.solvers import check_deadline
from solver.solvers.arcs import Arcs, by_gpu
from solver.solvers.dpgraph import arc_classes
from solver.solvers.paths import BIG, NONE, Radix, best_per, merge, on_cuts


def host_classes(arcs: Arcs) -> np.ndarray:
    """Class of each GPU, shape (k,), numbered in rig order: GPUs with identical arcs on one host."""
    keys = list(zip(arc_classes(arcs).tolist(), arcs.hosts.tolist(), strict=True))
    number: dict[tuple[int, int], int] = {}
    return np.array([number.setdefault(key, len(number)) for key in keys], dtype=np.int64)


class FreeOrder:
    """A free order's states, numbered so that every transition goes to a larger number.

    A state is (counts of GPUs used per class, last host + 1) as one mixed-radix number: identical
    GPUs on one host are interchangeable, and a class's next GPU is its next unused member in rig
    order (so the smallest GPU order comes first)."""

    def __init__(self, arcs: Arcs, deadline: float | None = None):
        self.arcs, self.deadline = arcs, deadline
        self.k = arcs.n_gpus
        self.host = arcs.hosts
        self.h = arcs.n_hosts
        self.by_gpu = by_gpu(arcs)
        cls = host_classes(arcs)
        self.members = [np.flatnonzero(cls == c) for c in range(int(cls.max()) + 1)]
        self.radix = Radix(np.array([len(m) for m in self.members], dtype=np.int64))
        self.mult, self.stride = self.radix.mult, self.radix.stride
        self.full = self.radix.size - 1
        self.count = (self.full + 1) * (self.h + 1)
        self._succ = [self._successors(s) for s in range(self.count)]

    def counts(self, state: int) -> np.ndarray:
        """GPUs used per class in a state."""
        return self.radix.digits(state // (self.h + 1))

    def _successors(self, state: int) -> list[tuple[int, int, bool]]:
        """(GPU, next state, enters a host) for each GPU that may run the next stage."""
        out: list[tuple[int, int, bool]] = []
        used, lh = divmod(state, self.h + 1)
        lh -= 1
        counts = self.counts(state)
        if (used == 0) != (lh < 0):
            return out
        entered = {int(self.host[m[0]]) for m, c in zip(self.members, counts, strict=True) if c > 0}
        for c in np.flatnonzero(counts < self.mult):
            g = int(self.members[c][counts[c]])
            hg = int(self.host[g])
            if hg != lh and hg in entered:
                continue
            out.append((g, (used + int(self.stride[c])) * (self.h + 1) + hg + 1, hg != lh))
        return out

    def successors(self, state: int) -> list[tuple[int, int, bool]]:
        return self._succ[state]

    def terminal(self, state: int) -> bool:
        """A plan may end here: some GPU used, and every GPU unless idle GPUs are allowed."""
        if state == 0:
            return False
        return True if self.arcs.idle else state // (self.h + 1) == self.full

    def _cost(self, ids: np.ndarray, enters: bool) -> np.ndarray:
        return self.arcs.time[ids] + (self.arcs.entry_units if enters else 0)

    def forward(self, allowed: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Best (mass, time) from the start to every (state, boundary)."""
        a, n = self.arcs, self.arcs.n_layers + 1
        first = np.full(n, NONE, dtype=np.int64)
        first[0] = 0
        table = {0: (first, np.zeros(n, dtype=np.int64))}
        for state in range(self.count):
            if state not in table:
                continue
            check_deadline(self.deadline)
            lm, lt = table[state]
            for g, nxt, enters in self._succ[state]:
                ids = self.by_gpu[g]
                ids = ids[allowed[ids] & (lm[a.start[ids]] >= 0)]
                if not len(ids):
                    continue
                src = a.start[ids]
                m, t = best_per(a.end[ids], lm[src] + a.mass[ids], lt[src] + self._cost(ids, enters), n)
                if nxt in table:
                    m, t = merge(m, t, *table[nxt])
                table[nxt] = (m, t)
        return table

    def backward(self, allowed: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Best (mass, time) from every (state, boundary) to the end."""
        a, n = self.arcs, self.arcs.n_layers + 1
        table: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for state in range(self.count - 1, -1, -1):
            check_deadline(self.deadline)
            m = np.full(n, NONE, dtype=np.int64)
            t = np.full(n, BIG, dtype=np.int64)
            if self.terminal(state):
                m[n - 1], t[n - 1] = 0, 0
            for g, nxt, enters in self._succ[state]:
                if nxt not in table:
                    continue
                rm, rt = table[nxt]
                ids = self.by_gpu[g]
                ids = ids[allowed[ids] & (rm[a.end[ids]] >= 0)]
                if not len(ids):
                    continue
                dst = a.end[ids]
                sm, st = best_per(a.start[ids], rm[dst] + a.mass[ids], rt[dst] + self._cost(ids, enters), n)
                m, t = merge(sm, st, m, t)
            if (m >= 0).any():
                table[state] = (m, t)
        return table

    def best(self, table: dict) -> tuple[int, tuple[int, int]] | None:
        """(the final state, its (mass, time)) of the best whole plan in a forward table, or None."""
        best: tuple[int, tuple[int, int]] | None = None
        for state, (m, t) in table.items():
            if self.terminal(state) and m[-1] >= 0:
                cand = (int(m[-1]), int(t[-1]))
                if best is None or (-cand[0], cand[1]) < (-best[1][0], best[1][1]):
                    best = (state, cand)
        return best

    def trace(self, table: dict, allowed: np.ndarray, state: int) -> tuple[list[int], list[int]]:
        """A plan whose value is ``table``'s at (``state``, L), traced back: (GPUs, cuts)."""
        a = self.arcs
        pred: dict[int, list[tuple[int, int, bool]]] = {}
        for prev in table:
            for g, nxt, enters in self._succ[prev]:
                pred.setdefault(nxt, []).append((prev, g, enters))
        b = a.n_layers
        m, t = int(table[state][0][b]), int(table[state][1][b])
        stages: list[tuple[int, int]] = []
        while state:
            for prev, g, enters in pred[state]:
                ids = self.by_gpu[g]
                ids = ids[allowed[ids] & (a.end[ids] == b)]
                pm, pt = table[prev]
                src = a.start[ids]
                hit = (pm[src] == m - a.mass[ids]) & (pt[src] == t - self._cost(ids, enters))
                if hit.any():
                    i = int(ids[np.argmax(hit)])
                    stages.append((g, int(a.start[i])))
                    m, t = m - int(a.mass[i]), t - int(a.time[i]) - (a.entry_units if enters else 0)
                    state, b = prev, int(a.start[i])
                    break
        stages.reverse()
        return [g for g, _ in stages], [start for _, start in stages[1:]]

    def cuts(self, allowed: np.ndarray, good) -> list[int]:
        """Smallest cut list among plans meeting ``good``: ending the list beats any further cut."""
        a, n = self.arcs, self.arcs.n_layers
        back = self.backward(allowed)
        front = {0: (0, 0)}
        at, cuts = 0, []
        while True:
            options = []
            for state, (pm, pt) in front.items():
                for g, nxt, enters in self.successors(state):
                    if nxt not in back:
                        continue
                    ids = self.by_gpu[g]
                    ids = ids[allowed[ids] & (a.start[ids] == at)]
                    bm, bt = back[nxt]
                    cost = pt + self._cost(ids, enters)
                    ok = (bm[a.end[ids]] >= 0) & good(
                        pm + a.mass[ids] + bm[a.end[ids]], cost + bt[a.end[ids]]
                    )
                    picked = zip(ids[ok], cost[ok], strict=True)
                    options += [(int(a.end[i]), nxt, pm + int(a.mass[i]), int(c)) for i, c in picked]
            if any(end == n for end, *_ in options):
                return cuts
            at = min(o[0] for o in options)
            front = {}
            for end, nxt, m, t in options:
                if end == at and (nxt not in front or (-m, t) < (-front[nxt][0], front[nxt][1])):
                    front[nxt] = (m, t)
            cuts.append(at)

    def order(self, allowed: np.ndarray, cuts: list[int], good) -> list[int]:
        """With the cuts fixed, the smallest GPU order among plans meeting ``good``."""
        a = self.arcs
        fixed = allowed & on_cuts(a, cuts)
        back = self.backward(fixed)
        bounds = [0, *cuts, a.n_layers]
        state, m, t, gpus = 0, 0, 0, []
        for s in range(len(bounds) - 1):
            for g, nxt, enters in sorted(self.successors(state)):
                ids = self.by_gpu[g]
                ids = ids[fixed[ids] & (a.start[ids] == bounds[s])]
                if not len(ids) or nxt not in back:
                    continue
                i = int(ids[0])
                bm, bt = back[nxt]
                cost = t + int(a.time[i]) + (a.entry_units if enters else 0)
                if bm[a.end[i]] >= 0 and good(m + a.mass[i] + bm[a.end[i]], cost + bt[a.end[i]]):
                    state, m, t = nxt, m + int(a.mass[i]), cost
                    gpus.append(g)
                    break
        return gpus

    def forced(self, gpus: list[int]) -> dict[int, tuple[int, int] | None]:
        """Per GPU, the best (mass, time) of a plan that uses it: the final states that used its class
        (identical GPUs, so any of them can be it)."""
        fwd = self.forward(np.ones(len(self.arcs), dtype=bool))
        out: dict[int, tuple[int, int] | None] = {}
        for g in gpus:
            c = next(i for i, members in enumerate(self.members) if g in members)
            cands = [
                (int(m[-1]), int(t[-1]))
                for state, (m, t) in fwd.items()
                if self.counts(state)[c] > 0 and self.terminal(state) and m[-1] >= 0
            ]
            out[g] = min(cands, key=lambda c: (-c[0], c[1])) if cands else None
        return out
