"""Exact free-order DP under a threshold on the stage key, its states confined to capacity windows.

The throughput objective keeps every stage's key within some T. Under T, GPU g covers at most
``cap_g`` layers (its longest arc within T), and a plan covers the L layers with every GPU once.
So once the GPUs of a state S (how many of each class are used) have covered [0, p),

    L - cap(rest of the GPUs) <= p <= cap(S),

a window of ``capT - L + 1`` boundaries, the same width for every state, where ``capT`` sums every
GPU's cap. Near the least T that any plan meets, ``capT`` barely exceeds L: the class-count DP
(2^k states for k distinct GPUs) then takes states x classes x width^2 steps instead of states x
classes x (L+1)^2, and it is exact: the windows only leave out what no plan within T can reach.

Two uses (``solver.solvers.pruned``): the min-max pass at a threshold T gives the least slowest
stage of any plan within T, or proves there is none; the min-plus passes forward and backward give
the exact best summed weight through every arc, so the table can be cut to the arcs of tied plans.
``host_limit`` is not carried (the caller checks its answer against it). Values are float64 over
integers below 2^52, so they are exact.
"""

from __future__ import annotations

import functools

import numpy as np

from solver.problem.scales import EXACT_FLOAT
from solver.solvers import Stopped, check_deadline
from solver.solvers.arcs import Arcs, gpu_classes
from solver.solvers.paths import Radix, first_index
from solver.solvers.policy import POLICY, Policy

#: Elements of one temporary block (B states x width x width): 32 MiB of float64.
CHUNK = 2**22


