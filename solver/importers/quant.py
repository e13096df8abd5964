"""llama-quantize's recipes: the ggml type each tensor of a model gets under a file type (Q4_K_M, ...).

A port of llama.cpp's ``src/llama-quant.cpp`` (``llama_ftype_get_default_type``,
``tensor_get_category``, ``tensor_allows_quantization``, ``llama_tensor_get_type_impl`` and
``tensor_type_fallback``) for the mixture-of-experts models the importers read. Tensors are visited in
llama-quantize's order (by layer, then by name: the model loader's ``weight_name_comparer``) with its
counters, so rules such as "the first eighth of the ``ffn_down`` tensors" pick the same tensors.

What the port assumes, because a config cannot say: an importance matrix was used (llama-quantize
requires one for IQ1/IQ2 files and Q2_K_S, and published quants are made with one), no ``--pure``, no
``--tensor-type`` overrides, no ``--token-embedding-type``/``--output-tensor-type``. The rules for
the Falcon architecture and for 70B dense Llama models never apply to the models read here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from solver.importers.ggmltypes import TYPES

#: Each llama-quantize file type and its default ggml type (``llama_ftype_get_default_type``).
FTYPES: dict[str, str] = {
    "Q2_K": "Q2_K",
    "Q2_K_S": "Q2_K",
    "Q3_K_S": "Q3_K",
    "Q3_K_M": "Q3_K",
    "Q3_K_L": "Q3_K",
    "Q4_0": "Q4_0",
    "Q4_1": "Q4_1",
    "Q4_K_S": "Q4_K",
    "Q4_K_M": "Q4_K",
    "Q5_0": "Q5_0",
    "Q5_1": "Q5_1",
    "Q5_K_S": "Q5_K",
    "Q5_K_M": "Q5_K",
    "Q6_K": "Q6_K",
    "Q8_0": "Q8_0",
    "IQ1_S": "IQ1_S",
    "IQ1_M": "IQ1_M",
    "IQ2_XXS": "IQ2_XXS",
    "IQ2_XS": "IQ2_XS",
    "IQ2_S": "IQ2_XS",
    "IQ2_M": "IQ2_S",
    "IQ3_XXS": "IQ3_XXS",
    "IQ3_XS": "IQ3_S",
    "IQ3_S": "IQ3_S",
    "IQ3_M": "IQ3_S",
    "IQ4_NL": "IQ4_NL",
    "IQ4_XS": "IQ4_XS",
    "MXFP4_MOE": "MXFP4",
}

#: The ggml type of a tensor llama-quantize leaves alone (norms, biases, routers, convolutions).
UNQUANTIZED = "F32"

_IQ_LOW = ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M")
_IQ_OUTPUT_Q5K = ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M")
_ATTN_OUTPUT_Q5K_8E = (
    *("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL"),
    *("Q4_K_S", "Q4_K_M", "IQ3_S", "IQ3_M", "IQ4_XS"),
)
#: ``tensor_type_fallback``: a type whose block does not divide the row, and what replaces it.
_FALLBACK = {
    **dict.fromkeys(("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS"), "IQ4_NL"),
    **dict.fromkeys(("Q2_K", "Q3_K"), "Q4_0"),
    "Q4_K": "Q5_0",
    "Q5_K": "Q5_1",
    "Q6_K": "Q8_0",
}
_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class Facts:
    """What the recipes read of the model: llama.cpp's ``hparams`` the rules test."""

    n_expert: int  #: routed experts (``n_expert``); 8 triggers Mixtral's rules
    n_gqa: int  #: attention heads per KV head (``n_gqa()``; MLA files have one KV head)
    n_blocks: int  #: ``block_count``, next-token-prediction blocks included (``n_layer``)
    has_imatrix: bool = True


@dataclass
class _Counters:
    """llama-quantize's ``quantize_state_impl`` counters."""

    n_attention_wv: int
    tied: bool
    i_attention_wv: int = 0
    i_ffn_down: int = 0
    i_ffn_gate: int = 0
    i_ffn_up: int = 0


