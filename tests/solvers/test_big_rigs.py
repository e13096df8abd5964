"""The shipped big rigs: their models' byte arithmetic, their synthetic profiles, and their plans.

(tests/solvers/test_agreement.py::test_shipped_rigs_agree also runs CP-SAT on every shipped rig.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from solver.engines import build_table, evaluate
from solver.files.config import load_model
from solver.planning.build import build_arcs
from solver.planning.resolve import Overrides, load_problem
from solver.profiles.format import read_profile
from solver.profiles.synth import SynthParams, synth_profile
from solver.solvers.route import exact_dp

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"


def q4k(weights: int) -> int:
    """Q4_K: 144 bytes per block of 256 weights."""
    assert weights % 256 == 0
    return weights // 256 * 144


def test_qwen3_235b_sizes_follow_the_geometry():
    model, _ = load_model(MODELS / "qwen3-235b-a22b.yaml")
    hidden, heads, kv_heads, head_dim, width, experts = 4096, 64, 4, 128, 1536, 128
    attention = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    norms = (2 * hidden + 2 * head_dim) * 4
    assert model.dense_bytes == q4k(attention) + hidden * experts * 4 + norms
    assert model.expert_bytes == q4k(3 * hidden * width)
    assert model.kv_bytes_per_token == kv_heads * head_dim * 2 * 2
    assert (model.layers, model.experts) == (94, 128)
    assert model.last_stage_bytes == 151936 * hidden // 256 * 210 + hidden * 4


def test_deepseek_v3_sizes_follow_the_geometry():
    model, _ = load_model(MODELS / "deepseek-v3.yaml")
    h, q_rank, kv_rank, rope, nope, v, heads = 7168, 1536, 512, 64, 128, 128, 128
    attention = h * q_rank + q_rank * heads * (nope + rope) + h * (kv_rank + rope)
    attention += kv_rank * heads * (nope + v) + heads * v * h
    norms = (q_rank + kv_rank + 2 * h) * 4
    dense = q4k(attention) + q4k(3 * h * 18432) + norms
    moe = q4k(attention) + q4k(3 * h * 2048) + 256 * h * 4 + 256 * 4 + norms
    assert model.dense_bytes == [dense] * 3 + [moe] * 58
    assert model.experts == [0] * 3 + [256] * 58
    half = h * 2048 // 256
    assert model.expert_bytes == 2 * half * 82 + half * 84  # gate, up IQ2_S; down Q2_K
    assert model.kv_bytes_per_token == (kv_rank + rope) * 2
    assert model.last_stage_bytes == 129280 * h // 256 * 210 + h * 4


@pytest.mark.parametrize(
    ("stem", "experts"),
    [("qwen3-235b-a22b", [128] * 94), ("deepseek-v3", [0] * 3 + [256] * 58)],
)
def test_shipped_synthetic_profile_is_the_generators_output(stem, experts):
    path = MODELS / "profiles" / f"{stem}.txt"
    assert "SYNTHETIC" in path.read_text().splitlines()[0]
    shipped = read_profile(path, stem)
    made = synth_profile(experts, SynthParams(top_k=8, seed=0))
    for got, want in (
        (shipped.layer, made.layer),
        (shipped.expert, made.expert),
        (shipped.count, made.count),
    ):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rig", ["eight", "sixteen", "six-auto"])
def test_big_rig_has_a_plan_that_fits(rig):
    p = load_problem(ROOT / "rigs" / f"{rig}.yaml")
    sol = exact_dp(build_arcs(p, build_table(p)))
    assert sol.status == "optimal"
    plan = evaluate(p, sol.gpus, sol.cuts)
    assert all(s.room_bytes >= 0 for s in plan.stages)
    assert 0.5 < plan.held_mass < 1.0  # memory binds: not everything is cached, and not little


def test_six_auto_is_listed_in_a_poor_order():
    """The rig's comment: as given its best window is 63.40 ms, a free order does better."""
    windows = {}
    for order in ("as-given", "auto"):
        p = load_problem(ROOT / "rigs" / "six-auto.yaml", Overrides(order=order))
        sol = exact_dp(build_arcs(p, build_table(p)))
        windows[order] = evaluate(p, sol.gpus, sol.cuts).window_ms
    assert windows["as-given"] == pytest.approx(63.40, abs=0.005)
    assert windows["auto"] < windows["as-given"] - 2.0
