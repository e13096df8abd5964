"""Path passes over the arc table that the DPs, bounds and cuts share, as pure numpy functions.

Shapes: ``n = L + 1`` boundaries, ``k`` GPUs, ``a`` arcs (``arcs.start``, ``arcs.end``, ``arcs.gpu``
and every weight are (a,) int64). A pass walks arcs forward from boundary 0 (or backward from L)
and keeps, per boundary, the best value of a path that reaches it; ``better`` (np.minimum or
np.maximum) says which value is best and ``combine`` how an arc adds to a path (a sum, or np.maximum
for a min-max level). ``worst`` marks a boundary no path reaches.

- ``stage_tables``: paths of exactly s arcs, s = 0..k; stage s takes GPU s's arcs with the order as
  given (exact), any arc with a free order (a GPU may repeat: a relaxation);
- ``path_minimax``: the least largest weight of a k-arc path (a bound on a min-max level);
- ``any_path``: paths of any number of arcs (idle GPUs: a plan may have any number of stages);
- ``best_through``/``through_any``: per arc, the best whole path through it, from both passes;
- ``Radix``: class counts as one mixed-radix number (the free-order DPs' states);
- ``narrow``/``first_index``/``first_value``: bisection for the first threshold that holds;
- ``best_per``/``merge``/``pick``/``nothing``: the DPs' lexicographic (most mass, then least
  time) picks;
- ``arcs_by_start``/``on_cuts``: arcs grouped by their start, and the arcs a fixed cut list allows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from solver.solvers.arcs import Arcs, free_order_states, gpu_classes

#: Mass of an unreachable state in the (mass, time) DPs.
NONE = -1
#: Time of an unreachable state; sums of two stay within int64.
BIG = np.iinfo(np.int64).max // 4

Combine = Callable[[np.ndarray, np.ndarray], np.ndarray]


def best_per(
    target: np.ndarray, mass: np.ndarray, cost: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per index 0..size-1 of ``target`` (a,), the lexicographic best (max mass, then min time) of
    the candidates aimed at it, (size,) each; NONE mass (and BIG time) where none is."""
    best_m = np.full(size, NONE, dtype=np.int64)
    best_t = np.full(size, BIG, dtype=np.int64)
    if len(target):
        order = np.lexsort((cost, -mass, target))
        pick = order[np.unique(target[order], return_index=True)[1]]
        best_m[target[pick]] = mass[pick]
        best_t[target[pick]] = cost[pick]
    return best_m, best_t


