"""The attention of a GGUF model's layers: each layer's kind, its KV cache bytes per token and its fixed
state bytes, as llama.cpp sizes them.

- KV cache per token of a layer, at llama.cpp's cache type (``-ctk``/``-ctv``): one K row and one V
  row, each ``ggml_row_size(type, elements)`` = elements / block x block bytes (f16 2 bytes per
  element; q8_0 34 bytes per 32; q4_0 18 per 32), rounded up to whole blocks.
  GQA: ``head_count_kv`` (scalar or per layer) x ``key_length`` / ``value_length`` (defaults, as in
  llama.cpp: ``embedding_length / head_count``). MLA (deepseek2 files with ``key_length_mla``): one
  K row of ``kv_lora_rank + rope.dimension_count`` and no V (llama.cpp PR 19067 stores the latent
  once; ``key_length`` 576 / ``value_length`` 512 read as GQA would overstate it).
- Sliding-window layers (gpt-oss: every even layer, llama.cpp ``set_swa_pattern(2)``) hold a fixed
  cache whatever the context: llama.cpp sizes it ``GGML_PAD(sliding_window + n_ubatch, 256)`` cells
  (768 at the window 128 and the default ``n_ubatch`` 512, one sequence), written as ``state_bytes``
  with ``kv_bytes_per_token`` 0.
- Chunked-attention layers (llama4: three of every four, llama.cpp ``set_swa_pattern(4)``, unless
  ``attention.sliding_window`` is 0) hold the same fixed cache for a chunk of 8,192 tokens: 8,704 cells.
- Linear-attention layers (qwen3next, qwen35moe: all but every ``full_attention_interval``-th) keep a fixed
  F32 recurrent state (llama.cpp hard-codes F32): ``n_embd_r`` = (conv_kernel - 1) x (inner_size +
  2 x group_count x state_size) conv values plus ``n_embd_s`` = state_size x inner_size, 4 bytes
  each, per sequence.
"""

from __future__ import annotations

from solver.errors import InputError
from solver.importers.ggmltypes import KV_TYPES, STATE_ELEMENT_BYTES, row_bytes
from solver.importers.ggufmeta import Meta

#: llama.cpp's default micro-batch and SWA cache padding (llama-kv-cache-iswa.cpp).
DEFAULT_N_UBATCH = 512
SWA_PAD = 256
#: llama4's attention chunk (llama.cpp sets ``n_swa`` 8192 and three chunked layers of every four).
LLAMA4_CHUNK = 8192
LLAMA4_PATTERN = 4


