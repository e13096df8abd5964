"""Hand-computed cases of docs/reference.md's "The arithmetic": layer bytes, room, the walk's stop, and
each mass curve."""

import numpy as np
import pytest

from solver.files.config import ModelConfig
from solver.problem.problem import Problem, estimate_layer_ms, layer_bytes_of
from solver.problem.rangewalk import walk_range, walk_table
from solver.profiles.curves import counts_mass, cover_mass, power_mass
from tests.helpers.factory import random_problem


def tiny(**kw) -> Problem:
    """3 layers, 2 GPUs; layer 0 has pairs of 10 bytes, layer 1 of 30, layer 2 of 5."""
    base = dict(
        rig="tiny",
        model="tiny",
        layer_bytes=np.array([100, 200, 50]),
        expert_bytes=np.array([10, 30, 5]),
        # ranks:       0  1  2  3  4  5
        pair_layer=np.array([1, 0, 2, 0, 1, 2]),
        pair_bytes=np.array([30, 10, 5, 10, 30, 5]),
        mass=cover_mass(6, 3.0),
        free=np.array([1000, 400]),
        reserve=np.array([100, 0]),
        layer_ms=np.array([1.0, 2.0]),
        min_layers=np.array([1, 1]),
        max_layers=np.array([3, 3]),
        gpu_names=["A", "B"],
        stage_bytes=7,
        first_stage_bytes=11,
        last_stage_bytes=13,
    )
    base.update(kw)
    return Problem(**base)


def test_layer_bytes_add_dense_state_and_kv_by_kind():
    model = ModelConfig(
        layers=5,
        experts=4,
        expert_bytes=1,
        dense_bytes=[10, 20, 30, 40, 50],
        kinds=["lin", "full"],
        state_bytes={"lin": 3},
        kv_bytes_per_token={"full": 2},
    )
    # kinds cycle lin, full, lin, full, lin; full layers get 2 bytes x context, lin layers 3 bytes
    assert layer_bytes_of(model, context=100) == [13, 220, 33, 240, 53]


def test_room_subtracts_reserve_stage_first_last_and_layers():
    p = tiny()
    assert p.room(0, 0, 3) == 1000 - 100 - 7 - 11 - 13 - 350
    assert p.room(0, 1, 2) == 1000 - 100 - 7 - 200
    assert p.room(1, 0, 1) == 400 - 7 - 11 - 100
    assert p.room(1, 1, 3) == 400 - 7 - 13 - 250  # = 130


def test_walk_stops_at_the_first_pair_that_does_not_fit():
    # GPU 1 on [1, 3): room 130; pairs in rank order: r0 (30), r2 (5), r4 (30), r5 (5)
    p = tiny()
    w = walk_range(p, 1, 1, 3)
    assert w.room == 130
    assert list(w.visible) == [0, 2, 4, 5]
    assert list(w.held) == [0, 2, 4, 5]  # 70 bytes fit
    p2 = tiny(free=np.array([1000, 330]))  # room 60: r0 (30) + r2 (5) = 35, r4 needs 65 > 60
    w2 = walk_range(p2, 1, 1, 3)
    assert w2.room == 60 and list(w2.held) == [0, 2]  # r5 (5 bytes) would fit but the walk stopped


def test_room_exactly_equal_to_the_walk_is_held():
    p = tiny(free=np.array([1000, 340]))  # room 70 = 30 + 5 + 30 + 5
    assert walk_range(p, 1, 1, 3).n_held == 4
    p = tiny(free=np.array([1000, 339]))  # room 69: the 4th pair no longer fits
    assert walk_range(p, 1, 1, 3).n_held == 3


def test_negative_room_holds_nothing():
    p = tiny(free=np.array([1000, 100]))
    w = walk_range(p, 1, 1, 3)
    assert w.room < 0 and w.n_held == 0


@pytest.mark.parametrize("seed", range(40))
def test_vectorised_table_matches_the_definition(seed):
    p = random_problem(seed, n_layers=6, n_gpus=3, experts=5)
    walk = walk_table(p)
    held = walk.held_sum(np.ones(len(p.pair_layer), dtype=np.int64))
    cache = walk.held_bytes()
    for g in range(3):
        for a in range(6):
            for b in range(a + 1, 7):
                ref = walk_range(p, g, a, b)
                assert walk.room[g, a, b] == max(ref.room, -1)
                if ref.room >= 0:
                    assert held[g, a, b] == ref.n_held
                    assert cache[g, a, b] == p.pair_bytes[ref.held].sum()


def test_cover_curve():
    m = cover_mass(4, 3.0)
    assert m == pytest.approx([1 - 0.75**3, 0.75**3 - 0.5**3, 0.5**3 - 0.25**3, 0.25**3])
    assert m[:2].sum() == pytest.approx(1 - (1 - 2 / 4) ** 3)


def test_power_curve():
    m = power_mass(3, 1.0)
    assert m == pytest.approx(np.array([1, 1 / 2, 1 / 3]) / (11 / 6))


def test_counts_curve():
    assert counts_mass(np.array([6, 3, 1, 0])) == pytest.approx([0.6, 0.3, 0.1, 0.0])


def test_layer_ms_estimate():
    assert estimate_layer_ms(84, 2.617) == pytest.approx(0.33)
    assert estimate_layer_ms(68, 1.545) == pytest.approx(0.69, abs=0.005)  # RTX 2080 Ti in REFERENCE
    assert estimate_layer_ms(0, 0.5) == pytest.approx(0.33 * 84 * 2.617)  # max(1, sms * GHz)
