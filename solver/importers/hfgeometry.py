"""The ``geometry:`` block of a model read from a Hugging Face ``config.json``: the GGUF keys llama.cpp's
converter (``convert_hf_to_gguf.py``) writes for the config, as ``solver.importers.ggufgeometry`` reads
them from a GGUF header, for the architectures whose graph moesplit rebuilds (docs/engines.md, "Memory
the engine takes"). Other architectures get no block.
"""

from __future__ import annotations

from solver.importers.ggufgeometry import compact, trim
from solver.importers.hfconfig import Config
from solver.importers.hflayers import Layer, head_dim

#: ``model_type`` -> the GGUF architecture llama.cpp's converter writes, for the graphs it rebuilds.
ARCH = {
    "qwen3_moe": "qwen3moe", "qwen3_next": "qwen3next", "deepseek_v3": "deepseek2",
    "deepseek_v2": "deepseek2", "glm4_moe": "glm4moe", "gpt_oss": "gpt-oss", "mixtral": "llama",
    "llama4": "llama4", "llama4_text": "llama4",
}  # fmt: skip


def hf_geometry(c: Config, layers: list[Layer]) -> dict[str, object] | None:
    """The block for the config ``c`` whose layers the family reader built; None for an architecture
    outside ARCH. Tensor names decide the optional parts (q/k norms, attention biases, routing bias)."""
    arch = ARCH.get(c.type)
    if arch is None:
        return None
    h, heads = c.int("hidden_size"), c.int("num_attention_heads")
    d = head_dim(c)
    names = {t.name for layer in layers for t in layer.tensors}
    dense = c.int("intermediate_size_mlp" if arch == "llama4" else "intermediate_size", 0)
    width = c.int("moe_intermediate_size", 0) or c.int("intermediate_size", 0)
    shared = {
        "qwen3next": c.int("shared_expert_intermediate_size", 0),
        "deepseek2": c.int("n_shared_experts", 0) * width,
        "glm4moe": c.int("n_shared_experts", 0) * width,
        "llama4": width,
    }.get(arch, 0)
    rotary = c.get("partial_rotary_factor", 1.0)
    head_kv = [0 if layer.kind == "linear" else c.int("num_key_value_heads", heads) for layer in layers]
    block: dict[str, object] = {
        "arch": arch, "n_embd": h, "n_head": heads, "head_kv": compact(head_kv), "head_k": d, "head_v": d,
        "n_rot": int(d * rotary) if isinstance(rotary, (int, float)) else d, "n_ff": dense or width,
        "n_ff_exp": width, "n_ff_shexp": shared,
    }  # fmt: skip
    windows = {"sliding": c.int("sliding_window", 0), "chunked": c.int("attention_chunk_size", 0)}
    swa = [il for il, layer in enumerate(layers) if layer.kind in windows and arch != "llama"]
    if swa:
        block |= {"swa_window": windows[layers[swa[0]].kind], "swa_layers": swa}
    if arch == "deepseek2":
        rank, rope = c.int("kv_lora_rank"), c.int("qk_rope_head_dim")
        block |= {
            "head_kv": 1, "head_k": rank + rope, "head_v": rank, "n_rot": rope, "kv_lora_rank": rank,
            "q_lora_rank": c.int("q_lora_rank", 0) if c.get("q_lora_rank") is not None else 0,
            "head_k_mla": c.int("qk_nope_head_dim") + rope, "head_v_mla": c.int("v_head_dim"),
        }  # fmt: skip
        if c.int("n_group", 1) > 1:
            block |= {"expert_groups": c.int("n_group"), "expert_groups_used": c.int("topk_group")}
    if arch == "qwen3next":
        block |= {
            "ssm_conv": c.int("linear_conv_kernel_dim"), "ssm_state": c.int("linear_key_head_dim"),
            "ssm_groups": c.int("linear_num_key_heads"), "ssm_dt_rank": c.int("linear_num_value_heads"),
            "ssm_inner": c.int("linear_num_value_heads") * c.int("linear_value_head_dim"),
        }  # fmt: skip
    sigmoid = arch in ("glm4moe", "llama4") or c.get("scoring_func") == "sigmoid"
    block["expert_gating"] = "softmax_weight" if arch == "gpt-oss" else "sigmoid" if sigmoid else "softmax"
    block["expert_weights_norm"] = arch in ("qwen3moe", "qwen3next", "llama") or (
        arch in ("deepseek2", "glm4moe") and bool(c.get("norm_topk_prob", False))
    )
    scale = c.get("routed_scaling_factor", 0.0) if arch in ("deepseek2", "glm4moe") else 0.0
    block["expert_weights_scale"] = float(scale) if isinstance(scale, (int, float)) else 0.0
    block["qk_norm"] = "attn_q_norm" in names and arch != "qwen3next"
    block["attn_bias"] = "attn_q.bias" in names and arch != "gpt-oss"
    block["expert_probs_bias"] = "exp_probs_b" in names
    return trim(block)
