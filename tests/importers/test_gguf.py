"""The GGUF importer on small files written with gguf.GGUFWriter, each field checked by hand arithmetic."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType as Q

from solver.errors import InputError
from solver.importers.gguf import read_gguf
from solver.importers.ggufheader import SkippedArray, read_header
from solver.importers.hf import read_hf
from tests.helpers.ggufbuild import (
    Tensor,
    ernie_header,
    glm47_flash_header,
    llama4_header,
    minimax_m2_header,
    olmoe_header,
    qwen2moe_header,
    qwen3_235b_like,
    qwen35moe_header,
    write_gguf,
    write_sparse_gguf,
)

#: Bytes per block and elements per block, from ggml's block structs (ggml-common.h), not gguf-py.
BLOCK = {
    Q.F32: (1, 4),
    Q.F16: (1, 2),
    Q.Q8_0: (32, 2 + 32),
    Q.Q4_K: (256, 2 + 2 + 12 + 128),
    Q.Q5_K: (256, 2 + 2 + 12 + 32 + 128),
    Q.Q6_K: (256, 128 + 64 + 16 + 2),
    Q.MXFP4: (32, 1 + 16),
}

H, E, ACTIVE, F, NH, NKV, D, VOCAB = 256, 4, 2, 256, 4, 2, 64, 512


def nb(qtype: Q, *shape: int) -> int:
    """Bytes of a tensor of ``qtype`` with these dimensions."""
    elements = 1
    for dim in shape:
        elements *= dim
    block, size = BLOCK[qtype]
    assert elements % block == 0
    return elements // block * size


def t(name: str, qtype: Q, *shape: int) -> Tensor:
    return Tensor(name, qtype, shape)


def gqa_tensors(il: int, qtype: Q = Q.Q4_K, v_type: Q = Q.Q6_K, q_width: int = NH * D) -> list[Tensor]:
    """q, k, v, output and the attention norm of a GQA layer."""
    return [
        t(f"blk.{il}.attn_norm.weight", Q.F32, H),
        t(f"blk.{il}.attn_q.weight", qtype, H, q_width),
        t(f"blk.{il}.attn_k.weight", qtype, H, NKV * D),
        t(f"blk.{il}.attn_v.weight", v_type, H, NKV * D),
        t(f"blk.{il}.attn_output.weight", qtype, NH * D, H),
    ]


def gqa_bytes(qtype: Q = Q.Q4_K, v_type: Q = Q.Q6_K, q_width: int = NH * D) -> int:
    return (
        nb(Q.F32, H)
        + nb(qtype, H, q_width)
        + nb(qtype, H, NKV * D)
        + nb(v_type, H, NKV * D)
        + nb(qtype, NH * D, H)
    )


def expert_tensors(il: int, down: Q, up: Q = Q.Q4_K) -> list[Tensor]:
    return [
        t(f"blk.{il}.ffn_gate_inp.weight", Q.F32, H, E),
        t(f"blk.{il}.ffn_gate_exps.weight", up, H, F, E),
        t(f"blk.{il}.ffn_up_exps.weight", up, H, F, E),
        t(f"blk.{il}.ffn_down_exps.weight", down, F, H, E),
    ]


def head(tied: bool = False) -> list[Tensor]:
    out = [t("token_embd.weight", Q.Q4_K, H, VOCAB), t("output_norm.weight", Q.F32, H)]
    return out if tied else [*out, t("output.weight", Q.Q6_K, H, VOCAB)]


HEAD_BYTES = nb(Q.Q6_K, H, VOCAB) + nb(Q.F32, H)


def base_kv(arch: str, layers: int, **extra: object) -> dict[str, object]:
    kv: dict[str, object] = {
        "general.name": f"tiny-{arch}",
        f"{arch}.block_count": layers,
        f"{arch}.context_length": 4096,
        f"{arch}.embedding_length": H,
        f"{arch}.expert_count": E,
        f"{arch}.expert_used_count": ACTIVE,
        f"{arch}.attention.head_count": NH,
        f"{arch}.attention.head_count_kv": NKV,
        f"{arch}.attention.key_length": D,
        f"{arch}.attention.value_length": D,
    }
    kv.update({f"{arch}.{k}": v for k, v in extra.items()})
    return kv


# A Q4_K_M-like mix: ffn_down_exps in Q6_K in some layers, Q4_K in others.
QWEN_DOWN = [Q.Q6_K, Q.Q4_K, Q.Q4_K, Q.Q6_K]


def qwen3moe(path: Path, heads_kv: object = NKV, split: int = 0) -> Path:
    tensors = head()
    for il, down in enumerate(QWEN_DOWN):
        tensors += gqa_tensors(il)
        tensors += [
            t(f"blk.{il}.attn_q_norm.weight", Q.F32, D),
            t(f"blk.{il}.attn_k_norm.weight", Q.F32, D),
            t(f"blk.{il}.ffn_norm.weight", Q.F32, H),
        ]
        tensors += expert_tensors(il, down)
    kv = base_kv("qwen3moe", len(QWEN_DOWN))
    kv["qwen3moe.attention.head_count_kv"] = heads_kv
    write_gguf(path, "qwen3moe", kv, tensors, split_max_tensors=split)
    return path


def test_qwen3moe_q4_k_m_like(tmp_path: Path) -> None:
    model = read_gguf(qwen3moe(tmp_path / "q.gguf"))
    gate = nb(Q.Q4_K, H * F * E)
    downs = [nb(down, F * H * E) for down in QWEN_DOWN]
    assert model.name == "tiny-qwen3moe" and model.arch == "qwen3moe"
    assert model.layers == 4 and model.experts == [E] * 4 and model.active_experts == ACTIVE
    assert model.expert_tensors == {
        "ffn_gate_exps": [gate] * 4,
        "ffn_up_exps": [gate] * 4,
        "ffn_down_exps": downs,
    }
    assert model.expert_bytes == [(2 * gate + down) // E for down in downs]
    assert downs[0] == 256 * 256 * 4 // 256 * 210 and gate == 256 * 256 * 4 // 256 * 144
    dense = gqa_bytes() + 2 * D * 4 + H * 4 + H * E * 4  # attention, q/k norms, ffn norm, router
    assert model.dense_bytes == [dense] * 4
    assert model.kinds == ["full"] * 4
    assert model.kv_bytes_per_token == {"full": NKV * (D + D) * 2}
    assert model.state_bytes == {"full": 0}
    assert model.last_stage_bytes == HEAD_BYTES and model.first_stage_bytes == 0
    # the untied embeddings stay in host memory: counted only in the file's size
    assert model.other_weight_bytes == nb(Q.Q4_K, H * VOCAB)
    assert model.command == "solve model from-gguf q.gguf"
    assert model.max_context == 4096 and "qwen3moe.context_length" in model.sources["max_context"]
    assert list(model.sources) == [
        *("name", "layers", "experts", "active_experts", "expert_bytes", "dense_bytes", "kinds"),
        *("state_bytes", "kv_bytes_per_token", "first_stage_bytes", "last_stage_bytes", "max_context"),
        *("other_weight_bytes", "expert_tensors", "ffn_tensors"),
    ]
    assert model.ffn_tensors == {"ffn_gate_inp": [H * E * 4] * 4}  # the router, f32


@pytest.mark.parametrize(
    ("kv_type", "row"), [("f16", 128 * 2), ("q8_0", 128 // 32 * 34), ("q4_0", 128 // 32 * 18)]
)
def test_kv_types(tmp_path: Path, kv_type: str, row: int) -> None:
    """One K and one V row of head_count_kv x 64 = 128 values per token, in the cache type's blocks."""
    model = read_gguf(qwen3moe(tmp_path / "q.gguf"), kv_type=kv_type)
    assert model.kv_bytes_per_token == {"full": 2 * row}
    assert model.command.endswith("" if kv_type == "f16" else f"--kv-type {kv_type}")


