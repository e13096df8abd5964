"""The exact expert fill: which of a stage's expert units to hold in VRAM so that its time is least.

A stage on GPU g runs layers [a, b). Each unit u (one expert tensor of one layer) is held on the GPU,
costing ``h[u]`` time units and ``bytes[u]`` of room, or left on the CPU, costing ``c[u]``; every
layer with a unit on the CPU costs ``sigma`` more (the switch to the CPU and back). So holding u saves
``v[u] = c[u] - h[u]`` and holding all of a layer's units saves ``sigma`` more. The fill maximises

    key = sum of v over held units + sigma * (layers fully held)

within the room; ties go to more layers fully held, then fewer bytes held, then the set whose sorted
(layer, slot) list on the CPU is lexicographically largest (earlier layers stay on the GPU).

The integer values are per unit and exactly additive in bytes among units of one rate per byte
(``unit_values``): two sets whose times are equal (the same bytes of each rate) get equal sums, so
the tie rules decide between them, not how each unit's time rounds. ``key`` is packed as
``value * (L + 1) + full`` (full <= L), which orders by value, then full layers.

A layer offers ``2^m`` patterns (which of its m units to hold). Where every unit is alike (one size,
one value) the best fill holds as many as fit, packed into whole layers (``uniform_table``); else two
exact algorithms:

- ``dense_table``: for every start a at once, a DP over layers whose state s is "at most s * G bytes
  held", G the greatest common divisor of all unit sizes; row a after layer b - 1 is the best fill of
  [a, b) for every room. GGUF tensor sizes share large powers of two, so the states
  are few (hundreds to a few thousand).
- ``best_set``: one range, by the same DP over its layers from the last one back, then the
  lexicographic rule front to back; it returns the held units themselves.

Both count bytes in one grain (``grain_of``): the sizes' greatest common divisor, or a coarser one,
with sizes rounded up to it, where the divisor would make too many states.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations, pairwise

import numpy as np

#: Most byte states the fill's DP counts in: a 141 GiB card in the 18 MiB grain of a Q4_K_M GGUF's
#: tensor sizes still counts exactly; sizes that share no such divisor are rounded up to a coarser grain.
MAX_STATES = 8192
#: Bound on the fill DP's packed (key, bytes) integers, below int64's so that adding a pattern to one
#: cannot overflow: keys too large to pack with the bytes are compared as a pair instead.
PACKED_LIMIT = 2**62


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


#: Least integer value of one grain of a rate class for its units to be valued per grain (a relative
#: rounding of at most 2^-21 per unit); below it each unit's value is rounded on its own.
MIN_GRAIN_VALUE = 2**20
#: Rates per byte within this relative gap of the previous one are one rate (float rounding of one formula).
RATE_GAP = 1e-9


def unit_values(value_ms: np.ndarray, size: np.ndarray, scale: int) -> np.ndarray:
    """Integer values (``scale`` per ms) of units worth ``value_ms`` each, additive in bytes.

    Units whose value per byte is one rate (to RATE_GAP; llama.cpp's units of layers with as many
    experts, on one GPU) are valued ``(size / grain) * rint(rate * grain * scale)``, grain the
    greatest common divisor of their sizes: sets of equal bytes of a rate get equal values, whereas
    rounding each unit on its own lets a 20-byte unit and two of 8 and 12 bytes differ by one and
    decide a tie the tie rules are meant to decide. A class whose grain is worth under
    MIN_GRAIN_VALUE keeps the per-unit rounding (its precision would suffer otherwise).
    """
    out = np.rint(value_ms * scale).astype(np.int64)
    if not len(size):
        return out
    rate = value_ms / size
    order = np.argsort(rate, kind="stable")
    sorted_rate = rate[order]
    gap = np.abs(np.diff(sorted_rate)) > RATE_GAP * np.maximum(np.abs(sorted_rate[1:]), 1e-300)
    starts = np.concatenate([[0], np.flatnonzero(gap) + 1, [len(order)]])
    for lo, hi in pairwise(starts.tolist()):
        ids = order[lo:hi]
        grain = int(np.gcd.reduce(size[ids]))
        per_grain = round(float(value_ms[ids].sum()) / float(size[ids].sum()) * grain * scale)
        if abs(per_grain) >= MIN_GRAIN_VALUE:
            out[ids] = (size[ids] // grain) * per_grain
    return out


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


def grain_of(sizes: np.ndarray, most_room: int) -> int:
    """The byte grain the fill counts in: the sizes' greatest common divisor, or, where the largest room
    would hold more than MAX_STATES of it, the finest grain that it holds MAX_STATES of (sizes are then
    rounded up to it, so a fill still fits its room; only models whose tensor sizes share no large
    divisor are affected)."""
    exact = int(np.gcd.reduce(sizes)) if len(sizes) else 1
    budget = MAX_STATES
    if max(most_room, 0) // exact < budget:
        return exact
    return -(-max(most_room, 0) // budget)


def best_set(units: Units, a: int, b: int, room: int) -> tuple[np.ndarray, int]:
    """The fill of layers [a, b) within ``room`` bytes: (held unit indices, packed key).

    A DP over the range's layers from the last one back gives, for every budget of ``s`` grains, the
    best key of a fill of the layers from each one on (the least bytes among the best). The optimum is
    that of the first layer at the room; then, front to back, each layer takes the pattern whose CPU
    units sort last among those whose rest is still the best of its budget (a completion of an
    optimum is itself optimal for what it has left, and uses no fewer bytes than it must).
    """
    layers = [la for la in range(a, b) if len(units.of_layer(la))]
    if room < 0 or not layers:
        return np.zeros(0, dtype=np.int64), 0
    grain = int(np.gcd.reduce(units.size))
    states = min(room, int(units.size[units.of_layer(layers[0])[0] :].sum())) // grain + 1
    pats = {la: patterns(units, la) for la in layers}
    low = np.iinfo(np.int64).min // 4
    key = np.zeros((len(layers) + 1, states), dtype=np.int64)
    size = np.zeros((len(layers) + 1, states), dtype=np.int64)
    for i in range(len(layers) - 1, -1, -1):
        key[i], size[i] = key[i + 1], size[i + 1]
        for p in pats[layers[i]]:
            shift = p.size // grain
            if not p.held or shift >= states:
                continue
            cand_key = np.full(states, low, dtype=np.int64)
            cand_key[shift:] = key[i + 1, : states - shift] + p.key
            cand_size = np.zeros(states, dtype=np.int64)
            cand_size[shift:] = size[i + 1, : states - shift] + p.size
            better = (cand_key > key[i]) | ((cand_key == key[i]) & (cand_size < size[i]))
            key[i] = np.where(better, cand_key, key[i])
            size[i] = np.where(better, cand_size, size[i])
    want_key, want_size = int(key[0, states - 1]), int(size[0, states - 1])
    best = want_key
    held: list[int] = []
    for i, la in enumerate(layers):
        options = []
        for p in pats[la]:
            left = want_size - p.size
            if left < 0 or left // grain >= states:
                continue
            at = left // grain
            if int(key[i + 1, at]) == want_key - p.key and int(size[i + 1, at]) == left:
                options.append(p)
        choice = max(options, key=lambda p: _cpu_order(units, p, la))
        held += choice.held
        want_size -= choice.size
        want_key -= choice.key
    return np.array(sorted(held), dtype=np.int64), best


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


def dense_table(units: Units, carried: list[np.ndarray], rooms: np.ndarray) -> Fills:
    """The best fill of every (g, a, b) of ``rooms`` (G, L+1, L+1), by one DP over layers for every start.

    ``carried`` are per-unit integers (shape (U,) each) summed over the chosen set alongside; one that
    is the units' own sizes is the bytes held, not carried twice. The states are as many as the largest
    room holds grains (``grain_of`` keeps them within MAX_STATES). A pattern that holds ``shift`` grains
    can only improve states from ``shift`` up, so each update works on those states alone, in place.
    """
    return dense_tables(units, carried, [rooms])[0]


def dense_tables(units: Units, carried: list[np.ndarray], rooms: Sequence[np.ndarray]) -> list[Fills]:
    """``dense_table`` of each of several room arrays (one rig at several contexts) from one DP: a
    state's best fill does not depend on how many states there are above it, so the DP counts the
    states of the largest room of them all and each array reads its own.

    The DP keeps only each state's key and bytes, and for every layer which pattern last improved each
    (start, state) (``trace``); the carried sums of the cells the rooms read are summed afterwards along
    those choices (``_carried``), rather than carried through every state of every layer."""
    n = units.n_layers
    grain = int(np.gcd.reduce(units.size)) if len(units.size) else 1
    cap = min(max(int(r.max(initial=0)) for r in rooms), int(units.size.sum()))
    states = max(cap, 0) // grain + 1
    outs = [
        Fills(
            np.zeros(r.shape, dtype=np.int64),
            np.zeros(r.shape, dtype=np.int64),
            [np.zeros(r.shape, dtype=np.int64) for _ in carried],
        )
        for r in rooms
    ]
    key = np.zeros((n, states), dtype=np.int64)  # row a: the fill of [a, b) after layer b - 1
    size = np.zeros((n, states), dtype=np.int32 if states < 2**31 else np.int64)  # in grains (<= state)
    cand_key, cand_size = np.empty_like(key), np.empty_like(size)  # scratch, reused by every pattern
    bits = (states - 1).bit_length()  # a state's bytes, in grains, are below 2**bits
    packed = (int(np.abs(units.value).sum()) + n * abs(units.sigma) + 1) << bits < PACKED_LIMIT
    better, tie, fewer = (np.empty((n, states), dtype=bool) for _ in range(3))
    trace: list[_Trace] = []
    for layer in range(n):
        rows = slice(0, layer + 1)  # starts a <= layer; row ``layer`` starts empty
        pats = _distinct([p for p in patterns(units, layer) if p.held and p.size // grain < states], carried)
        chose = np.zeros((layer + 1, states), dtype=np.int8 if len(pats) < 127 else np.int16)
        if packed:
            _relax_packed(key, size, rows, pats, chose, grain, bits, cand_key, better)
        else:
            _relax(key, size, rows, pats, chose, grain, (cand_key, cand_size, better, tie, fewer))
        trace.append(_Trace.of(chose, pats, carried, grain))
        for out, r in zip(outs, rooms):
            room = r[:, : layer + 1, layer + 1]  # (G, a)
            ok = room >= 0
            state = np.minimum(np.maximum(room, 0) // grain, states - 1)
            starts = np.broadcast_to(np.arange(layer + 1), room.shape)
            out.key[:, : layer + 1, layer + 1] = np.where(ok, key[starts, state], 0)
            out.size[:, : layer + 1, layer + 1] = np.where(
                ok, size[starts, state].astype(np.int64) * grain, 0
            )
    for out, r in zip(outs, rooms):
        _carried(out, r, trace, carried, units.size, grain, states)
    return outs


def _relax(
    key: np.ndarray,
    size: np.ndarray,
    rows: slice,
    pats: list[Pattern],
    chose: np.ndarray,
    grain: int,
    scratch: tuple[np.ndarray, ...],
) -> None:
    """One layer of the fill DP: every pattern extends the previous layer's fills of the ``rows``
    starts; a fill replaces a state's when its key is larger, or equal with fewer bytes, and ``chose``
    records the pattern (1-based). A pattern of ``shift`` grains only improves states from ``shift``
    up, so each update works on those states alone, in place."""
    cand_key, cand_size, better, tie, fewer = scratch
    states = key.shape[1]
    base_key, base_size = key[rows].copy(), size[rows].copy()
    for pid, p in enumerate(pats, 1):
        shift = p.size // grain
        width = states - shift
        ck = np.add(base_key[:, :width], p.key, out=cand_key[rows, :width])
        cs = np.add(base_size[:, :width], shift, out=cand_size[rows, :width])
        now_key, now_size = key[rows, shift:], size[rows, shift:]
        up = np.greater(ck, now_key, out=better[rows, :width])
        same = np.equal(ck, now_key, out=tie[rows, :width])
        same &= np.less(cs, now_size, out=fewer[rows, :width])
        up |= same
        np.maximum(now_key, ck, out=now_key)  # what ``up`` takes: a larger key, or the same
        np.copyto(now_size, cs, where=up)
        _mark(chose, shift, up, pid)


def _relax_packed(
    key: np.ndarray,
    size: np.ndarray,
    rows: slice,
    pats: list[Pattern],
    chose: np.ndarray,
    grain: int,
    bits: int,
    cand: np.ndarray,
    better: np.ndarray,
) -> None:
    """``_relax`` with each state's key and bytes packed in one integer, ``key << bits | (most - bytes)``,
    which orders as the rule does (a larger key, then fewer bytes), so one comparison and one maximum
    replace the rule's seven passes per pattern (where the keys leave ``bits`` free in an int64)."""
    states = key.shape[1]
    most = (1 << bits) - 1
    now = key[rows] << bits
    now |= most - size[rows]
    base = now.copy()
    for pid, p in enumerate(pats, 1):
        shift = p.size // grain
        width = states - shift
        ck = np.add(base[:, :width], (p.key << bits) - shift, out=cand[rows, :width])
        cur = now[:, shift:]
        up = np.greater(ck, cur, out=better[rows, :width])
        np.maximum(cur, ck, out=cur)
        _mark(chose, shift, up, pid)
    key[rows] = now >> bits
    size[rows] = most - (now & most)


