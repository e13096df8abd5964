"""``read_hf``: every field of the seven fixture configs against arithmetic written out by hand here.

Bits per weight used below (the table in solver/importers/hf.py): BF16 16, F32 32, Q8_0 34 B per 32,
Q4_K 144 B per 256, Q6_K 210 B per 256, Q5_0 22 B per 32, MXFP4 17 B per 32, FP8 1 B + a 4-byte scale
per 128 x 128 block.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solver.config import load_model
from solver.errors import InputError
from solver.importers.hf import SCHEMES, read_hf
from solver.importers.modelfile import model_yaml

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "fixtures" / "hf"
FIXTURES = sorted(p.name for p in HF.glob("*.json"))


def q4k(n: int) -> int:
    return n // 256 * 144


def q6k(n: int) -> int:
    return n // 256 * 210


def q8(n: int) -> int:
    return n // 32 * 34


def q50(n: int) -> int:
    return n // 32 * 22


def test_all_seven_families_are_fixtures():
    assert FIXTURES == [
        "deepseek-v3.json",
        "glm-4.5-air.json",
        "gpt-oss-120b.json",
        "mixtral-8x22b.json",
        "qwen3-235b-a22b.json",
        "qwen3-30b-a3b.json",
        "qwen3-next-80b-a3b.json",
    ]


def test_qwen3_235b_at_q4_k_reproduces_the_shipped_hand_written_file():
    m = read_hf(HF / "qwen3-235b-a22b.json", "Q4_K")
    shipped, _ = load_model(ROOT / "models" / "qwen3-235b-a22b.yaml")
    # 3 tensors of 4,096 x 1,536 at 4.5 bits = 3 x 3,538,944
    assert m.expert_bytes == [10_616_832] * 94 == [shipped.expert_bytes] * 94
    attention = q4k(4096 * 8192 + 2 * 4096 * 512 + 8192 * 4096)
    router = 4096 * 128 * 4
    norms = (4096 + 4096 + 128 + 128) * 4
    assert m.dense_bytes == [attention + router + norms] * 94 == [shipped.dense_bytes] * 94
    assert m.last_stage_bytes == q6k(151_936 * 4096) + 4096 * 4 == shipped.last_stage_bytes
    assert m.first_stage_bytes == q4k(151_936 * 4096)
    assert m.kv_bytes_per_token == {"full": 4 * 128 * 2 * 2} and m.kinds == ["full"] * 94
    assert m.expert_tensors == {
        k: [128 * 3_538_944] * 94 for k in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
    }
    assert (m.layers, m.experts, m.active_experts, m.max_context) == (94, [128] * 94, 8, 40960)
    assert m.estimate


def test_deepseek_v3_at_q4_k_reproduces_the_shipped_dense_and_head_bytes():
    m = read_hf(HF / "deepseek-v3.json", "Q4_K")
    shipped, _ = load_model(ROOT / "models" / "deepseek-v3.yaml")
    assert m.dense_bytes == shipped.dense_bytes
    assert m.last_stage_bytes == shipped.last_stage_bytes == q6k(129_280 * 7168) + 7168 * 4
    assert m.experts == shipped.experts
    assert m.kv_bytes_per_token == {"full": shipped.kv_bytes_per_token}


def test_qwen3_30b_bf16():
    m = read_hf(HF / "qwen3-30b-a3b.json", "BF16")
    h = 2048
    assert m.layers == 48 and m.experts == [128] * 48 and m.active_experts == 8
    assert m.expert_bytes == [3 * h * 768 * 2] * 48
    attention = (h * 32 * 128 + 2 * h * 4 * 128 + 32 * 128 * h) * 2
    assert m.dense_bytes == [attention + 128 * h * 2 + (2 * h + 2 * 128) * 2] * 48
    assert m.first_stage_bytes == 151_936 * h * 2
    assert m.last_stage_bytes == 151_936 * h * 2 + h * 2
    assert m.kv_bytes_per_token == {"full": 2048} and m.state_bytes == {}


def test_qwen3_next_q8_0_linear_and_full_layers():
    m = read_hf(HF / "qwen3-next-80b-a3b.json", "Q8_0")
    h, nk, nv, dk, dv = 2048, 16, 32, 128, 128
    assert m.kinds == ["linear", "linear", "linear", "full"] * 12
    conv = 2 * nk * dk + nv * dv
    assert m.state_bytes == {"linear": (conv * 3 + nv * dk * dv) * 4, "full": 0}
    assert m.state_bytes["linear"] == 2_195_456
    assert m.kv_bytes_per_token == {"full": 2 * 2 * 256 * 2, "linear": 0}
    assert m.expert_bytes == [q8(3 * h * 512)] * 48 and m.active_experts == 10
    moe = 512 * h * 4 + q8(3 * h * 512) + h * 4  # router in F32, the shared expert, its gate in F32
    norms = 2 * h * 4
    linear = q8((2 * nk * dk + 2 * nv * dv) * h) + q8(2 * nv * h) + q8(h * nv * dv)
    linear += (conv * 4 + nv + nv + dv) * 4  # conv1d, dt, A, gated norm in F32
    full = q8(16 * 256 * 2 * h) + 2 * q8(2 * 256 * h) + q8(16 * 256 * h) + 2 * 256 * 4
    assert m.dense_bytes[0] == linear + moe + norms
    assert m.dense_bytes[3] == full + moe + norms
    assert m.dense_bytes == [m.dense_bytes[0]] * 3 + [m.dense_bytes[3]] + m.dense_bytes[:4] * 11


def test_deepseek_v3_fp8_block_scales_mla_and_dense_layers():
    m = read_hf(HF / "deepseek-v3.json", "FP8")
    assert m.layers == 61  # the next-token-prediction layer is not counted
    assert m.experts == [0] * 3 + [256] * 58
    fp8 = 7168 * 2048 + (2048 // 128) * (7168 // 128) * 4
    assert m.expert_bytes == [0] * 3 + [3 * fp8] * 58
    assert m.kv_bytes_per_token == {"full": (512 + 64) * 2}
    assert m.first_stage_bytes == 129_280 * 7168 * 2


def test_gpt_oss_mxfp4_experts_with_bf16_biases_and_sliding_windows():
    m = read_hf(HF / "gpt-oss-120b.json", "MXFP4")
    h, e = 2880, 128
    assert m.kinds == ["sliding", "full"] * 18 and m.active_experts == 4
    assert m.state_bytes == {"sliding": 128 * 2 * 8 * 64 * 2, "full": 0}
    assert m.kv_bytes_per_token == {"sliding": 0, "full": 2 * 8 * 64 * 2}
    assert m.expert_bytes == [3 * h * h // 32 * 17 + 3 * h * 2] * 36
    assert m.expert_tensors["ffn_down_exps.bias"] == [e * h * 2] * 36
    elements = (4096 + 512 + 512) * h + h * 4096 + (4096 + 512 + 512 + h) + 64 + e * h + e + 2 * h
    assert m.dense_bytes == [elements * 2] * 36


def test_rows_that_do_not_fill_k_quant_blocks_fall_back_as_llama_cpp_does():
    oss = read_hf(HF / "gpt-oss-120b.json", "Q4_K")  # rows of 2,880: Q4_K -> Q5_0
    assert oss.expert_bytes[0] == 3 * q50(2880 * 2880) + 3 * 2880 * 4
    glm = read_hf(HF / "glm-4.5-air.json", "Q4_K")  # ffn_down rows of 1,408
    assert glm.expert_bytes[1] == 2 * q4k(4096 * 1408) + q50(1408 * 4096)


def test_glm_4_5_air_q8_0():
    m = read_hf(HF / "glm-4.5-air.json", "Q8_0")
    h = 4096
    assert m.layers == 46 and m.experts == [0] + [128] * 45
    assert m.expert_bytes == [0] + [q8(3 * h * 1408)] * 45
    attention = q8((12288 + 1024 + 1024) * h + h * 12288) + (12288 + 1024 + 1024) * 4
    moe = 128 * h * 4 + 128 * 4 + q8(3 * h * 1408)
    assert m.dense_bytes[1] == attention + moe + 2 * h * 4
    assert m.dense_bytes[0] == attention + q8(3 * h * 10944) + 2 * h * 4
    assert m.kv_bytes_per_token == {"full": 2 * 8 * 128 * 2}


def test_mixtral_q4_k_m_gives_more_bits_to_v_and_down_on_the_outer_layers():
    m = read_hf(HF / "mixtral-8x22b.json", "Q4_K_M")
    h, w = 6144, 16384
    more = [i < 7 or i >= 49 or (i - 7) % 3 == 2 for i in range(56)]
    assert sum(more) == 28
    plain, rich = 3 * q4k(h * w), 2 * q4k(h * w) + q6k(h * w)
    assert m.expert_bytes == [rich if b else plain for b in more]
    assert m.expert_tensors["ffn_down_exps"] == [8 * (q6k(h * w) if b else q4k(h * w)) for b in more]
    attention = 2 * q4k(h * h) + q4k(1024 * h)
    rest = 8 * h * 4 + 2 * h * 4
    assert m.dense_bytes == [attention + (q6k if b else q4k)(1024 * h) + rest for b in more]
    assert m.active_experts == 2 and m.kv_bytes_per_token == {"full": 4096}


def test_text_config_sparse_steps_and_mlp_only_layers(write):
    cfg = json.loads((HF / "qwen3-30b-a3b.json").read_text())
    cfg.update(num_hidden_layers=6, decoder_sparse_step=2, mlp_only_layers=[3])
    path = write("vl.json", json.dumps({"model_type": "qwen3_vl_moe", "text_config": cfg}))
    m = read_hf(path, "BF16")
    assert m.experts == [0, 128, 0, 0, 0, 128]
    assert m.expert_bytes[0] == 0 and m.dense_bytes[0] > m.dense_bytes[1]


def test_layer_types_decide_qwen3_next_kinds(write):
    cfg = json.loads((HF / "qwen3-next-80b-a3b.json").read_text())
    cfg.update(num_hidden_layers=4, layer_types=["full_attention", "linear_attention"] * 2)
    m = read_hf(write("next.json", json.dumps(cfg)), "BF16")
    assert m.kinds == ["full", "linear", "full", "linear"]


@pytest.mark.parametrize("fixture", FIXTURES)
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_every_fixture_and_scheme_writes_a_loadable_model(tmp_path, fixture, scheme):
    m = read_hf(HF / fixture, scheme)
    m.command = f"solve model from-hf {fixture} --weights {scheme}"
    path = tmp_path / "m.yaml"
    path.write_text(model_yaml(m))
    loaded, _ = load_model(path)
    assert loaded.layers == m.layers and loaded.active_experts == m.active_experts
    assert loaded.profile is None and "ESTIMATE" in path.read_text()
    per_layer = (
        loaded.dense_bytes if isinstance(loaded.dense_bytes, list) else [loaded.dense_bytes] * m.layers
    )
    assert per_layer == m.dense_bytes


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not a JSON file"),
        ("[1]", "expected a JSON object"),
        ('{"model_type": "llama", "num_hidden_layers": 2}', "unsupported model_type 'llama'"),
        ('{"model_type": "mixtral", "num_hidden_layers": 2}', "hidden_size: missing"),
        ('{"model_type": "mixtral", "num_hidden_layers": "2"}', "num_hidden_layers: expected a whole number"),
    ],
)
def test_bad_configs_are_one_line_errors(write, text, says):
    with pytest.raises(InputError, match=says) as err:
        read_hf(write("config.json", text), "BF16")
    assert "config.json" in str(err.value) and "\n" not in str(err.value)


def test_unknown_scheme_lists_the_known_ones():
    with pytest.raises(InputError, match="Q4_K_M"):
        read_hf(HF / "mixtral-8x22b.json", "Q3_K")


def test_deepseek_v2_without_a_q_lora_projects_q_straight_from_the_hidden_state(write):
    cfg = json.loads((HF / "deepseek-v3.json").read_text())
    cfg.update(model_type="deepseek_v2", q_lora_rank=None, topk_method="greedy", n_shared_experts=2)
    m = read_hf(write("v2.json", json.dumps(cfg)), "BF16")
    h, nh = 7168, 128
    attention = h * nh * 192 + h * 576 + 512 * nh * 256 + nh * 128 * h + 512  # q, kv_a, kv_b, o, kv_a_norm
    moe = 256 * h + 3 * h * 2 * 2048  # router without a bias, two shared experts
    assert m.dense_bytes[3] == (attention + moe + 2 * h) * 2
    assert m.expert_bytes[3] == 3 * h * 2048 * 2


def test_a_null_head_dim_falls_back_to_hidden_over_heads(write):
    cfg = json.loads((HF / "mixtral-8x22b.json").read_text())
    cfg["head_dim"] = None
    assert read_hf(write("c.json", json.dumps(cfg)), "BF16").kv_bytes_per_token == {"full": 2 * 8 * 128 * 2}