def test_head_count_kv_per_layer(tmp_path: Path) -> None:
    model = read_gguf(qwen3moe(tmp_path / "q.gguf", heads_kv=[2, 2, 4, 4]))
    assert model.kinds == ["full1", "full1", "full2", "full2"]
    assert model.kv_bytes_per_token == {"full1": 2 * 128 * 2, "full2": 4 * 128 * 2}


def test_glm4moe_drops_mtp_layers(tmp_path: Path) -> None:
    """block_count 5 with one MTP layer: 4 layers, the first dense; blk.4 is not counted anywhere."""
    dense_ff = 512
    tensors = head()
    for il in range(5):
        tensors += gqa_tensors(il)
        tensors += [
            t(f"blk.{il}.attn_q.bias", Q.F32, NH * D),
            t(f"blk.{il}.post_attention_norm.weight", Q.F32, H),
        ]
        if il == 0:
            tensors += [
                t("blk.0.ffn_gate.weight", Q.Q4_K, H, dense_ff),
                t("blk.0.ffn_up.weight", Q.Q4_K, H, dense_ff),
                t("blk.0.ffn_down.weight", Q.Q6_K, dense_ff, H),
            ]
            continue
        tensors += expert_tensors(il, Q.Q5_K)
        tensors += [
            t(f"blk.{il}.exp_probs_b.bias", Q.F32, E),
            t(f"blk.{il}.ffn_gate_shexp.weight", Q.Q4_K, H, F),
            t(f"blk.{il}.ffn_up_shexp.weight", Q.Q4_K, H, F),
            t(f"blk.{il}.ffn_down_shexp.weight", Q.Q6_K, F, H),
        ]
    tensors += [t("blk.4.nextn.eh_proj.weight", Q.Q4_K, 2 * H, H), t("blk.4.nextn.enorm.weight", Q.F32, H)]
    kv = base_kv("glm4moe", 5, leading_dense_block_count=1, nextn_predict_layers=1)
    model = read_gguf(write_and(tmp_path / "glm.gguf", "glm4moe", kv, tensors))
    attention = gqa_bytes() + nb(Q.F32, NH * D) + nb(Q.F32, H)
    moe = attention + nb(Q.F32, H, E) + nb(Q.F32, E) + 2 * nb(Q.Q4_K, H, F) + nb(Q.Q6_K, F, H)
    first = attention + 2 * nb(Q.Q4_K, H, dense_ff) + nb(Q.Q6_K, dense_ff, H)
    assert model.layers == 4 and model.experts == [0, E, E, E]
    assert model.dense_bytes == [first, moe, moe, moe]
    gate, down = nb(Q.Q4_K, H, F, E), nb(Q.Q5_K, F, H, E)
    assert model.expert_tensors == {
        "ffn_gate_exps": [0, gate, gate, gate],
        "ffn_up_exps": [0, gate, gate, gate],
        "ffn_down_exps": [0, down, down, down],
    }
    assert model.expert_bytes == [0] + [(2 * gate + down) // E] * 3
    assert "nextn_predict_layers 1" in model.sources["layers"]
    # every tensor of the file is counted once: layers, experts, head, and the rest (embeddings, MTP)
    file_bytes = sum(nb(x.qtype, *x.shape) for x in tensors)
    counted = sum(model.dense_bytes) + sum(map(sum, model.expert_tensors.values())) + model.last_stage_bytes
    assert model.other_weight_bytes == file_bytes - counted > nb(Q.Q4_K, H, VOCAB)
    assert "MTP" in model.sources["other_weight_bytes"]


def write_and(path: Path, arch: str, kv: dict[str, object], tensors: list[Tensor]) -> Path:
    write_gguf(path, arch, kv, tensors)
    return path


RANK, ROPE, QL, NOPE, VHEAD = 64, 32, 128, 32, 32


def deepseek2(path: Path, mla: bool = True) -> Path:
    tensors = head()
    for il in range(3):
        tensors += [
            t(f"blk.{il}.attn_norm.weight", Q.F32, H),
            t(f"blk.{il}.attn_q_a.weight", Q.Q8_0, H, QL),
            t(f"blk.{il}.attn_q_a_norm.weight", Q.F32, QL),
            t(f"blk.{il}.attn_q_b.weight", Q.Q8_0, QL, NH * (NOPE + ROPE)),
            t(f"blk.{il}.attn_kv_a_mqa.weight", Q.Q8_0, H, RANK + ROPE),
            t(f"blk.{il}.attn_kv_a_norm.weight", Q.F32, RANK),
            t(f"blk.{il}.attn_k_b.weight", Q.F16, NOPE, RANK, NH),
            t(f"blk.{il}.attn_v_b.weight", Q.F16, RANK, VHEAD, NH),
            t(f"blk.{il}.attn_output.weight", Q.Q8_0, NH * VHEAD, H),
            t(f"blk.{il}.ffn_norm.weight", Q.F32, H),
        ]
        if il == 0:
            tensors += [
                t("blk.0.ffn_gate.weight", Q.Q8_0, H, 2 * F),
                t("blk.0.ffn_up.weight", Q.Q8_0, H, 2 * F),
            ]
            tensors += [t("blk.0.ffn_down.weight", Q.Q8_0, 2 * F, H)]
        else:
            tensors += [*expert_tensors(il, Q.Q6_K), t(f"blk.{il}.exp_probs_b.bias", Q.F32, E)]
            tensors += [t(f"blk.{il}.ffn_{p}_shexp.weight", Q.Q8_0, H, F) for p in ("gate", "up")]
            tensors += [t(f"blk.{il}.ffn_down_shexp.weight", Q.Q8_0, F, H)]
    extra: dict[str, object] = {
        "leading_dense_block_count": 1,
        "expert_shared_count": 1,
        "attention.kv_lora_rank": RANK,
        "attention.q_lora_rank": QL,
        "rope.dimension_count": ROPE,
    }
    if mla:  # the converter since llama.cpp PR 12801: one KV head of the latent plus the RoPE key
        extra |= {"attention.key_length_mla": NOPE + ROPE, "attention.value_length_mla": VHEAD}
        extra |= {
            "attention.head_count_kv": 1,
            "attention.key_length": RANK + ROPE,
            "attention.value_length": RANK,
        }
    else:
        extra |= {
            "attention.head_count_kv": NH,
            "attention.key_length": NOPE + ROPE,
            "attention.value_length": VHEAD,
        }
    kv = base_kv("deepseek2", 3) | {f"deepseek2.{k}": v for k, v in extra.items()}
    return write_and(path, "deepseek2", kv, tensors)


@pytest.mark.parametrize(("kv_type", "row"), [("f16", 96 * 2), ("q8_0", 3 * 34), ("q4_0", 3 * 18)])
def test_deepseek2_mla(tmp_path: Path, kv_type: str, row: int) -> None:
    """MLA caches one row of kv_lora_rank 64 + rope 32 = 96 values per token, not key + value lengths."""
    model = read_gguf(deepseek2(tmp_path / "ds.gguf"), kv_type=kv_type)
    assert model.kv_bytes_per_token == {"full": row}
    assert model.experts == [0, E, E]
    attention = (
        nb(Q.F32, H)
        + nb(Q.Q8_0, H, QL)
        + nb(Q.F32, QL)
        + nb(Q.Q8_0, QL, NH * 64)
        + nb(Q.Q8_0, H, 96)
        + nb(Q.F32, RANK)
        + 2 * nb(Q.F16, 32 * 64 * NH)
        + nb(Q.Q8_0, NH * 32, H)
        + nb(Q.F32, H)
    )
    dense0 = attention + 3 * nb(Q.Q8_0, H, 2 * F)
    moe = attention + nb(Q.F32, H, E) + nb(Q.F32, E) + 3 * nb(Q.Q8_0, H, F)
    assert model.dense_bytes == [dense0, moe, moe]
    assert model.expert_bytes == [0] + [(2 * nb(Q.Q4_K, H, F, E) + nb(Q.Q6_K, F, H, E)) // E] * 2
    # the feed-forward tensors --fit's extra-layer rules move: layer 0's MLP, then router and shared expert
    dense_mlp, shared = nb(Q.Q8_0, H, 2 * F), nb(Q.Q8_0, H, F)
    assert model.ffn_tensors == {
        "ffn_down": [dense_mlp, 0, 0],
        "ffn_down_shexp": [0, shared, shared],
        "ffn_gate": [dense_mlp, 0, 0],
        "ffn_gate_inp": [0, nb(Q.F32, H, E), nb(Q.F32, H, E)],
        "ffn_gate_shexp": [0, shared, shared],
        "ffn_up": [dense_mlp, 0, 0],
        "ffn_up_shexp": [0, shared, shared],
    }
    assert "MLA" in model.sources["kv_bytes_per_token"]


def test_deepseek2_without_mla_metadata_is_gqa(tmp_path: Path) -> None:
    """An older conversion (no key_length_mla): llama.cpp caches every head's K and V."""
    model = read_gguf(deepseek2(tmp_path / "ds.gguf", mla=False))
    assert model.kv_bytes_per_token == {"full": NH * (64 + 32) * 2}


def test_gpt_oss_sliding_and_biases(tmp_path: Path) -> None:
    tensors = head()
    for il in range(4):
        tensors += gqa_tensors(il, Q.Q8_0, Q.Q8_0)
        tensors += [
            t(f"blk.{il}.attn_{p}.bias", Q.F32, w) for p, w in (("q", NH * D), ("k", 128), ("v", 128))
        ]
        tensors += [
            t(f"blk.{il}.attn_output.bias", Q.F32, H),
            t(f"blk.{il}.attn_sinks.weight", Q.F32, NH),
            t(f"blk.{il}.post_attention_norm.weight", Q.F32, H),
            t(f"blk.{il}.ffn_gate_inp.bias", Q.F32, E),
            t(f"blk.{il}.ffn_gate_exps.bias", Q.F32, F, E),
            t(f"blk.{il}.ffn_up_exps.bias", Q.F32, F, E),
            t(f"blk.{il}.ffn_down_exps.bias", Q.F32, H, E),
        ]
        tensors += expert_tensors(il, Q.MXFP4, Q.MXFP4)
    kv = base_kv("gpt-oss", 4, **{"attention.sliding_window": 128})
    model = read_gguf(write_and(tmp_path / "oss.gguf", "gpt-oss", kv, tensors))
    mx, bias_ff, bias_h = nb(Q.MXFP4, H, F, E), F * E * 4, H * E * 4
    assert model.expert_tensors == {
        "ffn_gate_exps": [mx] * 4,
        "ffn_gate_exps.bias": [bias_ff] * 4,
        "ffn_up_exps": [mx] * 4,
        "ffn_up_exps.bias": [bias_ff] * 4,
        "ffn_down_exps": [mx] * 4,
        "ffn_down_exps.bias": [bias_h] * 4,
    }
    assert model.expert_bytes == [-(-(3 * mx + 2 * bias_ff + bias_h) // E)] * 4
    assert model.kinds == ["sliding", "full", "sliding", "full"]
    per_token = NKV * (D + D) * 2
    assert model.kv_bytes_per_token == {"sliding": 0, "full": per_token}
    # llama.cpp's SWA cache: GGML_PAD(128 + n_ubatch 512, 256) = 768 cells
    assert model.state_bytes == {"sliding": 768 * per_token, "full": 0}
    attention = gqa_bytes(Q.Q8_0, Q.Q8_0) + 4 * (NH * D + 128 + 128 + H) + 4 * NH + 4 * H
    assert model.dense_bytes == [attention + nb(Q.F32, H, E) + 4 * E] * 4


SSM = {"conv_kernel": 4, "state_size": 16, "group_count": 2, "time_step_rank": 4, "inner_size": 64}
REAL_SSM = {"conv_kernel": 4, "state_size": 128, "group_count": 16, "time_step_rank": 32, "inner_size": 4096}


def qwen3next(path: Path, ssm: dict[str, int], drop: str = "") -> Path:
    conv_dim = 2 * ssm["group_count"] * ssm["state_size"] + ssm["inner_size"]
    tensors = head()
    for il in range(4):
        if il == 3:
            tensors += gqa_tensors(il, Q.Q8_0, Q.Q8_0, q_width=2 * NH * D)
        else:
            tensors += [
                t(f"blk.{il}.attn_norm.weight", Q.F32, H),
                t(f"blk.{il}.attn_qkv.weight", Q.Q8_0, H, conv_dim),
                t(f"blk.{il}.attn_gate.weight", Q.Q8_0, H, 64),
                t(f"blk.{il}.ssm_conv1d.weight", Q.F32, 4, conv_dim),
                t(f"blk.{il}.ssm_a", Q.F32, 4),
                t(f"blk.{il}.ssm_out.weight", Q.Q8_0, 64, H),
            ]
        tensors += [*expert_tensors(il, Q.Q4_K), t(f"blk.{il}.ffn_gate_inp_shexp.weight", Q.F32, H)]
    kv = base_kv("qwen3next", 4, full_attention_interval=4, **{f"ssm.{k}": v for k, v in ssm.items()})
    kv.pop(f"qwen3next.{drop}", None)
    return write_and(path, "qwen3next", kv, tensors)


def test_qwen3next_linear_state(tmp_path: Path) -> None:
    model = read_gguf(qwen3next(tmp_path / "next.gguf", SSM))
    assert model.kinds == ["linear", "linear", "linear", "full"]
    conv = (4 - 1) * (64 + 2 * 2 * 16)  # (kernel - 1) x (inner + 2 x groups x state)
    ssm = 16 * 64  # state x inner
    assert model.state_bytes == {"linear": 4 * (conv + ssm), "full": 0}
    assert model.kv_bytes_per_token == {"linear": 0, "full": NKV * 128 * 2}
    linear = nb(Q.F32, H) + nb(Q.Q8_0, H, 128) + nb(Q.Q8_0, H, 64) + 4 * 4 * 128 + 4 * 4 + nb(Q.Q8_0, 64, H)
    full = gqa_bytes(Q.Q8_0, Q.Q8_0, q_width=2 * NH * D)
    router = nb(Q.F32, H, E) + nb(Q.F32, H)
    assert model.dense_bytes == [linear + router] * 3 + [full + router]


def test_qwen3next_80b_state_per_layer(tmp_path: Path) -> None:
    """Qwen3-Next-80B's linear layer: 3 x 8,192 conv values + 128 x 128 x 32 heads, in F32."""
    model = read_gguf(qwen3next(tmp_path / "next.gguf", REAL_SSM))
    assert model.state_bytes["linear"] == 4 * (3 * 8192 + 128 * 128 * 32) == 2_195_456


def test_mixtral_defaults_and_tied_embeddings(tmp_path: Path) -> None:
    """llama with experts: no key_length (embedding / heads), no output.weight (token_embd is the head)."""
    tensors = head(tied=True)
    for il in range(2):
        tensors += [*gqa_tensors(il), t(f"blk.{il}.ffn_norm.weight", Q.F32, H), *expert_tensors(il, Q.Q6_K)]
    kv = base_kv("llama", 2)
    del kv["llama.attention.key_length"], kv["llama.attention.value_length"]
    model = read_gguf(write_and(tmp_path / "mixtral.gguf", "llama", kv, tensors))
    assert model.kv_bytes_per_token == {"full": NKV * (H // NH) * 2 * 2}
    assert model.last_stage_bytes == nb(Q.Q4_K, H, VOCAB) + nb(Q.F32, H)
    assert "tied" in model.sources["last_stage_bytes"]
    assert model.other_weight_bytes == 0  # the tied embeddings are the head
    assert model.experts == [E, E]


def test_mixtral_per_expert_tensors(tmp_path: Path) -> None:
    """An older Mixtral conversion with one tensor per expert reads as the merged one llama.cpp builds."""
    kv = base_kv("llama", 1)
    merged = [*gqa_tensors(0), *expert_tensors(0, Q.Q6_K), *head()]
    split = [*gqa_tensors(0), t("blk.0.ffn_gate_inp.weight", Q.F32, H, E), *head()]
    for x in range(E):
        split += [t(f"blk.0.ffn_{p}.{x}.weight", Q.Q4_K, H, F) for p in ("gate", "up")]
        split += [t(f"blk.0.ffn_down.{x}.weight", Q.Q6_K, F, H)]
    one = read_gguf(write_and(tmp_path / "merged.gguf", "llama", kv, merged))
    each = read_gguf(write_and(tmp_path / "split.gguf", "llama", kv, split))
    assert each.expert_tensors == one.expert_tensors and each.expert_bytes == one.expert_bytes
    assert each.dense_bytes == one.dense_bytes and each.experts == [E]
    assert "per-expert" in each.sources["expert_tensors"]
    missing = [x for x in split if x.name != "blk.0.ffn_up.3.weight"]
    assert "per-expert tensors for 4 of 4" not in error(write_and(tmp_path / "m.gguf", "llama", kv, missing))


def test_split_model_reads_every_shard(tmp_path: Path) -> None:
    whole = read_gguf(qwen3moe(tmp_path / "one.gguf"))
    qwen3moe(tmp_path / "split.gguf", split=20)
    shards = sorted(tmp_path.glob("split-*-of-*.gguf"))
    assert [p.name for p in shards] == [f"split-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    for shard in (shards[0], shards[2]):
        model = read_gguf(shard)
        assert dataclasses.replace(model, command="") == dataclasses.replace(whole, command="")
    shards[1].unlink()
    with pytest.raises(
        InputError, match=r"shard split-00002-of-00003\.gguf of this 3-shard model is missing"
    ):
        read_gguf(shards[0])


def test_qwen3_235b_sparse_file(tmp_path: Path) -> None:
    """A ~130 GiB sparse file: only the header is read; 10,616,832 bytes per Q4_K expert."""
    kv, tensors = qwen3_235b_like(tokenizer=False)
    path = tmp_path / "big.gguf"
    size = write_sparse_gguf(path, "qwen3moe", kv, tensors)
    assert size > 100 * 2**30
    model = read_gguf(path)
    q4k, q6k = 4096 * 1536 // 256 * 144, 4096 * 1536 // 256 * 210
    assert model.layers == 94 and model.experts == [128] * 94 and model.active_experts == 8
    assert model.expert_bytes == [2 * q4k + q6k if il % 4 == 0 else 3 * q4k for il in range(94)]
    assert model.expert_bytes[1] == 10_616_832


def test_header_matches_gguf_reader(tmp_path: Path) -> None:
    """The lean reader agrees with GGUFReader on every value it decodes and every tensor."""
    first = qwen3moe(tmp_path / "q.gguf", heads_kv=[2, 2, 4, 4])
    kv = base_kv("qwen3moe", 4) | {
        "tokenizer.ggml.tokens": [f"tok{i}" for i in range(300)],
        "tokenizer.ggml.token_type": list(range(5000)),
        "tokenizer.ggml.scores": [0.5] * 10,
        "tokenizer.ggml.add_bos_token": True,
        "qwen3moe.rope.freq_base": 1e6,
        "general.alignment": 64,
    }
    tensors = [
        t("output.weight", Q.Q6_K, H, VOCAB),
        *expert_tensors(0, Q.Q5_K),
        t("blk.0.x.weight", Q.F16, 3, 5),
    ]
    for path in (first, write_and(tmp_path / "k.gguf", "qwen3moe", kv, tensors)):
        header, reader = read_header(path), GGUFReader(path)
        fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
        assert list(header.metadata) == list(fields)
        for key, value in header.metadata.items():
            if isinstance(value, SkippedArray):
                assert value.count == len(fields[key].data)
            else:
                expected = fields[key].contents()
                assert value == (pytest.approx(expected) if isinstance(value, float) else expected), key
        assert [(x.name, x.ggml_type, x.shape, x.n_bytes) for x in header.tensors] == [
            (r.name, int(r.tensor_type), tuple(int(d) for d in r.shape), int(r.n_bytes))
            for r in reader.tensors
        ]
        assert [header.data_offset + x.offset for x in header.tensors] == [
            r.data_offset for r in reader.tensors
        ]
    assert isinstance(header.metadata["tokenizer.ggml.tokens"], SkippedArray)
    assert isinstance(header.metadata["tokenizer.ggml.token_type"], SkippedArray)


def error(path: Path, **kwargs: str) -> str:
    with pytest.raises(InputError) as info:
        read_gguf(path, **kwargs)
    text = str(info.value)
    assert "\n" not in text and text.startswith(str(path))
    return text


def test_not_gguf_empty_and_missing(tmp_path: Path) -> None:
    text = tmp_path / "model.gguf"
    text.write_text("name: not a gguf\n")
    assert "not a GGUF file" in error(text)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert "empty file" in error(empty)
    assert "no such file" in error(tmp_path / "absent.gguf")
    assert "is a directory" in error(tmp_path)


def test_truncated_files(tmp_path: Path) -> None:
    whole = qwen3moe(tmp_path / "q.gguf").read_bytes()
    header = read_header(tmp_path / "q.gguf")
    for cut, message in (
        (7, "not a GGUF file"),
        (300, "truncated header"),
        (len(whole) - 100, "truncated file"),
    ):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(whole[:cut])
        assert message in error(path)
    assert header.data_offset < len(whole) - 100


def test_unknown_architecture_and_missing_keys(tmp_path: Path) -> None:
    kv = base_kv("bert", 1)
    path = write_and(tmp_path / "bert.gguf", "bert", kv, [t("blk.0.ffn_gate_exps.weight", Q.F32, 2, 2, E)])
    assert "architecture 'bert' is not supported" in error(path)
    kv = base_kv("qwen3moe", 1)
    del kv["qwen3moe.expert_used_count"]
    path = write_and(tmp_path / "nokey.gguf", "qwen3moe", kv, [*expert_tensors(0, Q.Q4_K), *head()])
    assert "missing metadata key qwen3moe.expert_used_count" in error(path)
    path = qwen3next(tmp_path / "next.gguf", SSM, drop="ssm.state_size")
    assert "missing metadata key qwen3next.ssm.state_size" in error(path)
    assert "unknown KV cache type 'f8'" in error(path, kv_type="f8")


def test_dense_model_is_an_error(tmp_path: Path) -> None:
    path = write_and(tmp_path / "dense.gguf", "llama", base_kv("llama", 1), [*gqa_tensors(0), *head()])
    assert "not a mixture-of-experts model" in error(path)
    kv = base_kv("llama", 1)
    del kv["llama.expert_count"], kv["llama.expert_used_count"]
    path = write_and(tmp_path / "llama.gguf", "llama", kv, [*gqa_tensors(0), *head()])
    assert "no llama.expert_count: not a mixture-of-experts model" in error(path)


HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"

#: Published configs and the header llama.cpp's converter writes for each (tests/helpers/ggufbuild.py).
PUBLISHED = {
    "qwen3.6-35b-a3b.json": qwen35moe_header,
    "llama-4-scout-17b-16e.json": llama4_header,
    "glm-4.7-flash.json": glm47_flash_header,
    "qwen2-57b-a14b.json": qwen2moe_header,
    "ernie-4.5-21b-a3b.json": ernie_header,
    "minimax-m2.json": minimax_m2_header,
    "olmoe-1b-7b-0924.json": olmoe_header,
}


@pytest.mark.parametrize("fixture", sorted(PUBLISHED))
def test_published_models_agree_with_from_hf_at_q8_0(tmp_path: Path, fixture: str) -> None:
    """A Q8_0 header built from a published config reads, byte for byte, as from-hf estimates it.

    The header's tensors are listed by hand in ggufbuild (llama.cpp's names and shapes); the estimate
    builds its own from the config: two constructions that must agree.
    """
    config = json.loads((HF / fixture).read_text())
    arch, kv, tensors = PUBLISHED[fixture](config)
    path = tmp_path / "model.gguf"
    write_sparse_gguf(path, arch, kv, tensors)
    exact, estimate = read_gguf(path), read_hf(HF / fixture, "Q8_0")
    for key in (
        "layers", "experts", "active_experts", "expert_bytes", "expert_tensors", "dense_bytes", "kinds",
        "kv_bytes_per_token", "last_stage_bytes", "max_context", "nextn_layers",
    ):  # fmt: skip
        assert getattr(exact, key) == getattr(estimate, key), key
    assert exact.arch == arch


def test_qwen35moe_hybrid_layers_and_mtp_block(tmp_path: Path) -> None:
    """Qwen3.6-35B-A3B: 40 layers (the 41st block is MTP), a full layer every 4th, 256 experts."""
    arch, kv, tensors = qwen35moe_header(json.loads((HF / "qwen3.6-35b-a3b.json").read_text()))
    path = tmp_path / "q.gguf"
    write_sparse_gguf(path, arch, kv, tensors)
    m = read_gguf(path)
    assert (m.layers, m.nextn_layers, m.experts, m.active_experts) == (40, 1, [256] * 40, 8)
    assert m.kinds == ["linear", "linear", "linear", "full"] * 10
    # (kernel 4 - 1) x (inner 4,096 + 2 x 16 groups x 128) + 128 x 4,096, in F32
    assert m.state_bytes == {"linear": 4 * (3 * 8192 + 128 * 4096), "full": 0}
    assert m.kv_bytes_per_token == {"linear": 0, "full": 2 * 2 * 256 * 2}
    assert m.expert_bytes == [3 * 2048 * 512 // 32 * 34] * 40
    assert "MTP" in m.sources["layers"] and "nextn_predict_layers" in m.sources["nextn_layers"]


@pytest.mark.parametrize(("step", "moe"), [(1, [16] * 48), (2, [0, 16] * 24)])
def test_llama4_chunked_layers_and_interleaved_experts(tmp_path: Path, step: int, moe: list[int]) -> None:
    """Llama 4: three chunked layers of every four hold llama.cpp's 8,704-cell cache; Maverick's step 2
    puts experts in the odd layers only."""
    arch, kv, tensors = llama4_header(json.loads((HF / "llama-4-scout-17b-16e.json").read_text()), step=step)
    path = tmp_path / "l.gguf"
    write_sparse_gguf(path, arch, kv, tensors)
    m = read_gguf(path)
    per_token = 2 * 8 * 128 * 2
    assert m.experts == moe and m.kinds == ["chunked", "chunked", "chunked", "full"] * 12
    assert m.kv_bytes_per_token == {"chunked": 0, "full": per_token}
    assert m.state_bytes == {"chunked": 8704 * per_token, "full": 0}  # GGML_PAD(8192 + 512, 256)
    dense = 3 * 5120 * 16384 // 32 * 34
    if step == 2:
        assert m.dense_bytes[0] - m.dense_bytes[1] == dense - 3 * 5120 * 8192 // 32 * 34 - 5120 * 16 * 4
    kv["llama4.attention.sliding_window"] = 0  # a converter's way of saying: no chunked attention
    write_sparse_gguf(path, arch, kv, tensors)
    assert read_gguf(path).kinds == ["full"] * 48


def qwen3moe_layers(layers: int, drop: tuple[str, ...] = (), dense: tuple[int, ...] = ()) -> list[Tensor]:
    """A qwen3moe file's tensors for ``layers`` layers, less the named ones; ``dense`` layers get a plain
    MLP instead of experts."""
    tensors = head()
    for il in range(layers):
        tensors += gqa_tensors(il)
        if il in dense:
            tensors += [t(f"blk.{il}.ffn_{p}.weight", Q.Q4_K, H, F) for p in ("gate", "up")]
            tensors += [t(f"blk.{il}.ffn_down.weight", Q.Q4_K, F, H)]
        else:
            tensors += expert_tensors(il, Q.Q4_K)
    return [x for x in tensors if x.name not in drop]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"block_count": 2**31}, "qwen3moe.block_count 2147483648 is above the limit of 10,000 layers"),
        ({"block_count": 5}, "qwen3moe.block_count 5 but layer 4 has no tensors (the file has 4 layer(s)"),
        ({"expert_count": 2**31}, "qwen3moe.expert_count 2147483648 is above the limit of 65,536"),
        ({"expert_used_count": 5}, "qwen3moe.expert_used_count 5 is not in 1..4"),
        ({"expert_used_count": 0}, "qwen3moe.expert_used_count 0 is not in 1..4"),
        ({"nextn_predict_layers": 4}, "qwen3moe.nextn_predict_layers 4 leaves no layers"),
    ],
)
def test_counts_the_file_cannot_back_are_one_line_errors(tmp_path: Path, extra: dict, says: str) -> None:
    """Counts are checked against the tensors (and a bound) before anything per layer is built."""
    kv = base_kv("qwen3moe", 4) | {f"qwen3moe.{k}": v for k, v in extra.items()}
    assert says in error(write_and(tmp_path / "q.gguf", "qwen3moe", kv, qwen3moe_layers(4)))


@pytest.mark.parametrize(
    ("drop", "dense", "says"),
    [
        (
            ("blk.2.ffn_down_exps.weight",),
            (),
            "layer 2 has expert tensors ffn_gate_exps, ffn_up_exps but layer",
        ),
        ((), (1,), "layer 1 has no routed expert tensors (blk.1.ffn_*_exps), but llama.cpp builds them in"),
        (tuple(f"blk.3.ffn_{p}_exps.weight" for p in ("gate", "up", "down")), (), "layer 3 has no routed"),
    ],
)
def test_a_layer_missing_its_tensors_is_an_error(
    tmp_path: Path, drop: tuple, dense: tuple, says: str
) -> None:
    kv = base_kv("qwen3moe", 4)
    path = write_and(tmp_path / "q.gguf", "qwen3moe", kv, qwen3moe_layers(4, drop, dense))
    assert says in error(path)


def test_experts_outside_llama_cpps_layers_are_errors(tmp_path: Path) -> None:
    """deepseek2's first leading_dense_block_count layers are dense, llama4 interleaves MoE layers."""
    kv = base_kv("deepseek2", 3, leading_dense_block_count=1)
    path = write_and(tmp_path / "d.gguf", "deepseek2", kv, qwen3moe_layers(3))
    assert (
        "layer 0 has routed expert tensors, but llama.cpp builds them in every layer from layer 1 on"
        in error(path)
    )
    kv = base_kv("llama4", 4, interleave_moe_layer_step=2)
    path = write_and(tmp_path / "l.gguf", "llama4", kv, qwen3moe_layers(4, dense=(1,)))
    assert (
        "layer 0 has routed expert tensors, but llama.cpp builds them in the last layer of every 2"
        " (llama4.interleave_moe_layer_step 2)" in error(path)
    )


def test_a_shard_of_another_model_is_refused(tmp_path: Path) -> None:
    """Shards carry only split.* keys, so another model's shard shows in split.tensors.count or shapes."""
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir()
    other.mkdir()
    qwen3moe(one / "m.gguf", split=20)
    wider = []  # the same tensors, but experts twice as wide: another model of the same layout
    for shard in sorted(one.glob("m-*.gguf")):
        for x in read_header(shard).tensors:
            shape = x.shape
            if "_exps" in x.name:
                shape = (
                    (shape[0], 2 * shape[1], shape[2]) if "down" not in x.name else (2 * shape[0], *shape[1:])
                )
            wider.append(t(x.name, Q(x.ggml_type), *shape))
    write_gguf(other / "m.gguf", "qwen3moe", base_kv("qwen3moe", 4), wider, split_max_tensors=20)
    shard = "m-00002-of-00003.gguf"
    (one / shard).write_bytes((other / shard).read_bytes())
    with pytest.raises(
        InputError, match=r"m-00002-of-00003\.gguf: tensor blk\.\d+\.ffn_.* another model's shard"
    ):
        read_gguf(one / "m-00001-of-00003.gguf")
    kv = base_kv("qwen3moe", 5)  # 48 tensors in 3 shards, where the first shard says 51
    write_gguf(other / "n.gguf", "qwen3moe", kv, qwen3moe_layers(5), split_max_tensors=20)
    (other / "n-00002-of-00003.gguf").replace(one / shard)
    with pytest.raises(
        InputError, match=r"00003\.gguf: split\.tensors\.count is 48 but m-00001-of-00003\.gguf says 51"
    ):
        read_gguf(one / "m-00001-of-00003.gguf")


def test_unknown_architecture_points_to_the_model_file_reference(tmp_path: Path) -> None:
    kv = base_kv("bert", 1)
    path = write_and(tmp_path / "bert.gguf", "bert", kv, [t("blk.0.ffn_gate_exps.weight", Q.F32, 2, 2, E)])
    assert "docs/reference.md" in error(path)
