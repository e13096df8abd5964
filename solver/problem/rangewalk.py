"""The range walk: for every (GPU g, layers [a, b)) its room and which ranked pairs its cache holds.

A stage's cache walks the profile in rank order over the pairs of its own layers and stops at the
first pair that does not fit (docs/reference.md). With ``P[x, r]`` = bytes of the pairs of rank < r in layers
< x, the bytes the walk of [a, b) has taken after r ranks are ``P[b, r] - P[a, r]``: non-decreasing
in r. So the walk's stop is one binary search per (g, a, b), all run at once as array operations,
and any per-pair sum over a held set is two lookups in a prefix table of the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from solver.problem.problem import Problem


def prefix_by_layer_and_rank(pair_layer: np.ndarray, weight: np.ndarray, n_layers: int) -> np.ndarray:
    """``P[x, r]`` = sum of ``weight`` over pairs with rank < r and layer < x; shape (L+1, N+1)."""
    n = len(pair_layer)
    out = np.zeros((n_layers + 1, n + 1), dtype=weight.dtype)
    out[pair_layer + 1, np.arange(1, n + 1)] = weight
    np.cumsum(out, axis=0, out=out)
    np.cumsum(out, axis=1, out=out)
    return out


def need_table(p: Problem) -> np.ndarray:
    """Bytes a stage running [a, b) needs besides its cache, whatever the GPU, shape (L+1, L+1).

    Exact for a < b: every term is below 2^62 (see problem.BYTE_LIMIT).
    """
    n = p.n_layers
    s = np.concatenate([[0], np.cumsum(p.layer_bytes)])
    need = s[None, :] - s[:, None] + p.stage_bytes
    need[0, :] += p.first_stage_bytes
    need[:, n] += p.last_stage_bytes
    return need


def room_of(p: Problem, need: np.ndarray) -> np.ndarray:
    """``free - reserve - need`` for every (g, a, b), shape (k, L+1, L+1); -1 where b <= a or it does not fit.

    Exact where >= 0 (sizes stay below 2^62, see solver.problem.scales.BYTE_LIMIT).
    """
    n = p.n_layers
    avail = np.maximum(p.free - p.reserve, -1)
    room = avail[:, None, None] - need[None, :, :]
    room[:, ~np.triu(np.ones((n + 1, n + 1), dtype=bool), 1)] = -1
    return np.maximum(room, -1)


def expert_prefix(p: Problem) -> np.ndarray:
    """Bytes of every routed expert of layers < x, shape (L+1,): all of a range's experts is two lookups."""
    return np.concatenate([[0], np.cumsum(p.experts_per_layer * p.expert_bytes)])


def room_table(p: Problem) -> np.ndarray:
    """Room of every (g, a, b), shape (k, L+1, L+1); -1 where b <= a or the range does not fit."""
    return room_of(p, need_table(p))


@dataclass(frozen=True)
class RangeWalk:
    """Rooms and walk stops of every (GPU, range).

    room (k, L+1, L+1): bytes free for the cache, -1 if the range cannot run on that GPU.
    stop (k, L+1, L+1): ranks walked; the held pairs are the range's pairs of rank < stop.
    """

    room: np.ndarray
    stop: np.ndarray
    pair_layer: np.ndarray
    bytes_prefix: np.ndarray

    def held_sum(self, weight: np.ndarray) -> np.ndarray:
        """Sum of a per-pair ``weight`` (N,) over every held set, shape (k, L+1, L+1)."""
        n_layers = self.room.shape[1] - 1
        pre = prefix_by_layer_and_rank(self.pair_layer, weight, n_layers)
        return self._diff(pre)

    def held_bytes(self) -> np.ndarray:
        """Cache bytes of every held set, shape (k, L+1, L+1)."""
        return self._diff(self.bytes_prefix)

    def _diff(self, pre: np.ndarray) -> np.ndarray:
        n = self.room.shape[1]
        a = np.arange(n)[None, :, None]
        b = np.arange(n)[None, None, :]
        out = pre[b, self.stop] - pre[a, self.stop]
        out[self.room < 0] = 0
        return out


def walk_table(p: Problem) -> RangeWalk:
    """Walk every (GPU, range) at once: a vectorised binary search for each stop."""
    room = room_table(p)
    pre = prefix_by_layer_and_rank(p.pair_layer, p.pair_bytes, p.n_layers)
    n_ranks = len(p.pair_layer)
    g, a, b = np.nonzero(room >= 0)
    r = room[g, a, b]
    lo = np.zeros(len(r), dtype=np.int64)
    hi = np.full(len(r), n_ranks, dtype=np.int64)
    while True:
        open_ = lo < hi
        if not open_.any():
            break
        mid = (lo + hi + 1) // 2
        fits = pre[b, mid] - pre[a, mid] <= r
        lo = np.where(open_ & fits, mid, lo)
        hi = np.where(open_ & ~fits, mid - 1, hi)
    stop = np.zeros(room.shape, dtype=np.int64)
    stop[g, a, b] = lo
    return RangeWalk(room=room, stop=stop, pair_layer=p.pair_layer, bytes_prefix=pre)


@dataclass(frozen=True)
class StageWalk:
    """One stage's walk, straight from the definition: the reference the table is tested against."""

    room: int
    visible: np.ndarray
    held: np.ndarray

    @property
    def n_held(self) -> int:
        return len(self.held)


def walk_range(p: Problem, g: int, a: int, b: int) -> StageWalk:
    """Walk ranks in order over layers [a, b) on GPU g; stop at the first pair that does not fit."""
    room = p.room(g, a, b)
    visible = np.flatnonzero((p.pair_layer >= a) & (p.pair_layer < b))
    if room < 0:
        return StageWalk(room, visible, visible[:0])
    used = np.cumsum(p.pair_bytes[visible])
    n_held = int(np.searchsorted(used, room, side="right"))
    return StageWalk(room, visible, visible[:n_held])