def _swa_cells(window: int) -> int:
    """llama.cpp's SWA (or chunked) cache cells, one sequence: GGML_PAD(window + n_ubatch, SWA_PAD)."""
    return -(-(window + DEFAULT_N_UBATCH) // SWA_PAD) * SWA_PAD


def _row_bytes(elements: int, kv_type: str) -> int:
    """llama.cpp's bytes for one cache row of ``elements`` values (ggml_row_size), whole blocks."""
    return row_bytes(KV_TYPES[kv_type], elements)


def attention(
    meta: Meta, layers: int, shown: str, sources: dict[str, str], kv_type: str
) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """Each layer's kind, and the KV bytes per token and fixed state bytes of each kind."""
    per_token = [0] * layers
    fixed = [0] * layers
    base = ["full"] * layers
    if meta.arch == "deepseek2" and meta.key("attention.key_length_mla") in meta.metadata:
        rank, rope = meta.int("attention.kv_lora_rank"), meta.int("rope.dimension_count")
        per_token = [_row_bytes(rank + rope, kv_type)] * layers
        kv_text = (
            f"MLA: one {kv_type} row of {meta.key('attention.kv_lora_rank')} {rank} + "
            f"{meta.key('rope.dimension_count')} {rope} per token and layer, no V row (llama.cpp PR 19067)"
        )
    else:
        per_token, kv_text = _gqa(meta, layers, kv_type)
        if meta.arch == "deepseek2":
            mla = meta.key("attention.key_length_mla")
            kv_text += f" (no {mla}: an older conversion llama.cpp runs without MLA)"
    state_text = ""
    if meta.arch == "gpt-oss":
        window = meta.int("attention.sliding_window")
        cells = _swa_cells(window)
        for il in range(0, layers, 2):
            base[il], fixed[il], per_token[il] = "sliding", cells * per_token[il], 0
        state_text = (
            f"sliding (even layers): llama.cpp's SWA cache of GGML_PAD("
            f"{meta.key('attention.sliding_window')} {window} + n_ubatch {DEFAULT_N_UBATCH}, {SWA_PAD})"
            f" = {cells} cells x the KV per token, one sequence"
        )
    elif meta.arch == "llama4" and meta.metadata.get(meta.key("attention.sliding_window")) != 0:
        cells = _swa_cells(LLAMA4_CHUNK)
        for il in range(layers):
            if il % LLAMA4_PATTERN < LLAMA4_PATTERN - 1:
                base[il], fixed[il], per_token[il] = "chunked", cells * per_token[il], 0
        state_text = (
            f"chunked (three of every {LLAMA4_PATTERN} layers): llama.cpp's chunked-attention cache of"
            f" GGML_PAD(chunk {LLAMA4_CHUNK} + n_ubatch {DEFAULT_N_UBATCH}, {SWA_PAD}) = {cells} cells"
            " x the KV per token, one sequence"
        )
    elif meta.arch in ("qwen3next", "qwen35moe"):
        interval = meta.int("full_attention_interval")
        if interval == 0:
            raise InputError(shown, f"{meta.key('full_attention_interval')} is 0")
        conv, d_state = meta.int("ssm.conv_kernel"), meta.int("ssm.state_size")
        groups, inner = meta.int("ssm.group_count"), meta.int("ssm.inner_size")
        heads = meta.int("ssm.time_step_rank")
        n_embd_r = max(conv - 1, 0) * (inner + 2 * groups * d_state)
        n_embd_s = d_state * inner
        for il in range(layers):
            if (il + 1) % interval:
                base[il], fixed[il], per_token[il] = "linear", STATE_ELEMENT_BYTES * (n_embd_r + n_embd_s), 0
        state_text = (
            f"linear (all but every {interval}th layer, {meta.key('full_attention_interval')}):"
            f" F32 recurrent state (conv_kernel {conv} - 1) x (inner_size {inner}"
            f" + 2 x group_count {groups} x state_size {d_state}) + state_size x inner_size"
            f" ({heads} heads, time_step_rank) = {n_embd_r + n_embd_s} values"
            f" x {STATE_ELEMENT_BYTES} bytes, one sequence"
        )
    kinds, kv, state = _name_kinds(base, per_token, fixed)
    sources["kinds"] = ", ".join(sorted(set(kinds)))
    sources["kv_bytes_per_token"] = kv_text
    sources["state_bytes"] = state_text or "0: no fixed per-layer state"
    return kinds, kv, state


def _gqa(meta: Meta, layers: int, kv_type: str) -> tuple[list[int], str]:
    """GQA KV bytes per token of each layer: head_count_kv x (key_length + value_length) values."""
    heads = meta.int("attention.head_count")
    width = meta.int("embedding_length")
    default_head = width // heads if heads else None
    heads_kv = meta.per_layer("attention.head_count_kv", layers, heads)
    key_len = meta.int("attention.key_length", default_head)
    value_len = meta.int("attention.value_length", default_head)
    per_token = [_row_bytes(h * key_len, kv_type) + _row_bytes(h * value_len, kv_type) for h in heads_kv]
    shown_heads = heads_kv[0] if len(set(heads_kv)) == 1 else "per layer"
    lengths = (
        f"{meta.key('attention.key_length')} {key_len} + value_length {value_len}"
        if meta.key("attention.key_length") in meta.metadata
        else f"{key_len} + {value_len} (embedding_length / head_count, as llama.cpp defaults)"
    )
    heads_key = meta.key("attention.head_count_kv")
    return per_token, f"GQA {kv_type}: {heads_key} {shown_heads} x ({lengths}) per token"


def _name_kinds(
    base: list[str], per_token: list[int], fixed: list[int]
) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """Kind names per layer: the base kind, numbered when its layers differ in KV or state bytes."""
    variants: dict[str, list[tuple[int, int]]] = {}
    for kind, kv, state in zip(base, per_token, fixed, strict=True):
        seen = variants.setdefault(kind, [])
        if (kv, state) not in seen:
            seen.append((kv, state))
    kinds: list[str] = []
    kv_by_kind: dict[str, int] = {}
    state_by_kind: dict[str, int] = {}
    for kind, kv, state in zip(base, per_token, fixed, strict=True):
        seen = variants[kind]
        name = kind if len(seen) == 1 else f"{kind}{seen.index((kv, state)) + 1}"
        kinds.append(name)
        kv_by_kind[name], state_by_kind[name] = kv, state
    return kinds, kv_by_kind, state_by_kind
