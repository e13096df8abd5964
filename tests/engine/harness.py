"""Run the real llama.cpp on models that exist only as headers.

Three pieces, each usable alone:

* ``ModelSpec`` builders and ``write_sparse_gguf``: a GGUF whose metadata and tensor infos are those
  llama.cpp's converter writes for a published model, over a data region that is a sparse hole. The
  estimate paths of llama.cpp (``llama-fit-params``) never read tensor data, so a header is enough to
  make it place, size and reserve exactly as it would for the real file.
* ``rpc_servers``: a context manager that starts ``ggml-rpc-server`` processes on free 127.0.0.1 ports,
  each serving the CPU as one device (``RPC0``, ``RPC1``, ...), and ends them by pid.
* ``fit_print`` / ``parse_fit_print`` / ``parse_fit_command`` / ``parse_loader_log``: run
  ``llama-fit-params`` and read what it prints.

The tokenizer is the minimum the loader accepts: ``tokenizer.ggml.model = "none"`` with
``{arch}.vocab_size``; llama-vocab then adds that many dummy tokens, so ``n_vocab`` (and with it the
embedding, output and logits sizes) is the real one while the header stays a few kB.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from solver.engines.llamacpp import verify
from solver.engines.llamacpp.verify import Usage
from tests.helpers.ggufbuild import add_kv

Q = GGMLQuantizationType
MiB = 1024 * 1024
DEFAULT_BIN = Path.home() / ".cache/moesplit/llama.cpp-11434.0.0/build/bin"

# ---- model headers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    """One tensor: its GGUF name, GGML type and shape in GGML order (ne0, the row length, first)."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's data: rows of ``shape[0]`` elements packed in the type's blocks."""
        block, size = GGML_QUANT_SIZES[self.qtype]
        return int(np.prod(self.shape, dtype=np.int64)) // block * size


@dataclass(frozen=True)
class ModelSpec:
    """A model header: architecture, metadata (without ``general.architecture``) and tensors."""

    name: str
    arch: str
    kv: dict[str, object]
    tensors: tuple[TensorSpec, ...]
    n_ctx_train: int

    def tensor(self, name: str) -> TensorSpec:
        """The tensor called ``name`` (KeyError if absent)."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


def pick_type(name: str, shape: tuple[int, ...], experts_type: GGMLQuantizationType | None = None) -> Q:
    """A Q4_K_M-like type for a tensor: vectors and the router F32, V and down projections Q6_K, the
    rest Q4_K; rows that K-quants cannot pack (not a multiple of 256) fall back to Q8_0, then F16."""
    if len(shape) == 1 or "ffn_gate_inp" in name or "ssm_conv1d" in name or name.endswith(".bias"):
        return Q.F32
    if experts_type is not None and "_exps." in name:
        want = experts_type
    elif "attn_v." in name or "ffn_down" in name or name == "output.weight":
        want = Q.Q6_K
    else:
        want = Q.Q4_K
    for qtype in (want, Q.Q8_0, Q.F16):
        if shape[0] % GGML_QUANT_SIZES[qtype][0] == 0:
            return qtype
    return Q.F32


class _Builder:
    """Collects tensors for one header, typing each with ``pick_type``."""

    def __init__(self, experts_type: GGMLQuantizationType | None = None) -> None:
        self.tensors: list[TensorSpec] = []
        self.experts_type = experts_type

    def add(self, name: str, *shape: int, qtype: GGMLQuantizationType | None = None) -> None:
        """A tensor with GGML-order ``shape``; its type from ``pick_type`` unless given."""
        self.tensors.append(TensorSpec(name, qtype or pick_type(name, shape, self.experts_type), shape))

    def ends(self, h: int, vocab: int, tied: bool = False) -> None:
        """Token embedding, output norm and (untied) output head."""
        self.add("token_embd.weight", h, vocab)
        self.add("output_norm.weight", h)
        if not tied:
            self.add("output.weight", h, vocab)

    def attention(self, il: int, h: int, q: int, k: int, v: int, o: int, bias: bool = False) -> None:
        """Separate Q/K/V projections of widths ``q``/``k``/``v`` and an output over ``o`` inputs."""
        self.add(f"blk.{il}.attn_q.weight", h, q)
        self.add(f"blk.{il}.attn_k.weight", h, k)
        self.add(f"blk.{il}.attn_v.weight", h, v)
        if bias:
            self.add(f"blk.{il}.attn_q.bias", q)
            self.add(f"blk.{il}.attn_k.bias", k)
            self.add(f"blk.{il}.attn_v.bias", v)
        self.add(f"blk.{il}.attn_output.weight", o, h)

    def experts(self, il: int, h: int, width: int, n: int) -> None:
        """Router-selected expert stacks: gate and up ``h -> width``, down ``width -> h``."""
        self.add(f"blk.{il}.ffn_gate_exps.weight", h, width, n)
        self.add(f"blk.{il}.ffn_up_exps.weight", h, width, n)
        self.add(f"blk.{il}.ffn_down_exps.weight", width, h, n)

    def mlp(self, il: int, h: int, width: int, suffix: str = "") -> None:
        """A gated MLP (``suffix`` ``_shexp`` for a shared expert)."""
        self.add(f"blk.{il}.ffn_gate{suffix}.weight", h, width)
        self.add(f"blk.{il}.ffn_up{suffix}.weight", h, width)
        self.add(f"blk.{il}.ffn_down{suffix}.weight", width, h)

    def nextn(self, il: int, h: int) -> None:
        """The NextN/MTP block's own tensors (its embedding and head are shared with the trunk)."""
        self.add(f"blk.{il}.nextn.eh_proj.weight", 2 * h, h)
        self.add(f"blk.{il}.nextn.enorm.weight", h)
        self.add(f"blk.{il}.nextn.hnorm.weight", h)
        self.add(f"blk.{il}.nextn.shared_head_norm.weight", h)


