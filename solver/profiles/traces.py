"""Routing dumps: records of little-endian int32 ``layer``, int32 ``k``, then k int32 expert ids and
k float32 gate weights (Strata's trace format). Read into routing counts, and written (for tests).

A count is a routing event: one (layer, expert) pick in one record. The gate weights are read and
checked (finite) but not summed: the engine's cache hit rate counts lookups, not weighted lookups.
Records are parsed in runs of equal ``k`` with numpy, so a dump of millions of records reads fast.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from solver.errors import InputError
from solver.files.bounded import TRACE_LIMIT, read_bounded
from solver.profiles.format import Profile

#: No router picks more experts than this per token; a larger k is a garbled record.
MAX_K = 65536
#: Records read per numpy step at most, and the first window when k changes.
CHUNK, MIN_WINDOW = 1 << 17, 64


@dataclass(frozen=True)
class RoutingCounts:
    """Routing events per (layer, expert), for pairs routed at least once."""

    layer: np.ndarray
    expert: np.ndarray
    count: np.ndarray
    records: int
    files: int

    @property
    def events(self) -> int:
        return int(self.count.sum())

    def ranked(self, file: str) -> Profile:
        """The pairs as a profile with counts: count descending, ties by layer then expert."""
        order = np.lexsort((self.expert, self.layer, -self.count))
        return Profile(file=file, layer=self.layer[order], expert=self.expert[order], count=self.count[order])


def write_trace(path: Path, records: Iterable[tuple[int, list[int], list[float]]]) -> None:
    """Write records ``(layer, experts, weights)`` in the dump format (for tests and examples)."""
    chunks = []
    for layer, experts, weights in records:
        if len(experts) != len(weights):
            raise ValueError("a record needs one weight per expert")
        chunks.append(np.array([layer, len(experts)], "<i4").tobytes())
        chunks.append(np.asarray(experts, "<i4").tobytes())
        chunks.append(np.asarray(weights, "<f4").tobytes())
    path.write_bytes(b"".join(chunks))


def _bad(shown: str, word: int, what: str) -> InputError:
    return InputError(shown, f"record at byte offset {4 * word}: {what}")


def _check_run(
    shown: str,
    start: int,
    stride: int,
    layers: np.ndarray,
    ids: np.ndarray,
    w: np.ndarray,
    experts: np.ndarray | None,
) -> None:
    """Raise for the first garbled record of a run: negative ids, a repeated expert, a non-finite weight,
    or (with a model's ``experts`` per layer) a pair out of the model's range."""
    k = ids.shape[1]
    bad_layer = layers < 0
    bad_id = (ids < 0).any(axis=1)
    srt = np.sort(ids, axis=1)
    dup = (srt[:, 1:] == srt[:, :-1]).any(axis=1) if k > 1 else np.zeros(len(ids), bool)
    bad_w = ~np.isfinite(w).all(axis=1)
    out_layer = np.zeros(len(ids), bool)
    out_expert = np.zeros(len(ids), bool)
    if experts is not None:
        out_layer = ~bad_layer & (layers >= len(experts))
        ok = ~bad_layer & ~out_layer
        limit = np.where(ok, experts[np.where(ok, layers, 0)], 0)
        out_expert = ok & (ids >= limit[:, None]).any(axis=1)
    flags = bad_layer | bad_id | dup | bad_w | out_layer | out_expert
    if not flags.any():
        return
    i = int(np.argmax(flags))
    word = start + i * stride
    if bad_layer[i]:
        raise _bad(shown, word, f"negative layer {layers[i]}")
    if bad_id[i]:
        raise _bad(shown, word, f"negative expert id {ids[i].min()}")
    if dup[i]:
        raise _bad(shown, word, f"expert ids repeat within one record ({', '.join(map(str, ids[i]))})")
    if bad_w[i]:
        raise _bad(shown, word, "a gate weight is not a finite number")
    if out_layer[i]:
        raise _bad(shown, word, f"layer {layers[i]} out of range (the model has {len(experts)} layers)")
    e = int(ids[i].max())
    raise _bad(shown, word, f"expert {e} out of range (layer {layers[i]} has {experts[layers[i]]} experts)")


def _tally(keys: list[np.ndarray], counts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Merge (distinct keys, counts) pieces into one sorted set of distinct keys with summed counts."""
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    key, inverse = np.unique(np.concatenate(keys), return_inverse=True)
    count = np.zeros(len(key), np.int64)
    np.add.at(count, inverse, np.concatenate(counts))
    return key, count


def _read_one(path: Path, shown: str, experts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Distinct pair keys ``layer << 32 | expert``, their routing events, and the number of records.

    Records are taken in runs of equal k, each at most CHUNK records (bounded memory); a run's
    window doubles while k stays the same, so a file whose k changes often is still read in O(n).
    """
    raw = read_bounded(path, shown, "a routing trace", TRACE_LIMIT, binary=None)
    n = len(raw) // 4
    ints = np.frombuffer(raw, "<i4", count=n)
    floats = np.frombuffer(raw, "<f4", count=n)
    keys: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    pos, records, window = 0, 0, MIN_WINDOW
    while pos * 4 < len(raw):
        if pos + 2 > n:
            raise _bad(shown, pos, f"truncated: {len(raw) - 4 * pos} bytes left, a record header needs 8")
        k = int(ints[pos + 1])
        if not 1 <= k <= MAX_K:
            raise _bad(shown, pos, f"k = {k}, expected 1 to {MAX_K} experts")
        stride = 2 + 2 * k
        if pos + stride > n:
            need = 4 * stride
            raise _bad(shown, pos, f"truncated: k = {k} needs {need} bytes, {len(raw) - 4 * pos} left")
        fit = min((n - pos) // stride, window)
        same = ints[pos + 1 : pos + 1 + fit * stride : stride] == k
        run = fit if same.all() else int(np.argmin(same))
        window = min(2 * window, CHUNK) if run == fit else MIN_WINDOW
        block = slice(pos, pos + run * stride)
        rows = ints[block].reshape(run, stride)
        layers = rows[:, 0].astype(np.int64)
        ids = rows[:, 2 : 2 + k].astype(np.int64)
        weights = floats[block].reshape(run, stride)[:, 2 + k :]
        _check_run(shown, pos, stride, layers, ids, weights, experts)
        u, c = np.unique((np.repeat(layers, k) << 32) | ids.ravel(), return_counts=True)
        keys.append(u)
        counts.append(c)
        records += run
        pos += run * stride
        if len(keys) >= 64:
            merged = _tally(keys, counts)
            keys, counts = [merged[0]], [merged[1]]
    return (*_tally(keys, counts), records)


def read_traces(paths: list[tuple[Path, str]], experts: np.ndarray | None = None) -> RoutingCounts:
    """Count routing events per pair over every record of every file ``(path, shown name)``.

    With ``experts`` (a model's experts per layer), a pair outside the model is an error.
    """
    keys: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    records = 0
    for path, shown in paths:
        u, c, n = _read_one(path, shown, experts)
        keys.append(u)
        counts.append(c)
        records += n
    key, count = _tally(keys, counts)
    return RoutingCounts(
        layer=(key >> 32).astype(np.int64),
        expert=(key & 0xFFFFFFFF).astype(np.int64),
        count=count,
        records=records,
        files=len(paths),
    )
