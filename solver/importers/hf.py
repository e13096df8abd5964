"""``solve model from-hf``: a model file from a Hugging Face ``config.json`` and a stated weight scheme.

The config gives the shapes of every tensor (``solver.importers.hffamilies``, per architecture), the
weight scheme their bytes (``solver.importers.hfschemes``), so the result is an estimate and says so.
Tensors are named as llama.cpp's GGUF converter names them (``attn_q``, ``ffn_down_exps``, ...), so
``expert_tensors`` and ``--override-tensor`` patterns mean the same tensors for both importers.

KV cache: one K and one V row per token and layer at the ``--kv-type`` (f16 2 bytes per value; q8_0 34
bytes per 32; q4_0 18 per 32). Full attention (GQA) rows are ``num_key_value_heads x head_dim``
values; MLA keeps one row of the compressed latent and the RoPE key, ``kv_lora_rank +
qk_rope_head_dim``; a sliding-window or chunked layer holds at most the window, a fixed ``window x
per-token`` bytes (engines round it up by a batch); a Gated-DeltaNet (linear attention) layer holds its
convolution and recurrent state in float32 (as llama.cpp does), whatever the context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from solver.errors import InputError
from solver.importers.ggmltypes import check_kv_type
from solver.importers.hfconfig import Config, checkpoint_of, load_config
from solver.importers.hffamilies import FAMILIES
from solver.importers.hfgeometry import hf_geometry
from solver.importers.hflayers import Tensor, vec
from solver.importers.hfschemes import SCHEMES, WEIGHTS, sizes
from solver.importers.modelfile import BY_HAND, MAX_LAYERS, ImportedModel, per_expert_bytes
from solver.importers.quant import Facts


def _default_name(data: dict[str, Any], path: Path) -> str:
    """The model's name: the config's ``_name_or_path``, the cached repository's, else the folder's."""
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


def read_hf(config_path: Path, weights: str, name: str | None = None, kv_type: str = "f16") -> ImportedModel:
    """The model a Hugging Face config describes, with bytes estimated for weight scheme ``weights``."""
    data, shown = load_config(config_path)
    scheme = weights.upper()
    if scheme not in WEIGHTS:
        hint = ""
        if scheme.endswith("_XL") or scheme.startswith("UD-"):
            hint = (
                " (Unsloth's _XL/UD files choose types per tensor from their own measurements, not from a"
                " llama-quantize recipe: run solve model from-gguf on the file for exact bytes)"
            )
        raise InputError(shown, f"unknown weight scheme {weights!r}{hint}; known: {', '.join(WEIGHTS)}")
    check_kv_type(shown, kv_type)
    c = Config(data, shown, kv_type)
    family_type = c.type if c.type in FAMILIES else c.top_type
    if family_type not in FAMILIES:
        raise InputError(
            shown,
            f"unsupported model_type {c.type or '(none)'!r}; supported: {', '.join(FAMILIES)}; {BY_HAND}",
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
    tied = c.flag("tie_word_embeddings", False, data)

    embed = Tensor("token_embd", "embed", (vocab, h))
    head = Tensor("output", "head", (vocab, h))
    norm = vec("output_norm", h)
    entries = [
        (_gguf_name(f"blk.{i}.", t), t, i) for i, layer in enumerate(fam.layers) for t in layer.tensors
    ]
    entries += [("token_embd.weight", embed, n), ("output_norm.weight", norm, n)]
    if not tied or scheme in SCHEMES:
        entries.append(("output.weight", head, n))
    facts = Facts(n_expert=most, n_gqa=fam.gqa, n_blocks=n + fam.nextn)
    sized = sizes(scheme, entries, facts)

    expert_tensors: dict[str, list[int]] = {}
    dense = []
    for i, layer in enumerate(fam.layers):
        own = 0
        for t in layer.tensors:
            size = sized.by_name[_gguf_name(f"blk.{i}.", t)]
            if t.expert:
                expert_tensors.setdefault(t.name, [0] * n)[i] = size
            else:
                own += size
        dense.append(own)
    expert_bytes = per_expert_bytes(expert_tensors, [layer.experts for layer in fam.layers])

    first = sized.by_name["token_embd.weight"]
    last = sized.by_name.get("output.weight", first) + sized.by_name["output_norm.weight"]
    kinds = [layer.kind for layer in fam.layers]
    used = set(kinds)
    layers_note = f"num_hidden_layers = {n}"
    if fam.nextn_note and not fam.nextn:
        layers_note += f"; {fam.nextn_note}"
    head_type = sized.kind.get("output.weight", sized.kind["token_embd.weight"])
    sources = {
        "source": f"{shown} (model_type {c.type}), weights {sized.summary}",
        "layers": layers_note,
        "experts": f"{moe_layers} MoE layers of {most} routed experts",
        "active_experts": "the config's top-k (experts per token)",
        "expert_bytes": "the layer's expert tensors at the scheme's types over its experts, rounded up",
        "dense_bytes": "attention, router, shared experts and norms of the layer at the scheme's types",
        "first_stage_bytes": f"token embeddings {vocab} x {h} ({sized.kind['token_embd.weight']}): vLLM and"
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
        geometry=hf_geometry(c, fam.layers),
    )