def _base_kv(
    arch: str, name: str, layers: int, ctx: int, h: int, heads: int, vocab: int
) -> dict[str, object]:
    """Keys every architecture here needs, the minimal tokenizer included."""
    return {
        "general.name": name,
        f"{arch}.block_count": layers,
        f"{arch}.context_length": ctx,
        f"{arch}.embedding_length": h,
        f"{arch}.attention.head_count": heads,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.rope.freq_base": 1e6,
        f"{arch}.vocab_size": vocab,
        "tokenizer.ggml.model": "none",
    }


def qwen3moe(
    name: str = "Qwen3-30B-A3B",
    layers: int = 48,
    h: int = 2048,
    heads: int = 32,
    heads_kv: int = 4,
    d: int = 128,
    experts: int = 128,
    used: int = 8,
    width: int = 768,
    vocab: int = 151_936,
    ctx: int = 40_960,
) -> ModelSpec:
    """Qwen3 MoE (30B-A3B by default; ``qwen3_235b`` for the large one): GQA with q/k norms, every
    layer 128 experts, no shared expert."""
    arch = "qwen3moe"
    kv = _base_kv(arch, name, layers, ctx, h, heads, vocab) | {
        f"{arch}.attention.head_count_kv": heads_kv,
        f"{arch}.attention.key_length": d,
        f"{arch}.attention.value_length": d,
        f"{arch}.expert_count": experts,
        f"{arch}.expert_used_count": used,
        f"{arch}.expert_feed_forward_length": width,
        f"{arch}.feed_forward_length": 6144,
    }
    b = _Builder()
    b.ends(h, vocab)
    for il in range(layers):
        b.add(f"blk.{il}.attn_norm.weight", h)
        b.attention(il, h, heads * d, heads_kv * d, heads_kv * d, heads * d)
        b.add(f"blk.{il}.attn_q_norm.weight", d)
        b.add(f"blk.{il}.attn_k_norm.weight", d)
        b.add(f"blk.{il}.ffn_norm.weight", h)
        b.add(f"blk.{il}.ffn_gate_inp.weight", h, experts)
        b.experts(il, h, width, experts)
    return ModelSpec(name, arch, kv, tuple(b.tensors), ctx)


