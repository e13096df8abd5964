"""The exact expert fill: which of a stage's expert units to hold in VRAM so that its time is least.

A stage on GPU g runs layers [a, b). Each unit u (one expert tensor of one layer) is held on the GPU,
costing ``h[u]`` time units and ``bytes[u]`` of room, or left on the CPU, costing ``c[u]``; every
layer with a unit on the CPU costs ``sigma`` more (the switch to the CPU and back). So holding u saves
``v[u] = c[u] - h[u]`` and holding all of a layer's units saves ``sigma`` more. The fill maximises

    key = sum of v over held units + sigma * (layers fully held)

within the room; ties go to more layers fully held, then fewer bytes held, then the set whose sorted
(layer, slot) list on the CPU is lexicographically largest (earlier layers stay on the GPU).

The integer values are per unit, so equal sets give equal sums. ``key`` is packed as
``value * (L + 1) + full`` (full <= L), which orders by value, then full layers.

A layer offers ``2^m`` patterns (which of its m units to hold). Where every unit is alike (one size,
one value) the best fill holds as many as fit, packed into whole layers (``uniform_table``); else two
exact algorithms:

- ``dense_table``: for every start a at once, a DP over layers whose state s is "at most s * G bytes
  held", G the greatest common divisor of all unit sizes; row a after layer b - 1 is the best fill of
  [a, b) for every room. GGUF tensor sizes share large powers of two, so the states
  are few (hundreds to a few thousand).
- ``best_set``: one range, by Pareto frontiers of (bytes, key) over suffixes of its layers, then the
  lexicographic rule front to back; it returns the held units themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

#: Dense DP cells (starts x states) above which the table falls back to per-range frontiers.
DENSE_CELLS = 2_000_000


@dataclass(frozen=True)
class Units:
    """One GPU's view of the model's units, sorted by (layer, slot); shape (U,) each.

    layer, slot: where the unit is; size: bytes; value: the packed key one held unit adds (``v *
    (L+1)``); ``sigma``: the packed key a fully held layer adds (``sigma * (L+1) + 1``).
    """

    layer: np.ndarray
    slot: np.ndarray
    size: np.ndarray
    value: np.ndarray
    sigma: int
    n_layers: int

    def of_layer(self, layer: int) -> np.ndarray:
        """Indices of the layer's units, shape (m,)."""
        lo, hi = np.searchsorted(self.layer, [layer, layer + 1])
        return np.arange(lo, hi)


def pack(value: np.ndarray, sigma: int, n_layers: int) -> tuple[np.ndarray, int]:
    """Packed per-unit keys and the packed bonus of a full layer (see the module docstring)."""
    return value * (n_layers + 1), sigma * (n_layers + 1) + 1


@dataclass(frozen=True)
class Pattern:
    """One way to fill a layer: the units held (indices into Units), their bytes and packed key."""

    held: tuple[int, ...]
    size: int
    key: int


def patterns(units: Units, layer: int) -> list[Pattern]:
    """Every subset of the layer's units, each with its bytes and packed key (a full layer adds sigma)."""
    ids = units.of_layer(layer).tolist()
    out = []
    for r in range(len(ids) + 1):
        for held in combinations(ids, r):
            size = int(units.size[list(held)].sum()) if held else 0
            key = int(units.value[list(held)].sum()) if held else 0
            if ids and r == len(ids):
                key += units.sigma
            out.append(Pattern(held, size, key))
    return out


def _cpu_order(units: Units, p: Pattern, layer: int) -> tuple[int, ...]:
    """The pattern's CPU slots, ended by a sentinel above every slot: a larger tuple is preferred.

    A list of CPU units that stops early in this layer goes on with a later layer's unit, which sorts
    after any of this layer's, so ending counts as the largest next element."""
    held = set(p.held)
    return (*sorted(int(units.slot[u]) for u in units.of_layer(layer) if u not in held), 1 << 30)


def _frontier(entries: list[tuple[int, int]]) -> dict[int, int]:
    """The Pareto frontier of (bytes, key): keys strictly rising with bytes, as {bytes: key}."""
    best: dict[int, int] = {}
    top = None
    for size, key in sorted(entries, key=lambda e: (e[0], -e[1])):
        if top is None or key > top:
            best[size] = key
            top = key
    return best


def best_set(units: Units, a: int, b: int, room: int) -> tuple[np.ndarray, int]:
    """The fill of layers [a, b) within ``room`` bytes: (held unit indices, packed key).

    Exact: suffix frontiers hold every optimal completion (a dominated suffix would make a better
    whole), and the lexicographic rule is applied front to back among completions that stay optimal.
    """
    layers = [la for la in range(a, b) if len(units.of_layer(la))]
    pats = {la: patterns(units, la) for la in layers}
    suffix: list[dict[int, int]] = [{0: 0}]
    for la in reversed(layers):
        nxt = suffix[-1]
        suffix.append(_frontier([(s + p.size, k + p.key) for s, k in nxt.items() for p in pats[la]]))
    suffix.reverse()  # suffix[i]: frontier of layers[i:]
    fits = [(s, k) for s, k in suffix[0].items() if s <= room]
    if not fits:
        return np.zeros(0, dtype=np.int64), 0
    size, key = max(fits, key=lambda e: (e[1], -e[0]))
    best = key
    held: list[int] = []
    for i, la in enumerate(layers):
        rest = suffix[i + 1]
        options = [p for p in pats[la] if rest.get(size - p.size) == key - p.key]
        choice = max(options, key=lambda p: _cpu_order(units, p, la))
        held += choice.held
        size -= choice.size
        key -= choice.key
    return np.array(sorted(held), dtype=np.int64), best


