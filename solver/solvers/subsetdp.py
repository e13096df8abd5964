"""Exact DP where plans differ in the GPUs they use: idle GPUs allowed, or a free order over hosts.

A state is what decides which GPU may run the next stage and what its boundary costs: with the order
as given, the last GPU used (the used GPUs keep rig order and hosts are contiguous, so host runs hold
by themselves); with a free order, how many GPUs of each class (identical arcs, one host) are used and
the host of the last one (the next GPU must be new, on that host or on one not yet entered).
``F[state][b]`` is the best (mass, time) of covering layers [0, b); a step adds an arc of an allowed
GPU plus ``entry_units`` when it enters a host (see ``solver.arcs``). The tie-break chain runs as in
``solver.solvers.dp``: the throughput objective's max stage, spare KV and bottleneck by bisection on
thresholds, then the smallest cut list (a list that ends is smaller than any longer one it starts)
and the smallest GPU order, chosen greedily against best completions computed backwards.

With the order as given, GPU g may follow any earlier GPU, so a pass keeps running bests over the
states before g (those of g's own host, reached without an entry, and the rest) and takes one step
per GPU: k steps a pass, not k^2, so a thousand GPUs plan in seconds. A free order's states grow as
2^k for k distinct GPUs (far fewer when many are alike); beyond ``Policy.max_subset_steps``
transitions per pass it raises TooLarge (``refusal`` says why).

Every pass checks ``limits``' deadline. Stopped once the objective is settled, the answer is a plan
of that objective traced back through the objective's pass, "feasible" with the objective as its
bound (the tie-breaks are what is left); stopped before, "unknown".
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from solver.arcs import Arcs, by_gpu
from solver.solvers import Limits, Solution, Stopped, TooLarge, check_deadline, check_host, stage_key, usable
from solver.solvers.dp import arc_classes, objective_bound
from solver.solvers.paths import BIG, NONE, Radix, best_per, first_value, merge
from solver.solvers.policy import POLICY, Policy


def subset_steps_for(order: str, mult: list[int], hosts: int) -> int:
    """Transitions per pass: k with the order as given (one step per GPU); with a free order the
    class-count states (``mult`` GPUs in each class) times (hosts + 1) last hosts times the classes."""
    if order == "as-given":
        return sum(mult)
    return math.prod(m + 1 for m in mult) * (hosts + 1) * len(mult)


def gpu_classes(arcs: Arcs) -> np.ndarray:
    """Class of each GPU, shape (k,), numbered in rig order: GPUs with identical arcs on one host."""
    keys = list(zip(arc_classes(arcs).tolist(), arcs.hosts.tolist(), strict=True))
    number: dict[tuple[int, int], int] = {}
    return np.array([number.setdefault(key, len(number)) for key in keys], dtype=np.int64)


def subset_steps(arcs: Arcs) -> int:
    """Transitions per pass of this table's rig."""
    mult = np.bincount(gpu_classes(arcs)).tolist() if arcs.order == "auto" else [arcs.n_gpus]
    return subset_steps_for(arcs.order, mult, arcs.n_hosts)


def refusal(arcs: Arcs, policy: Policy = POLICY) -> str | None:
    """Why the host/idle DP does not take this table, or None: with the order as given, a rig order
    that splits a host's GPUs; with a free order, more transitions per pass than ``policy`` allows."""
    if arcs.order == "as-given":
        hosts = arcs.hosts
        if 1 + int(np.count_nonzero(hosts[1:] != hosts[:-1])) != arcs.n_hosts:
            return "the host/idle DP takes a rig order that keeps each host's GPUs together"
        return None
    steps = subset_steps(arcs)
    if steps > policy.max_subset_steps:
        return (
            f"the host/idle DP takes at most {policy.max_subset_steps:,} transitions per pass, "
            f"not {steps:,} ({arcs.n_gpus} GPUs in a free order)"
        )
    return None


class _States:
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
        cls = gpu_classes(arcs)
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
        fixed = allowed & _on_cuts(a, cuts)
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


class _AsGiven:
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
        same, other = _nothing(size), (fm[0], ft[0])
        for g in range(k):
            if g % 64 == 0:
                check_deadline(self.deadline)
            if self.new_host[g]:
                other, same = merge(*other, *same), _nothing(size)
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
            _nothing(size),
            _nothing(size),
        )  # best steps by GPUs of g's host run from g, of later runs
        for g in range(k - 1, -1, -1):
            if g % 64 == 0:
                check_deadline(self.deadline)
            if g + 1 < k and self.new_host[g + 1]:
                run, after = _nothing(size), merge(*after, *run)
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
                other, same = _pick(other, same), (NONE, BIG)
            entered = (other[0], other[1] + self.entry) if other[0] >= 0 else (NONE, BIG)
            pm[g], pt[g] = _pick(same, entered)
            same = _pick(same, (int(fm[g + 1]), int(ft[g + 1])))
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
        fixed = allowed & _on_cuts(a, cuts)
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