def qwen3_235b() -> ModelSpec:
    """Qwen3-235B-A22B: 94 layers of 4096, 64 heads over 4 KV heads, experts of width 1536."""
    return qwen3moe("Qwen3-235B-A22B", layers=94, h=4096, heads=64, heads_kv=4, width=1536)


def qwen3next() -> ModelSpec:
    """Qwen3-Next-80B-A3B: every 4th layer gated full attention (Q projection doubled for the gate),
    the others Gated DeltaNet; 512 experts of width 512 plus a gated shared expert in every layer."""
    arch, name, layers, h, heads, heads_kv, d = "qwen3next", "Qwen3-Next-80B-A3B", 48, 2048, 16, 2, 256
    experts, used, width, shared, vocab, ctx = 512, 10, 512, 512, 151_936, 262_144
    nk, nv, dk, kernel = 16, 32, 128, 4
    key_dim, value_dim = nk * dk, nv * dk
    kv = _base_kv(arch, name, layers, ctx, h, heads, vocab) | {
        f"{arch}.attention.head_count_kv": heads_kv,
        f"{arch}.attention.key_length": d,
        f"{arch}.attention.value_length": d,
        f"{arch}.rope.dimension_count": d // 4,
        f"{arch}.expert_count": experts,
        f"{arch}.expert_used_count": used,
        f"{arch}.expert_feed_forward_length": width,
        f"{arch}.expert_shared_feed_forward_length": shared,
        f"{arch}.feed_forward_length": 5120,
        f"{arch}.full_attention_interval": 4,
        f"{arch}.ssm.conv_kernel": kernel,
        f"{arch}.ssm.state_size": dk,
        f"{arch}.ssm.group_count": nk,
        f"{arch}.ssm.time_step_rank": nv,
        f"{arch}.ssm.inner_size": value_dim,
    }
    b = _Builder()
    b.ends(h, vocab)
    for il in range(layers):
        b.add(f"blk.{il}.attn_norm.weight", h)
        b.add(f"blk.{il}.post_attention_norm.weight", h)
        if (il + 1) % 4 == 0:
            b.attention(il, h, 2 * heads * d, heads_kv * d, heads_kv * d, heads * d)
            b.add(f"blk.{il}.attn_q_norm.weight", d)
            b.add(f"blk.{il}.attn_k_norm.weight", d)
        else:
            b.add(f"blk.{il}.attn_qkv.weight", h, 2 * key_dim + value_dim)
            b.add(f"blk.{il}.attn_gate.weight", h, value_dim)
            b.add(f"blk.{il}.ssm_conv1d.weight", kernel, 2 * key_dim + value_dim)
            b.add(f"blk.{il}.ssm_dt.bias", nv)
            b.add(f"blk.{il}.ssm_a", nv)
            b.add(f"blk.{il}.ssm_ba.weight", h, 2 * nv)
            b.add(f"blk.{il}.ssm_norm.weight", dk)
            b.add(f"blk.{il}.ssm_out.weight", value_dim, h)
        b.add(f"blk.{il}.ffn_gate_inp.weight", h, experts)
        b.experts(il, h, width, experts)
        b.add(f"blk.{il}.ffn_gate_inp_shexp.weight", h)
        b.mlp(il, h, shared, "_shexp")
    return ModelSpec(name, arch, kv, tuple(b.tensors), ctx)


