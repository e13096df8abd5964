"""Exact DP for SPEC 8 rigs: idle GPUs allowed, or a free order over several hosts.

A state is what decides which GPU may run the next stage and what its boundary costs: with the order
as given, the last GPU used (the used GPUs keep rig order and hosts are contiguous, so host runs hold
by themselves); with a free order, how many GPUs of each class (identical arcs, one host) are used and
the host of the last one (the next GPU must be new, on that host or on one not yet entered).
``F[state][b]`` is the best (mass, time) of covering layers [0, b); a step adds an arc of an allowed
GPU plus ``entry_units`` when it enters a host (see ``solver.arcs``). The tie-break chain runs as in
``solver.solvers.dp``: the throughput objective's max stage, spare KV and bottleneck by bisection on
thresholds, then the smallest cut list (a list that ends is smaller than any longer one it starts)
and the smallest GPU order, chosen greedily against best completions computed backwards.

A free order's states grow as 2^k for k distinct GPUs (far fewer when many are alike); beyond
MAX_STEPS transitions per pass it raises TooLarge.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from solver.arcs import Arcs
from solver.solvers import Limits, Solution, TooLarge, stage_key
from solver.solvers.dp import BIG, NONE, _best, _check_host, _first, arc_classes, objective_bound

#: Transitions (state, next GPU) one pass of a free order may take: 2^9 * 9 GPUs on one host.
MAX_STEPS = 5000


def subset_steps_for(order: str, mult: list[int], hosts: int) -> int:
    """Transitions per pass, about k^2 with the order as given; with a free order the class-count
    states (``mult`` GPUs in each class) times (hosts + 1) last hosts times the classes."""
    k = sum(mult)
    if order == "as-given":
        return k * (k + 1)
    return int(np.prod(np.array(mult) + 1)) * (hosts + 1) * len(mult)


def gpu_classes(arcs: Arcs) -> np.ndarray:
    """Class of each GPU, shape (k,), numbered in rig order: GPUs with identical arcs on one host."""
    keys = list(zip(arc_classes(arcs).tolist(), arcs.hosts.tolist(), strict=True))
    first = {key: i for i, key in reversed(list(enumerate(keys)))}
    order = sorted(set(first.values()))
    return np.array([order.index(first[key]) for key in keys], dtype=np.int64)


def subset_steps(arcs: Arcs) -> int:
    """Transitions per pass of this table's rig."""
    mult = np.bincount(gpu_classes(arcs)).tolist() if arcs.order == "auto" else [arcs.n_gpus]
    return subset_steps_for(arcs.order, mult, arcs.n_hosts)


