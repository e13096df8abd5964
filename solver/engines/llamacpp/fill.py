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
  are few (hundreds to a few thousand). A row depends only on its layers' units, so a start whose
  first layers repeat an earlier start's (a GGUF's layers come in a few quantisation patterns) takes
  that start's row for them and is relaxed only from where they stop.
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
#: Bound on the fill DP's packed (key, bytes, pattern) integers, below int64's so that adding a pattern to one
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
    size = dict(zip(ids, units.size[ids].tolist()))
    value = dict(zip(ids, units.value[ids].tolist()))
    out = []
    for r in range(len(ids) + 1):
        for held in combinations(ids, r):
            key = _int64(sum(value[u] for u in held))
            if ids and r == len(ids):
                key += units.sigma
            out.append(Pattern(held, _int64(sum(size[u] for u in held)), key))
    return out


def _int64(x: int) -> int:
    """``x`` as an int64 sum holds it (wrapping around as numpy's does)."""
    return (x + 2**63) % 2**64 - 2**63


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
    best key of a fill of the layers from each one on (the least bytes among the best): each layer
    relaxes the fills of the layers after it as ``dense_tables`` does one start. The optimum is that of
    the first layer at the room; then, front to back, each layer takes the pattern whose CPU units sort
    last among those whose rest is still the best of its budget (a completion of an optimum is itself
    optimal for what it has left, and uses no fewer bytes than it must).
    """
    layers = [la for la in range(a, b) if len(units.of_layer(la))]
    if room < 0 or not layers:
        return np.zeros(0, dtype=np.int64), 0
    grain = int(np.gcd.reduce(units.size))
    states = min(room, int(units.size[units.of_layer(layers[0])[0] :].sum())) // grain + 1
    pats = {la: patterns(units, la) for la in layers}
    dp = _states(units, 1, states)
    chose = np.zeros((1, states), dtype=np.int8 if len(max(pats.values(), key=len)) < 127 else np.int16)
    every = np.arange(states)
    after = [dp.at(np.zeros(states, dtype=np.int64), every)]  # the fill of the layers after each
    for la in reversed(layers):
        dp.relax(slice(0, 1), [p for p in pats[la] if p.held and p.size // grain < states], chose, grain)
        after.append(dp.at(np.zeros(states, dtype=np.int64), every))
    after.reverse()
    key, size = after[0]
    want_key, want_size = int(key[states - 1]), int(size[states - 1]) * grain
    best = want_key
    held: list[int] = []
    for i, la in enumerate(layers):
        key, size = after[i + 1]
        options = []
        for p in pats[la]:
            left = want_size - p.size
            if left < 0 or left // grain >= states:
                continue
            at = left // grain
            if int(key[at]) == want_key - p.key and int(size[at]) * grain == left:
                options.append(p)
        choice = max(options, key=lambda p: _cpu_order(units, p, la))
        held += choice.held
        want_size -= choice.size
        want_key -= choice.key
    return np.array(sorted(held), dtype=np.int64), best


def _distinct(pats: list[Pattern], carried: list[list[int]]) -> list[tuple[Pattern, tuple[int, ...]]]:
    """One pattern of each (bytes, key, carried sums), with its carried sums: equal tensors of a layer
    give equal fills."""
    seen: dict[tuple, tuple[Pattern, tuple[int, ...]]] = {}
    for p in pats:
        sums = tuple(_int64(sum(c[u] for u in p.held)) for c in carried)
        seen.setdefault((p.size, p.key, *sums), (p, sums))
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
    those choices (``_carried``), rather than carried through every state of every layer. A start whose
    first layers repeat an earlier start's is relaxed only from where they stop (``_Repeats``), and
    layers alike share their patterns (the DP reads only their bytes and keys)."""
    n = units.n_layers
    grain = int(np.gcd.reduce(units.size)) if len(units.size) else 1
    cap = min(max(int(r.max(initial=0)) for r in rooms), int(units.size.sum()))
    states = max(cap, 0) // grain + 1
    rep = _Repeats.of(units, carried)
    every = np.concatenate(rooms)  # (sum of G, L+1, L+1)
    room = every[:, rep.cell_a, rep.cell_b]  # (sum of G, C): the cells a < b in the order they are read
    state = np.minimum(np.maximum(room, 0) // grain, states - 1)
    key, size = np.zeros(room.shape, dtype=np.int64), np.zeros(room.shape, dtype=np.int64)
    dp = _states(units, rep.relaxed, states)
    trace = _Trace(n, states, _most_patterns(units), len(carried))
    per_unit = [c.tolist() for c in carried]
    made: dict[int, tuple[list[Pattern], list[tuple[int, ...]]]] = {}
    for layer in range(n):
        if rep.kind[layer] not in made:
            fit = [p for p in patterns(units, layer) if p.held and p.size // grain < states]
            pats, sums = zip(*_distinct(fit, per_unit)) if fit else ((), ())
            made[rep.kind[layer]] = list(pats), list(sums)
        pats, sums = made[rep.kind[layer]]
        rows = slice(0, rep.live[layer])
        dp.relax(rows, pats, trace.chose[layer, rows], grain)
        trace.add(layer, pats, sums, grain)
        lo, hi = rep.read[layer], rep.read[layer + 1]
        key[:, lo:hi], size[:, lo:hi] = dp.at(rep.cell_row[lo:hi], state[:, lo:hi])
        to, of = rep.snapshots[layer]
        if len(to):
            dp.copy(to, of)
    rep.copy_choices(trace.chose)
    ok = room >= 0
    summed = [i for i, c in enumerate(carried) if not np.array_equal(c, units.size)]
    sums = dict(zip(summed, _carried(trace, summed, rep.cell_row, rep.cell_b - rep.cell_a, state, ok)))
    key, size = np.where(ok, key, 0), np.where(ok, size * grain, 0)
    outs = []
    first = np.cumsum([0, *(len(r) for r in rooms)])
    for r, lo, hi in zip(rooms, first[:-1], first[1:]):
        out = Fills(
            np.zeros(r.shape, dtype=np.int64),
            np.zeros(r.shape, dtype=np.int64),
            [np.zeros(r.shape, dtype=np.int64) for _ in carried],
        )
        out.key[:, rep.cell_a, rep.cell_b] = key[lo:hi]
        out.size[:, rep.cell_a, rep.cell_b] = size[lo:hi]
        for i, got in enumerate(out.sums):  # a carried array of the units' own sizes: the bytes held
            got[:, rep.cell_a, rep.cell_b] = sums[i][lo:hi] if i in sums else size[lo:hi]
        outs.append(out)
    return outs


@dataclass(frozen=True)
class _Repeats:
    """Which starts' DP rows repeat an earlier start's, and the schedule that relaxes each row once.

    The DP row of start a after layer b - 1 depends only on the signatures of layers a..b-1 (``kind``,
    shape (L,): each unit's bytes, value and carried integers in slot order, all that the layer's
    distinct patterns are made of), so where layers a..a+e-1 read as an earlier start's a'..a'+e-1,
    row a's first e layers are row a''s. ``skip[a]`` is the longest such e over a' < a and
    ``source[a]`` the least a' of it; row a is relaxed from layer a + skip[a] on, from a copy of the row
    that relaxed its first skip[a] layers (``snapshots[layer]``: (to, of) rows copied after that layer),
    and its cells of ranges up to skip[a] layers are read, each at its own state, from the row that
    relaxes that length, when it does. Start a + 1 repeats a' + 1 for at least skip[a] - 1 layers, so
    a + skip[a] never decreases with a: the rows a layer relaxes are the first ``live[layer]``, and only
    the first ``relaxed`` rows ever are.

    Cells (a, b), a < b: ``cell_a``, ``cell_b`` and the row each is read from, ``cell_row`` (shape (C,)
    each), sorted by the layer they are read after (cells ``read[layer]:read[layer + 1]``). A cell's
    row is the first start whose layers read as the cell's: a's own past skip[a] layers (an earlier
    one would make skip[a] longer), else its source's, so cells of equal layers read one row."""

    kind: list[int]
    skip: np.ndarray
    source: np.ndarray
    live: list[int]
    relaxed: int
    cell_a: np.ndarray
    cell_b: np.ndarray
    cell_row: np.ndarray
    read: list[int]
    snapshots: list[tuple[np.ndarray, np.ndarray]]

    @classmethod
    def of(cls, units: Units, carried: list[np.ndarray]) -> _Repeats:
        n = units.n_layers
        kind = _signatures(units, carried)
        same = kind[:, None] == kind[None, :]
        run = np.zeros((n + 1, n + 1), dtype=np.int64)  # run[a', a]: how many layers from a', a agree
        for i in range(n - 1, -1, -1):
            run[i, :n] = np.where(same[i], run[i + 1, 1:] + 1, 0)
        earlier = np.where(np.tri(n, k=-1, dtype=bool).T, run[:n, :n], -1)  # a' < a only
        source = np.argmax(earlier, axis=0) if n else np.zeros(0, dtype=np.int64)
        skip = np.maximum(earlier.max(axis=0, initial=0), 0)
        by = np.zeros((n, n + 1), dtype=np.int64)  # by[a, t]: the row that relaxes a's first t layers
        for a in range(n):
            e = int(skip[a])
            by[a, 1 : e + 1] = by[source[a], 1 : e + 1]
            by[a, e + 1 :] = a
        starts = np.arange(n) + skip  # the layer each row is first relaxed at; n: never
        live = np.searchsorted(starts, np.arange(n), side="right").tolist()
        cell_a, cell_b = np.triu_indices(n + 1, k=1)
        row = by[cell_a, cell_b - cell_a]
        when = row + (cell_b - cell_a) - 1
        ordered = np.argsort(when, kind="stable")
        read = np.searchsorted(when[ordered], np.arange(n + 1)).tolist()
        copied = np.flatnonzero((skip > 0) & (starts < n))
        of = by[copied, skip[copied]]
        at = of + skip[copied] - 1
        snapshots = [(copied[at == layer], of[at == layer]) for layer in range(n)]
        relaxed = int(np.count_nonzero(starts < n))
        return cls(
            kind.tolist(),
            skip,
            source,
            live,
            relaxed,
            cell_a[ordered],
            cell_b[ordered],
            row[ordered],
            read,
            snapshots,
        )

    def copy_choices(self, chose: np.ndarray) -> None:
        """``chose[a + t, a] = chose[a' + t, a']`` for the t < skip[a] layers each row took from its
        source a' (in increasing a, so a source's own copied layers are there first): the choices of
        every start read as if its row had been relaxed over every layer."""
        for a in np.flatnonzero(self.skip).tolist():
            e, s = int(self.skip[a]), int(self.source[a])
            chose[a : a + e, a] = chose[s : s + e, s]


def _signatures(units: Units, carried: list[np.ndarray]) -> np.ndarray:
    """One integer per layer, shape (L,), equal for layers whose units (in slot order) have the same
    bytes, value and carried integers."""
    cols = np.stack([units.size, units.value, *carried], axis=1)  # (U, 2 + carried)
    bounds = np.searchsorted(units.layer, np.arange(units.n_layers + 1)).tolist()
    ids: dict[bytes, int] = {}
    return np.array([ids.setdefault(cols[lo:hi].tobytes(), len(ids)) for lo, hi in pairwise(bounds)])


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


def _most_patterns(units: Units) -> int:
    """The most patterns a layer offers but none: ``2**m - 1`` for its ``m`` units."""
    return (1 << int(np.bincount(units.layer).max(initial=0))) - 1


def _states(units: Units, n: int, states: int) -> _PairStates | _PackedStates:
    """The fill DP's ``n`` rows of ``states`` states, packed (``_PackedStates``) where the keys leave the
    bytes and the pattern room in an int64."""
    bits = (states - 1).bit_length()  # a state's bytes, in grains, are below 2**bits
    pid_bits = _most_patterns(units).bit_length()
    keys = int(np.abs(units.value).sum()) + units.n_layers * abs(units.sigma) + 1
    if keys << (bits + pid_bits) < PACKED_LIMIT:
        return _PackedStates(n, states, bits, pid_bits)
    return _PairStates(n, states)


class _PairStates:
    """The fill DP's states, row a the fill of [a, b) after layer b - 1: each one's key and bytes (in
    grains) in two arrays, relaxed by ``_relax``."""

    def __init__(self, n: int, states: int) -> None:
        self.key = np.zeros((n, states), dtype=np.int64)
        self.size = np.zeros((n, states), dtype=np.int32 if states < 2**31 else np.int64)  # <= state
        cand_key, cand_size = np.empty_like(self.key), np.empty_like(self.size)  # reused by every pattern
        self.scratch = (cand_key, cand_size, *(np.empty((n, states), dtype=bool) for _ in range(3)))

    def relax(self, rows: slice, pats: list[Pattern], chose: np.ndarray, grain: int) -> None:
        _relax(self.key, self.size, rows, pats, chose, grain, self.scratch)

    def at(self, starts: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The key and bytes (in grains, int64) of the states ``state`` of rows ``starts``."""
        return self.key[starts, state], self.size[starts, state].astype(np.int64)

    def copy(self, to: np.ndarray, of: np.ndarray) -> None:
        """Rows ``to`` take rows ``of``'s states."""
        self.key[to], self.size[to] = self.key[of], self.size[of]


class _PackedStates:
    """The fill DP's states as ``_PairStates`` holds them, packed in one integer each with the pattern
    that set it (``_relax_packed``), where the keys leave ``bits + pid_bits`` free in an int64
    (``PACKED_LIMIT``)."""

    def __init__(self, n: int, states: int, bits: int, pid_bits: int) -> None:
        self.bits, self.pid_bits = bits, pid_bits
        self.most = (1 << bits) - 1
        self.packed = np.full((n, states), self.most << pid_bits, dtype=np.int64)  # key 0, no bytes
        self.scratch = (np.empty_like(self.packed), np.empty_like(self.packed))

    def relax(self, rows: slice, pats: list[Pattern], chose: np.ndarray, grain: int) -> None:
        _relax_packed(self.packed, rows, pats, chose, grain, self.bits, self.pid_bits, self.scratch)

    def at(self, starts: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The key and bytes (in grains) of the states ``state`` of rows ``starts``."""
        got = self.packed[starts, state] >> self.pid_bits
        return got >> self.bits, self.most - (got & self.most)

    def copy(self, to: np.ndarray, of: np.ndarray) -> None:
        """Rows ``to`` take rows ``of``'s states."""
        self.packed[to] = self.packed[of]


def _relax_packed(
    packed: np.ndarray,
    rows: slice,
    pats: list[Pattern],
    chose: np.ndarray,
    grain: int,
    bits: int,
    pid_bits: int,
    scratch: tuple[np.ndarray, np.ndarray],
) -> None:
    """``_relax`` over states packed as ``(key << bits | (most - bytes)) << pid_bits | (last -
    pattern)``: a larger key, then fewer bytes, then an earlier pattern of the layer (none, the state
    as it was, first of all) is a larger integer, so one maximum per pattern replaces the rule's seven
    passes and the marking. The pattern a state is left with (``chose``, 1-based, 0 none) is the one
    ``_relax`` records, the last strict improvement: the first pattern that reaches the best, none
    where none beats the state."""
    base, cand = scratch
    last = (1 << pid_bits) - 1
    now = packed[rows]
    now |= last
    base = base[rows]
    np.copyto(base, now)
    states = now.shape[1]
    for pid, p in enumerate(pats, 1):
        shift = p.size // grain
        width = states - shift
        add = (((p.key << bits) - shift) << pid_bits) - pid
        ck = np.add(base[:, :width], add, out=cand[rows, :width])
        cur = now[:, shift:]
        np.maximum(cur, ck, out=cur)
    np.subtract(last, now & last, out=chose, casting="unsafe")


def _mark(chose: np.ndarray, shift: int, up: np.ndarray, pid: int) -> None:
    """``chose[:, shift:]`` takes ``pid`` where ``up``: a layer's patterns come in increasing ``pid``
    over a zeroed ``chose``, so the last one marked is the largest, and a maximum (many times faster
    than a masked copy) marks it."""
    np.maximum(chose[:, shift:], np.multiply(up, pid, dtype=chose.dtype), out=chose[:, shift:])


class _Trace:
    """The fill DP's choices: for every layer which of its patterns (1-based; 0 none) each (start,
    state) took last (``chose[layer, a, state]``; starts after the layer take none), and each pattern's
    grains and carried sums (pattern 0: none)."""

    def __init__(self, n: int, states: int, most_patterns: int, n_carried: int) -> None:
        self.chose = np.zeros((n, n, states), dtype=np.int8 if most_patterns < 127 else np.int16)
        self.shift = np.zeros((n, most_patterns + 1), dtype=np.int64)
        self.sums = np.zeros((n, most_patterns + 1, n_carried), dtype=np.int64)

    def add(self, layer: int, pats: list[Pattern], sums: list[tuple[int, ...]], grain: int) -> None:
        """The grains and carried sums of the layer's patterns."""
        if pats:
            self.shift[layer, 1 : len(pats) + 1] = [p.size // grain for p in pats]
            self.sums[layer, 1 : len(pats) + 1] = sums


def _carried(
    trace: _Trace, summed: list[int], row: np.ndarray, length: np.ndarray, state: np.ndarray, ok: np.ndarray
) -> np.ndarray:
    """The sums of the carried arrays ``summed`` over the fills of the cells ``ok`` (shape (R, C): room
    arrays' GPUs by cells of rows ``row`` and ranges of ``length``, shape (C,) each, at ``state``),
    shape (len(summed), R, C), zeros where not ``ok``.

    A cell's fill is walked from its state after its last layer back to its first, each layer's
    chosen pattern adding its sums and giving back its grains. Cells of one row, length and state
    walk alike: a row's choices depend only on its layers' signatures, and so do each layer's
    patterns (``_distinct`` of the first layer of its signature), so a cell read from row r walks row
    r's first layers as its own; each such walk is taken once. The walks step back together, longest
    first, so that those still walking are a prefix; each step reads a walk's pattern and then its
    sums and grains (``table``, shape (L * P, len(summed) + 1): the grains last) at flat indices, the
    grains given back so far summed alongside."""
    n, _, states = trace.chose.shape
    code = ((n - length) * n + row) * states + state  # longest first, then by row and state
    walks, each = np.unique(np.where(ok, code, n * n * states), return_inverse=True)  # not ok: no walk
    left, row, state = n - walks // (n * states), walks // states % n, walks % states
    most = trace.shift.shape[1]
    table = np.concatenate([trace.sums[:, :, summed], trace.shift[:, :, None]], axis=2).reshape(n * most, -1)
    last = row + left - 1
    at_last = (last * n + row) * states + state  # into trace.chose, flat
    total = np.zeros((len(walks), len(summed) + 1), dtype=np.int64)
    chose = trace.chose.ravel()
    walking = np.searchsorted(-left, -np.arange(n), side="left").tolist()  # the walks longer than step
    for step, k in enumerate(walking):
        if not k:
            break
        at = at_last[:k] - total[:k, -1]
        at -= step * n * states
        total[:k] += table.take(chose.take(at) + (last[:k] - step) * most, axis=0)
    return total[:, :-1].T.take(each, axis=1).reshape(len(summed), *ok.shape)


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