def deepseek2(lite: bool = False) -> ModelSpec:
    """DeepSeek-V3 (or V2-Lite with ``lite``): MLA attention stored as the compressed latent (the K
    cache row is ``kv_lora_rank + rope``, V is a view of it), leading dense layers, one shared expert,
    a routing bias and sigmoid gating (V3)."""
    arch = "deepseek2"
    if lite:
        name, layers, h, heads = "DeepSeek-V2-Lite", 27, 2048, 16
        q_rank, kv_rank, rope, nope, vd = 0, 512, 64, 128, 128
        experts, used, width, shared, dense, n_dense, vocab, ctx = 64, 6, 1408, 2, 10944, 1, 102_400, 163_840
    else:
        name, layers, h, heads = "DeepSeek-V3", 61, 7168, 128
        q_rank, kv_rank, rope, nope, vd = 1536, 512, 64, 128, 128
        experts, used, width, shared, dense, n_dense, vocab, ctx = 256, 8, 2048, 1, 18432, 3, 129_280, 163_840
    kv = _base_kv(arch, name, layers, ctx, h, heads, vocab) | {
        f"{arch}.attention.head_count_kv": 1,
        f"{arch}.attention.key_length": kv_rank + rope,
        f"{arch}.attention.value_length": kv_rank,
        f"{arch}.attention.key_length_mla": nope + rope,
        f"{arch}.attention.value_length_mla": vd,
        f"{arch}.attention.kv_lora_rank": kv_rank,
        f"{arch}.rope.dimension_count": rope,
        f"{arch}.leading_dense_block_count": n_dense,
        f"{arch}.feed_forward_length": dense,
        f"{arch}.expert_count": experts,
        f"{arch}.expert_used_count": used,
        f"{arch}.expert_shared_count": shared,
        f"{arch}.expert_feed_forward_length": width,
        f"{arch}.expert_weights_scale": 1.0 if lite else 2.5,
        f"{arch}.expert_weights_norm": not lite,
        f"{arch}.expert_gating_func": 1 if lite else 2,
    }
    if q_rank:
        kv[f"{arch}.attention.q_lora_rank"] = q_rank
        kv[f"{arch}.expert_group_count"] = 8
        kv[f"{arch}.expert_group_used_count"] = 4
    b = _Builder()
    b.ends(h, vocab)
    for il in range(layers):
        b.add(f"blk.{il}.attn_norm.weight", h)
        if q_rank:
            b.add(f"blk.{il}.attn_q_a_norm.weight", q_rank)
            b.add(f"blk.{il}.attn_q_a.weight", h, q_rank)
            b.add(f"blk.{il}.attn_q_b.weight", q_rank, heads * (nope + rope))
        else:
            b.add(f"blk.{il}.attn_q.weight", h, heads * (nope + rope))
        b.add(f"blk.{il}.attn_kv_a_norm.weight", kv_rank)
        b.add(f"blk.{il}.attn_kv_a_mqa.weight", h, kv_rank + rope)
        b.add(f"blk.{il}.attn_k_b.weight", nope, kv_rank, heads)
        b.add(f"blk.{il}.attn_v_b.weight", kv_rank, vd, heads)
        b.add(f"blk.{il}.attn_output.weight", heads * vd, h)
        b.add(f"blk.{il}.ffn_norm.weight", h)
        if il < n_dense:
            b.mlp(il, h, dense)
            continue
        b.add(f"blk.{il}.ffn_gate_inp.weight", h, experts)
        if not lite:
            b.add(f"blk.{il}.exp_probs_b.bias", experts)
        b.experts(il, h, width, experts)
        b.mlp(il, h, width * shared, "_shexp")
    return ModelSpec(name, arch, kv, tuple(b.tensors), ctx)