def category(name: str) -> str:
    """``tensor_get_category``: the class of a GGUF tensor name the rules test."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for part, cat in (
        ("attn_qkv.weight", "attn_qkv"),
        ("attn_kv_b.weight", "attn_kv_b"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if part in name:
            return cat
    return "other"


def _attn_v_like(cat: str) -> bool:
    return cat in ("attn_v", "attn_qkv", "attn_kv_b")


def quantizable(name: str, ndim: int) -> bool:
    """``tensor_allows_quantization`` for the tensors these models have."""
    return (
        ndim >= 2
        and name.endswith("weight")
        and "_norm.weight" not in name
        and "ffn_gate_inp.weight" not in name
        and "ssm_conv1d" not in name
    )


def _more_bits(layer: int, layers: int) -> bool:
    """``use_more_bits``: the first and last eighth, and every third layer between them."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def _layer(name: str) -> int:
    match = _LAYER.match(name)
    return int(match[1]) if match else -1


def _pick(ftype: str, new: str, name: str, shape: tuple[int, ...], f: Facts, c: _Counters) -> str:
    """``llama_tensor_get_type_impl``: the type of one quantizable tensor, ``new`` the default."""
    cat = category(name)
    ncols = shape[-1]
    if cat == "output" or (c.tied and cat == "token_embd"):
        if ftype == "MXFP4_MOE" or ncols % TYPES[new].block:
            return "Q8_0"
        if ftype in _IQ_OUTPUT_Q5K:
            return "Q5_K"
        return new if new == "Q8_0" else "Q6_K"
    if ftype == "MXFP4_MOE":
        return "MXFP4" if len(shape) == 3 and shape[0] > 1 else "Q8_0"
    if cat == "token_embd":
        if ftype in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
            return "Q2_K"
        if ftype in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
            return "IQ3_S"
        return new
    two_s = ftype in ("IQ2_S", "IQ2_M")
    if ftype in _IQ_LOW:
        if _attn_v_like(cat):
            c.i_attention_wv += 1
            if f.n_gqa >= 4 or f.n_expert >= 4:
                return "Q4_K"
            return "IQ3_S" if two_s else "Q2_K"
        if f.n_expert == 8 and cat == "attn_k":
            return "Q4_K"
        if cat == "ffn_down":
            first = c.i_ffn_down < f.n_blocks // 8
            c.i_ffn_down += 1
            return ("IQ3_S" if two_s else "Q2_K") if first else new
        if cat == "attn_output":
            if f.n_expert == 8:
                return "Q5_K"
            if ftype in ("IQ1_S", "IQ1_M"):
                return "IQ2_XXS"
            return "IQ3_S" if two_s else new
        return new
    if _attn_v_like(cat):
        new = _attn_v(ftype, new, c.i_attention_wv, c.n_attention_wv, f)
        c.i_attention_wv += 1
        return "Q8_0" if f.n_expert == 8 else new
    if cat == "attn_k":
        if f.n_expert == 8:
            return "Q8_0"
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ftype, new)
    if cat == "attn_q":
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ftype, new)
    if cat == "ffn_down":
        layer, layers = (_layer(name), f.n_blocks) if f.n_expert > 1 else (c.i_ffn_down, f.n_blocks)
        c.i_ffn_down += 1
        return _ffn_down(ftype, new, layer, layers, f)
    if cat == "attn_output":
        if f.n_expert == 8:
            return "Q5_K" if ftype in _ATTN_OUTPUT_Q5K_8E else new
        return {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K", "IQ3_M": "Q4_K"}.get(
            ftype, new
        )
    if cat in ("ffn_gate", "ffn_up"):
        if cat == "ffn_gate":
            counter = c.i_ffn_gate
            c.i_ffn_gate += 1
        else:
            counter = c.i_ffn_up
            c.i_ffn_up += 1
        layer = _layer(name) if f.n_expert > 1 else counter
        if ftype == "IQ3_XS" and f.n_blocks // 8 <= layer < 7 * f.n_blocks // 8:
            return "IQ3_XXS"
    return new


