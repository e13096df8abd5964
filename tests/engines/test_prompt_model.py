"""The llama.cpp prompt time model's rules: FLOPs from the model's shapes, causal and windowed
attention, only the routed experts copied, ik_llama.cpp's own offload threshold, each card at its own
measured share of its throughput and the experts at the MoE block's share of that."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from solver.engines import REGISTRY, engine_named
from solver.engines.llamacpp.fields import LlamaFields
from solver.engines.llamacpp.prompt import (
    EXPERT_EFFICIENCY,
    EXPERT_HALF_TOKENS,
    MATRIX_EFFICIENCY,
    geometry_flops,
    prompt_model,
)
from solver.files.cards import cards
from solver.files.config import load_model, load_rig
from solver.planning.resolve import Overrides, load_problem
from tests.calibrate.test_calibrate_llama import make_rig

ROOT = Path(__file__).resolve().parents[2]
GPT_OSS = ROOT / "models" / "gpt-oss-120b-mxfp4.yaml"


def test_geometry_counts_each_weight_once() -> None:
    model, _ = load_model(GPT_OSS)
    g = model.geometry
    experts = np.full(model.layers, float(model.experts))
    dense, expert, attention, window = geometry_flops(model, experts)
    attn = (
        g.n_embd * (g.n_head * g.head_k + g.head_kv * (g.head_k + g.head_v)) + g.n_head * g.head_v * g.n_embd
    )
    assert dense[0] == 2.0 * (attn + g.n_embd * model.experts)  # projections and the router
    assert expert[0] == 2.0 * model.active_experts * 3 * g.n_embd * g.n_ff_exp
    assert attention[0] == 2.0 * g.n_head * (g.head_k + g.head_v)
    assert [int(w) for w in window[:2]] == [g.swa_window, 0]  # even layers slide (swa_layers)


def _pm():
    rig, _ = load_rig(ROOT / "rigs" / "gpt-oss-4090-3090-3060.yaml", REGISTRY)
    model, _ = load_model(GPT_OSS)
    return prompt_model(rig, model, np.full(model.layers, float(model.experts)))


def test_flash_attention_attends_causally_and_a_window_caps_the_cache() -> None:
    pm = _pm()
    full = next(i for i in range(len(pm.window)) if pm.window[i] == 0)
    slide = next(i for i in range(len(pm.window)) if pm.window[i] > 0)
    m, pos = 512, 10_000
    per_key = float(pm.attention[full])
    assert pm.keys_flops(full, full + 1, m, pos) == pytest.approx(m * (pos + (m + 1) / 2) * per_key)
    assert pm.keys_flops(slide, slide + 1, m, pos) == pytest.approx(
        m * (pm.window[slide] + (m + 1) / 2) * per_key
    )
    off = replace(pm, flash_attn=False)
    assert off.keys_flops(full, full + 1, m, pos) == pytest.approx(m * (pos + m) * per_key)


def test_a_micro_batch_copies_only_the_experts_it_routes_to() -> None:
    pm = _pm()
    share = pm.tokens_share[0]  # 4 of 128
    assert pm.copied_share(0, 1, 1) == pytest.approx(share)
    assert pm.copied_share(0, 1, 32) == pytest.approx(1 - (1 - share) ** 32)
    assert pm.copied_share(0, 1, 4096) == pytest.approx(1.0)


def test_ik_llama_offloads_cpu_experts_from_its_own_threshold(tmp_path: Path) -> None:
    mainline = make_rig(tmp_path)  # Qwen3.6-35B-A3B: 256 experts, 8 active
    ik = tmp_path / "ik.yaml"
    ik.write_text(mainline.read_text().replace("engine: llama.cpp", "engine: ik_llama.cpp"))
    assert LlamaFields.of(load_problem(mainline, Overrides())).prompt.min_batch == 32
    assert LlamaFields.of(load_problem(ik, Overrides())).prompt.min_batch == 32 * 256 // 8


def test_ik_reads_the_micro_batch_of_a_command() -> None:
    args = engine_named("ik_llama.cpp").read_command(["-ngl", "99", "-ub", "4096", "-b", "8192"])
    assert (args.n_ubatch, args.n_batch) == (4096, 8192)


def test_each_card_computes_at_its_measured_share_unless_the_rig_gives_one(tmp_path: Path) -> None:
    rig, _ = load_rig(ROOT / "rigs" / "gpt-oss-4090-3090-3060.yaml", REGISTRY)
    model, _ = load_model(GPT_OSS)
    experts = np.full(model.layers, float(model.experts))
    pm = prompt_model(rig, model, experts)
    shares = [
        cards()[n].matrix_efficiency or MATRIX_EFFICIENCY for n in ("RTX 4090", "RTX 3090", "RTX 3060 12GB")
    ]
    tflops = np.array([cards()[n].tflops for n in ("RTX 4090", "RTX 3090", "RTX 3060 12GB")])
    assert shares[2] == MATRIX_EFFICIENCY  # no public dense run in the card table
    assert pm.flops == pytest.approx(tflops * 1e12 * np.array(shares))
    assert pm.efficiency == pytest.approx(np.mean(shares))  # where calibration starts
    path = tmp_path / "rig.yaml"
    text = (
        (ROOT / "rigs" / "gpt-oss-4090-3090-3060.yaml").read_text().replace("../models/", f"{ROOT}/models/")
    )
    path.write_text(text.replace("\ngpus:", "\nengine: llama.cpp\nmatrix_efficiency: 0.3\ngpus:", 1))
    given, _ = load_rig(path, REGISTRY)
    assert prompt_model(given, model, experts).flops == pytest.approx(tflops * 1e12 * 0.3)


def test_expert_flops_run_at_the_moe_share_of_the_dense_rate() -> None:
    pm = _pm()
    m = 4096
    t = m * float(pm.tokens_share[0])
    sat = EXPERT_EFFICIENCY * t / (t + EXPERT_HALF_TOKENS)
    flops = m * float(pm.dense[0]) + pm.keys_flops(0, 1, m, 0) + m * float(pm.expert[0]) / sat
    assert pm.stage_ms(0, 0, 1, 0, m, 0) == pytest.approx(1000.0 * flops / float(pm.flops[0]))