def gpt_oss(large: bool = True) -> ModelSpec:
    """gpt-oss-120b (or 20b): alternating 128-token sliding-window and full attention with sinks,
    biases everywhere, MXFP4 experts of width 2880 (rows of 2880 are not K-quant blocks: Q8_0)."""
    arch = "gpt-oss"
    name, layers, experts = ("gpt-oss-120b", 36, 128) if large else ("gpt-oss-20b", 24, 32)
    h, heads, heads_kv, d, used, width, vocab, ctx = 2880, 64, 8, 64, 4, 2880, 201_088, 131_072
    kv = _base_kv(arch, name, layers, ctx, h, heads, vocab) | {
        f"{arch}.attention.head_count_kv": heads_kv,
        f"{arch}.attention.key_length": d,
        f"{arch}.attention.value_length": d,
        f"{arch}.attention.sliding_window": 128,
        f"{arch}.expert_count": experts,
        f"{arch}.expert_used_count": used,
        f"{arch}.expert_feed_forward_length": width,
        f"{arch}.feed_forward_length": width,
        f"{arch}.rope.freq_base": 150000.0,
    }
    b = _Builder(experts_type=Q.MXFP4)
    b.ends(h, vocab)
    for il in range(layers):
        b.add(f"blk.{il}.attn_norm.weight", h)
        b.add(f"blk.{il}.post_attention_norm.weight", h)
        b.attention(il, h, heads * d, heads_kv * d, heads_kv * d, heads * d, bias=True)
        b.add(f"blk.{il}.attn_output.bias", h)
        b.add(f"blk.{il}.attn_sinks.weight", heads)
        b.add(f"blk.{il}.ffn_gate_inp.weight", h, experts)
        b.add(f"blk.{il}.ffn_gate_inp.bias", experts)
        b.experts(il, h, width, experts)
        b.add(f"blk.{il}.ffn_gate_exps.bias", width, experts)
        b.add(f"blk.{il}.ffn_up_exps.bias", width, experts)
        b.add(f"blk.{il}.ffn_down_exps.bias", h, experts)
    return ModelSpec(name, arch, kv, tuple(b.tensors), ctx)


def glm4moe() -> ModelSpec:
    """GLM-4.5-Air: 46 layers (the first dense) plus the NextN/MTP block as layer 46, q/k/v biases,
    no q/k norms, 128 experts of width 1408 with one shared expert and a routing bias."""
    arch, name, trunk, h, heads, heads_kv, d = "glm4moe", "GLM-4.5-Air", 46, 4096, 96, 8, 128
    experts, used, width, dense, vocab, ctx = 128, 8, 1408, 10944, 151_552, 131_072
    kv = _base_kv(arch, name, trunk + 1, ctx, h, heads, vocab) | {
        f"{arch}.attention.head_count_kv": heads_kv,
        f"{arch}.attention.key_length": d,
        f"{arch}.attention.value_length": d,
        f"{arch}.rope.dimension_count": d // 2,
        f"{arch}.leading_dense_block_count": 1,
        f"{arch}.feed_forward_length": dense,
        f"{arch}.expert_count": experts,
        f"{arch}.expert_used_count": used,
        f"{arch}.expert_shared_count": 1,
        f"{arch}.expert_feed_forward_length": width,
        f"{arch}.expert_weights_norm": True,
        f"{arch}.expert_gating_func": 2,
        f"{arch}.nextn_predict_layers": 1,
    }
    b = _Builder()
    b.ends(h, vocab)
    for il in range(trunk + 1):
        b.add(f"blk.{il}.attn_norm.weight", h)
        b.attention(il, h, heads * d, heads_kv * d, heads_kv * d, heads * d, bias=True)
        b.add(f"blk.{il}.post_attention_norm.weight", h)
        if il == 0:
            b.mlp(il, h, dense)
        else:
            b.add(f"blk.{il}.ffn_gate_inp.weight", h, experts)
            b.add(f"blk.{il}.exp_probs_b.bias", experts)
            b.experts(il, h, width, experts)
            b.mlp(il, h, width, "_shexp")
        if il == trunk:
            b.nextn(il, h)
    return ModelSpec(name, arch, kv, tuple(b.tensors), ctx)


