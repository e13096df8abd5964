"""The architecture rules of ``solve model from-hf``: for each ``model_type``, which layers hold routed
experts, shared experts or a dense MLP, which attention each layer has, and its KV and state bytes."""

from __future__ import annotations

from collections.abc import Callable

from solver.errors import InputError
from solver.importers.hfconfig import Config
from solver.importers.hflayers import (
    Family,
    Layer,
    Tensor,
    experts,
    gated_deltanet,
    gqa,
    gqa_heads,
    gqa_kv,
    mla,
    mlp,
    mtp_kept,
    norms,
    router,
    vec,
)


def _sparse_qwen(c: Config, n: int) -> list[bool]:
    """Qwen's MoE layers: every ``decoder_sparse_step``-th layer, less ``mlp_only_layers``."""
    step = c.positive("decoder_sparse_step", 1)
    only = c.layer_list("mlp_only_layers", n)
    return [i not in only and (i + 1) % step == 0 for i in range(n)]


def _qwen3moe(c: Config, n: int) -> Family:
    """Qwen3 MoE: GQA with q/k norms; MoE layers by ``decoder_sparse_step``; no shared expert."""
    h, e = c.int("hidden_size"), c.experts("num_experts")
    moe = _sparse_qwen(c, n)
    layers = []
    for i in range(n):
        ffn = (
            [router(h, e), *experts(h, e, c.int("moe_intermediate_size"))]
            if moe[i]
            else mlp(h, c.int("intermediate_size"))
        )
        layers.append(Layer("full", [*gqa(c, qk_norm="head"), *ffn, *norms(h)], e if moe[i] else 0))
    notes = {"kinds": "every layer full attention (GQA, q/k norms)"}
    return Family(layers, {"full": gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes, gqa_heads(c))


def _shared_expert(h: int, width: int) -> list[Tensor]:
    """Qwen's shared expert and its sigmoid gate (``shared_expert_gate``, one weight per hidden unit)."""
    return [*mlp(h, width, "_shexp"), vec("ffn_gate_inp_shexp", h)] if width else []


def _qwen2moe(c: Config, n: int) -> Family:
    """Qwen2 MoE: GQA with q/k/v biases, a gated shared expert (when configured) in each MoE layer."""
    h, e = c.int("hidden_size"), c.experts("num_experts")
    moe = _sparse_qwen(c, n)
    shared = c.int("shared_expert_intermediate_size", 0)
    attn = gqa(c, bias="qkv")
    layers = []
    for i in range(n):
        if moe[i]:
            ffn = [router(h, e), *experts(h, e, c.int("moe_intermediate_size")), *_shared_expert(h, shared)]
        else:
            ffn = mlp(h, c.int("intermediate_size"))
        layers.append(Layer("full", [*attn, *ffn, *norms(h)], e if moe[i] else 0))
    notes = {
        "kinds": "every layer full attention (GQA, q/k/v biases)",
        "dense_bytes": f"includes one shared expert of width {shared} and its gate",
    }
    return Family(layers, {"full": gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes, gqa_heads(c))


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
    linear, state = gated_deltanet(c, split_ba)
    moe = _sparse_qwen(c, n)
    shared = c.int("shared_expert_intermediate_size", 0)
    full = gqa(c, gate=bool(c.get("attn_output_gate", True)), qk_norm="head")
    layers = []
    for i in range(n):
        attn = full if kinds[i] == "full" else linear
        if moe[i]:
            ffn = [router(h, e), *experts(h, e, c.int("moe_intermediate_size")), *_shared_expert(h, shared)]
        else:
            ffn = mlp(h, c.int("intermediate_size"))
        layers.append(Layer(kinds[i], [*attn, *ffn, *norms(h)], e if moe[i] else 0))
    notes = {
        "kinds": f"{how}: gated full attention (GQA) or Gated DeltaNet linear attention",
        "state_bytes": "linear: (conv_dim x (linear_conv_kernel_dim - 1) + value heads x key dim x value dim)"
        " x 4 B (float32)",
        "dense_bytes": f"includes one shared expert of width {shared} and its gate",
    }
    family = Family(
        layers,
        {"full": gqa_kv(c), "linear": 0},
        {"full": 0, "linear": state},
        c.int("num_experts_per_tok"),
        notes,
        gqa_heads(c),
    )
    if split_ba:
        mtp_kept(family, c, "mtp_num_hidden_layers")
    return family


def _qwen3next(c: Config, n: int) -> Family:
    """Qwen3-Next: one ``ssm_ba`` tensor, no MTP blocks kept."""
    return _qwen_hybrid(c, n, split_ba=False)


def _qwen35moe(c: Config, n: int) -> Family:
    """Qwen3.5/3.6 MoE: ``ssm_beta`` and ``ssm_alpha``, MTP blocks kept."""
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
            ffn = [router(h, e), *experts(h, e, c.int("moe_intermediate_size"))]
            ffn += [vec("exp_probs_b", e)] if bias else []
            ffn += mlp(h, shared, "_shexp") if shared else []
        else:
            ffn = mlp(h, c.int("intermediate_size"))
        layers.append(Layer("full", [*mla(c), *ffn, *norms(h)], e if moe else 0))
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
        mtp_kept(family, c, "num_nextn_predict_layers")
    elif mtp := c.int("num_nextn_predict_layers", 0):
        family.nextn_note = f"num_nextn_predict_layers {mtp}: llama.cpp's converter leaves DeepSeek's out"
    return family


def _glm4moe(c: Config, n: int) -> Family:
    """GLM-4 MoE (``glm4_moe``): leading dense layers, a routing bias, shared experts, MTP blocks kept."""
    h, e = c.int("hidden_size"), c.experts("n_routed_experts")
    k = c.int("first_k_dense_replace", 0)
    shared = c.int("n_shared_experts", 0) * c.int("moe_intermediate_size")
    qk = "head" if c.get("use_qk_norm", False) else ""
    attn = gqa(c, qk_norm=qk, bias="qkv" if c.get("attention_bias") else "")
    layers = []
    for i in range(n):
        if i >= k:
            ffn = [router(h, e), vec("exp_probs_b", e)]
            ffn += [
                *experts(h, e, c.int("moe_intermediate_size")),
                *(mlp(h, shared, "_shexp") if shared else []),
            ]
        else:
            ffn = mlp(h, c.int("intermediate_size"))
        layers.append(Layer("full", [*attn, *ffn, *norms(h)], e if i >= k else 0))
    notes = {
        "kinds": "every layer full attention (GQA)",
        "dense_bytes": f"first_k_dense_replace = {k} dense layers; shared experts of width {shared}",
    }
    family = Family(layers, {"full": gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes, gqa_heads(c))
    mtp_kept(family, c, "num_nextn_predict_layers")
    return family


def _gptoss(c: Config, n: int) -> Family:
    """gpt-oss: sliding-window and full attention with sinks, biased experts, every layer MoE."""
    h, e = c.int("hidden_size"), c.experts("num_local_experts")
    types = c.per_layer_list("layer_types", n, ("sliding_attention", "full_attention")) or [
        "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)
    ]
    kinds = ["sliding" if t == "sliding_attention" else "full" for t in types]
    width = c.int("intermediate_size")
    attn = gqa(c, bias="qkvo", sinks=True)
    ffn = [router(h, e), vec("ffn_gate_inp.bias", e), *experts(h, e, width, bias=True)]
    layers = [Layer(kind, [*attn, *ffn, *norms(h)], e) for kind in kinds]
    window = c.int("sliding_window")
    per_token = gqa_kv(c)
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
        gqa_heads(c),
    )


def _mixtral(c: Config, n: int) -> Family:
    """Mixtral: every layer MoE, full or sliding-window attention throughout."""
    h, e = c.int("hidden_size"), c.experts("num_local_experts")
    kind = "sliding" if c.has("sliding_window") else "full"
    ffn = [router(h, e), *experts(h, e, c.int("intermediate_size"))]
    layers = [Layer(kind, [*gqa(c), *ffn, *norms(h)], e) for _ in range(n)]
    per_token = gqa_kv(c)
    if kind == "sliding":
        window = c.int("sliding_window")
        kv, state = {"sliding": 0}, {"sliding": window * per_token}
        notes = {"kinds": f"every layer sliding-window attention ({window} tokens)"}
    else:
        kv, state, notes = {"full": per_token}, {}, {"kinds": "every layer full attention (GQA)"}
    return Family(layers, kv, state, c.int("num_experts_per_tok"), notes, gqa_heads(c))


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
    attn = gqa(c)
    layers = []
    for i in range(n):
        if i in moe:
            ffn = [router(h, e), *experts(h, e, width), *mlp(h, width, "_shexp")]
        else:
            ffn = mlp(h, c.int("intermediate_size_mlp"))
        layers.append(Layer(kinds[i], [*attn, *ffn, *norms(h)], e if i in moe else 0))
    per_token = gqa_kv(c)
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
        gqa_heads(c),
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
    attn = gqa(c, bias="qkvo" if c.get("use_bias", False) else "")
    layers = []
    for i in range(n):
        moe = start <= i <= end and (i + 1) % step == 0
        if moe:
            ffn = [router(h, e), vec("exp_probs_b", e), *experts(h, e, width)]
            ffn += mlp(h, shared, "_shexp") if shared else []
        else:
            ffn = mlp(h, c.int("intermediate_size"))
        layers.append(Layer("full", [*attn, *ffn, *norms(h)], e if moe else 0))
    notes = {
        "kinds": "every layer full attention (GQA)",
        "dense_bytes": f"moe_layer_start_index {start}, moe_layer_interval {step}; shared experts of width"
        f" {shared} (moe_num_shared_experts x moe_intermediate_size)",
    }
    return Family(layers, {"full": gqa_kv(c)}, {}, c.int("moe_k"), notes, gqa_heads(c))


def _minimax_m2(c: Config, n: int) -> Family:
    """MiniMax-M2: every layer MoE, per-layer q/k norms, a routing bias; no shared expert."""
    h, e = c.int("hidden_size"), c.experts("num_local_experts")
    attn = gqa(c, qk_norm="layer" if c.get("use_qk_norm", True) else "")
    bias = [vec("exp_probs_b", e)] if c.get("use_routing_bias", True) else []
    ffn = [router(h, e), *bias, *experts(h, e, c.int("intermediate_size"))]
    layers = [Layer("full", [*attn, *ffn, *norms(h)], e) for _ in range(n)]
    notes = {"kinds": "every layer full attention (GQA, q/k norms over all heads)"}
    family = Family(layers, {"full": gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes, gqa_heads(c))
    if mtp := c.int("num_mtp_modules", 0):
        family.nextn_note = f"num_mtp_modules {mtp}: llama.cpp's converter leaves MiniMax's out"
    return family


def _olmoe(c: Config, n: int) -> Family:
    """OLMoE: every layer MoE, q/k norms over all heads; no shared expert."""
    h, e = c.int("hidden_size"), c.experts("num_experts")
    ffn = [router(h, e), *experts(h, e, c.int("intermediate_size"))]
    layers = [Layer("full", [*gqa(c, qk_norm="layer"), *ffn, *norms(h)], e) for _ in range(n)]
    notes = {"kinds": "every layer full attention (GQA, q/k norms over all heads)"}
    return Family(layers, {"full": gqa_kv(c)}, {}, c.int("num_experts_per_tok"), notes, gqa_heads(c))


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