def merge(m1: np.ndarray, t1: np.ndarray, m2: np.ndarray, t2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise the better of two (mass, time) tables of one shape: more mass, then less time."""
    first = (m1 > m2) | ((m1 == m2) & (t1 <= t2))
    return np.where(first, m1, m2), np.where(first, t1, t2)


class Radix:
    """Counts of used members per class, ``mult`` (c,) members each, as one mixed-radix number:
    using one more of class i adds ``stride[i]``, so every step goes to a larger number and 0 is
    "none used", ``size - 1`` "all used"."""

    def __init__(self, mult: np.ndarray):
        self.mult = np.asarray(mult, dtype=np.int64)
        self.stride = np.concatenate([[1], np.cumprod(self.mult + 1)[:-1]]).astype(np.int64)
        self.size = math.prod(int(m) + 1 for m in self.mult)  # Python ints: 64 classes overflow int64

    @functools.cached_property
    def counts(self) -> np.ndarray:
        """(size, c): the counts of every state."""
        return (np.arange(self.size)[:, None] // self.stride[None, :]) % (self.mult + 1)[None, :]

    def digits(self, state: int) -> np.ndarray:
        """(c,): the counts of one state."""
        return (state // self.stride) % (self.mult + 1)


def narrow(lo: int, hi: int, probe: Callable[[int], int | None]) -> tuple[int, bool]:
    """Bisection over indices [lo, hi] for the first where a test holds (it must fail on a prefix
    and hold on the rest; ``hi`` is never tried). ``probe(mid)`` returns -1 where it fails, else an
    index at most ``mid`` where it is known to hold (a plan found within ``mid`` may prove a lower
    one: the search jumps there), or None where it cannot tell (a deadline). Returns (the first
    index, True), or (the lowest index not yet ruled out, False) when a probe could not tell."""
    while lo < hi:
        mid = (lo + hi) // 2
        got = probe(mid)
        if got is None:
            return lo, False
        if got < 0:
            lo = mid + 1
        else:
            hi = got
    return lo, True


def first_index(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The first index in [lo, hi] where ``ok`` holds (``narrow`` with a plain yes or no)."""
    return narrow(lo, hi, lambda mid: mid if ok(mid) else -1)[0]


def first_value(values: np.ndarray, ok: Callable, last_likely: bool = False) -> int:
    """The first of ``values`` where ``ok`` holds (see ``first_index``; the last is assumed to hold).
    ``last_likely`` tries the second last first, so an answer at the last value costs one test."""
    hi = len(values) - 1
    if last_likely and hi > 0:
        if not ok(values[hi - 1]):
            return int(values[hi])
        hi -= 1
    return int(values[first_index(0, hi, lambda i: ok(values[i]))])


def stage_tables(
    arcs: Arcs,
    weight: np.ndarray,
    origin: int,
    worst: int,
    better: np.ufunc,
    combine: Combine,
    allowed: np.ndarray | None = None,
    backward: bool = False,
) -> np.ndarray:
    """(k + 1, n): row s the best value of a path of s arcs from boundary 0 (``backward``: of k - s
    arcs to boundary L), ``origin`` where it starts. Only ``allowed`` arcs, if given."""
    n, k = arcs.n_layers + 1, arcs.n_gpus
    layered = arcs.order == "as-given"
    table = np.full((k + 1, n), worst, dtype=np.int64)
    if backward:
        table[k, n - 1] = origin
    else:
        table[0, 0] = origin
    src, dst = (arcs.end, arcs.start) if backward else (arcs.start, arcs.end)
    for s in range(k - 1, -1, -1) if backward else range(k):
        here, there = (s + 1, s) if backward else (s, s + 1)
        on = table[here, src] != worst
        if layered:
            on &= arcs.gpu == s
        if allowed is not None:
            on &= allowed
        better.at(table[there], dst[on], combine(table[here, src[on]], weight[on]))
    return table


def any_path(
    arcs: Arcs,
    weight: np.ndarray,
    origin: int,
    worst: int,
    better: np.ufunc,
    combine: Combine,
    backward: bool = False,
) -> np.ndarray:
    """(n,): per boundary, the best value of a path of any arcs, any number of them, from boundary 0
    (``backward``: to boundary L); one sweep, since arcs go forward: a boundary is final once every
    arc into it is seen."""
    n = arcs.n_layers
    src, dst = (arcs.end, arcs.start) if backward else (arcs.start, arcs.end)
    order = np.argsort(src, kind="stable")
    cut = np.searchsorted(src[order], np.arange(n + 2))
    reach = np.full(n + 1, worst, dtype=np.int64)
    reach[n if backward else 0] = origin
    for p in range(n, 0, -1) if backward else range(n):
        if reach[p] == worst:
            continue
        ids = order[cut[p] : cut[p + 1]]
        better.at(reach, dst[ids], combine(reach[p], weight[ids]))
    return reach


def _sense(sense: str) -> tuple[int, np.ufunc]:
    """(worst, better) of a "min" or "max" bound."""
    if sense == "min":
        return np.iinfo(np.int64).max // 4, np.minimum
    return -(np.iinfo(np.int64).max // 4), np.maximum


def through_any(arcs: Arcs, weight: np.ndarray, sense: str) -> np.ndarray:
    """Per arc, the best total ``weight`` of a path of arcs from layer 0 to layer L through it, any
    GPUs, any count (``sense`` "min": a lower bound on every plan through it; "max": an upper one)."""
    worst, better = _sense(sense)
    fwd = any_path(arcs, weight, 0, worst, better, np.add)
    bwd = any_path(arcs, weight, 0, worst, better, np.add, backward=True)
    dead = (fwd[arcs.start] == worst) | (bwd[arcs.end] == worst)
    return np.where(dead, worst, fwd[arcs.start] + weight + bwd[arcs.end])


def best_through(arcs: Arcs, weight: np.ndarray, sense: str, exact_states: int) -> np.ndarray:
    """For each arc, a bound on the total ``weight`` of any whole plan that uses it, shape (a,).

    ``sense`` "min" gives a lower bound, "max" an upper bound. With the order as given, stage s is
    GPU s and the bound is exact (a forward and a backward pass over the layered graph). With a
    free order the passes count stages but let a GPU repeat, which relaxes the plan and keeps the
    bound valid; a free order of at most ``exact_states`` class-count states gets the exact best
    plan through each arc instead (``_through_by_classes``). Used to drop arcs that cannot be part
    of any plan within a proven tie set.
    """
    k = arcs.n_gpus
    worst, better = _sense(sense)
    if arcs.order == "auto" and free_order_states(arcs) <= exact_states:
        return _through_by_classes(arcs, weight, worst, better)
    fwd = stage_tables(arcs, weight, 0, worst, better, np.add)
    bwd = stage_tables(arcs, weight, 0, worst, better, np.add, backward=True)
    through = fwd[:k, arcs.start] + weight[None, :] + bwd[1:, arcs.end]
    dead = (fwd[:k, arcs.start] == worst) | (bwd[1:, arcs.end] == worst)
    through[dead] = worst
    if arcs.order == "as-given":
        return through[arcs.gpu, np.arange(len(arcs))]
    return through.min(axis=0) if sense == "min" else through.max(axis=0)


def _through_by_classes(arcs: Arcs, weight: np.ndarray, worst: int, better: np.ufunc) -> np.ndarray:
    """Exact best whole plan through each arc with a free order.

    A state counts how many GPUs of each class (identical GPUs are interchangeable) cover layers
    [0, p): ``fwd[S, p]`` is the best weight of that, ``bwd[S, p]`` of covering [p, L) with the rest.
    """
    n = arcs.n_layers
    cls = gpu_classes(arcs)
    radix = Radix(np.bincount(cls))
    mult, stride, states, counts = radix.mult, radix.stride, radix.size, radix.counts
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


def nothing(size: int) -> tuple[np.ndarray, np.ndarray]:
    """A (mass, time) table that reaches no boundary."""
    return np.full(size, NONE, dtype=np.int64), np.full(size, BIG, dtype=np.int64)


def pick(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    """The better of two (mass, time) values."""
    return x if (-x[0], x[1]) <= (-y[0], y[1]) else y


def on_cuts(arcs: Arcs, cuts: list[int]) -> np.ndarray:
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


def path_minimax(arcs: Arcs, weight: np.ndarray, allowed: np.ndarray) -> int:
    """A lower bound on the smallest max ``weight`` of a plan on ``allowed`` arcs, from a k-stage
    path pass (exact with the order as given; a free order lets a GPU repeat)."""
    low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    return int(stage_tables(arcs, weight, low, high, np.minimum, np.maximum, allowed)[-1, -1])