def mixtral(large: bool = True) -> ModelSpec:
    """Mixtral 8x22B (or 8x7B): architecture ``llama`` with ``expert_count`` 8, top-2, experts of
    ``feed_forward_length`` width, 32768-token vocab."""
    arch = "llama"
    if large:
        name, layers, h, heads, heads_kv, width, ctx = "Mixtral-8x22B", 56, 6144, 48, 8, 16384, 65_536
    else:
        name, layers, h, heads, heads_kv, width, ctx = "Mixtral-8x7B", 32, 4096, 32, 8, 14336, 32_768
    d, experts, used, vocab = 128, 8, 2, 32_768
    kv = _base_kv(arch, name, layers, ctx, h, heads, vocab) | {
        f"{arch}.attention.head_count_kv": heads_kv,
        f"{arch}.rope.dimension_count": d,
        f"{arch}.feed_forward_length": width,
        f"{arch}.expert_count": experts,
        f"{arch}.expert_used_count": used,
    }
    b = _Builder()
    b.ends(h, vocab)
    for il in range(layers):
        b.add(f"blk.{il}.attn_norm.weight", h)
        b.attention(il, h, heads * d, heads_kv * d, heads_kv * d, heads * d)
        b.add(f"blk.{il}.ffn_norm.weight", h)
        b.add(f"blk.{il}.ffn_gate_inp.weight", h, experts)
        b.experts(il, h, width, experts)
    return ModelSpec(name, arch, kv, tuple(b.tensors), ctx)


def llama4() -> ModelSpec:
    """Llama-4-Scout-17B-16E: chunked (8192) attention in 3 of every 4 layers, every layer 16 experts
    top-1 plus a shared expert of the same width; the context is capped at 256k here."""
    arch, name, layers, h, heads, heads_kv, d = "llama4", "Llama-4-Scout-17B-16E", 48, 5120, 40, 8, 128
    experts, used, width, dense, vocab, ctx = 16, 1, 8192, 16384, 202_048, 262_144
    kv = _base_kv(arch, name, layers, ctx, h, heads, vocab) | {
        f"{arch}.attention.head_count_kv": heads_kv,
        f"{arch}.attention.key_length": d,
        f"{arch}.attention.value_length": d,
        f"{arch}.rope.dimension_count": d,
        f"{arch}.expert_count": experts,
        f"{arch}.expert_used_count": used,
        f"{arch}.expert_feed_forward_length": width,
        f"{arch}.feed_forward_length": dense,
        f"{arch}.interleave_moe_layer_step": 1,
    }
    b = _Builder()
    b.ends(h, vocab)
    for il in range(layers):
        b.add(f"blk.{il}.attn_norm.weight", h)
        b.attention(il, h, heads * d, heads_kv * d, heads_kv * d, heads * d)
        b.add(f"blk.{il}.ffn_norm.weight", h)
        b.add(f"blk.{il}.ffn_gate_inp.weight", h, experts)
        b.experts(il, h, width, experts)
        b.mlp(il, h, width, "_shexp")
    return ModelSpec(name, arch, kv, tuple(b.tensors), ctx)


MODELS: dict[str, Callable[[], ModelSpec]] = {
    "qwen3-30b-a3b": qwen3moe,
    "qwen3-235b-a22b": qwen3_235b,
    "qwen3-next-80b-a3b": qwen3next,
    "deepseek-v3": deepseek2,
    "deepseek-v2-lite": lambda: deepseek2(lite=True),
    "gpt-oss-120b": gpt_oss,
    "gpt-oss-20b": lambda: gpt_oss(large=False),
    "glm-4.5-air": glm4moe,
    "mixtral-8x22b": mixtral,
    "mixtral-8x7b": lambda: mixtral(large=False),
    "llama-4-scout": llama4,
}


def write_sparse_gguf(path: Path, spec: ModelSpec) -> int:
    """Write ``spec``'s header and extend the file over its (unwritten, sparse) data region plus a MiB
    of slack; returns the apparent size. Only the header occupies disk blocks."""
    writer = GGUFWriter(path, spec.arch)
    for key, value in spec.kv.items():
        add_kv(writer, key, value)
    total = 0
    for t in spec.tensors:
        writer.add_tensor_info(
            t.name, list(reversed(t.shape)), np.dtype(np.float32), t.nbytes, raw_dtype=t.qtype
        )
        total += GGUFWriter.ggml_pad(t.nbytes, writer.data_alignment)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    size = GGUFWriter.ggml_pad(path.stat().st_size, writer.data_alignment) + total + MiB
    os.truncate(path, size)
    return size


