"""The ``geometry:`` block of a model read from a GGUF header: the widths llama.cpp builds its compute
graph from, read from the same metadata keys and tensor names its loader reads (``src/llama-model.cpp``,
``llama_model::load_hparams`` and ``load_tensors``), for the architectures whose graph moesplit rebuilds
(docs/engines.md, "Memory the engine takes"). Other architectures get no block.
"""

from __future__ import annotations

from solver.importers.ggufmeta import Meta

#: Architectures whose compute graph solver.engines.llamacpp.memory rebuilds.
GRAPH_ARCHS = ("qwen3moe", "qwen3next", "deepseek2", "gpt-oss", "glm4moe", "llama", "llama4")
#: ``{arch}.expert_gating_func`` values (``LLAMA_EXPERT_GATING_FUNC_TYPE``).
_GATING = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}


def compact(values: list[int]) -> int | list[int]:
    """One value when every layer has it, else the list."""
    return values[0] if len(set(values)) == 1 else values


def gguf_geometry(meta: Meta, layers: int, names: set[str]) -> dict[str, object] | None:
    """The block for ``layers`` trunk layers of the header ``meta`` with tensors ``names``; None for an
    architecture outside GRAPH_ARCHS. Keys at their defaults are left out."""
    arch = meta.arch
    if arch not in GRAPH_ARCHS:
        return None
    h, heads = meta.int("embedding_length"), meta.int("attention.head_count")
    head_k = meta.int("attention.key_length", h // max(heads, 1))
    head_kv = meta.per_layer("attention.head_count_kv", layers, heads)
    interval = meta.int("full_attention_interval", 0)
    if interval:  # qwen3next: the other layers are Gated DeltaNet (recurrent)
        head_kv = [n if (il + 1) % interval == 0 else 0 for il, n in enumerate(head_kv)]
    n_ff = meta.per_layer("feed_forward_length", layers, 0)
    width = meta.int("expert_feed_forward_length", 0) or n_ff[0]
    shared = meta.int("expert_shared_feed_forward_length", 0) or width * meta.int("expert_shared_count", 0)
    if arch == "llama4":
        shared = width
    block: dict[str, object] = {
        "arch": arch, "n_embd": h, "n_head": heads, "head_kv": compact(head_kv), "head_k": head_k,
        "head_v": meta.int("attention.value_length", h // max(heads, 1)),
        "n_rot": meta.int("rope.dimension_count", head_k), "n_ff": compact(n_ff), "n_ff_exp": width,
        "n_ff_shexp": shared,
    }  # fmt: skip
    if arch == "gpt-oss":
        block |= {"swa_window": meta.int("attention.sliding_window"), "swa_layers": list(range(0, layers, 2))}
    elif arch == "llama4":  # chunked attention, 8192 tokens, in 3 of every 4 layers
        block |= {"swa_window": 8192, "swa_layers": [il for il in range(layers) if (il + 1) % 4]}
    for key, name in (
        ("kv_lora_rank", "attention.kv_lora_rank"), ("q_lora_rank", "attention.q_lora_rank"),
        ("head_k_mla", "attention.key_length_mla"), ("head_v_mla", "attention.value_length_mla"),
        ("ssm_conv", "ssm.conv_kernel"), ("ssm_state", "ssm.state_size"), ("ssm_groups", "ssm.group_count"),
        ("ssm_dt_rank", "ssm.time_step_rank"), ("ssm_inner", "ssm.inner_size"),
        ("expert_groups", "expert_group_count"), ("expert_groups_used", "expert_group_used_count"),
    ):  # fmt: skip
        block[key] = meta.int(name, 0)
    default = (
        "sigmoid" if arch in ("glm4moe", "llama4") else "softmax_weight" if arch == "gpt-oss" else "softmax"
    )
    gating = (
        default if arch in ("gpt-oss", "llama4") else _GATING.get(meta.int("expert_gating_func", 0), default)
    )
    block["expert_gating"] = gating
    # build_moe_ffn's norm_w: fixed true for qwen3moe, qwen3next and llama (Mixtral), false for llama4
    # and gpt-oss, the header's expert_weights_norm for deepseek2 and glm4moe
    norm = meta.metadata.get(meta.key("expert_weights_norm"), False)
    fixed = {"qwen3moe": True, "qwen3next": True, "llama": True, "llama4": False, "gpt-oss": False}
    block["expert_weights_norm"] = fixed.get(arch, bool(norm))
    scale = meta.metadata.get(meta.key("expert_weights_scale"), 0.0)
    block["expert_weights_scale"] = float(scale) if isinstance(scale, (int, float)) else 0.0
    block["qk_norm"] = any(n.endswith(".attn_q_norm.weight") for n in names) and arch != "qwen3next"
    block["attn_bias"] = any(n.endswith(".attn_q.bias") for n in names) and arch != "gpt-oss"
    block["expert_probs_bias"] = any(n.endswith(".exp_probs_b.bias") for n in names)
    return trim(block)


#: The block's defaults (solver.files.config.GeometryConfig), left out when written.
DEFAULTS: dict[str, object] = {
    "n_rot": 0, "n_ff": 0, "n_ff_exp": 0, "n_ff_shexp": 0, "swa_window": 0, "swa_layers": [],
    "kv_lora_rank": 0, "q_lora_rank": 0, "head_k_mla": 0, "head_v_mla": 0, "ssm_conv": 0, "ssm_state": 0,
    "ssm_groups": 0, "ssm_dt_rank": 0, "ssm_inner": 0, "expert_gating": "softmax",
    "expert_weights_norm": False, "expert_weights_scale": 0.0, "expert_groups": 0,
    "expert_groups_used": 0, "qk_norm": False, "attn_bias": False, "expert_probs_bias": False,
}  # fmt: skip


def trim(block: dict[str, object]) -> dict[str, object]:
    """The block without the keys at their defaults."""
    return {k: v for k, v in block.items() if k not in DEFAULTS or DEFAULTS[k] != v}
