"""``solve model from-hf``: a model file from a Hugging Face ``config.json`` and a stated weight scheme.

A config gives the shapes of every tensor, not their bytes; the bytes come from the scheme's bits per
tensor class (``SCHEMES`` below), so the result is an estimate and says so. Tensors are named as
llama.cpp's GGUF converter names them (``attn_q``, ``ffn_down_exps``, ...), so ``expert_tensors`` and
``--override-tensor`` patterns mean the same tensors for both importers.

Weight schemes (bits per weight by tensor class; a tensor of ``n`` weights takes ``ceil(n * bits / 8)``
bytes; the block formats need rows of a whole number of blocks, else llama.cpp falls back to the type in
brackets, as ``llama_tensor_get_type`` does for rows not divisible by 256):

============  =============================  ==========  =============  ==========  ====================
scheme        attention, dense and shared    routed      token          head        router, norms,
              MLPs                           experts     embeddings     (lm_head)   biases (1-D)
============  =============================  ==========  =============  ==========  ====================
BF16          16                             16          16             16          16
FP8           8 + a float32 scale per        as attn.    16             16          16 (router too)
              128 x 128 block (DeepSeek/
              Qwen FP8 checkpoints)
Q8_0          8.5 (34 B per 32)              8.5         8.5            8.5         32 (F32)
Q4_K          4.5 (144 B per 256) [Q5_0,     4.5         4.5            6.5625      32
              5.5 bits]                                                  (Q6_K)
Q4_K_M        Q4_K, but ``attn_v`` and every ``ffn_down`` (dense, shared, routed) in Q6_K (6.5625 bits,
              210 B per 256) [Q8_0] on llama.cpp's ``use_more_bits`` layers: the first and last eighth of
              the layers and every third layer between them
MXFP4         16                             4.25 (17 B  16             16          16
                                             per 32)
============  =============================  ==========  =============  ==========  ====================

Q4_K_M is a simplification of llama-quantize's mix: its other rules (Q8_0 ``attn_k``/``attn_v`` for
8-expert models, per-architecture exceptions, imatrix-driven choices) are left out, so a real Q4_K_M file
differs by a few percent; ``solve model from-gguf`` on the file itself is exact.

KV cache and state: 2 bytes per element (a BF16/FP16 KV cache). Full attention (GQA) keeps
``2 x num_key_value_heads x head_dim`` elements per token and layer; MLA keeps the compressed latent and
the RoPE key, ``kv_lora_rank + qk_rope_head_dim``; a sliding-window layer holds at most the window, a
fixed ``window x per-token`` bytes (engines round it up by a batch); a Gated-DeltaNet (linear attention)
layer holds its convolution and recurrent state in float32 (as llama.cpp does), whatever the context.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from solver.config import shown_path
from solver.errors import InputError, read_input
from solver.importers.modelfile import ImportedModel

KV_ELEMENT_BYTES = 2
STATE_ELEMENT_BYTES = 4
FP8_BLOCK = 128


@dataclass(frozen=True)
class Format:
    """A tensor storage type: bits per weight; block formats need rows of ``block`` weights."""

    name: str
    bits: Fraction
    block: int = 1
    fallback: str | None = None


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("F32", Fraction(32)),
        Format("BF16", Fraction(16)),
        Format("FP8", Fraction(8)),
        Format("Q8_0", Fraction(17, 2), 32, "BF16"),
        Format("Q5_0", Fraction(11, 2), 32, "Q8_0"),
        Format("Q4_K", Fraction(9, 2), 256, "Q5_0"),
        Format("Q6_K", Fraction(105, 16), 256, "Q8_0"),
        Format("MXFP4", Fraction(17, 4), 32, "BF16"),
    )
}

#: Tensor classes: matrix (attention, dense and shared MLP), expert (routed experts), embed, head,
#: router, vector (norms, biases, sinks and other 1-D tensors).
CLASSES = ("matrix", "expert", "embed", "head", "router", "vector")


def _formats(*names: str) -> dict[str, str]:
    return dict(zip(CLASSES, names, strict=True))


#: The storage type of each tensor class under each weight scheme (the docstring's table).
SCHEMES: dict[str, dict[str, str]] = {
    "BF16": _formats("BF16", "BF16", "BF16", "BF16", "BF16", "BF16"),
    "FP8": _formats("FP8", "FP8", "BF16", "BF16", "BF16", "BF16"),
    "Q8_0": _formats("Q8_0", "Q8_0", "Q8_0", "Q8_0", "F32", "F32"),
    "Q4_K": _formats("Q4_K", "Q4_K", "Q4_K", "Q6_K", "F32", "F32"),
    "Q4_K_M": _formats("Q4_K", "Q4_K", "Q4_K", "Q6_K", "F32", "F32"),
    "MXFP4": _formats("BF16", "MXFP4", "BF16", "BF16", "BF16", "BF16"),
}

#: Q4_K_M: these tensors are Q6_K on the ``use_more_bits`` layers.
MORE_BITS_TENSORS = ("attn_v", "ffn_down", "ffn_down_shexp", "ffn_down_exps")


def use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's rule for the layers a _M mix gives more bits (llama-quant.cpp ``use_more_bits``)."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


@dataclass(frozen=True)
class Tensor:
    """One tensor of a layer: GGUF-style name, class, shape with the row (input) length last."""

    name: str
    cls: str
    shape: tuple[int, ...]
    expert: bool = False


def tensor_bytes(fmt: Format, shape: tuple[int, ...]) -> int:
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


def format_of(scheme: str, t: Tensor, layer: int, layers: int) -> Format:
    """The storage type of tensor ``t`` of ``layer`` under ``scheme``."""
    if scheme == "Q4_K_M" and t.name in MORE_BITS_TENSORS and use_more_bits(layer, layers):
        return FORMATS["Q6_K"]
    return FORMATS[SCHEMES[scheme][t.cls]]


# ---- reading the config ---------------------------------------------------------------------------


class Config:
    """The model's config (``text_config`` unwrapped), with errors that name the file and key."""

    def __init__(self, data: dict[str, Any], shown: str):
        self.shown = shown
        text = data.get("text_config")
        self.data = text if isinstance(text, dict) and text else data
        self.type = str(self.data.get("model_type") or data.get("model_type") or "")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default)
        if value is None:
            raise InputError(self.shown, f"missing (a {self.type} config needs it)", key=key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(self.shown, f"expected a whole number >= 0, got {value!r}", key=key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value


@dataclass
class Layer:
    kind: str
    tensors: list[Tensor]
    experts: int


def _vec(name: str, n: int, expert: bool = False) -> Tensor:
    return Tensor(name, "vector", (n,), expert)


def _gqa(
    c: Config, *, gate: bool = False, qk_norm: bool = False, bias: str = "", sinks: bool = False
) -> list[Tensor]:
    """Grouped-query attention: q, k, v, o (+ q/k norms, biases, sinks). ``bias``: "qkv" or "qkvo"."""
    h, nh, nkv = c.int("hidden_size"), c.int("num_attention_heads"), c.int("num_key_value_heads")
    d = c.int("head_dim", h // max(nh, 1))
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
    if qk_norm:
        out += [_vec("attn_q_norm", d), _vec("attn_k_norm", d)]
    if sinks:
        out.append(_vec("attn_sinks", nh))
    return out


def _gqa_kv(c: Config) -> int:
    h, nh = c.int("hidden_size"), c.int("num_attention_heads")
    return 2 * c.int("num_key_value_heads") * c.int("head_dim", h // max(nh, 1)) * KV_ELEMENT_BYTES


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


def _gated_deltanet(c: Config) -> tuple[list[Tensor], int]:
    """Qwen3-Next's linear attention: its tensors and its fixed state in bytes."""
    h = c.int("hidden_size")
    nk, nv = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
    dk, dv, kernel = (
        c.int("linear_key_head_dim"),
        c.int("linear_value_head_dim"),
        c.int("linear_conv_kernel_dim"),
    )
    key, value = nk * dk, nv * dv
    conv = 2 * key + value
    tensors = [
        Tensor("ssm_in", "matrix", (2 * key + 2 * value, h)),
        Tensor("ssm_ba", "matrix", (2 * nv, h)),
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


def _norms(h: int) -> list[Tensor]:
    return [_vec("attn_norm", h), _vec("ffn_norm", h)]


# ---- the families --------------------------------------------------------------------------------


@dataclass
class Family:
    """What one architecture's reader returns: per-layer tensors and kinds, and notes for the header."""

    layers: list[Layer]
    kv: dict[str, int]
    state: dict[str, int]
    active: int
    notes: dict[str, str]


def _sparse_qwen(c: Config, n: int) -> list[bool]:
    """Qwen's MoE layers: every ``decoder_sparse_step``-th layer, less ``mlp_only_layers``."""
    step = c.int("decoder_sparse_step", 1)
    only = set(c.get("mlp_only_layers", []))
    return [i not in only and step > 0 and (i + 1) % step == 0 for i in range(n)]


def _qwen3moe(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.int("num_experts")
    moe = _sparse_qwen(c, n)
    layers = []
    for i in range(n):
        ffn = (
            [Tensor("ffn_gate_inp", "router", (e, h)), *_experts(h, e, c.int("moe_intermediate_size"))]
            if moe[i]
            else _mlp(h, c.int("intermediate_size"))
        )
        layers.append(Layer("full", [*_gqa(c, qk_norm=True), *ffn, *_norms(h)], e if moe[i] else 0))
    notes = {"kinds": "every layer full attention (GQA, q/k norms)"}
    return Family(layers, {"full": _gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes)


def _qwen3next(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.int("num_experts")
    if c.has("layer_types"):
        types = list(c.get("layer_types"))[:n]
        kinds = ["linear" if t == "linear_attention" else "full" for t in types]
        how = "layer_types"
    else:
        every = c.int("full_attention_interval")
        kinds = ["full" if (i + 1) % every == 0 else "linear" for i in range(n)]
        how = f"full_attention_interval = {every}"
    linear, state = _gated_deltanet(c)
    moe = _sparse_qwen(c, n)
    shared = c.int("shared_expert_intermediate_size")
    layers = []
    for i in range(n):
        attn = _gqa(c, gate=True, qk_norm=True) if kinds[i] == "full" else linear
        if moe[i]:
            ffn = [
                Tensor("ffn_gate_inp", "router", (e, h)),
                *_experts(h, e, c.int("moe_intermediate_size")),
                *_mlp(h, shared, "_shexp"),
                Tensor("ffn_gate_inp_shexp", "router", (1, h)),
            ]
        else:
            ffn = _mlp(h, c.int("intermediate_size"))
        layers.append(Layer(kinds[i], [*attn, *ffn, *_norms(h)], e if moe[i] else 0))
    notes = {
        "kinds": f"{how}: gated full attention (GQA) or Gated DeltaNet linear attention",
        "state_bytes": "linear: (conv_dim x (linear_conv_kernel_dim - 1) + value heads x key dim x value dim)"
        " x 4 B (float32)",
        "dense_bytes": f"includes one shared expert of width {shared} and its gate",
    }
    return Family(
        layers,
        {"full": _gqa_kv(c), "linear": 0},
        {"full": 0, "linear": state},
        c.int("num_experts_per_tok"),
        notes,
    )


def _deepseek(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.int("n_routed_experts")
    k, freq = c.int("first_k_dense_replace", 0), c.int("moe_layer_freq", 1)
    shared = c.int("n_shared_experts", 0) * c.int("moe_intermediate_size")
    bias = c.get("topk_method") == "noaux_tc"
    layers = []
    for i in range(n):
        moe = i >= k and freq > 0 and i % freq == 0
        if moe:
            ffn = [Tensor("ffn_gate_inp", "router", (e, h)), *_experts(h, e, c.int("moe_intermediate_size"))]
            ffn += [_vec("exp_probs_b", e)] if bias else []
            ffn += _mlp(h, shared, "_shexp") if shared else []
        else:
            ffn = _mlp(h, c.int("intermediate_size"))
        layers.append(Layer("full", [*_mla(c), *ffn, *_norms(h)], e if moe else 0))
    kv = (c.int("kv_lora_rank") + c.int("qk_rope_head_dim")) * KV_ELEMENT_BYTES
    notes = {
        "kinds": "every layer MLA (multi-head latent attention)",
        "kv_bytes_per_token": f"MLA: (kv_lora_rank {c.int('kv_lora_rank')} + qk_rope_head_dim "
        f"{c.int('qk_rope_head_dim')}) x 2 B",
        "dense_bytes": f"first_k_dense_replace = {k} dense layers"
        + (f"; shared experts of width {shared} in the MoE layers" if shared else ""),
    }
    return Family(layers, {"full": kv}, {}, c.int("num_experts_per_tok"), notes)


def _glm4moe(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.int("n_routed_experts")
    k = c.int("first_k_dense_replace", 0)
    shared = c.int("n_shared_experts", 0) * c.int("moe_intermediate_size")
    attn = _gqa(c, qk_norm=bool(c.get("use_qk_norm", False)), bias="qkv" if c.get("attention_bias") else "")
    layers = []
    for i in range(n):
        if i >= k:
            ffn = [Tensor("ffn_gate_inp", "router", (e, h)), _vec("exp_probs_b", e)]
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
    return Family(layers, {"full": _gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes)


def _gptoss(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.int("num_local_experts")
    types = list(c.get("layer_types", []))[:n] or [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)
    ]
    kinds = ["sliding" if t == "sliding_attention" else "full" for t in types]
    width = c.int("intermediate_size")
    attn = _gqa(c, bias="qkvo", sinks=True)
    ffn = [
        Tensor("ffn_gate_inp", "router", (e, h)),
        _vec("ffn_gate_inp.bias", e),
        *_experts(h, e, width, bias=True),
    ]
    layers = [Layer(kind, [*attn, *ffn, *_norms(h)], e) for kind in kinds]
    window = c.int("sliding_window")
    per_token = _gqa_kv(c)
    notes = {
        "kinds": "layer_types: sliding-window and full attention (GQA with sinks)",
        "state_bytes": f"sliding: the window of {window} tokens x {per_token} B, held whatever the context",
    }
    active = c.int("num_experts_per_tok", c.get("experts_per_token"))
    return Family(
        layers, {"full": per_token, "sliding": 0}, {"full": 0, "sliding": window * per_token}, active, notes
    )


def _mixtral(c: Config, n: int) -> Family:
    h, e = c.int("hidden_size"), c.int("num_local_experts")
    kind = "sliding" if c.has("sliding_window") else "full"
    ffn = [Tensor("ffn_gate_inp", "router", (e, h)), *_experts(h, e, c.int("intermediate_size"))]
    layers = [Layer(kind, [*_gqa(c), *ffn, *_norms(h)], e) for _ in range(n)]
    per_token = _gqa_kv(c)
    if kind == "sliding":
        window = c.int("sliding_window")
        kv, state = {"sliding": 0}, {"sliding": window * per_token}
        notes = {"kinds": f"every layer sliding-window attention ({window} tokens)"}
    else:
        kv, state, notes = {"full": per_token}, {}, {"kinds": "every layer full attention (GQA)"}
    return Family(layers, kv, state, c.int("num_experts_per_tok"), notes)


FAMILIES: dict[str, Callable[[Config, int], Family]] = {
    "qwen3_moe": _qwen3moe,
    "qwen3_next": _qwen3next,
    "deepseek_v3": _deepseek,
    "deepseek_v2": _deepseek,
    "glm4_moe": _glm4moe,
    "gpt_oss": _gptoss,
    "mixtral": _mixtral,
}


# ---- the model ------------------------------------------------------------------------------------


def _load(path: Path) -> tuple[dict[str, Any], str]:
    shown = shown_path(path)
    raw = read_input(path, shown, "a Hugging Face config.json")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(shown, f"not a JSON file: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(shown, "expected a JSON object (a Hugging Face config.json)")
    return data, shown


def _default_name(data: dict[str, Any], path: Path) -> str:
    named = data.get("_name_or_path")
    if isinstance(named, str) and named.strip():
        return named.rstrip("/").split("/")[-1]
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def _scheme_line(scheme: str) -> str:
    table = SCHEMES[scheme]
    parts = [f"{cls} {table[cls]}" for cls in CLASSES]
    line = f"{scheme}: " + ", ".join(parts)
    if scheme == "Q4_K_M":
        line += "; attn_v and ffn_down* Q6_K on use_more_bits layers"
    return line


def read_hf(config_path: Path, weights: str, name: str | None = None) -> ImportedModel:
    """The model a Hugging Face config describes, with bytes estimated for weight scheme ``weights``."""
    data, shown = _load(config_path)
    scheme = weights.upper()
    if scheme not in SCHEMES:
        raise InputError(shown, f"unknown weight scheme {weights!r}; known: {', '.join(SCHEMES)}")
    c = Config(data, shown)
    if c.type not in FAMILIES:
        known = ", ".join(FAMILIES)
        raise InputError(
            shown, f"unsupported model_type {c.type or '(none)'!r}; supported: {known}", key="model_type"
        )
    n = c.int("num_hidden_layers")
    if n == 0:
        raise InputError(shown, "expected at least one layer, got 0", key="num_hidden_layers")
    fam = FAMILIES[c.type](c, n)
    h, vocab = c.int("hidden_size"), c.int("vocab_size")

    expert_tensors: dict[str, list[int]] = {}
    dense, expert_bytes = [], []
    for i, layer in enumerate(fam.layers):
        own = 0
        for t in layer.tensors:
            size = tensor_bytes(format_of(scheme, t, i, n), t.shape)
            if t.expert:
                expert_tensors.setdefault(t.name, [0] * n)[i] = size
            else:
                own += size
        dense.append(own)
        total = sum(v[i] for v in expert_tensors.values())
        expert_bytes.append(-(-total // layer.experts) if layer.experts else 0)

    embed = Tensor("token_embd", "embed", (vocab, h))
    head = Tensor("output", "head", (vocab, h))
    first = tensor_bytes(format_of(scheme, embed, 0, n), embed.shape)
    last = tensor_bytes(format_of(scheme, head, n, n), head.shape) + tensor_bytes(
        format_of(scheme, _vec("output_norm", h), n, n), (h,)
    )
    kinds = [layer.kind for layer in fam.layers]
    used = set(kinds)
    mtp = c.int("num_nextn_predict_layers", 0)
    moe_layers = sum(1 for layer in fam.layers if layer.experts)
    sources = {
        "source": f"{shown} (model_type {c.type}), weights {_scheme_line(scheme)}",
        "layers": f"num_hidden_layers = {n}"
        + (f" (the {mtp} next-token-prediction layer(s) are not counted)" if mtp else ""),
        "experts": f"{moe_layers} MoE layers of {max(layer.experts for layer in fam.layers)} routed experts",
        "active_experts": "num_experts_per_tok",
        "expert_bytes": "the layer's expert tensors at the scheme's bits over its experts, rounded up",
        "dense_bytes": "attention, router, shared experts and norms of the layer at the scheme's bits",
        "first_stage_bytes": f"token embeddings {vocab} x {h} ({SCHEMES[scheme]['embed']}): vLLM and SGLang"
        " load them on the first stage",
        "last_stage_bytes": f"lm_head {vocab} x {h} ({SCHEMES[scheme]['head']}) + final norm"
        + (
            " (tied to the embeddings; the last stage still holds it)" if c.get("tie_word_embeddings") else ""
        ),
        "kv_bytes_per_token": "2 B per element (BF16/FP16 KV cache)",
        "max_context": "max_position_embeddings",
        **fam.notes,
    }
    return ImportedModel(
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
        sources=sources,
        max_context=c.int("max_position_embeddings") if c.has("max_position_embeddings") else None,
    )