def ensure_gguf(key: str, directory: Path) -> tuple[Path, ModelSpec]:
    """The sparse GGUF for ``MODELS[key]`` under ``directory``, written unless already there."""
    spec = MODELS[key]()
    path = directory / f"{key}.gguf"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        write_sparse_gguf(path, spec)
    return path, spec


# ---- rpc servers ------------------------------------------------------------------------------------


def _free_port() -> int:
    """A port the kernel says is free on 127.0.0.1 now (a later bind can still race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Block until ``port`` accepts a connection; raise if the server exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ggml-rpc-server on port {port} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"ggml-rpc-server on port {port} did not listen within {timeout} s")


@contextlib.contextmanager
def rpc_servers(
    n: int, bin_dir: Path = DEFAULT_BIN, threads: int = 1, timeout: float = 20.0
) -> Iterator[str]:
    """Start ``n`` ggml-rpc-servers bound to 127.0.0.1 on free ports; yield the ``--rpc`` value
    (``127.0.0.1:P1,127.0.0.1:P2,...``, devices RPC0, RPC1, ... in that order); end each by its pid.

    Note: the connection probe of ``_wait_listening`` is seen by the server as a client that hangs up,
    which it survives."""
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for _ in range(n):
            port = _free_port()
            cmd = [str(bin_dir / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port), "-t", str(threads)]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            ports.append(port)
            _wait_listening(port, procs[-1], timeout)
        yield ",".join(f"127.0.0.1:{p}" for p in ports)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ---- llama-fit-params -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FitPrint:
    """fit-print's table: devices in llama.cpp's order, the host's line, and the run's log."""

    devices: dict[str, Usage]
    host: Usage
    log: str = field(repr=False, default="")
    seconds: float = 0.0


def parse_fit_print(stdout: str) -> tuple[dict[str, Usage], Usage]:
    """fit-print's device lines by device name, and its ``Host`` line (the product's own parser,
    solver.engines.llamacpp.verify)."""
    devices, host = verify.parse_fit_print(stdout)
    return {u.name: u for u in devices}, host


def fit_print(
    model: Path, rpc: str, args: Sequence[str], bin_dir: Path = DEFAULT_BIN, timeout: float = 120.0
) -> FitPrint:
    """Run ``llama-fit-params -m MODEL --rpc RPC --fit-print on ARGS`` and parse its table. Raises
    ``RuntimeError`` with the log's tail when llama.cpp refuses the command."""
    cmd = [str(bin_dir / "llama-fit-params"), "-m", str(model), "--rpc", rpc, "--fit-print", "on", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise RuntimeError(f"llama-fit-params exited {proc.returncode}: {tail}")
    devices, host = parse_fit_print(proc.stdout)
    return FitPrint(devices, host, proc.stderr, seconds)


_SCHED_RESERVE = re.compile(r"graph_reserve: reserving a graph for ubatch with n_tokens =\s*(\d+),")
_SCHED_NODE = re.compile(r"^node #\s*\d+ \(\s*([A-Z_]+)\): (.{20}) \(\s*(\d+[MK])\) \[\s*(\S+)", re.M)


def sched_dump(model: Path, rpc: str, args: Sequence[str], bin_dir: Path = DEFAULT_BIN) -> str:
    """The ``-v`` log of a fit-print run with ``GGML_SCHED_DEBUG=2``: every reserved graph's splits and
    nodes (op, name, size, backend). Large (a few MB): one line per node per reservation."""
    cmd = [
        str(bin_dir / "llama-fit-params"),
        "-m",
        str(model),
        "--rpc",
        rpc,
        "--fit-print",
        "on",
        "-v",
        *args,
    ]
    env = dict(os.environ, GGML_SCHED_DEBUG="2")
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=300)
    return re.sub(r"\d+\.\d+\.\d+\.\d+ [DIWE] ", "", proc.stderr)