class _States:
    """The DP's states, numbered so that every transition goes to a larger number.

    A free order's state is (counts of GPUs used per class, last host + 1) as one mixed-radix number:
    identical GPUs on one host are interchangeable, and a class's next GPU is its next unused member
    in rig order (so the smallest GPU order comes first)."""

    def __init__(self, arcs: Arcs):
        self.arcs = arcs
        self.k = arcs.n_gpus
        self.host = arcs.hosts
        self.as_given = arcs.order == "as-given"
        self.h = arcs.n_hosts
        if not self.as_given and subset_steps(arcs) > MAX_STEPS:
            raise TooLarge(
                f"the host/idle DP takes at most {MAX_STEPS:,} transitions per pass, "
                f"not {subset_steps(arcs):,} ({self.k} GPUs in a free order)"
            )
        self.by_gpu = [np.flatnonzero(arcs.gpu == g) for g in range(self.k)]
        if self.as_given:
            self.count = self.k + 1
        else:
            cls = gpu_classes(arcs)
            self.members = [np.flatnonzero(cls == c) for c in range(int(cls.max()) + 1)]
            self.mult = np.array([len(m) for m in self.members], dtype=np.int64)
            self.stride = np.concatenate([[1], np.cumprod(self.mult + 1)[:-1]]).astype(np.int64)
            self.full = int(np.prod(self.mult + 1)) - 1
            self.count = (self.full + 1) * (self.h + 1)
        self._succ = [self._successors(s) for s in range(self.count)]

    def counts(self, state: int) -> np.ndarray:
        """GPUs used per class in a free order's state."""
        return (state // (self.h + 1) // self.stride) % (self.mult + 1)

    def _successors(self, state: int) -> list[tuple[int, int, bool]]:
        """(GPU, next state, enters a host) for each GPU that may run the next stage."""
        out = []
        if self.as_given:
            last = state - 1
            for g in range(last + 1, self.k):
                enters = last < 0 or self.host[g] != self.host[last]
                out.append((g, g + 1, bool(enters)))
            return out
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
        if self.arcs.idle:
            return True
        return (state - 1 == self.k - 1) if self.as_given else state // (self.h + 1) == self.full

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
            lm, lt = table[state]
            for g, nxt, enters in self._succ[state]:
                ids = self.by_gpu[g]
                ids = ids[allowed[ids] & (lm[a.start[ids]] >= 0)]
                if not len(ids):
                    continue
                src = a.start[ids]
                m, t = _best(a.end[ids], lm[src] + a.mass[ids], lt[src] + self._cost(ids, enters), n)
                if nxt in table:
                    bm, bt = table[nxt]
                    better = (m > bm) | ((m == bm) & (t < bt))
                    m, t = np.where(better, m, bm), np.where(better, t, bt)
                table[nxt] = (m, t)
        return table

    def backward(self, allowed: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Best (mass, time) from every (state, boundary) to the end."""
        a, n = self.arcs, self.arcs.n_layers + 1
        table: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for state in range(self.count - 1, -1, -1):
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
                sm, st = _best(a.start[ids], rm[dst] + a.mass[ids], rt[dst] + self._cost(ids, enters), n)
                better = (sm > m) | ((sm == m) & (st < t))
                m, t = np.where(better, sm, m), np.where(better, st, t)
            if (m >= 0).any():
                table[state] = (m, t)
        return table

    def optimum(self, allowed: np.ndarray) -> tuple[int, int] | None:
        """Best (mass, time) of a whole plan on ``allowed`` arcs, or None."""
        table = self.forward(allowed)
        best: tuple[int, int] | None = None
        for state, (m, t) in table.items():
            if self.terminal(state) and m[-1] >= 0:
                cand = (int(m[-1]), int(t[-1]))
                if best is None or (-cand[0], cand[1]) < (-best[0], best[1]):
                    best = cand
        return best


def solve_subsets(arcs: Arcs, limits: Limits | None = None) -> Solution:
    """The exact plan of a rig with idle GPUs or a free order over hosts (see the module doc)."""
    t0 = time.perf_counter()
    states = _States(arcs)

    def infeasible() -> Solution:
        return Solution("dp", "infeasible", info={"wall_ms": (time.perf_counter() - t0) * 1e3})

    allowed = np.ones(len(arcs), dtype=bool)
    if states.optimum(allowed) is None:
        return infeasible()
    top = 0
    if arcs.objective == "throughput":
        keys = stage_key(arcs)
        top = _first(np.unique(keys), lambda v: states.optimum(allowed & (keys <= v)) is not None)
        allowed &= keys <= top
    mass_star, time_star = states.optimum(allowed)
    cap = arcs.time_cap(time_star)

    def good(m: int | np.ndarray, t: int | np.ndarray) -> bool | np.ndarray:
        return (m == mass_star) & (t <= cap)

    def tied(mask: np.ndarray) -> bool:
        got = states.optimum(mask)
        return got is not None and bool(good(*got))

    spares = np.unique(arcs.spare[allowed])[::-1]
    spare = _first(spares, lambda v: tied(allowed & (arcs.spare >= v)))
    allowed &= arcs.spare >= spare
    values = np.unique(arcs.bottleneck[allowed])
    worst = _first(values, lambda b: tied(allowed & (arcs.bottleneck <= b)))
    allowed &= arcs.bottleneck <= worst
    cuts = _greedy_cuts(states, allowed, good)
    gpus = _greedy_order(states, allowed, cuts, good)
    _check_host(arcs, gpus, cuts)
    bound = objective_bound(arcs, top, mass_star, time_star)
    return Solution(
        "dp", "optimal", tuple(gpus), tuple(cuts), bound, info={"wall_ms": (time.perf_counter() - t0) * 1e3}
    )


def _greedy_cuts(states: _States, allowed: np.ndarray, good) -> list[int]:
    """Smallest cut list among plans meeting ``good``: ending the list beats any further cut."""
    a, n = states.arcs, states.arcs.n_layers
    back = states.backward(allowed)
    front = {0: (0, 0)}
    at, cuts = 0, []
    while True:
        options = []
        for state, (pm, pt) in front.items():
            for g, nxt, enters in states.successors(state):
                if nxt not in back:
                    continue
                ids = states.by_gpu[g]
                ids = ids[allowed[ids] & (a.start[ids] == at)]
                bm, bt = back[nxt]
                cost = pt + states._cost(ids, enters)
                ok = (bm[a.end[ids]] >= 0) & good(pm + a.mass[ids] + bm[a.end[ids]], cost + bt[a.end[ids]])
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


def _greedy_order(states: _States, allowed: np.ndarray, cuts: list[int], good) -> list[int]:
    """With the cuts fixed, the smallest GPU order among plans meeting ``good``."""
    a = states.arcs
    bounds = [0, *cuts, a.n_layers]
    pairs = set(itertools.pairwise(bounds))
    on = [(int(x), int(y)) in pairs for x, y in zip(a.start, a.end, strict=True)]
    fixed = allowed & np.array(on, dtype=bool)
    back = states.backward(fixed)
    state, m, t, gpus = 0, 0, 0, []
    for s in range(len(bounds) - 1):
        for g, nxt, enters in sorted(states.successors(state)):
            ids = states.by_gpu[g]
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


def forced_times(arcs: Arcs, gpus: list[int]) -> dict[int, int | None]:
    """For each GPU in ``gpus``, the summed time (entries included) of the best plan that uses it,
    by (mass, time) as the objective's first level ranks plans; None if no plan can use it.

    What an idle GPU would have cost (the report compares it with the plan's). With the order as
    given a plan uses g when it passes the state "last GPU g": forward and backward values meet
    there. With a free order, the final state has used g's class."""
    states = _States(arcs)
    allowed = np.ones(len(arcs), dtype=bool)
    fwd = states.forward(allowed)
    back = states.backward(allowed) if states.as_given else {}
    out: dict[int, int | None] = {}
    for g in gpus:
        cands = []
        if states.as_given:
            if g + 1 in fwd and g + 1 in back:
                fm, ft = fwd[g + 1]
                bm, bt = back[g + 1]
                ok = (fm >= 0) & (bm >= 0)
                cands = [(int(fm[b] + bm[b]), int(ft[b] + bt[b])) for b in np.flatnonzero(ok)]
        else:
            c = next(i for i, members in enumerate(states.members) if g in members)
            for state, (m, t) in fwd.items():  # a plan using g's class can use g (identical arcs)
                if states.counts(state)[c] > 0 and states.terminal(state) and m[-1] >= 0:
                    cands.append((int(m[-1]), int(t[-1])))
        out[g] = min(cands, key=lambda c: (-c[0], c[1]))[1] if cands else None
    return out
