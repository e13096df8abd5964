"""``solve model from-hf``: a model file from a Hugging Face ``config.json`` and a stated weight scheme.

A config gives the shapes of every tensor, not their bytes; the bytes come from the weight scheme, so
the result is an estimate and says so. Tensors are named as llama.cpp's GGUF converter names them
(``attn_q``, ``ffn_down_exps``, ...), so ``expert_tensors`` and ``--override-tensor`` patterns mean
the same tensors for both importers. A tensor of ``n`` weights takes its storage type's whole blocks
(``solver.importers.ggmltypes``).

Two kinds of scheme:

- **llama-quantize recipes** (``Q2_K`` .. ``Q8_0``, ``IQ1_S`` .. ``IQ4_XS``, ``IQ4_NL``, the ``_S``/
  ``_M``/``_L`` mixes, ``MXFP4_MOE``): every tensor gets the type llama-quantize gives it, from a port
  of its rules (``solver.importers.quant``; docs/models.md lists the types per tensor class).
- **checkpoint schemes**, by tensor class:

============  =============================  ==========  =============  ==========  ====================
scheme        attention, dense and shared    routed      token          head        router, norms,
              MLPs                           experts     embeddings     (lm_head)   biases (1-D)
============  =============================  ==========  =============  ==========  ====================
BF16          16                             16          16             16          16
FP8           8 + a float32 scale per        as attn.    16             16          16 (router too)
              128 x 128 block (DeepSeek/
              Qwen FP8 checkpoints)
MXFP4         16                             4.25 (17 B  16             16          16
                                             per 32)
Q4_K          4.5 (144 B per 256) [Q5_0]     4.5         4.5            6.5625      32 (F32)
                                                                        (Q6_K)
============  =============================  ==========  =============  ==========  ====================

``Q4_K`` is one uniform type (not llama-quantize's ``Q4_K`` alias, which is ``Q4_K_M``). A block type
whose block does not divide a row falls back as llama.cpp does (in brackets; F16 when nothing fits).

KV cache: one K and one V row per token and layer at the ``--kv-type`` (f16 2 bytes per value; q8_0 34
bytes per 32; q4_0 18 per 32). Full attention (GQA) rows are ``num_key_value_heads x head_dim``
values; MLA keeps one row of the compressed latent and the RoPE key, ``kv_lora_rank +
qk_rope_head_dim``; a sliding-window or chunked layer holds at most the window, a fixed ``window x
per-token`` bytes (engines round it up by a batch); a Gated-DeltaNet (linear attention) layer holds its
convolution and recurrent state in float32 (as llama.cpp does), whatever the context.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from solver.config import COUNT_MAX, shown_path
from solver.errors import InputError, read_input
from solver.importers.ggmltypes import KV_TYPES, TYPES, row_bytes, tensor_bytes
from solver.importers.modelfile import MAX_EXPERTS, MAX_LAYERS, ImportedModel
from solver.importers.quant import FTYPES, Facts, assign_types

STATE_ELEMENT_BYTES = 4
FP8_BLOCK = 128


@dataclass(frozen=True)
class Format:
    """A checkpoint storage type: bits per weight; block formats need rows of ``block`` weights."""

    name: str
    bits: Fraction
    block: int = 1
    fallback: str | None = None


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("F32", Fraction(32)),
        Format("F16", Fraction(16)),
        Format("BF16", Fraction(16)),
        Format("FP8", Fraction(8)),
        Format("Q5_0", Fraction(11, 2), 32, "F16"),
        Format("Q4_K", Fraction(9, 2), 256, "Q5_0"),
        Format("Q6_K", Fraction(105, 16), 256, "Q8_0"),
        Format("Q8_0", Fraction(17, 2), 32, "F16"),
        Format("MXFP4", Fraction(17, 4), 32, "BF16"),
    )
}

#: Tensor classes: matrix (attention, dense and shared MLP), expert (routed experts), embed, head,
#: router, vector (norms, biases, sinks and other 1-D tensors).
CLASSES = ("matrix", "expert", "embed", "head", "router", "vector")


def _formats(*names: str) -> dict[str, str]:
    return dict(zip(CLASSES, names, strict=True))


#: The storage type of each tensor class under each checkpoint scheme (the docstring's table).
SCHEMES: dict[str, dict[str, str]] = {
    "BF16": _formats("BF16", "BF16", "BF16", "BF16", "BF16", "BF16"),
    "FP8": _formats("FP8", "FP8", "BF16", "BF16", "BF16", "BF16"),
    "MXFP4": _formats("BF16", "MXFP4", "BF16", "BF16", "BF16", "BF16"),
    "Q4_K": _formats("Q4_K", "Q4_K", "Q4_K", "Q6_K", "F32", "F32"),
}

#: Every ``--weights`` name: the checkpoint schemes, then llama-quantize's recipes.
WEIGHTS = (*SCHEMES, *(f for f in FTYPES if f not in SCHEMES))


@dataclass(frozen=True)
class Tensor:
    """One tensor of a layer: GGUF-style name, class, shape with the row (input) length last."""

    name: str
    cls: str
    shape: tuple[int, ...]
    expert: bool = False


def checkpoint_bytes(fmt: Format, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of ``shape`` stored as ``fmt`` (falling back when rows do not fit its blocks)."""
    while fmt.block > 1 and shape[-1] % fmt.block:
        fmt = FORMATS[str(fmt.fallback)]
    n = math.prod(shape)
    if fmt.name == "FP8" and len(shape) >= 2:
        out, row = shape[-2], shape[-1]
        scales = math.ceil(out / FP8_BLOCK) * math.ceil(row / FP8_BLOCK) * 4
        return n + math.prod(shape[:-2]) * scales
    if fmt.name == "FP8":
        fmt = FORMATS["BF16"]
    return math.ceil(n * fmt.bits / 8)


