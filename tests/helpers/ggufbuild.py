"""Small GGUF files for the importer's tests, written with ``gguf.GGUFWriter`` (llama.cpp's own writer),
and the headers llama.cpp's converter writes for published models, built from their configs.

Run as a script (``python -m tests.helpers.ggufbuild DIR``) it writes a header the size of a real one (a
151,936-token tokenizer with as many merges, Qwen3-235B-A22B's 1,131 tensors at Q4_K_M-like types)
over a sparse data region of about 130 GiB, and measures ``read_gguf`` against ``gguf.GGUFReader`` (wall
time and peak RSS of each in a fresh subprocess).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

Q = GGMLQuantizationType


@dataclass(frozen=True)
class Tensor:
    """A tensor to write: name, GGML type, shape in GGML order (ne0, the row, first)."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]


def add_kv(writer: GGUFWriter, key: str, value: object) -> None:
    """One metadata value: ints as uint32, floats as float32, strings, bools, lists as arrays."""
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, list):
        writer.add_array(key, value)
    else:
        raise TypeError(f"{key}: {type(value)}")


def _data(t: Tensor) -> np.ndarray:
    """Zeros of the tensor's byte size: numpy shape is GGML's reversed; quantized rows as bytes."""
    dims = list(reversed(t.shape))
    if t.qtype == Q.F32:
        return np.zeros(dims, np.float32)
    if t.qtype == Q.F16:
        return np.zeros(dims, np.float16)
    block, size = GGML_QUANT_SIZES[t.qtype]
    dims[-1] = dims[-1] // block * size
    return np.zeros(dims, np.uint8)


