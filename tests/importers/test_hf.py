"""``read_hf``: every field of the seven fixture configs against arithmetic written out by hand here.

Bits per weight used below (the table in solver/importers/hfschemes.py): BF16 16, F32 32, Q8_0 34 B per 32,
Q4_K 144 B per 256, Q6_K 210 B per 256, Q5_0 22 B per 32, MXFP4 17 B per 32, FP8 1 B + a 4-byte scale
per 128 x 128 block.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solver.errors import InputError
from solver.files.config import load_model
from solver.importers.hf import FAMILIES, WEIGHTS, read_hf
from solver.importers.modelfile import model_yaml

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "tests" / "fixtures" / "hf"
FIXTURES = sorted(p.name for p in HF.glob("*.json"))


def q4k(n: int) -> int:
    return n // 256 * 144


def q6k(n: int) -> int:
    return n // 256 * 210


def q8(n: int) -> int:
    return n // 32 * 34


def q5k(n: int) -> int:
    return n // 256 * 176


def q50(n: int) -> int:
    return n // 32 * 22


def test_every_family_has_a_published_config():
    assert FIXTURES == [
        "deepseek-v3.json",
        "ernie-4.5-21b-a3b.json",
        "glm-4.5-air.json",
        "glm-4.7-flash.json",
        "gpt-oss-120b.json",
        "llama-4-scout-17b-16e.json",
        "minimax-m2.json",
        "mixtral-8x22b.json",
        "olmoe-1b-7b-0924.json",
        "qwen2-57b-a14b.json",
        "qwen3-235b-a22b.json",
        "qwen3-30b-a3b.json",
        "qwen3-next-80b-a3b.json",
        "qwen3.6-35b-a3b.json",
    ]
    covered = {read_hf(HF / f, "BF16").arch for f in FIXTURES}
    # deepseek_v2 has its own test below; a wrapper's model_type names the text model's family too
    assert set(FAMILIES) - covered == {"deepseek_v2", "qwen3_5_moe", "llama4"}


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


def test_mixtral_q4_k_m_follows_llama_quantize_for_an_8_expert_model():
    """llama-quantize's Q4_K_M on 8 experts: ffn_down Q6_K on use_more_bits layers; attn_k and attn_v
    Q8_0 everywhere; attn_output Q5_K; the rest Q4_K."""
    m = read_hf(HF / "mixtral-8x22b.json", "Q4_K_M")
    h, w = 6144, 16384
    more = [i < 7 or i >= 49 or (i - 7) % 3 == 2 for i in range(56)]
    assert sum(more) == 28
    plain, rich = 3 * q4k(h * w), 2 * q4k(h * w) + q6k(h * w)
    assert m.expert_bytes == [rich if b else plain for b in more]
    assert m.expert_tensors["ffn_down_exps"] == [8 * (q6k(h * w) if b else q4k(h * w)) for b in more]
    attention = q4k(h * h) + 2 * q8(1024 * h) + q5k(h * h)
    rest = 8 * h * 4 + 2 * h * 4
    assert m.dense_bytes == [attention + rest] * 56
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
@pytest.mark.parametrize("scheme", ["BF16", "FP8", "MXFP4", "Q4_K", "Q8_0", "Q4_K_M", "IQ2_XXS", "MXFP4_MOE"])
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


def test_qwen3_6_35b_a3b_hybrid_layers_shared_expert_and_mtp_block():
    m = read_hf(HF / "qwen3.6-35b-a3b.json", "BF16")
    h, nk, nv, dk, dv = 2048, 16, 32, 128, 128
    assert (m.layers, m.nextn_layers, m.experts, m.active_experts) == (40, 1, [256] * 40, 8)
    assert m.kinds == ["linear", "linear", "linear", "full"] * 10
    conv = 2 * nk * dk + nv * dv
    assert m.state_bytes == {"linear": (conv * 3 + nv * dk * dv) * 4, "full": 0}
    assert m.kv_bytes_per_token == {"linear": 0, "full": 2 * 2 * 256 * 2}
    assert m.expert_bytes == [3 * h * 512 * 2] * 40
    # in_proj_qkv, in_proj_z, in_proj_b and in_proj_a; conv1d, dt, A, the gated norm; out_proj
    linear = (conv * h + nv * dv * h + 2 * nv * h + conv * 4 + 2 * nv + dv + h * nv * dv) * 2
    full = (16 * 256 * 2 * h + 2 * 2 * 256 * h + 16 * 256 * h + 2 * 256) * 2  # gated q, k, v, o, q/k norms
    moe = (256 * h + 3 * h * 512 + h + 2 * h) * 2  # router, shared expert and its gate, two norms
    assert m.dense_bytes[:4] == [linear + moe] * 3 + [full + moe]
    assert m.max_context == 262144 and "mtp_num_hidden_layers" in m.sources["nextn_layers"]


def test_glm_4_7_flash_is_mla_with_an_mtp_block():
    m = read_hf(HF / "glm-4.7-flash.json", "BF16", kv_type="q8_0")
    assert (m.layers, m.nextn_layers, m.active_experts) == (47, 1, 4)
    assert m.experts == [0] + [64] * 46 and m.expert_bytes == [0] + [3 * 2048 * 1536 * 2] * 46
    assert m.kv_bytes_per_token == {"full": (512 + 64) // 32 * 34}  # one q8_0 row of the latent + RoPE key


def test_llama_4_scout_chunked_attention_and_shared_experts():
    m = read_hf(HF / "llama-4-scout-17b-16e.json", "BF16")
    h, per_token = 5120, 2 * 8 * 128 * 2
    assert m.experts == [16] * 48 and m.active_experts == 1 and m.nextn_layers == 0
    assert m.kinds == ["chunked", "chunked", "chunked", "full"] * 12
    assert m.state_bytes == {"chunked": 8192 * per_token, "full": 0}
    assert m.kv_bytes_per_token == {"chunked": 0, "full": per_token}
    attention = (h * 40 * 128 * 2 + 2 * h * 8 * 128) * 2
    assert m.dense_bytes == [attention + (16 * h + 3 * h * 8192 + 2 * h) * 2] * 48


def test_llama_4_maverick_interleaves_moe_layers(write):
    cfg = json.loads((HF / "llama-4-scout-17b-16e.json").read_text())
    cfg["text_config"].update(interleave_moe_layer_step=2, num_local_experts=128, moe_layers=None)
    m = read_hf(write("maverick.json", json.dumps(cfg)), "BF16")
    assert m.experts == [0, 128] * 24
    h = 5120
    assert m.dense_bytes[0] - m.dense_bytes[1] == (3 * h * 16384 - 128 * h - 3 * h * 8192) * 2


def test_qwen2_57b_shared_expert_and_biases():
    m = read_hf(HF / "qwen2-57b-a14b.json", "BF16")
    h, d = 3584, 128
    assert m.experts == [64] * 28 and m.active_experts == 8 and m.kinds == ["full"] * 28
    attention = h * 28 * d * 2 + 2 * h * 4 * d + 28 * d + 2 * 4 * d  # q, o, k, v, then the biases
    assert m.dense_bytes == [(attention + 64 * h + 3 * h * 20480 + h + 2 * h) * 2] * 28
    assert m.kv_bytes_per_token == {"full": 2 * 4 * 128 * 2}


def test_ernie_dense_first_layer_shared_experts_and_tied_head():
    m = read_hf(HF / "ernie-4.5-21b-a3b.json", "Q8_0")
    h = 2560
    assert m.experts == [0] + [64] * 27 and m.active_experts == 6
    attention = q8(h * 20 * 128 * 2 + 2 * h * 4 * 128)
    assert m.dense_bytes[0] == attention + q8(3 * h * 12288) + 2 * h * 4
    assert m.dense_bytes[1] == attention + 64 * h * 4 + 64 * 4 + q8(3 * h * 3072) + 2 * h * 4
    assert m.first_stage_bytes == m.last_stage_bytes - h * 4 == q8(103424 * h)  # one tied tensor


def test_minimax_m2_and_olmoe_norms_over_all_heads():
    m = read_hf(HF / "minimax-m2.json", "BF16")
    h = 3072
    assert m.experts == [256] * 62 and m.active_experts == 8 and m.nextn_layers == 0
    attention = (2 * h * 48 * 128 + 2 * h * 8 * 128 + 48 * 128 + 8 * 128) * 2
    assert m.dense_bytes == [attention + (256 * h + 256 + 2 * h) * 2] * 62
    assert "num_mtp_modules" in m.sources["layers"]
    o = read_hf(HF / "olmoe-1b-7b-0924.json", "BF16")
    assert o.dense_bytes == [(4 * 2048 * 2048 + 2 * 2048 + 64 * 2048 + 2 * 2048) * 2] * 16
    assert o.expert_bytes == [3 * 2048 * 1024 * 2] * 16


@pytest.mark.parametrize(
    ("kv_type", "row"), [("f16", 1024 * 2), ("q8_0", 1024 // 32 * 34), ("q4_0", 1024 // 32 * 18)]
)
def test_kv_types_take_llama_cpps_row_sizes(kv_type, row):
    """Mixtral: one K and one V row of 8 KV heads x 128 values per token and layer."""
    m = read_hf(HF / "mixtral-8x22b.json", "Q4_K_M", kv_type=kv_type)
    assert m.kv_bytes_per_token == {"full": 2 * row}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"num_hidden_layers": 10**12},
            "num_hidden_layers: 1000000000000 is above the limit of 2,147,483,647",
        ),
        ({"num_hidden_layers": 20000}, "num_hidden_layers: 20000 layers is above the limit of 10,000"),
        ({"num_experts": 0}, "num_experts: 0 routed experts: not a mixture-of-experts model"),
        ({"num_experts": 10**6}, "num_experts: 1000000 experts is above the limit of 65,536"),
        ({"num_experts_per_tok": 200}, "top-k 200 is not in 1..128"),
        ({"num_experts_per_tok": 0}, "top-k 0 is not in 1..128"),
        ({"mlp_only_layers": [48]}, "mlp_only_layers: 48 is not a layer of this 48-layer model (0..47)"),
        ({"mlp_only_layers": ["3"]}, "mlp_only_layers: '3' is not a layer"),
        ({"mlp_only_layers": list(range(48))}, "no layer has routed experts"),
        ({"decoder_sparse_step": 0}, "decoder_sparse_step: expected at least 1, got 0"),
    ],
)
def test_counts_a_config_cannot_mean_are_one_line_errors(write, change, says):
    cfg = json.loads((HF / "qwen3-30b-a3b.json").read_text()) | change
    with pytest.raises(InputError) as err:
        read_hf(write("config.json", json.dumps(cfg)), "BF16")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_short_layer_types_and_unknown_families_are_one_line_errors(write):
    cfg = json.loads((HF / "qwen3-next-80b-a3b.json").read_text()) | {"layer_types": ["full_attention"]}
    with pytest.raises(InputError, match="layer_types: expected a list of 48 entries"):
        read_hf(write("next.json", json.dumps(cfg)), "BF16")
    with pytest.raises(InputError, match=r"unsupported model_type 'bert'.*docs/reference\.md"):
        read_hf(write("bert.json", '{"model_type": "bert", "num_hidden_layers": 2}'), "BF16")
    with pytest.raises(InputError, match="Unsloth's _XL/UD files"):
        read_hf(HF / "mixtral-8x22b.json", "UD-Q4_K_XL")


def test_every_gguf_recipe_is_a_weights_name():
    assert {"Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"} <= set(
        WEIGHTS
    )
    assert {
        "IQ1_S",
        "IQ1_M",
        "IQ2_XXS",
        "IQ2_XS",
        "IQ2_S",
        "IQ2_M",
        "IQ3_XXS",
        "IQ3_S",
        "IQ4_XS",
        "IQ4_NL",
    } <= set(WEIGHTS)