def _full_layers(units: Units, held: list[int]) -> int:
    layers, counts = np.unique(units.layer[held], return_counts=True) if held else ([], [])
    return sum(1 for la, n in zip(layers, counts) if n == len(units.of_layer(int(la))))


def _distinct(pats: list[Pattern], carried: list[np.ndarray]) -> list[Pattern]:
    """One pattern of each (bytes, key, carried sums): equal tensors of a layer give equal fills."""
    seen: dict[tuple, Pattern] = {}
    for p in pats:
        held = list(p.held)
        sig = (p.size, p.key, *(int(c[held].sum()) for c in carried))
        seen.setdefault(sig, p)
    return list(seen.values())


@dataclass(frozen=True)
class Fills:
    """The best fill of many (GPU, range) cells: packed key, bytes held and carried sums, each shaped
    like the rooms they answer (cells whose room is negative hold zeros)."""

    key: np.ndarray
    size: np.ndarray
    sums: list[np.ndarray]


def dense_table(units: Units, carried: list[np.ndarray], rooms: np.ndarray) -> Fills | None:
    """The best fill of every (g, a, b) of ``rooms`` (G, L+1, L+1), by one DP over layers for every start.

    ``carried`` are per-unit integers (shape (U,) each) summed over the chosen set alongside. Returns
    None when the states would be too many (then ranges are filled one by one by ``best_set``).
    """
    n = units.n_layers
    grain = int(np.gcd.reduce(units.size)) if len(units.size) else 1
    cap = min(int(rooms.max(initial=0)), int(units.size.sum()))
    states = max(cap, 0) // grain + 1
    if states * (n + 1) > DENSE_CELLS:
        return None
    low = np.iinfo(np.int64).min // 4
    out = Fills(
        np.zeros(rooms.shape, dtype=np.int64),
        np.zeros(rooms.shape, dtype=np.int64),
        [np.zeros(rooms.shape, dtype=np.int64) for _ in carried],
    )
    key = np.zeros((n, states), dtype=np.int64)  # row a: the fill of [a, b) after layer b - 1
    size = np.zeros((n, states), dtype=np.int64)
    sums = [np.zeros((n, states), dtype=np.int64) for _ in carried]
    for layer in range(n):
        rows = slice(0, layer + 1)  # starts a <= layer; row ``layer`` starts empty
        pats = _distinct([p for p in patterns(units, layer) if p.held and p.size // grain < states], carried)
        base_key, base_size = key[rows].copy(), size[rows].copy()
        base_sums = [x[rows].copy() for x in sums]
        for p in pats:
            shift = p.size // grain
            cand_key = np.full_like(base_key, low)
            cand_key[:, shift:] = base_key[:, : states - shift] + p.key
            cand_size = np.zeros_like(base_size)
            cand_size[:, shift:] = base_size[:, : states - shift] + p.size
            now_key, now_size = key[rows], size[rows]
            better = (cand_key > now_key) | ((cand_key == now_key) & (cand_size < now_size))
            key[rows] = np.where(better, cand_key, now_key)
            size[rows] = np.where(better, cand_size, now_size)
            held = list(p.held)
            for i, per_unit in enumerate(carried):
                cand = np.zeros_like(base_key)
                cand[:, shift:] = base_sums[i][:, : states - shift] + int(per_unit[held].sum())
                sums[i][rows] = np.where(better, cand, sums[i][rows])
        room = rooms[:, : layer + 1, layer + 1]  # (G, a)
        ok = room >= 0
        state = np.minimum(np.maximum(room, 0) // grain, states - 1)
        starts = np.broadcast_to(np.arange(layer + 1), room.shape)
        out.key[:, : layer + 1, layer + 1] = np.where(ok, key[starts, state], 0)
        out.size[:, : layer + 1, layer + 1] = np.where(ok, size[starts, state], 0)
        for i in range(len(carried)):
            out.sums[i][:, : layer + 1, layer + 1] = np.where(ok, sums[i][starts, state], 0)
    return out


def uniform_table(units: Units, carried: list[np.ndarray], rooms: np.ndarray) -> Fills | None:
    """The best fill of every (g, a, b) in closed form when every unit is alike (one size, one value
    above 0, the same carried integers) and every layer with units has m of them: hold as many as fit,
    ``c = min(units in range, room // size)``, packed m to a layer (``c // m`` layers full). None when
    the units are not alike."""
    if not len(units.size):
        return None
    alike = all(len(np.unique(x)) == 1 for x in (units.size, units.value, *carried))
    per_layer = np.bincount(units.layer, minlength=units.n_layers)
    m = int(per_layer.max())
    if not alike or int(units.value[0]) <= 0 or np.any((per_layer != 0) & (per_layer != m)):
        return None
    moe = np.concatenate([[0], np.cumsum(per_layer > 0)])
    in_range = m * (moe[None, :] - moe[:, None])  # (L+1, L+1) over (a, b)
    size = int(units.size[0])
    held = np.where(rooms >= 0, np.minimum(in_range[None], np.maximum(rooms, 0) // size), 0)
    key = held * int(units.value[0]) + (held // m) * units.sigma
    return Fills(key, held * size, [held * int(x[0]) for x in carried])