def _nothing(size: int) -> tuple[np.ndarray, np.ndarray]:
    """A (mass, time) table that reaches no boundary."""
    return np.full(size, NONE, dtype=np.int64), np.full(size, BIG, dtype=np.int64)


def _pick(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    """The better of two (mass, time) values."""
    return x if (-x[0], x[1]) <= (-y[0], y[1]) else y


def _on_cuts(arcs: Arcs, cuts: list[int]) -> np.ndarray:
    """The arcs that span two consecutive bounds of ``cuts``."""
    bounds = np.array([0, *cuts, arcs.n_layers])
    stage = np.searchsorted(bounds, arcs.start)
    on = bounds[np.minimum(stage, len(bounds) - 1)] == arcs.start
    return on & (bounds[np.minimum(stage + 1, len(bounds) - 1)] == arcs.end)


def arcs_by_start(arcs: Arcs, allowed: np.ndarray) -> list[np.ndarray]:
    """Arc numbers of the ``allowed`` arcs starting at each boundary, ascending."""
    ids = np.flatnonzero(allowed)
    ids = ids[np.argsort(arcs.start[ids], kind="stable")]
    cut = np.searchsorted(arcs.start[ids], np.arange(arcs.n_layers + 2))
    return [ids[cut[b] : cut[b + 1]] for b in range(arcs.n_layers + 1)]


def _states(arcs: Arcs, deadline: float | None, policy: Policy = POLICY) -> _States | _AsGiven:
    """The DP's states for this table; TooLarge where ``refusal`` says why not."""
    why = refusal(arcs, policy)
    if why is not None:
        raise TooLarge(why)
    return _AsGiven(arcs, deadline) if arcs.order == "as-given" else _States(arcs, deadline)


def solve_subsets(arcs: Arcs, limits: Limits | None = None, policy: Policy = POLICY) -> Solution:
    """The exact plan of a rig with idle GPUs or a free order over hosts (see the module doc).

    ``limits``' deadline stops it: "feasible" with a plan of the settled objective, else "unknown"."""
    t0 = time.perf_counter()
    states = _states(arcs, (limits or Limits()).deadline(t0), policy)
    found: list[Solution] = []
    try:
        got = _settle(states, found)
    except Stopped:
        if not found:
            return Solution("dp", "unknown", wall_ms=(time.perf_counter() - t0) * 1e3)
        got = dataclasses.replace(found[-1], status="feasible")
    return dataclasses.replace(got, wall_ms=(time.perf_counter() - t0) * 1e3)


def _settle(states: _States | _AsGiven, found: list[Solution]) -> Solution:
    """The whole chain; ``found`` gets a plan of the objective as soon as it is settled."""
    arcs = states.arcs
    allowed = np.ones(len(arcs), dtype=bool)
    table = states.forward(allowed)
    best = states.best(table)
    if best is None:
        return Solution("dp", "infeasible")
    top = 0
    if arcs.objective.minmax:
        keys = stage_key(arcs)
        top = first_value(
            np.unique(keys), lambda v: states.best(states.forward(allowed & (keys <= v))) is not None
        )
        allowed &= keys <= top
        table = states.forward(allowed)
        best = states.best(table)
    state, (mass_star, time_star) = best
    cap = arcs.time_cap(time_star)
    bound = objective_bound(arcs, top, mass_star, time_star)
    traced = Solution("dp", "optimal", *map(tuple, states.trace(table, allowed, state)), bound)
    if usable(arcs, traced) is not None:  # what a stop returns: a plan of the objective, within the limit
        found.append(traced)

    def good(m: int | np.ndarray, t: int | np.ndarray) -> bool | np.ndarray:
        return (m == mass_star) & (t <= cap)

    def tied(mask: np.ndarray) -> bool:
        got = states.best(states.forward(mask))
        return got is not None and bool(good(*got[1]))

    spares = np.unique(arcs.spare[allowed])[::-1]
    spare = first_value(spares, lambda v: tied(allowed & (arcs.spare >= v)))
    allowed &= arcs.spare >= spare
    values = np.unique(arcs.bottleneck[allowed])
    worst = first_value(values, lambda b: tied(allowed & (arcs.bottleneck <= b)))
    allowed &= arcs.bottleneck <= worst
    cuts = states.cuts(allowed, good)
    gpus = states.order(allowed, cuts, good)
    check_host(arcs, gpus, cuts)
    return Solution("dp", "optimal", tuple(gpus), tuple(cuts), bound)


def forced_times(
    arcs: Arcs, gpus: list[int], deadline: float | None = None, policy: Policy = POLICY
) -> dict[int, int | None] | None:
    """For each GPU in ``gpus``, the summed time (entries included) of the best plan that uses it,
    by (mass, time) as the objective's first level ranks plans; None if no plan can use it.

    What an idle GPU would have cost (the report compares it with the plan's); None for the whole
    answer when ``deadline`` stops it."""
    try:
        got = _states(arcs, deadline, policy).forced(gpus)
    except Stopped:
        return None
    return {g: None if v is None else v[1] for g, v in got.items()}