# ---- reading the config ---------------------------------------------------------------------------


class Config:
    """The model's config (``text_config`` unwrapped), with errors that name the file and key."""

    def __init__(self, data: dict[str, Any], shown: str, kv_type: str = "f16"):
        self.shown = shown
        text = data.get("text_config")
        self.data = text if isinstance(text, dict) and text else data
        self.type = str(self.data.get("model_type") or data.get("model_type") or "")
        self.top_type = str(data.get("model_type") or "")
        self.kv_name = kv_type
        self.kv_type = KV_TYPES[kv_type]

    def kv_text(self) -> str:
        """The cache type as the header says it: ``q8_0 KV cache (34 B per 32 values)``."""
        kind = self.kv_type
        per = "value" if kind.block == 1 else f"{kind.block} values"
        return f"{self.kv_name} KV cache ({kind.size} B per {per})"

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default)
        if value is None:
            raise InputError(self.shown, f"missing (a {self.type} config needs it)", key=key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(self.shown, f"expected a whole number >= 0, got {value!r}", key=key)
        if value > COUNT_MAX:
            raise InputError(self.shown, f"{value} is above the limit of {COUNT_MAX:,}", key=key)
        return value

    def positive(self, key: str, default: int | None = None) -> int:
        """A whole number >= 1 (a step, a count that divides)."""
        value = self.int(key, default)
        if value == 0:
            raise InputError(self.shown, "expected at least 1, got 0", key=key)
        return value

    def experts(self, key: str) -> int:
        """The routed expert count: 1..MAX_EXPERTS."""
        value = self.int(key)
        if value == 0:
            raise InputError(self.shown, "0 routed experts: not a mixture-of-experts model", key=key)
        if value > MAX_EXPERTS:
            raise InputError(self.shown, f"{value} experts is above the limit of {MAX_EXPERTS:,}", key=key)
        return value

    def layer_list(self, key: str, n: int) -> set[int]:
        """A list of layer indices (``mlp_only_layers``, ``moe_layers``), each in 0..n-1."""
        value = self.get(key, [])
        if not isinstance(value, list):
            raise InputError(self.shown, f"expected a list of layer numbers, got {value!r}", key=key)
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < n:
                raise InputError(
                    self.shown, f"{item!r} is not a layer of this {n}-layer model (0..{n - 1})", key=key
                )
        return set(value)

    def per_layer_list(self, key: str, n: int, allowed: tuple[Any, ...]) -> list[Any] | None:
        """A list with one entry per layer from ``allowed`` (``layer_types``), or None when absent."""
        value = self.get(key)
        if value is None or value == []:
            return None
        if not isinstance(value, list) or len(value) < n:
            got = f"{len(value)} entries" if isinstance(value, list) else repr(value)
            raise InputError(
                self.shown, f"expected a list of {n} entries (one per layer), got {got}", key=key
            )
        for item in value[:n]:
            if item not in allowed:
                known = ", ".join(repr(a) for a in allowed)
                raise InputError(self.shown, f"{item!r} is not one of {known}", key=key)
        return list(value[:n])

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def kv_row(self, elements: int) -> int:
        """Bytes of one KV cache row of ``elements`` values at the cache type."""
        return row_bytes(self.kv_type, elements)


@dataclass
class Layer:
    kind: str
    tensors: list[Tensor]
    experts: int


def _vec(name: str, n: int, expert: bool = False) -> Tensor:
    return Tensor(name, "vector", (n,), expert)


def _head_dim(c: Config) -> int:
    return c.int("head_dim", c.int("hidden_size") // max(c.int("num_attention_heads"), 1))


def _gqa(
    c: Config, *, gate: bool = False, qk_norm: str = "", bias: str = "", sinks: bool = False
) -> list[Tensor]:
    """Grouped-query attention: q, k, v, o (+ q/k norms, biases, sinks).

    ``qk_norm``: "head" (one norm of head_dim) or "layer" (over all heads); ``bias``: "qkv" or "qkvo".
    """
    h, nh, nkv = c.int("hidden_size"), c.int("num_attention_heads"), c.int("num_key_value_heads")
    d = _head_dim(c)
    q = nh * d * (2 if gate else 1)
    out = [
        Tensor("attn_q", "matrix", (q, h)),
        Tensor("attn_k", "matrix", (nkv * d, h)),
        Tensor("attn_v", "matrix", (nkv * d, h)),
        Tensor("attn_output", "matrix", (h, nh * d)),
    ]
    if "qkv" in bias:
        out += [_vec("attn_q.bias", q), _vec("attn_k.bias", nkv * d), _vec("attn_v.bias", nkv * d)]
    if bias == "qkvo":
        out.append(_vec("attn_output.bias", h))
    if qk_norm == "head":
        out += [_vec("attn_q_norm", d), _vec("attn_k_norm", d)]
    elif qk_norm == "layer":
        out += [_vec("attn_q_norm", nh * d), _vec("attn_k_norm", nkv * d)]
    if sinks:
        out.append(_vec("attn_sinks", nh))
    return out


def _gqa_kv(c: Config) -> int:
    """KV bytes per token of a GQA layer: one K and one V row of num_key_value_heads x head_dim."""
    return 2 * c.kv_row(c.int("num_key_value_heads") * _head_dim(c))


def _gqa_heads(c: Config) -> int:
    """llama.cpp's ``n_gqa()``: query heads per KV head."""
    nkv = c.int("num_key_value_heads")
    return c.int("num_attention_heads") // nkv if nkv else 0


def _mla(c: Config) -> list[Tensor]:
    """DeepSeek's multi-head latent attention."""
    h, nh = c.int("hidden_size"), c.int("num_attention_heads")
    kv, rope, nope, v = (
        c.int(k) for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    )
    out = []
    if c.has("q_lora_rank"):
        ql = c.int("q_lora_rank")
        out += [Tensor("attn_q_a", "matrix", (ql, h)), _vec("attn_q_a_norm", ql)]
        out.append(Tensor("attn_q_b", "matrix", (nh * (nope + rope), ql)))
    else:
        out.append(Tensor("attn_q", "matrix", (nh * (nope + rope), h)))
    return [
        *out,
        Tensor("attn_kv_a_mqa", "matrix", (kv + rope, h)),
        _vec("attn_kv_a_norm", kv),
        Tensor("attn_kv_b", "matrix", (nh * (nope + v), kv)),
        Tensor("attn_output", "matrix", (h, nh * v)),
    ]


def _gated_deltanet(c: Config, split_ba: bool) -> tuple[list[Tensor], int]:
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): its tensors and fixed state in bytes.

    llama.cpp's converter writes the q/k/v projection as ``attn_qkv`` and the output gate ``z`` as
    ``attn_gate``; beta and alpha are one ``ssm_ba`` (Qwen3-Next) or ``ssm_beta`` and ``ssm_alpha``.
    """
    h = c.int("hidden_size")
    nk, nv = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
    dk, dv, kernel = (
        c.int("linear_key_head_dim"),
        c.int("linear_value_head_dim"),
        c.int("linear_conv_kernel_dim"),
    )
    key, value = nk * dk, nv * dv
    conv = 2 * key + value
    ba = (
        [Tensor("ssm_beta", "matrix", (nv, h)), Tensor("ssm_alpha", "matrix", (nv, h))]
        if split_ba
        else [Tensor("ssm_ba", "matrix", (2 * nv, h))]
    )
    tensors = [
        Tensor("attn_qkv", "matrix", (conv, h)),
        Tensor("attn_gate", "matrix", (value, h)),
        *ba,
        _vec("ssm_conv1d", conv * kernel),
        _vec("ssm_dt", nv),
        _vec("ssm_a", nv),
        _vec("ssm_norm", dv),
        Tensor("ssm_out", "matrix", (h, value)),
    ]
    state = (conv * (kernel - 1) + nv * dk * dv) * STATE_ELEMENT_BYTES
    return tensors, state


def _mlp(h: int, width: int, suffix: str = "") -> list[Tensor]:
    return [
        Tensor(f"ffn_gate{suffix}", "matrix", (width, h)),
        Tensor(f"ffn_up{suffix}", "matrix", (width, h)),
        Tensor(f"ffn_down{suffix}", "matrix", (h, width)),
    ]


def _experts(h: int, n: int, width: int, bias: bool = False) -> list[Tensor]:
    out = [
        Tensor("ffn_gate_exps", "expert", (n, width, h), True),
        Tensor("ffn_up_exps", "expert", (n, width, h), True),
        Tensor("ffn_down_exps", "expert", (n, h, width), True),
    ]
    if bias:
        out += [
            Tensor("ffn_gate_exps.bias", "vector", (n, width), True),
            Tensor("ffn_up_exps.bias", "vector", (n, width), True),
            Tensor("ffn_down_exps.bias", "vector", (n, h), True),
        ]
    return out


def _router(h: int, e: int) -> Tensor:
    return Tensor("ffn_gate_inp", "router", (e, h))


def _norms(h: int) -> list[Tensor]:
    return [_vec("attn_norm", h), _vec("ffn_norm", h)]


# ---- the families --------------------------------------------------------------------------------


@dataclass
class Family:
    """What one architecture's reader returns: per-layer tensors and kinds, and notes for the header.

    ``gqa`` is llama.cpp's query heads per KV head (the recipes test it); ``nextn`` the
    next-token-prediction blocks llama.cpp's converter keeps after the layers.
    """

    layers: list[Layer]
    kv: dict[str, int]
    state: dict[str, int]
    active: int
    notes: dict[str, str]
    gqa: int
    nextn: int = 0
    nextn_note: str = ""


def _mtp_kept(family: Family, c: Config, key: str) -> None:
    """The config's next-token-prediction layers, which llama.cpp's converter appends as blocks."""
    family.nextn = c.int(key, 0)
    if family.nextn:
        family.nextn_note = f"{key} {family.nextn}: llama.cpp's converter appends them after the layers"


def _sparse_qwen(c: Config, n: int) -> list[bool]:
    """Qwen's MoE layers: every ``decoder_sparse_step``-th layer, less ``mlp_only_layers``."""
    step = c.positive("decoder_sparse_step", 1)
    only = c.layer_list("mlp_only_layers", n)
    return [i not in only and (i + 1) % step == 0 for i in range(n)]


def _qwen3moe(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.experts("num_experts")
    moe = _sparse_qwen(c, n)
    layers = []
    for i in range(n):
        ffn = (
            [_router(h, e), *_experts(h, e, c.int("moe_intermediate_size"))]
            if moe[i]
            else _mlp(h, c.int("intermediate_size"))
        )
        layers.append(Layer("full", [*_gqa(c, qk_norm="head"), *ffn, *_norms(h)], e if moe[i] else 0))
    notes = {"kinds": "every layer full attention (GQA, q/k norms)"}
    return Family(layers, {"full": _gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes, _gqa_heads(c))


def _shared_expert(h: int, width: int) -> list[Tensor]:
    """Qwen's shared expert and its sigmoid gate (``shared_expert_gate``, one weight per hidden unit)."""
    return [*_mlp(h, width, "_shexp"), _vec("ffn_gate_inp_shexp", h)] if width else []


def _qwen2moe(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.experts("num_experts")
    moe = _sparse_qwen(c, n)
    shared = c.int("shared_expert_intermediate_size", 0)
    attn = _gqa(c, bias="qkv")
    layers = []
    for i in range(n):
        if moe[i]:
            ffn = [_router(h, e), *_experts(h, e, c.int("moe_intermediate_size")), *_shared_expert(h, shared)]
        else:
            ffn = _mlp(h, c.int("intermediate_size"))
        layers.append(Layer("full", [*attn, *ffn, *_norms(h)], e if moe[i] else 0))
    notes = {
        "kinds": "every layer full attention (GQA, q/k/v biases)",
        "dense_bytes": f"includes one shared expert of width {shared} and its gate",
    }
    return Family(layers, {"full": _gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes, _gqa_heads(c))


def _hybrid_kinds(c: Config, n: int) -> tuple[list[str], str]:
    """Qwen3-Next/Qwen3.5 layer kinds: ``layer_types``, else every ``full_attention_interval``-th full."""
    types = c.per_layer_list("layer_types", n, ("linear_attention", "full_attention"))
    if types is not None:
        return ["linear" if t == "linear_attention" else "full" for t in types], "layer_types"
    every = c.positive("full_attention_interval", 4)
    return [
        "full" if (i + 1) % every == 0 else "linear" for i in range(n)
    ], f"full_attention_interval = {every}"


def _qwen_hybrid(c: Config, n: int, split_ba: bool) -> Family:
    """Qwen3-Next (``split_ba`` False) and Qwen3.5/3.6 MoE: gated full attention, Gated DeltaNet, MoE."""
    h, e = c.int("hidden_size"), c.experts("num_experts")
    kinds, how = _hybrid_kinds(c, n)
    linear, state = _gated_deltanet(c, split_ba)
    moe = _sparse_qwen(c, n)
    shared = c.int("shared_expert_intermediate_size", 0)
    full = _gqa(c, gate=bool(c.get("attn_output_gate", True)), qk_norm="head")
    layers = []
    for i in range(n):
        attn = full if kinds[i] == "full" else linear
        if moe[i]:
            ffn = [_router(h, e), *_experts(h, e, c.int("moe_intermediate_size")), *_shared_expert(h, shared)]
        else:
            ffn = _mlp(h, c.int("intermediate_size"))
        layers.append(Layer(kinds[i], [*attn, *ffn, *_norms(h)], e if moe[i] else 0))
    notes = {
        "kinds": f"{how}: gated full attention (GQA) or Gated DeltaNet linear attention",
        "state_bytes": "linear: (conv_dim x (linear_conv_kernel_dim - 1) + value heads x key dim x value dim)"
        " x 4 B (float32)",
        "dense_bytes": f"includes one shared expert of width {shared} and its gate",
    }
    family = Family(
        layers,
        {"full": _gqa_kv(c), "linear": 0},
        {"full": 0, "linear": state},
        c.int("num_experts_per_tok"),
        notes,
        _gqa_heads(c),
    )
    if split_ba:
        _mtp_kept(family, c, "mtp_num_hidden_layers")
    return family


def _qwen3next(c: Config, n: int) -> Family:
    return _qwen_hybrid(c, n, split_ba=False)


def _qwen35moe(c: Config, n: int) -> Family:
    return _qwen_hybrid(c, n, split_ba=True)


def _deepseek(c: Config, n: int) -> Family:
    """DeepSeek-V2/V3 and GLM-4.7-Flash (``glm4_moe_lite``): MLA, leading dense layers, shared experts."""
    h, e = c.int("hidden_size"), c.experts("n_routed_experts")
    k, freq = c.int("first_k_dense_replace", 0), c.positive("moe_layer_freq", 1)
    shared = c.int("n_shared_experts", 0) * c.int("moe_intermediate_size")
    bias = c.get("topk_method") == "noaux_tc"
    layers = []
    for i in range(n):
        moe = i >= k and i % freq == 0
        if moe:
            ffn = [_router(h, e), *_experts(h, e, c.int("moe_intermediate_size"))]
            ffn += [_vec("exp_probs_b", e)] if bias else []
            ffn += _mlp(h, shared, "_shexp") if shared else []
        else:
            ffn = _mlp(h, c.int("intermediate_size"))
        layers.append(Layer("full", [*_mla(c), *ffn, *_norms(h)], e if moe else 0))
    rank, rope = c.int("kv_lora_rank"), c.int("qk_rope_head_dim")
    notes = {
        "kinds": "every layer MLA (multi-head latent attention)",
        "kv_bytes_per_token": f"MLA: one {c.kv_name} row of kv_lora_rank {rank} + qk_rope_head_dim {rope}",
        "dense_bytes": f"first_k_dense_replace = {k} dense layers"
        + (f"; shared experts of width {shared} in the MoE layers" if shared else ""),
    }
    # llama.cpp's MLA files have one KV head: n_gqa is the query head count.
    family = Family(
        layers,
        {"full": c.kv_row(rank + rope)},
        {},
        c.int("num_experts_per_tok"),
        notes,
        c.int("num_attention_heads"),
    )
    if c.type == "glm4_moe_lite":
        _mtp_kept(family, c, "num_nextn_predict_layers")
    elif mtp := c.int("num_nextn_predict_layers", 0):
        family.nextn_note = f"num_nextn_predict_layers {mtp}: llama.cpp's converter leaves DeepSeek's out"
    return family


def _glm4moe(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.experts("n_routed_experts")
    k = c.int("first_k_dense_replace", 0)
    shared = c.int("n_shared_experts", 0) * c.int("moe_intermediate_size")
    qk = "head" if c.get("use_qk_norm", False) else ""
    attn = _gqa(c, qk_norm=qk, bias="qkv" if c.get("attention_bias") else "")
    layers = []
    for i in range(n):
        if i >= k:
            ffn = [_router(h, e), _vec("exp_probs_b", e)]
            ffn += [
                *_experts(h, e, c.int("moe_intermediate_size")),
                *(_mlp(h, shared, "_shexp") if shared else []),
            ]
        else:
            ffn = _mlp(h, c.int("intermediate_size"))
        layers.append(Layer("full", [*attn, *ffn, *_norms(h)], e if i >= k else 0))
    notes = {
        "kinds": "every layer full attention (GQA)",
        "dense_bytes": f"first_k_dense_replace = {k} dense layers; shared experts of width {shared}",
    }
    family = Family(layers, {"full": _gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes, _gqa_heads(c))
    _mtp_kept(family, c, "num_nextn_predict_layers")
    return family


def _gptoss(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.experts("num_local_experts")
    types = c.per_layer_list("layer_types", n, ("sliding_attention", "full_attention")) or [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)
    ]
    kinds = ["sliding" if t == "sliding_attention" else "full" for t in types]
    width = c.int("intermediate_size")
    attn = _gqa(c, bias="qkvo", sinks=True)
    ffn = [_router(h, e), _vec("ffn_gate_inp.bias", e), *_experts(h, e, width, bias=True)]
    layers = [Layer(kind, [*attn, *ffn, *_norms(h)], e) for kind in kinds]
    window = c.int("sliding_window")
    per_token = _gqa_kv(c)
    notes = {
        "kinds": "layer_types: sliding-window and full attention (GQA with sinks)",
        "state_bytes": f"sliding: the window of {window} tokens x {per_token} B, held whatever the context",
    }
    active = c.int("num_experts_per_tok", c.get("experts_per_token"))
    return Family(
        layers,
        {"full": per_token, "sliding": 0},
        {"full": 0, "sliding": window * per_token},
        active,
        notes,
        _gqa_heads(c),
    )


def _mixtral(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.experts("num_local_experts")
    kind = "sliding" if c.has("sliding_window") else "full"
    ffn = [_router(h, e), *_experts(h, e, c.int("intermediate_size"))]
    layers = [Layer(kind, [*_gqa(c), *ffn, *_norms(h)], e) for _ in range(n)]
    per_token = _gqa_kv(c)
    if kind == "sliding":
        window = c.int("sliding_window")
        kv, state = {"sliding": 0}, {"sliding": window * per_token}
        notes = {"kinds": f"every layer sliding-window attention ({window} tokens)"}
    else:
        kv, state, notes = {"full": per_token}, {}, {"kinds": "every layer full attention (GQA)"}
    return Family(layers, kv, state, c.int("num_experts_per_tok"), notes, _gqa_heads(c))


def _llama4(c: Config, n: int) -> Family:
    """Llama 4: MoE every ``interleave_moe_layer_step``-th layer (or ``moe_layers``) with a shared
    expert, dense layers of ``intermediate_size_mlp``; chunked attention on the RoPE layers."""
    h, e = c.int("hidden_size"), c.experts("num_local_experts")
    if c.get("moe_layers"):
        moe = c.layer_list("moe_layers", n)
        how = "moe_layers"
    else:
        step = c.positive("interleave_moe_layer_step", 1)
        moe = set(range(step - 1, n, step))
        how = f"interleave_moe_layer_step = {step}"
    rope = c.per_layer_list("no_rope_layers", n, (0, 1))
    if rope is None:
        every = c.positive("no_rope_layer_interval", 4)
        rope = [int((i + 1) % every != 0) for i in range(n)]
    chunk = c.int("attention_chunk_size", 0)
    kinds = ["chunked" if chunk and rope[i] else "full" for i in range(n)]
    width = c.int("intermediate_size")
    attn = _gqa(c)
    layers = []
    for i in range(n):
        if i in moe:
            ffn = [_router(h, e), *_experts(h, e, width), *_mlp(h, width, "_shexp")]
        else:
            ffn = _mlp(h, c.int("intermediate_size_mlp"))
        layers.append(Layer(kinds[i], [*attn, *ffn, *_norms(h)], e if i in moe else 0))
    per_token = _gqa_kv(c)
    notes = {
        "kinds": f"chunked attention ({chunk} tokens) on the RoPE layers (no_rope_layers), else full",
        "state_bytes": f"chunked: the chunk of {chunk} tokens x {per_token} B, held whatever the context",
        "dense_bytes": f"{how}; a shared expert of width {width} in each MoE layer",
    }
    return Family(
        layers,
        {"full": per_token, "chunked": 0},
        {"full": 0, "chunked": chunk * per_token},
        c.int("num_experts_per_tok"),
        notes,
        _gqa_heads(c),
    )


def _ernie(c: Config, n: int) -> Family:
    """ERNIE-4.5 MoE: MoE from ``moe_layer_start_index`` every ``moe_layer_interval``-th layer."""
    h, e = c.int("hidden_size"), c.experts("moe_num_experts")
    start, step = c.int("moe_layer_start_index", 0), c.positive("moe_layer_interval", 1)
    end = c.get("moe_layer_end_index", -1)
    if isinstance(end, bool) or not isinstance(end, int) or end < -1:
        raise InputError(c.shown, f"expected a layer number or -1, got {end!r}", key="moe_layer_end_index")
    end = n - 1 if end == -1 else end
    width = c.int("moe_intermediate_size")
    shared = c.int("moe_num_shared_experts", 0) * width
    attn = _gqa(c, bias="qkvo" if c.get("use_bias", False) else "")
    layers = []
    for i in range(n):
        moe = start <= i <= end and (i + 1) % step == 0
        if moe:
            ffn = [_router(h, e), _vec("exp_probs_b", e), *_experts(h, e, width)]
            ffn += _mlp(h, shared, "_shexp") if shared else []
        else:
            ffn = _mlp(h, c.int("intermediate_size"))
        layers.append(Layer("full", [*attn, *ffn, *_norms(h)], e if moe else 0))
    notes = {
        "kinds": "every layer full attention (GQA)",
        "dense_bytes": f"moe_layer_start_index {start}, moe_layer_interval {step}; shared experts of width"
        f" {shared} (moe_num_shared_experts x moe_intermediate_size)",
    }
    return Family(layers, {"full": _gqa_kv(c)}, {}, c.int("moe_k"), notes, _gqa_heads(c))


def _minimax_m2(c: Config, n: int) -> Family:
    """MiniMax-M2: every layer MoE, per-layer q/k norms, a routing bias; no shared expert."""
    h, e = c.int("hidden_size"), c.experts("num_local_experts")
    attn = _gqa(c, qk_norm="layer" if c.get("use_qk_norm", True) else "")
    bias = [_vec("exp_probs_b", e)] if c.get("use_routing_bias", True) else []
    ffn = [_router(h, e), *bias, *_experts(h, e, c.int("intermediate_size"))]
    layers = [Layer("full", [*attn, *ffn, *_norms(h)], e) for _ in range(n)]
    notes = {"kinds": "every layer full attention (GQA, q/k norms over all heads)"}
    family = Family(layers, {"full": _gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes, _gqa_heads(c))
    if mtp := c.int("num_mtp_modules", 0):
        family.nextn_note = f"num_mtp_modules {mtp}: llama.cpp's converter leaves MiniMax's out"
    return family


def _olmoe(c: Config, n: int) -> Family:
    """OLMoE: every layer MoE, q/k norms over all heads; no shared expert."""
    h, e = c.int("hidden_size"), c.experts("num_experts")
    ffn = [_router(h, e), *_experts(h, e, c.int("intermediate_size"))]
    layers = [Layer("full", [*_gqa(c, qk_norm="layer"), *ffn, *_norms(h)], e) for _ in range(n)]
    notes = {"kinds": "every layer full attention (GQA, q/k norms over all heads)"}
    return Family(layers, {"full": _gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes, _gqa_heads(c))


#: ``model_type`` (the text model's when the config wraps one) -> reader.
FAMILIES: dict[str, Callable[[Config, int], Family]] = {
    "qwen3_moe": _qwen3moe,
    "qwen2_moe": _qwen2moe,
    "qwen3_next": _qwen3next,
    "qwen3_5_moe": _qwen35moe,
    "qwen3_5_moe_text": _qwen35moe,
    "deepseek_v3": _deepseek,
    "deepseek_v2": _deepseek,
    "glm4_moe_lite": _deepseek,
    "glm4_moe": _glm4moe,
    "gpt_oss": _gptoss,
    "mixtral": _mixtral,
    "llama4": _llama4,
    "llama4_text": _llama4,
    "ernie4_5_moe": _ernie,
    "minimax_m2": _minimax_m2,
    "olmoe": _olmoe,
}


# ---- the model ------------------------------------------------------------------------------------


def _load(path: Path) -> tuple[dict[str, Any], str]:
    shown = shown_path(path)
    raw = read_input(path, shown, "a Hugging Face config.json")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InputError(shown, f"not a JSON file: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(shown, "expected a JSON object (a Hugging Face config.json)")
    return data, shown


def _default_name(data: dict[str, Any], path: Path) -> str:
    named = data.get("_name_or_path")
    if isinstance(named, str) and named.strip():
        return named.rstrip("/").split("/")[-1]
    cached = checkpoint_of(path)
    if isinstance(cached, str):  # Hugging Face's cache: the repository's name, not the revision's hash
        return cached.split("/")[-1]
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def _gguf_name(prefix: str, t: Tensor) -> str:
    """The tensor's GGUF name: ``blk.N.attn_q.weight``; biases and ``ssm_a`` keep their own suffix."""
    return f"{prefix}{t.name}" if "." in t.name else f"{prefix}{t.name}.weight"


@dataclass
class _Sizes:
    """Bytes of every tensor by GGUF name, and how the scheme stored them (for the header)."""

    by_name: dict[str, int]
    kind: dict[str, str]
    summary: str


def _sizes(scheme: str, entries: list[tuple[str, Tensor, int]], facts: Facts) -> _Sizes:
    """Bytes of each (GGUF name, tensor, layer) under ``scheme``."""
    if scheme in SCHEMES:
        table = SCHEMES[scheme]
        sizes = {name: checkpoint_bytes(FORMATS[table[t.cls]], t.shape) for name, t, _ in entries}
        summary = f"{scheme}: " + ", ".join(f"{cls} {table[cls]}" for cls in CLASSES)
        return _Sizes(sizes, {name: table[t.cls] for name, t, _ in entries}, summary)
    types = assign_types(scheme, [(name, t.shape) for name, t, _ in entries], facts)
    sizes = {name: tensor_bytes(TYPES[types[name]], t.shape) for name, t, _ in entries}
    counts = Counter(types.values())
    used = ", ".join(f"{kind} x {counts[kind]}" for kind in sorted(counts, key=lambda k: -counts[k]))
    summary = (
        f"{scheme}: llama-quantize's recipe (docs/models.md; an imatrix assumed), tensors by type: {used}"
    )
    return _Sizes(sizes, types, summary)


#: A file of Hugging Face's cache: models--ORG--NAME/snapshots/REVISION/config.json.
_HF_CACHE = re.compile(r"models--(?P<org>[^/\\]+?)--(?P<name>[^/\\]+)$")


def checkpoint_of(config_path: Path) -> str | Path | None:
    """What vLLM and SGLang would load for this config: the Hugging Face id when the file is in Hugging
    Face's cache, the folder when it holds the weights (``*.safetensors``), else None (not known)."""
    folder = config_path.resolve().parent
    if folder.parent.name == "snapshots":
        cached = _HF_CACHE.match(folder.parent.parent.name)
        if cached:
            return f"{cached['org']}/{cached['name']}"
    return folder if any(folder.glob("*.safetensors")) else None


def read_hf(config_path: Path, weights: str, name: str | None = None, kv_type: str = "f16") -> ImportedModel:
    """The model a Hugging Face config describes, with bytes estimated for weight scheme ``weights``."""
    data, shown = _load(config_path)
    scheme = weights.upper()
    if scheme not in WEIGHTS:
        hint = ""
        if scheme.endswith("_XL") or scheme.startswith("UD-"):
            hint = (
                " (Unsloth's _XL/UD files choose types per tensor from their own measurements, not from a"
                " llama-quantize recipe: run solve model from-gguf on the file for exact bytes)"
            )
        raise InputError(shown, f"unknown weight scheme {weights!r}{hint}; known: {', '.join(WEIGHTS)}")
    if kv_type not in KV_TYPES:
        raise InputError(shown, f"unknown KV cache type {kv_type!r} (expected one of {', '.join(KV_TYPES)})")
    c = Config(data, shown, kv_type)
    family_type = c.type if c.type in FAMILIES else c.top_type
    if family_type not in FAMILIES:
        raise InputError(
            shown,
            f"unsupported model_type {c.type or '(none)'!r}; supported: {', '.join(FAMILIES)}; for another"
            " model write the model file by hand (docs/reference.md, 'The model file')",
            key="model_type",
        )
    n = c.int("num_hidden_layers")
    if n == 0:
        raise InputError(shown, "expected at least one layer, got 0", key="num_hidden_layers")
    if n > MAX_LAYERS:
        raise InputError(shown, f"{n} layers is above the limit of {MAX_LAYERS:,}", key="num_hidden_layers")
    fam = FAMILIES[family_type](c, n)
    moe_layers = sum(1 for layer in fam.layers if layer.experts)
    if not moe_layers:
        raise InputError(shown, "no layer has routed experts: not a mixture-of-experts model")
    most = max(layer.experts for layer in fam.layers)
    if not 0 < fam.active <= most:
        raise InputError(shown, f"top-k {fam.active} is not in 1..{most} (the routed experts)")
    if fam.nextn > MAX_LAYERS:
        raise InputError(
            shown, f"{fam.nextn} next-token-prediction layers is above the limit of {MAX_LAYERS:,}"
        )
    h, vocab = c.int("hidden_size"), c.int("vocab_size")
    tied = bool(c.get("tie_word_embeddings", data.get("tie_word_embeddings", False)))

    embed = Tensor("token_embd", "embed", (vocab, h))
    head = Tensor("output", "head", (vocab, h))
    norm = _vec("output_norm", h)
    entries = [
        (_gguf_name(f"blk.{i}.", t), t, i) for i, layer in enumerate(fam.layers) for t in layer.tensors
    ]
    entries += [("token_embd.weight", embed, n), ("output_norm.weight", norm, n)]
    if not tied or scheme in SCHEMES:
        entries.append(("output.weight", head, n))
    facts = Facts(n_expert=most, n_gqa=fam.gqa, n_blocks=n + fam.nextn)
    sizes = _sizes(scheme, entries, facts)

    expert_tensors: dict[str, list[int]] = {}
    dense, expert_bytes = [], []
    for i, layer in enumerate(fam.layers):
        own = 0
        for t in layer.tensors:
            size = sizes.by_name[_gguf_name(f"blk.{i}.", t)]
            if t.expert:
                expert_tensors.setdefault(t.name, [0] * n)[i] = size
            else:
                own += size
        dense.append(own)
        total = sum(v[i] for v in expert_tensors.values())
        expert_bytes.append(-(-total // layer.experts) if layer.experts else 0)

    first = sizes.by_name["token_embd.weight"]
    last = sizes.by_name.get("output.weight", first) + sizes.by_name["output_norm.weight"]
    kinds = [layer.kind for layer in fam.layers]
    used = set(kinds)
    layers_note = f"num_hidden_layers = {n}"
    if fam.nextn_note and not fam.nextn:
        layers_note += f"; {fam.nextn_note}"
    head_type = sizes.kind.get("output.weight", sizes.kind["token_embd.weight"])
    sources = {
        "source": f"{shown} (model_type {c.type}), weights {sizes.summary}",
        "layers": layers_note,
        "experts": f"{moe_layers} MoE layers of {most} routed experts",
        "active_experts": "the config's top-k (experts per token)",
        "expert_bytes": "the layer's expert tensors at the scheme's types over its experts, rounded up",
        "dense_bytes": "attention, router, shared experts and norms of the layer at the scheme's types",
        "first_stage_bytes": f"token embeddings {vocab} x {h} ({sizes.kind['token_embd.weight']}): vLLM and"
        " SGLang load them on the first stage",
        "last_stage_bytes": f"lm_head {vocab} x {h} ({head_type}) + final norm"
        + (" (tied to the embeddings; the last stage still holds it)" if tied else ""),
        "kv_bytes_per_token": c.kv_text(),
        "max_context": "max_position_embeddings",
        **fam.notes,
    }
    if fam.nextn:
        sources["nextn_layers"] = fam.nextn_note
    return ImportedModel(
        kv_type=kv_type,
        name=name or _default_name(data, config_path),
        arch=c.type,
        layers=n,
        experts=[layer.experts for layer in fam.layers],
        active_experts=fam.active,
        expert_bytes=expert_bytes,
        expert_tensors=expert_tensors,
        dense_bytes=dense,
        kinds=kinds,
        state_bytes={k: v for k, v in fam.state.items() if k in used},
        kv_bytes_per_token={k: v for k, v in fam.kv.items() if k in used},
        first_stage_bytes=first,
        last_stage_bytes=last,
        estimate=True,
        vocab_size=vocab,
        embedding_bytes=first,
        sources=sources,
        max_context=c.int("max_position_embeddings") if c.has("max_position_embeddings") else None,
        nextn_layers=fam.nextn,
    )