def _mark(chose: np.ndarray, shift: int, up: np.ndarray, pid: int) -> None:
    """``chose[:, shift:]`` takes ``pid`` where ``up``: a layer's patterns come in increasing ``pid``
    over a zeroed ``chose``, so the last one marked is the largest, and a maximum (many times faster
    than a masked copy) marks it."""
    np.maximum(chose[:, shift:], np.multiply(up, pid, dtype=chose.dtype), out=chose[:, shift:])


@dataclass(frozen=True)
class _Trace:
    """One layer of the fill DP: which of its patterns (1-based; 0 none) each (start, state) took last,
    and each pattern's grains and carried sums (row 0: none)."""

    chose: np.ndarray
    shift: np.ndarray
    sums: np.ndarray

    @classmethod
    def of(cls, chose: np.ndarray, pats: list[Pattern], carried: list[np.ndarray], grain: int) -> _Trace:
        shift = np.array([0, *(p.size // grain for p in pats)], dtype=np.int64)
        sums = np.zeros((len(pats) + 1, len(carried)), dtype=np.int64)
        for pid, p in enumerate(pats, 1):
            held = list(p.held)
            sums[pid] = [int(c[held].sum()) for c in carried]
        return cls(chose, shift, sums)


def _carried(
    out: Fills,
    rooms: np.ndarray,
    trace: list[_Trace],
    carried: list[np.ndarray],
    size: np.ndarray,
    grain: int,
    states: int,
) -> None:
    """The carried sums of every cell (g, a, b) whose room is not negative: from its room's state after
    layer b - 1 back to layer a, each layer's chosen pattern adds its sums and gives back its grains.
    A carried array that is the units' own sizes is the bytes held, already known."""
    g, a, b = np.nonzero(rooms >= 0)
    keep = b > a
    g, a, b = g[keep], a[keep], b[keep]
    state = np.minimum(rooms[g, a, b] // grain, states - 1)
    total = np.zeros((len(g), len(carried)), dtype=np.int64)
    for layer in range(len(trace) - 1, -1, -1):
        on = np.flatnonzero((a <= layer) & (b > layer))
        if not len(on):
            continue
        t = trace[layer]
        pid = t.chose[a[on], state[on]].astype(np.int64)
        total[on] += t.sums[pid]
        state[on] -= t.shift[pid]
    for i, c in enumerate(carried):
        if np.array_equal(c, size):
            out.sums[i][...] = out.size
        else:
            out.sums[i][g, a, b] = total[:, i]


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