class Windows:
    """The class-count states of a free order over ``allowed`` arcs, each with its window.

    ``counts`` (N, C) GPUs used per class, ``level`` (N,) GPUs used, ``lo`` (N,) the first boundary
    of each state's window of ``width``, built on first use (ask ``work`` before: N is a product
    over the classes); ``dense[c]`` the (n + width, n + width) weights of class c's allowed arcs
    (inf elsewhere, padded so every window indexes inside)."""

    def __init__(self, arcs: Arcs, allowed: np.ndarray):
        self.arcs, self.allowed = arcs, allowed
        self.n = arcs.n_layers
        self.cls = gpu_classes(arcs)
        self.n_cls = int(self.cls.max()) + 1
        self.mult = np.bincount(self.cls, minlength=self.n_cls)
        self.cap = capacities(arcs, self.cls, allowed)
        self.total = int(self.mult @ self.cap)
        self.width = max(0, min(self.total - self.n, self.n) + 1) if self.total >= self.n else 0
        self.radix = Radix(self.mult)
        self.states, self.stride = self.radix.size, self.radix.stride

    @property
    def counts(self) -> np.ndarray:
        """(N, C) GPUs used per class in each state (built once a pass is to run: ``work`` first)."""
        return self.radix.counts

    @functools.cached_property
    def level(self) -> np.ndarray:
        return self.counts.sum(axis=1)

    @functools.cached_property
    def lo(self) -> np.ndarray:
        return np.maximum(0, self.n - (self.total - self.counts @ self.cap))

    @property
    def feasible(self) -> bool:
        """False when the caps alone rule every plan out (some class cannot cover a layer, or all
        of them together fall short of L)."""
        return self.width > 0 and bool((self.cap > 0).all())

    @property
    def work(self) -> int:
        """Steps of one pass: states x classes x width^2."""
        return self.states * self.n_cls * self.width**2 if self.feasible else 0

    def dense(self, weight: np.ndarray) -> list[np.ndarray]:
        """Per class, its allowed arcs' ``weight`` as a padded (start, end) matrix (inf: no arc)."""
        a, size = self.arcs, self.n + 1 + self.width
        out = []
        on = self.allowed
        for c in range(self.n_cls):
            rep = on & (a.gpu == int(np.flatnonzero(self.cls == c)[0]))  # identical GPUs: one stands in
            m = np.full((size, size), np.inf)
            m[a.start[rep], a.end[rep]] = weight[rep].astype(np.float64)
            out.append(m)
        return out

    def _steps(self, level: int, c: int) -> tuple[np.ndarray, np.ndarray]:
        """States at ``level`` that may add a GPU of class c, and the states that makes."""
        src = np.flatnonzero((self.level == level) & (self.counts[:, c] < self.mult[c]))
        return src, src + self.stride[c]

    def _blocks(self, dense: np.ndarray, lo_a: np.ndarray, lo_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (window of a) x (window of b) blocks of ``dense`` for each pair of window starts, as
        (unique blocks, index of each pair's block): few distinct pairs recur over many states."""
        pairs, inv = np.unique(np.stack([lo_a, lo_b]), axis=1, return_inverse=True)
        span = np.arange(self.width)
        rows = pairs[0][:, None, None] + span[None, :, None]
        cols = pairs[1][:, None, None] + span[None, None, :]
        return dense[rows, cols], inv.reshape(-1)

    def forward(self, dense: list[np.ndarray], op: np.ufunc, deadline: float | None) -> np.ndarray:
        """F (N, width): the best ``op``-combined weight covering [0, lo + i) with each state's GPUs."""
        f = np.full((self.states, self.width), np.inf)
        f[0, 0] = _none(op)
        for level in range(int(self.mult.sum())):
            check_deadline(deadline)
            for c in range(self.n_cls):
                src, dst = self._steps(level, c)
                live = (f[src] < np.inf).any(axis=1)
                src, dst = src[live], dst[live]
                for lo in range(0, len(src), self._chunk()):
                    s, d = src[lo : lo + self._chunk()], dst[lo : lo + self._chunk()]
                    blocks, inv = self._blocks(dense[c], self.lo[s], self.lo[d])
                    got = op(f[s][:, :, None], blocks[inv]).min(axis=1)
                    f[d] = np.minimum(f[d], got)
        return f

    def backward(self, dense: list[np.ndarray], op: np.ufunc, deadline: float | None) -> np.ndarray:
        """G (N, width): the best weight covering [lo + i, L) with the GPUs each state has not used."""
        g = np.full((self.states, self.width), np.inf)
        g[self.states - 1, self.n - self.lo[-1]] = _none(op)
        for level in range(int(self.mult.sum()) - 1, -1, -1):
            check_deadline(deadline)
            for c in range(self.n_cls):
                src, dst = self._steps(level, c)
                live = (g[dst] < np.inf).any(axis=1)
                src, dst = src[live], dst[live]
                for lo in range(0, len(src), self._chunk()):
                    s, d = src[lo : lo + self._chunk()], dst[lo : lo + self._chunk()]
                    blocks, inv = self._blocks(dense[c], self.lo[s], self.lo[d])
                    got = op(blocks[inv], g[d][:, None, :]).min(axis=2)
                    g[s] = np.minimum(g[s], got)
        return g

    def _chunk(self) -> int:
        return max(1, CHUNK // max(1, self.width**2))

    def through(
        self, weight: np.ndarray, f: np.ndarray, g: np.ndarray, op: np.ufunc, deadline: float | None
    ) -> np.ndarray:
        """Per arc of the table, the best ``op``-combined weight of a plan within the windows through
        it: min over states S of op(F[S][start], weight, G[S + its class][end]); inf where none."""
        a, size = self.arcs, self.n + 1 + self.width
        out = np.full(len(a), np.inf)
        span = np.arange(self.width)
        for c in range(self.n_cls):
            check_deadline(deadline)
            meet = np.full(size * size, np.inf)  # min over S of op(F[S][x], G[S + c][y]) at (x, y)
            for level in range(int(self.mult.sum())):
                src, dst = self._steps(level, c)
                for lo in range(0, len(src), self._chunk()):
                    s, d = src[lo : lo + self._chunk()], dst[lo : lo + self._chunk()]
                    both = op(f[s][:, :, None], g[d][:, None, :])
                    where = (self.lo[s][:, None, None] + span[None, :, None]) * size
                    where = where + self.lo[d][:, None, None] + span[None, None, :]
                    keep = both < np.inf
                    np.minimum.at(meet, where[keep], both[keep])
            on = self.allowed & (self.cls[a.gpu] == c)
            out[on] = op(meet.reshape(size, size)[a.start[on], a.end[on]], weight[on].astype(np.float64))
        return out


def capacities(arcs: Arcs, cls: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Per class, the most layers one of its GPUs covers with an allowed arc (0: none)."""
    cap = np.zeros(int(cls.max()) + 1, dtype=np.int64)
    np.maximum.at(cap, cls[arcs.gpu[allowed]], (arcs.end - arcs.start)[allowed])
    return cap


def exact(weight: np.ndarray, arcs: Arcs) -> bool:
    """Whether every sum of a plan's weights stays an integer float64 holds exactly."""
    return float(np.abs(weight).max(initial=0)) * (arcs.n_gpus + 2) * 2 < EXACT_FLOAT


def _none(op: np.ufunc) -> float:
    """What covering nothing weighs: 0 for a sum, -inf for a max."""
    return 0.0 if op is np.add else -np.inf


def least_top(
    arcs: Arcs, keys: np.ndarray, low: int, high: int | None, deadline: float | None, policy: Policy = POLICY
) -> tuple[int | None, int]:
    """The least slowest-stage key of any plan, by min-max passes at rising thresholds.

    ``low`` is a proven lower bound and ``high`` the key of a known plan (None: none known). Each
    threshold T from the capacity bound up answers exactly: the least top of a plan within T, or
    none (then every plan's top exceeds T). The thresholds widen the windows about twofold each
    time, so the passes that fail are the cheap ones. Returns (the least top, or None when a pass
    would take over ``policy.window_max_work`` steps, the keys are not exact in float64, or the
    deadline passed; the proven lower bound reached). Without a known plan, a table with no plan at
    all returns (None, the largest key + 1).
    """
    values = np.unique(keys)
    cls = gpu_classes(arcs)
    mult = np.bincount(cls)
    if not exact(keys, arcs):
        return None, low

    def slack(t: int) -> int:
        """capT - L under threshold t (negative: the caps alone rule t out)."""
        cap = capacities(arcs, cls, keys <= t)
        return int(mult @ cap) - arcs.n_layers if (cap > 0).all() else -1

    i = int(np.searchsorted(values, low))
    top = len(values) - 1 if high is None else int(np.searchsorted(values, high))
    want = 0  # the least slack of the next threshold: 0, the caps' own bound, proves those below it
    while i <= top:
        i = first_index(i, top, lambda j, want=want: slack(int(values[j])) >= want)
        t = int(values[i])
        if want == 0:
            low = max(low, t)
        win = Windows(arcs, keys <= t)
        if win.work > policy.window_max_work:
            return None, low
        if win.feasible:
            try:
                f = win.forward(win.dense(keys), np.maximum, deadline)
            except Stopped:
                return None, low
            best = f[-1, arcs.n_layers - win.lo[-1]]
            if np.isfinite(best):
                return int(best), int(best)
        low = int(values[i + 1]) if i + 1 < len(values) else t + 1
        want = 2 * (slack(t) + 1)
        i += 1
    return None, low


def exact_through(
    arcs: Arcs, weight: np.ndarray, deadline: float | None, policy: Policy = POLICY
) -> tuple[int, np.ndarray] | None:
    """(the least summed ``weight`` of any plan on ``arcs``, per arc the least of a plan through it;
    a huge value where none), by the windowed min-plus passes over every arc of the table; None
    when there is no plan, a pass would be too large or inexact, or the deadline passes."""
    win = Windows(arcs, np.ones(len(arcs), dtype=bool))
    if not win.feasible or win.work > policy.window_max_work or not exact(weight, arcs):
        return None
    dense = win.dense(weight)
    try:
        f = win.forward(dense, np.add, deadline)
        best = f[-1, arcs.n_layers - win.lo[-1]]
        if not np.isfinite(best):
            return None
        g = win.backward(dense, np.add, deadline)
        through = win.through(weight, f, g, np.add, deadline)
    except Stopped:
        return None
    out = np.full(len(arcs), np.iinfo(np.int64).max // 2, dtype=np.int64)
    used = np.isfinite(through)
    out[used] = through[used].astype(np.int64)
    return int(best), out
