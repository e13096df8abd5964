"""llama.cpp's fill DP (``dense_tables``), which relaxes a start's row only from where its layers stop
repeating an earlier start's, against the DP that relaxes every start over every layer of its range,
on small models whose layers repeat (a Q4_K_M GGUF's head, period and tail; two kinds at random; one
kind throughout), with both kinds of DP states and several room and carried arrays."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from solver.engines.llamacpp import fill
from solver.engines.llamacpp.fill import Fills, Units, best_set, dense_tables

#: How each case's sequence of layer kinds is drawn.
SHAPES = ("q4_k_m", "periodic", "two-kinds", "one-kind", "random")


def every_start_over_every_layer(
    units: Units, carried: list[np.ndarray], rooms: Sequence[np.ndarray]
) -> list[Fills]:
    """The fill of every cell by the DP of every start at once, each start's row relaxed over every
    layer of its range (rows 0..layer at each layer), reading each cell's state after its last layer."""
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
    dp = fill._states(units, n, states)
    trace = fill._Trace(n, states, fill._most_patterns(units), len(carried))
    per_unit = [c.tolist() for c in carried]
    for layer in range(n):
        rows = slice(0, layer + 1)
        fit = [p for p in fill.patterns(units, layer) if p.held and p.size // grain < states]
        pats, sums = zip(*fill._distinct(fit, per_unit)) if fit else ((), ())
        dp.relax(rows, list(pats), trace.chose[layer, rows], grain)
        trace.add(layer, list(pats), list(sums), grain)
        for out, r in zip(outs, rooms):
            room = r[:, : layer + 1, layer + 1]
            ok = room >= 0
            state = np.minimum(np.maximum(room, 0) // grain, states - 1)
            starts = np.broadcast_to(np.arange(layer + 1), room.shape)
            key, size = dp.at(starts, state)
            out.key[:, : layer + 1, layer + 1] = np.where(ok, key, 0)
            out.size[:, : layer + 1, layer + 1] = np.where(ok, size * grain, 0)
    walk_every_cell(outs, rooms, trace, carried, grain, states)
    return outs


def walk_every_cell(
    outs: list[Fills],
    rooms: Sequence[np.ndarray],
    trace: fill._Trace,
    carried: list[np.ndarray],
    grain: int,
    states: int,
) -> None:
    """The carried sums of every cell (g, a, b), a < b, whose room is not negative, each walked on its
    own from its room's state after layer b - 1 back to layer a along start a's choices: each layer's
    chosen pattern adds its sums and gives back its grains."""
    for out, r in zip(outs, rooms):
        g, a, b = np.nonzero((r >= 0) & np.triu(np.ones(r.shape[1:], dtype=bool), k=1))
        state = np.minimum(r[g, a, b] // grain, states - 1)
        total = np.zeros((len(g), len(carried)), dtype=np.int64)
        for step in range(int((b - a).max(initial=0))):
            on = b - a > step
            layer = b[on] - 1 - step
            pid = trace.chose[layer, a[on], state[on]].astype(np.int64)
            total[on] += trace.sums[layer, pid]
            state[on] -= trace.shift[layer, pid]
        for i in range(len(carried)):
            out.sums[i][g, a, b] = total[:, i]


def _kinds(rng: np.random.Generator, n: int, shape: str) -> list[int]:
    """Each layer's kind, shape (n,)."""
    if shape == "q4_k_m":  # llama-quantize's ffn_down_exps: Q6_K in the first and last eighths, every third
        return [1 if i < n / 8 or i >= 7 * n / 8 or (i - n // 8) % 3 == 2 else 0 for i in range(n)]
    if shape == "periodic":
        period = rng.integers(1, 4)
        body = [int(rng.integers(0, 3)) for _ in range(period)]
        head, tail = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        kinds = [body[i % period] for i in range(n)]
        return [3] * min(head, n) + kinds[: max(n - head - tail, 0)] + [4] * min(tail, max(n - head, 0))
    if shape == "two-kinds":
        return rng.integers(0, 2, n).tolist()
    if shape == "one-kind":
        return [0] * n
    return rng.integers(0, 5, n).tolist()


def random_case(seed: int) -> tuple[Units, list[np.ndarray], list[np.ndarray]]:
    """Units, carried arrays and room arrays of a small model whose layers are of a few kinds: each
    kind its own units (0 to 3; bytes in a grain of 4, values of either sign). Kind 0 may hold two
    units alike, and kind 2 be kind 0 but for one carried integer that tells those two apart (the
    same DP rows, but not the same distinct patterns); kinds 3 and 4 may be kind 1 but for one unit's
    value or bytes."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 21))
    kinds = _kinds(rng, n, SHAPES[seed % len(SHAPES)])
    palette = []
    for _ in range(5):
        m = int(rng.choice([0, 1, 2, 3], p=[0.1, 0.2, 0.3, 0.4]))
        size, value = rng.choice([4, 8, 12, 20], m), rng.integers(-3, 12, m)
        palette.append((size, value, [rng.integers(-5, 40, m) for _ in range(2)]))
    size, value, (c0, c1) = palette[0]
    if len(size) >= 2 and rng.random() < 0.7:
        for x in (size, value, c0, c1):
            x[-1] = x[0]
        c1 = c1.copy()
        c1[-1] += 1
        palette[2] = (size, value, [c0, c1])
    size, value, cs = palette[1]
    if len(size) and rng.random() < 0.7:
        palette[3] = (size, value + (np.arange(len(size)) == 0), cs)
        palette[4] = (size + 4 * (np.arange(len(size)) == len(size) - 1), value, cs)
    layer, size, value, c0, c1 = [], [], [], [], []
    for i, k in enumerate(kinds):
        s, v, (x, y) = palette[k]
        layer += [i] * len(s)
        size += s.tolist()
        value += v.tolist()
        c0 += x.tolist()
        c1 += y.tolist()
    layer = np.array(layer, dtype=np.int64)
    key, sigma = fill.pack(np.array(value, dtype=np.int64), int(rng.integers(-2, 9)), n)
    units = Units(layer, np.zeros_like(layer), np.array(size, dtype=np.int64), key, sigma, n)
    carried = [np.array(c1, dtype=np.int64), units.size.copy(), np.array(c0, dtype=np.int64)]
    carried = carried[: rng.integers(1, 4)]
    most = int(units.size.sum()) + 8
    rooms = [rng.integers(-most // 4, most, (int(rng.integers(1, 4)), n + 1, n + 1)) for _ in range(3)]
    rooms[1] = np.minimum(rooms[1], most // 3)  # fewer states than the first array reads
    return units, carried, rooms[: rng.integers(1, 4)]


def _assert_same(want: list, got: list) -> None:
    """Every cell's key, bytes and carried sums alike, bit for bit."""
    for w, g in zip(want, got, strict=True):
        assert np.array_equal(w.key, g.key)
        assert np.array_equal(w.size, g.size)
        for a, b in zip(w.sums, g.sums, strict=True):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("seed", range(150))
def test_fill_dp_of_repeated_layers_is_the_dp_of_every_start(seed, packed, monkeypatch):
    """Every cell's key, bytes and carried sums are those of the DP that relaxes every start over
    every layer, bit for bit, and its key and bytes those of the range's own fill (``best_set``)."""
    if not packed:
        monkeypatch.setattr(fill, "PACKED_LIMIT", 0)
    units, carried, rooms = random_case(seed)
    n_states = max(int(units.size.sum()), 1) // 4 + 1
    assert isinstance(fill._states(units, 1, n_states), fill._PackedStates if packed else fill._PairStates)
    got = dense_tables(units, carried, rooms)
    _assert_same(every_start_over_every_layer(units, carried, rooms), got)
    rng = np.random.default_rng(seed)
    for r, g in zip(rooms, got):
        cells = np.argwhere((r >= 0) & np.triu(np.ones(r.shape[1:], dtype=bool), k=1))
        for gpu, a, b in rng.permutation(cells)[:12]:  # best_set is slow
            held, key = best_set(units, int(a), int(b), int(r[gpu, a, b]))
            assert int(g.key[gpu, a, b]) == key
            assert int(g.size[gpu, a, b]) == int(units.size[held].sum())


def test_repeated_starts_share_their_rows():
    """A Q4_K_M-like model of 24 layers of three units: only its first start and the first of its body
    are relaxed from their first layer, the others only where their layers stop repeating an earlier
    start's (about half the row-layers in all); with every layer its own, every start from its first."""
    n = 24
    kinds = _kinds(np.random.default_rng(0), n, "q4_k_m")
    layer = np.repeat(np.arange(n), 3)
    size = np.array([[4, 4, 8 if k else 4] for k in kinds]).ravel()
    value, sigma = fill.pack(size * 3, 5, n)
    units = Units(layer, np.tile(np.arange(3), n), size, value, sigma, n)
    rep = fill._Repeats.of(units, [size])
    first = np.flatnonzero(rep.skip == 0).tolist()
    assert first == [0, 3]
    assert sum(rep.live) < 0.6 * sum(range(1, n + 1))
    distinct = Units(layer, units.slot, size, value + layer, sigma, n)
    rep = fill._Repeats.of(distinct, [size])
    assert rep.live == list(range(1, n + 1)) and not rep.skip.any() and rep.relaxed == n


def test_cells_sharing_a_walk_across_room_arrays():
    """Room arrays and GPUs that read one cell at one state (a GPU's copy, an array of the first one
    alone, one clipped below its largest rooms), cells of repeated starts that read one row, and
    negative rooms among them: the carried sums are the reference's, bit for bit, and zero where the
    room is negative even though a unit of no bytes fills a room of none."""
    n = 12
    kinds = _kinds(np.random.default_rng(0), n, "q4_k_m")
    layer = np.repeat(np.arange(n), 3)
    size = np.array([[0, 4, 8 if k else 4] for k in kinds]).ravel()
    value, sigma = fill.pack(np.array([[2, 5, 9 if k else 5] for k in kinds]).ravel(), 3, n)
    units = Units(layer, np.tile(np.arange(3), n), size, value, sigma, n)
    carried = [np.tile([1, 2, 3], n), size.copy()]
    first = np.random.default_rng(1).integers(-8, 40, (2, n + 1, n + 1))
    first[1] = first[0]
    rooms = [first, first[:1].copy(), np.minimum(first, 20)]
    assert fill._Repeats.of(units, carried).skip.any()
    got = dense_tables(units, carried, rooms)
    _assert_same(every_start_over_every_layer(units, carried, rooms), got)
    none = dense_tables(units, carried, [np.zeros((1, n + 1, n + 1), dtype=np.int64)])[0]
    assert none.sums[0][0, 0, n] == n  # a room of no bytes holds each layer's unit of none