def _attn_v(ftype: str, new: str, i: int, n: int, f: Facts) -> str:
    """The ``attn_v`` (and ``attn_qkv``, ``attn_kv_b``) rules, before the 8-expert bump."""
    if ftype == "Q2_K":
        return "Q4_K" if f.n_gqa >= 4 else "Q3_K"
    if ftype == "Q2_K_S" and f.n_gqa >= 4:
        return "Q4_K"
    if ftype == "IQ3_XXS":
        return "Q4_K" if f.n_gqa >= 4 else ("IQ3_XXS" if f.has_imatrix else "IQ3_S")
    if ftype in ("IQ3_XS", "IQ3_S") and f.n_gqa >= 4:
        return "Q4_K"
    if ftype == "IQ3_M":
        return "Q4_K"
    if ftype == "Q3_K_M":
        return "Q5_K" if i < 2 else "Q4_K"
    if ftype == "Q3_K_L":
        return "Q5_K"
    if ftype in ("IQ4_NL", "IQ4_XS") and f.n_gqa >= 4:
        return "Q5_K"
    if ftype in ("Q4_K_M", "Q5_K_M") and _more_bits(i, n):
        return "Q6_K"
    if ftype == "Q4_K_S" and i < 4:
        return "Q5_K"
    return new


def _ffn_down(ftype: str, new: str, i: int, n: int, f: Facts) -> str:
    """The ``ffn_down`` rules (dense, shared and routed experts alike) outside the low IQ types."""
    if ftype == "Q2_K":
        return "Q3_K"
    if ftype == "Q2_K_S":
        return "Q4_K" if i < n // 8 else new
    if ftype == "IQ3_XXS" and not f.has_imatrix:
        return "Q4_K" if i < n // 8 else "Q3_K"
    if ftype == "Q3_K_M":
        return "Q5_K" if i < n // 16 else "Q4_K"
    if ftype == "IQ3_M" and (i < n // 8 or (f.n_expert == 8 and _more_bits(i, n))):
        return "Q4_K"
    if ftype == "Q3_K_L":
        return "Q5_K"
    if ftype == "Q4_K_M":
        return "Q6_K" if _more_bits(i, n) else new
    if i < n // 8 and ftype in ("IQ4_NL", "IQ4_XS") and not f.has_imatrix:
        return "Q5_K"
    if ftype == "Q5_K_M" and _more_bits(i, n):
        return "Q6_K"
    if ftype == "Q4_K_S" and i < n // 8:
        return "Q5_K"
    if ftype in ("Q4_0", "Q5_0") and f.has_imatrix and i < n // 8:
        return "Q4_1" if ftype == "Q4_0" else "Q5_1"
    return new


def _fallback(kind: str, ncols: int) -> str:
    """``tensor_type_fallback``: a type whose block fits the row; F16 when none does."""
    if ncols % TYPES[kind].block == 0:
        return kind
    other = _FALLBACK.get(kind)
    return other if other is not None and ncols % TYPES[other].block == 0 else "F16"


def assign_types(ftype: str, tensors: list[tuple[str, tuple[int, ...]]], facts: Facts) -> dict[str, str]:
    """The ggml type of every tensor of a model quantized as ``ftype``.

    ``tensors`` are (GGUF name, shape with the row last), every tensor of the file; tensors
    llama-quantize does not quantize get ``UNQUANTIZED``.
    """
    default = FTYPES[ftype]
    names = [name for name, _ in tensors]
    counters = _Counters(
        n_attention_wv=sum(1 for n in names if _attn_v_like(category(n))),
        tied="output.weight" not in names,
    )
    types: dict[str, str] = {}
    for name, shape in sorted(tensors, key=lambda t: (_layer(t[0]), t[0])):
        if not quantizable(name, len(shape)):
            types[name] = UNQUANTIZED
            continue
        kind = _pick(ftype, default, name, shape, facts, counters)
        types[name] = _fallback(kind, shape[-1])
    return types