def write_gguf(
    path: Path, arch: str, kv: dict[str, object], tensors: list[Tensor], split_max_tensors: int = 0
) -> None:
    """A GGUF file (or shards ``STEM-0000k-of-0000n.gguf`` when split) with these keys and tensors."""
    writer = GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    for key, value in kv.items():
        add_kv(writer, key, value)
    for t in tensors:
        raw = None if t.qtype in (Q.F32, Q.F16) else t.qtype
        writer.add_tensor(t.name, _data(t), raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_sparse_gguf(path: Path, arch: str, kv: dict[str, object], tensors: list[Tensor]) -> int:
    """A GGUF header declaring ``tensors`` over a sparse (unwritten) data region; returns the file size."""
    writer = GGUFWriter(path, arch)
    for key, value in kv.items():
        add_kv(writer, key, value)
    total = 0
    for t in tensors:
        block, size = GGML_QUANT_SIZES[t.qtype]
        n_bytes = int(np.prod(t.shape)) // block * size
        shape = list(reversed(t.shape))
        writer.add_tensor_info(t.name, shape, np.dtype(np.float32), n_bytes, raw_dtype=t.qtype)
        total += GGUFWriter.ggml_pad(n_bytes, writer.data_alignment)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header = path.stat().st_size
    data_start = GGUFWriter.ggml_pad(header, writer.data_alignment)
    os.truncate(path, data_start + total)
    return data_start + total


def qwen3_235b_like(vocab: int = 151_936, tokenizer: bool = True) -> tuple[dict[str, object], list[Tensor]]:
    """Qwen3-235B-A22B's metadata and tensors at Q4_K_M-like types (ffn_down_exps Q6_K in every
    fourth layer), with a full-size tokenizer unless ``tokenizer`` is False."""
    arch, layers, hidden, experts, width, heads, heads_kv, head = "qwen3moe", 94, 4096, 128, 1536, 64, 4, 128
    kv: dict[str, object] = {
        "general.name": "Qwen3-235B-A22B",
        f"{arch}.block_count": layers,
        f"{arch}.context_length": 40960,
        f"{arch}.embedding_length": hidden,
        f"{arch}.expert_count": experts,
        f"{arch}.expert_used_count": 8,
        f"{arch}.expert_feed_forward_length": width,
        f"{arch}.attention.head_count": heads,
        f"{arch}.attention.head_count_kv": heads_kv,
        f"{arch}.attention.key_length": head,
        f"{arch}.attention.value_length": head,
    }
    if tokenizer:
        kv["tokenizer.ggml.model"] = "gpt2"
        kv["tokenizer.ggml.tokens"] = [f"tok{i}" for i in range(vocab)]
        kv["tokenizer.ggml.token_type"] = [1] * vocab
        kv["tokenizer.ggml.merges"] = [f"t{i} k{i}" for i in range(vocab - 1)]
    tensors = [Tensor("token_embd.weight", Q.Q4_K, (hidden, vocab))]
    for il in range(layers):
        down = Q.Q6_K if il % 4 == 0 else Q.Q4_K
        tensors += [
            Tensor(f"blk.{il}.attn_norm.weight", Q.F32, (hidden,)),
            Tensor(f"blk.{il}.attn_q.weight", Q.Q4_K, (hidden, heads * head)),
            Tensor(f"blk.{il}.attn_k.weight", Q.Q4_K, (hidden, heads_kv * head)),
            Tensor(f"blk.{il}.attn_v.weight", Q.Q6_K, (hidden, heads_kv * head)),
            Tensor(f"blk.{il}.attn_output.weight", Q.Q4_K, (heads * head, hidden)),
            Tensor(f"blk.{il}.attn_q_norm.weight", Q.F32, (head,)),
            Tensor(f"blk.{il}.attn_k_norm.weight", Q.F32, (head,)),
            Tensor(f"blk.{il}.ffn_norm.weight", Q.F32, (hidden,)),
            Tensor(f"blk.{il}.ffn_gate_inp.weight", Q.F32, (hidden, experts)),
            Tensor(f"blk.{il}.ffn_gate_exps.weight", Q.Q4_K, (hidden, width, experts)),
            Tensor(f"blk.{il}.ffn_up_exps.weight", Q.Q4_K, (hidden, width, experts)),
            Tensor(f"blk.{il}.ffn_down_exps.weight", down, (width, hidden, experts)),
        ]
    tensors += [
        Tensor("output_norm.weight", Q.F32, (hidden,)),
        Tensor("output.weight", Q.Q6_K, (hidden, vocab)),
    ]
    return kv, tensors


# ---- headers of published models, from their config.json ----------------------------------------
#
# Each builder reads a config under tests/fixtures/hf/ and returns (arch, metadata, tensors) as
# llama.cpp's converter writes them (gguf-py's tensor names, convert_hf_to_gguf's metadata keys), every
# matrix in ``q`` and every vector in F32, so that from-gguf on the header can be checked against
# from-hf on the config at the same types. Shapes are in GGML order (the row first).


def _m(name: str, rows: int, cols: int, q: Q) -> Tensor:
    """A matrix of ``rows`` outputs over rows of ``cols`` inputs (a PyTorch ``rows x cols`` weight)."""
    return Tensor(name, q, (cols, rows))


def _v(name: str, n: int) -> Tensor:
    return Tensor(name, Q.F32, (n,))


def _experts(il: int, n: int, width: int, h: int, q: Q) -> list[Tensor]:
    return [
        Tensor(f"blk.{il}.ffn_gate_exps.weight", q, (h, width, n)),
        Tensor(f"blk.{il}.ffn_up_exps.weight", q, (h, width, n)),
        Tensor(f"blk.{il}.ffn_down_exps.weight", q, (width, h, n)),
    ]


def _mlp(il: int, width: int, h: int, q: Q, suffix: str = "") -> list[Tensor]:
    return [
        _m(f"blk.{il}.ffn_gate{suffix}.weight", width, h, q),
        _m(f"blk.{il}.ffn_up{suffix}.weight", width, h, q),
        _m(f"blk.{il}.ffn_down{suffix}.weight", h, width, q),
    ]


def _attention(il: int, h: int, heads: int, heads_kv: int, d: int, q: Q, q_width: int = 0) -> list[Tensor]:
    return [
        _v(f"blk.{il}.attn_norm.weight", h),
        _m(f"blk.{il}.attn_q.weight", q_width or heads * d, h, q),
        _m(f"blk.{il}.attn_k.weight", heads_kv * d, h, q),
        _m(f"blk.{il}.attn_v.weight", heads_kv * d, h, q),
        _m(f"blk.{il}.attn_output.weight", h, heads * d, q),
    ]


def _ends(h: int, vocab: int, q: Q, tied: bool = False) -> list[Tensor]:
    out = [_m("token_embd.weight", vocab, h, q), _v("output_norm.weight", h)]
    return out if tied else [*out, _m("output.weight", vocab, h, q)]


def _common(arch: str, c: dict, layers: int) -> dict[str, object]:
    return {
        "general.name": arch,
        f"{arch}.block_count": layers,
        f"{arch}.context_length": c["max_position_embeddings"],
        f"{arch}.embedding_length": c["hidden_size"],
        f"{arch}.attention.head_count": c["num_attention_heads"],
    }


def qwen35moe_header(config: dict, q: Q = Q.Q8_0) -> tuple[str, dict[str, object], list[Tensor]]:
    """Qwen3.5/3.6 MoE: gated full attention every 4th layer, Gated DeltaNet, MoE with a shared expert
    and its gate in every layer, and the MTP block appended (``mtp_num_hidden_layers``)."""
    c = config["text_config"]
    h, e, d, nh = c["hidden_size"], c["num_experts"], c["head_dim"], c["num_attention_heads"]
    nkv = c["num_key_value_heads"]
    nk, nv, dk, dv, kernel = (
        c[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                       "linear_value_head_dim", "linear_conv_kernel_dim")
    )  # fmt: skip
    n, mtp, every = c["num_hidden_layers"], c["mtp_num_hidden_layers"], c["full_attention_interval"]
    conv = 2 * nk * dk + nv * dv
    arch = "qwen35moe"
    kv = _common(arch, c, n + mtp) | {
        f"{arch}.attention.head_count_kv": nkv,
        f"{arch}.attention.key_length": d,
        f"{arch}.attention.value_length": d,
        f"{arch}.expert_count": e,
        f"{arch}.expert_used_count": c["num_experts_per_tok"],
        f"{arch}.expert_feed_forward_length": c["moe_intermediate_size"],
        f"{arch}.expert_shared_feed_forward_length": c["shared_expert_intermediate_size"],
        f"{arch}.full_attention_interval": every,
        f"{arch}.ssm.conv_kernel": kernel,
        f"{arch}.ssm.state_size": dk,
        f"{arch}.ssm.group_count": nk,
        f"{arch}.ssm.time_step_rank": nv,
        f"{arch}.ssm.inner_size": nv * dv,
        f"{arch}.nextn_predict_layers": mtp,
    }
    tensors = _ends(h, c["vocab_size"], q)
    for il in range(n + mtp):
        if (il + 1) % every == 0 or il >= n:
            tensors += _attention(il, h, nh, nkv, d, q, q_width=2 * nh * d)
            tensors += [_v(f"blk.{il}.attn_q_norm.weight", d), _v(f"blk.{il}.attn_k_norm.weight", d)]
        else:
            tensors += [
                _v(f"blk.{il}.attn_norm.weight", h),
                _m(f"blk.{il}.attn_qkv.weight", conv, h, q),
                _m(f"blk.{il}.attn_gate.weight", nv * dv, h, q),
                _m(f"blk.{il}.ssm_beta.weight", nv, h, q),
                _m(f"blk.{il}.ssm_alpha.weight", nv, h, q),
                Tensor(f"blk.{il}.ssm_conv1d.weight", Q.F32, (kernel, conv)),
                _v(f"blk.{il}.ssm_dt.bias", nv),
                _v(f"blk.{il}.ssm_a", nv),
                _v(f"blk.{il}.ssm_norm.weight", dv),
                _m(f"blk.{il}.ssm_out.weight", h, nv * dv, q),
            ]
        tensors += [
            _v(f"blk.{il}.post_attention_norm.weight", h),
            _m(f"blk.{il}.ffn_gate_inp.weight", e, h, Q.F32),
        ]
        tensors += _experts(il, e, c["moe_intermediate_size"], h, q)
        tensors += _mlp(il, c["shared_expert_intermediate_size"], h, q, "_shexp")
        tensors.append(_v(f"blk.{il}.ffn_gate_inp_shexp.weight", h))
        if il >= n:
            tensors += [
                _m(f"blk.{il}.nextn.eh_proj.weight", h, 2 * h, q),
                _v(f"blk.{il}.nextn.enorm.weight", h),
            ]
    return arch, kv, tensors


def llama4_header(config: dict, q: Q = Q.Q8_0, step: int = 0) -> tuple[str, dict[str, object], list[Tensor]]:
    """Llama 4: MoE (with a shared expert) every ``interleave_moe_layer_step``-th layer, dense layers of
    ``intermediate_size_mlp``; ``step`` overrides the config's (Maverick interleaves 2)."""
    c = config["text_config"]
    h, e, d = c["hidden_size"], c["num_local_experts"], c["head_dim"]
    n, step = c["num_hidden_layers"], step or c["interleave_moe_layer_step"]
    width, dense = c["intermediate_size"], c["intermediate_size_mlp"]
    arch = "llama4"
    kv = _common(arch, c, n) | {
        f"{arch}.attention.head_count_kv": c["num_key_value_heads"],
        f"{arch}.attention.key_length": d,
        f"{arch}.attention.value_length": d,
        f"{arch}.expert_count": e,
        f"{arch}.expert_used_count": c["num_experts_per_tok"],
        f"{arch}.expert_feed_forward_length": width,
        f"{arch}.feed_forward_length": dense,
        f"{arch}.interleave_moe_layer_step": step,
        f"{arch}.leading_dense_block_count": 0,
    }
    tensors = _ends(h, c["vocab_size"], q)
    for il in range(n):
        tensors += _attention(il, h, c["num_attention_heads"], c["num_key_value_heads"], d, q)
        tensors.append(_v(f"blk.{il}.ffn_norm.weight", h))
        if (il + 1) % step == 0:
            tensors += [_m(f"blk.{il}.ffn_gate_inp.weight", e, h, Q.F32), *_experts(il, e, width, h, q)]
            tensors += _mlp(il, width, h, q, "_shexp")
        else:
            tensors += _mlp(il, dense, h, q)
    return arch, kv, tensors


def glm47_flash_header(config: dict, q: Q = Q.Q8_0) -> tuple[str, dict[str, object], list[Tensor]]:
    """GLM-4.7-Flash as llama.cpp's converter writes it: deepseek2 with MLA (``attn_k_b``/``attn_v_b``),
    one dense layer, shared experts, and the MTP block appended."""
    c = config
    h, e, nh = c["hidden_size"], c["n_routed_experts"], c["num_attention_heads"]
    ql, rank, rope, nope, vd = (c[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                                               "qk_nope_head_dim", "v_head_dim"))  # fmt: skip
    n, mtp, width = c["num_hidden_layers"], c["num_nextn_predict_layers"], c["moe_intermediate_size"]
    arch = "deepseek2"
    kv = _common(arch, c, n + mtp) | {
        f"{arch}.attention.head_count_kv": 1,
        f"{arch}.attention.key_length": rank + rope,
        f"{arch}.attention.value_length": rank,
        f"{arch}.attention.key_length_mla": nope + rope,
        f"{arch}.attention.value_length_mla": vd,
        f"{arch}.attention.kv_lora_rank": rank,
        f"{arch}.attention.q_lora_rank": ql,
        f"{arch}.rope.dimension_count": rope,
        f"{arch}.leading_dense_block_count": c["first_k_dense_replace"],
        f"{arch}.expert_count": e,
        f"{arch}.expert_used_count": c["num_experts_per_tok"],
        f"{arch}.expert_shared_count": c["n_shared_experts"],
        f"{arch}.expert_feed_forward_length": width,
        f"{arch}.nextn_predict_layers": mtp,
    }
    tensors = _ends(h, c["vocab_size"], q)
    for il in range(n + mtp):
        tensors += [
            _v(f"blk.{il}.attn_norm.weight", h),
            _m(f"blk.{il}.attn_q_a.weight", ql, h, q),
            _v(f"blk.{il}.attn_q_a_norm.weight", ql),
            _m(f"blk.{il}.attn_q_b.weight", nh * (nope + rope), ql, q),
            _m(f"blk.{il}.attn_kv_a_mqa.weight", rank + rope, h, q),
            _v(f"blk.{il}.attn_kv_a_norm.weight", rank),
            Tensor(f"blk.{il}.attn_k_b.weight", q, (nope, rank, nh)),
            Tensor(f"blk.{il}.attn_v_b.weight", q, (rank, vd, nh)),
            _m(f"blk.{il}.attn_output.weight", h, nh * vd, q),
            _v(f"blk.{il}.ffn_norm.weight", h),
        ]
        if il < c["first_k_dense_replace"]:
            tensors += _mlp(il, c["intermediate_size"], h, q)
            continue
        tensors += [_m(f"blk.{il}.ffn_gate_inp.weight", e, h, Q.F32), _v(f"blk.{il}.exp_probs_b.bias", e)]
        tensors += [*_experts(il, e, width, h, q), *_mlp(il, width * c["n_shared_experts"], h, q, "_shexp")]
        if il >= n:
            tensors += [
                _m(f"blk.{il}.nextn.eh_proj.weight", h, 2 * h, q),
                _v(f"blk.{il}.nextn.enorm.weight", h),
            ]
    return arch, kv, tensors


def _plain_moe(
    arch: str,
    c: dict,
    q: Q,
    experts: int,
    top_k: int,
    width: int,
    layer: Callable[[int], list[Tensor]],
    extra: dict[str, object],
    tied: bool = False,
) -> tuple[str, dict[str, object], list[Tensor]]:
    """A GQA model whose layer ``il`` holds ``layer(il)`` after its attention and norms."""
    h, nh, nkv, n = (
        c["hidden_size"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["num_hidden_layers"],
    )
    d = c.get("head_dim") or h // nh
    kv = _common(arch, c, n) | {
        f"{arch}.attention.head_count_kv": nkv,
        f"{arch}.expert_count": experts,
        f"{arch}.expert_used_count": top_k,
        f"{arch}.expert_feed_forward_length": width,
        **(
            {f"{arch}.attention.key_length": d, f"{arch}.attention.value_length": d}
            if "head_dim" in c
            else {}
        ),
        **extra,
    }
    tensors = _ends(h, c["vocab_size"], q, tied)
    for il in range(n):
        tensors += [*_attention(il, h, nh, nkv, d, q), _v(f"blk.{il}.ffn_norm.weight", h), *layer(il)]
    return arch, kv, tensors


def qwen2moe_header(c: dict, q: Q = Q.Q8_0) -> tuple[str, dict[str, object], list[Tensor]]:
    """Qwen2-MoE: q/k/v biases, a shared expert and its gate in every layer."""
    h, e, nh, nkv = c["hidden_size"], c["num_experts"], c["num_attention_heads"], c["num_key_value_heads"]
    d, width, shared = h // nh, c["moe_intermediate_size"], c["shared_expert_intermediate_size"]

    def layer(il: int) -> list[Tensor]:
        return [
            _v(f"blk.{il}.attn_q.bias", nh * d), _v(f"blk.{il}.attn_k.bias", nkv * d),
            _v(f"blk.{il}.attn_v.bias", nkv * d), _m(f"blk.{il}.ffn_gate_inp.weight", e, h, Q.F32),
            *_experts(il, e, width, h, q), *_mlp(il, shared, h, q, "_shexp"),
            _v(f"blk.{il}.ffn_gate_inp_shexp.weight", h),
        ]  # fmt: skip

    extra = {"qwen2moe.expert_shared_feed_forward_length": shared}
    return _plain_moe("qwen2moe", c, q, e, c["num_experts_per_tok"], width, layer, extra)


def ernie_header(c: dict, q: Q = Q.Q8_0) -> tuple[str, dict[str, object], list[Tensor]]:
    """ERNIE-4.5 MoE: dense layers before ``moe_layer_start_index``, a routing bias, shared experts."""
    h, e, width, start = (
        c["hidden_size"],
        c["moe_num_experts"],
        c["moe_intermediate_size"],
        c["moe_layer_start_index"],
    )
    shared = width * c["moe_num_shared_experts"]

    def layer(il: int) -> list[Tensor]:
        if il < start:
            return _mlp(il, c["intermediate_size"], h, q)
        return [
            _m(f"blk.{il}.ffn_gate_inp.weight", e, h, Q.F32), _v(f"blk.{il}.exp_probs_b.bias", e),
            *_experts(il, e, width, h, q), *_mlp(il, shared, h, q, "_shexp"),
        ]  # fmt: skip

    arch = "ernie4_5-moe"
    extra = {
        f"{arch}.leading_dense_block_count": start,
        f"{arch}.interleave_moe_layer_step": c["moe_layer_interval"],
    }
    return _plain_moe(arch, c, q, e, c["moe_k"], width, layer, extra, tied=c["tie_word_embeddings"])


def minimax_m2_header(c: dict, q: Q = Q.Q8_0) -> tuple[str, dict[str, object], list[Tensor]]:
    """MiniMax-M2: q/k norms over all heads, a routing bias, every layer MoE."""
    h, e, width, d = c["hidden_size"], c["num_local_experts"], c["intermediate_size"], c["head_dim"]

    def layer(il: int) -> list[Tensor]:
        return [
            _v(f"blk.{il}.attn_q_norm.weight", c["num_attention_heads"] * d),
            _v(f"blk.{il}.attn_k_norm.weight", c["num_key_value_heads"] * d),
            _m(f"blk.{il}.ffn_gate_inp.weight", e, h, Q.F32), _v(f"blk.{il}.exp_probs_b.bias", e),
            *_experts(il, e, width, h, q),
        ]  # fmt: skip

    return _plain_moe("minimax-m2", c, q, e, c["num_experts_per_tok"], width, layer, {})


def olmoe_header(c: dict, q: Q = Q.Q8_0) -> tuple[str, dict[str, object], list[Tensor]]:
    """OLMoE: q/k norms over all heads, every layer MoE."""
    h, e, width, nh = c["hidden_size"], c["num_experts"], c["intermediate_size"], c["num_attention_heads"]
    d = h // nh

    def layer(il: int) -> list[Tensor]:
        return [
            _v(f"blk.{il}.attn_q_norm.weight", nh * d),
            _v(f"blk.{il}.attn_k_norm.weight", c["num_key_value_heads"] * d),
            _m(f"blk.{il}.ffn_gate_inp.weight", e, h, Q.F32),
            *_experts(il, e, width, h, q),
        ]

    return _plain_moe("olmoe", c, q, e, c["num_experts_per_tok"], width, layer, {})


MEASURE = """
import resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
if sys.argv[1] == "read_gguf":
    from solver.importers.gguf import read_gguf
    model = read_gguf(Path(sys.argv[2]))
    what = f"{model.layers} layers, expert_bytes[0] {model.expert_bytes[0]}"
else:
    from gguf import GGUFReader
    reader = GGUFReader(sys.argv[2])
    what = f"{len(reader.tensors)} tensors, {len(reader.fields)} fields"
seconds = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{sys.argv[1]:10s} {seconds:6.2f} s (imports included)  peak RSS {rss:6.0f} MiB  ({what})")
"""


def main(out: Path) -> None:
    """Write the full-size header over a sparse data region and time both readers on it."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "qwen3-235b-a22b-like.gguf"
    kv, tensors = qwen3_235b_like()
    size = write_sparse_gguf(path, "qwen3moe", kv, tensors)
    blocks = os.stat(path).st_blocks * 512
    print(
        f"{path}: {len(tensors)} tensors, {size / 2**30:.2f} GiB apparent, {blocks / 2**20:.1f} MiB on disk"
    )
    root = Path(__file__).resolve().parents[2]
    for reader, runs in (("read_gguf", 5), ("GGUFReader", 1)):
        for _ in range(runs):
            subprocess.run([sys.executable, "-c", MEASURE, reader, str(path)], check=True, cwd=root)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ggufbench"))