def parse_sched_nodes(log: str, n_tokens: int) -> list[tuple[str, str, str, str]]:
    """``(op, name, size, backend)`` of each non-view node of the first graph reserved for
    ``n_tokens`` tokens (the one fit-params sizes) in a ``sched_dump`` log; sizes as ggml prints
    them (``4M``, ``255K``, truncated), names and backends truncated as ggml prints them."""
    parts = _SCHED_RESERVE.split(log)
    for i in range(1, len(parts), 2):
        if int(parts[i]) == n_tokens:
            return [(m[1], m[2].strip(), m[3], m[4]) for m in _SCHED_NODE.finditer(parts[i + 1])]
    raise ValueError(f"no graph reserved for {n_tokens} tokens in the log")


def parse_fit_command(text: str) -> dict[str, object]:
    """The fitted command fit-params prints without ``--fit-print`` (``-c N -ngl N [-ts a,b,...]
    [-ot "pattern=BUFT,..."]``, last line of stdout): ``{"c": int, "ngl": int, "ts": [int, ...],
    "ot": [(pattern, buffer type), ...]}`` (``ts`` and ``ot`` empty when absent)."""
    line = [ln for ln in text.strip().splitlines() if ln.strip()][-1]
    words = shlex.split(line)
    out: dict[str, object] = {"c": None, "ngl": None, "ts": [], "ot": []}
    for flag, value in zip(words[::2], words[1::2]):
        if flag == "-c":
            out["c"] = int(value)
        elif flag == "-ngl":
            out["ngl"] = int(value)
        elif flag == "-ts":
            out["ts"] = [int(v) for v in value.split(",")]
        elif flag == "-ot":
            out["ot"] = [tuple(item.rsplit("=", 1)) for item in value.split(",") if item]
        else:
            raise ValueError(f"unexpected {flag!r} in fit-params command: {line!r}")
    return out


@dataclass(frozen=True)
class LoaderLog:
    """What a ``-v`` log says about placement and sizes.

    ``layer_device``: the device of each layer (``load_tensors: layer N assigned to device X``; layer
    ``n_layer_all`` is the output layer). ``tensor_buffer``: the buffer type of the tensors this build
    names (overridden tensors, ``tensor NAME (SIZE MiB TYPE) buffer type overridden to BUFT``, and
    tensors the preferred buffer type refused, ``... cannot be used with preferred buffer type X,
    using Y instead``); other tensors are not listed per tensor. ``compute_buffers``: the reserved
    compute buffer per buffer type in MiB with two decimals (``sched_reserve: BUFT compute buffer
    size = X MiB``), finer than fit-print's whole MiB. Model and KV buffer lines exist too but read
    0.00 MiB under fit-params, which never allocates."""

    layer_device: dict[int, str]
    tensor_buffer: dict[str, str]
    compute_buffers: dict[str, float]


_LAYER = re.compile(r"load_tensors: layer\s+(\d+) assigned to device (\S+?),")
_OVERRIDE = re.compile(r"tensor (\S+) \([\d.]+ MiB \S+\) buffer type overridden to (\S+)")
_REFUSED = re.compile(
    r"tensor '(\S+)' \(\S+\) \(and \d+ others\) cannot be used with preferred buffer type \S+, "
    r"using (\S+) instead"
)
_COMPUTE = re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")


def parse_loader_log(log: str) -> LoaderLog:
    """Read layer placement, named tensors' buffer types and compute buffer sizes from a ``-v`` log
    (the last reservation wins when the log holds several)."""
    layers = {int(m[1]): m[2] for m in _LAYER.finditer(log)}
    tensors = {m[1]: m[2] for m in _OVERRIDE.finditer(log)}
    tensors.update({m[1]: m[2] for m in _REFUSED.finditer(log)})
    compute = {m[1]: float(m[2]) for m in _COMPUTE.finditer(log)}
    return LoaderLog(layers, tensors, compute)
