"""The one shape every model importer fills, and the model file it is written as (docs/reference.md)."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field

from solver.errors import InputError
from solver.files.kvcache import DEFAULT_KV_TYPE
from solver.units import INT64_MAX


@dataclass
class ImportedModel:
    """A model read from a GGUF header or a Hugging Face config, per layer where it varies. L layers.

    experts (L,)         routed experts of each layer, 0 for a dense layer
    expert_bytes (L,)    bytes of one routed expert: the layer's expert tensors over its experts, rounded up
    expert_tensors       tensor name after ``blk.N.`` (``.weight`` dropped, ``.bias`` kept, e.g.
                         ``ffn_gate_exps``, ``ffn_down_exps.bias``) -> bytes per layer (L,), 0 where absent
    dense_bytes (L,)     every other tensor of the layer (attention, router, shared experts, norms)
    ffn_tensors          of those, the feed-forward tensors (router, shared experts, a dense layer's MLP)
                         by name as in ``expert_tensors`` -> bytes per layer (L,); empty: not known
    kinds (L,)           layer kind names (e.g. ``full``, ``linear``, ``sliding``)
    state_bytes          fixed per-layer session state by kind (linear attention / SSM), bytes
    kv_bytes_per_token   KV cache bytes per token by kind
    sources              model-file key -> where its number came from, written as comments
    max_context          the longest context the model was trained for (written when known)
    nextn_layers         next-token-prediction blocks the GGUF file has after the L layers
    kv_type              the KV cache type kv_bytes_per_token is at (solver.files.kvcache)
    gguf, hf_model       what an engine's command loads: the GGUF file (a path relative to the model
                         file), the checkpoint directory or Hugging Face id (None: not known)
    vocab_size           tokens of the vocabulary (the output logits' width), when known
    embedding_bytes      the token embeddings' part of ``first_stage_bytes`` (llama.cpp keeps them in RAM)
    other_weight_bytes   weights of the file no stage holds (host-memory embeddings, MTP layers)
    geometry             the widths llama.cpp's compute graph is built from (solver.files.config
                         GeometryConfig; None: an architecture whose graph is not rebuilt)
    """

    name: str
    arch: str
    layers: int
    experts: list[int]
    active_experts: int
    expert_bytes: list[int]
    expert_tensors: dict[str, list[int]]
    dense_bytes: list[int]
    kinds: list[str]
    state_bytes: dict[str, int]
    kv_bytes_per_token: dict[str, int]
    first_stage_bytes: int = 0
    last_stage_bytes: int = 0
    estimate: bool = False
    command: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    max_context: int | None = None
    nextn_layers: int = 0
    kv_type: str = DEFAULT_KV_TYPE
    gguf: str | None = None
    hf_model: str | None = None
    vocab_size: int | None = None
    embedding_bytes: int = 0
    other_weight_bytes: int = 0
    geometry: dict[str, object] | None = None
    ffn_tensors: dict[str, list[int]] = field(default_factory=dict)


def check_sizes(m: ImportedModel, shown: str) -> None:
    """InputError (naming ``shown``, the file the sizes came from) for a size past 2^63 - 1 bytes, the
    most a model file may hold: a config whose widths multiply past it is no model."""
    sizes = {
        "expert_bytes": max(m.expert_bytes, default=0),
        "dense_bytes": max(m.dense_bytes, default=0),
        "state_bytes": max(m.state_bytes.values(), default=0),
        "kv_bytes_per_token": max(m.kv_bytes_per_token.values(), default=0),
        "first_stage_bytes": m.first_stage_bytes,
        "last_stage_bytes": m.last_stage_bytes,
    }
    for key, size in sizes.items():
        if size > INT64_MAX:
            raise InputError(shown, f"{key} would be {size:,} bytes, past the 2^63-1 a model file holds")


#: Most layers (or blocks) a model file may have: far above any published model (the largest have
#: a few hundred), and small enough that per-layer lists stay small. Checked before anything is built.
MAX_LAYERS = 10_000
#: Most routed experts a layer may have (published models have at most a few hundred).
MAX_EXPERTS = 65_536

#: What an importer's message says of an architecture it does not read.
BY_HAND = "for another model write the model file by hand (docs/reference.md, 'The model file')"

#: Width the per-layer lists are wrapped at.
LINE_WIDTH = 100


def per_expert_bytes(expert_tensors: dict[str, list[int]], experts: list[int]) -> list[int]:
    """``expert_bytes``: each layer's expert tensors over its experts, rounded up (0 for a dense layer)."""
    return [
        -(-sum(column[il] for column in expert_tensors.values()) // n) if n else 0
        for il, n in enumerate(experts)
    ]


def _mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB"


def _flow(values: list, indent: int = 2) -> str:
    """A YAML flow list, wrapped to LINE_WIDTH: ``[1, 2, 3]`` on one line when it fits."""
    items = [str(v) for v in values]
    one = "[" + ", ".join(items) + "]"
    if len(one) <= LINE_WIDTH - 24:
        return one
    lines, line = [], " " * indent
    for item in items:
        piece = f"{item},"
        if len(line) + len(piece) + 1 > LINE_WIDTH and line.strip():
            lines.append(line)
            line = " " * indent
        line += piece if not line.strip() else f" {piece}"
    lines.append(line)
    return "[\n" + "\n".join(lines) + "\n]"


def _compact(values: list) -> object:
    """One value when every entry is the same, else the list."""
    return values[0] if len(set(values)) == 1 else values


def _period(kinds: list[str]) -> list[str]:
    """The shortest prefix that repeated cyclically gives ``kinds`` (the model file repeats kinds so)."""
    for p in range(1, len(kinds) + 1):
        if all(k == kinds[i % p] for i, k in enumerate(kinds)):
            return kinds[:p]
    return kinds


def _value(value: object, indent: int = 2) -> str:
    return _flow(value, indent) if isinstance(value, list) else str(value)


def _line(key: str, value: object, comment: str = "") -> str:
    text = f"{key}: {_value(value)}"
    if comment and "\n" not in text:
        return f"{text:<34} # {comment}"
    return f"{text}  # {comment}" if comment else text


def _moe_values(m: ImportedModel, values: list[int]) -> object:
    """A per-layer expert size: one value when it is the same on every MoE layer (dense layers ignore it)."""
    moe = {v for v, e in zip(values, m.experts, strict=True) if e}
    return moe.pop() if len(moe) == 1 else values


def model_yaml(m: ImportedModel, profile: str | None = None) -> str:
    """The model file for ``m``, with comments saying where every number came from.

    Lists that hold one value throughout are written as that value, and ``kinds`` as its shortest
    repeating cycle. ``profile`` (a path relative to the model file) is written only when given.
    """
    name = m.name if m.name.isprintable() else json.dumps(m.name)  # a name from a header stays one line
    head = [f"# {name}: model file written by `{m.command}`." if m.command else f"# {name}: model file."]
    if m.estimate:
        head += [
            "# ESTIMATE: the bytes come from the weight scheme's type for each tensor, not from the weights",
            "# file itself; import the GGUF file (solve model from-gguf) for exact bytes.",
        ]
    if m.sources:
        head.append("# Where the numbers come from:")
        for key, text in m.sources.items():
            head += textwrap.wrap(
                f"{key}: {text}", LINE_WIDTH, initial_indent="#   ", subsequent_indent="#     "
            )
    total_experts = sum(e * b for e, b in zip(m.experts, m.expert_bytes, strict=True))
    head += [
        f"# Totals: routed experts {total_experts / 2**30:,.2f} GiB, other layer weights "
        f"{sum(m.dense_bytes) / 2**30:,.2f} GiB,",
        f"#   embeddings {_mib(m.first_stage_bytes)}, head {_mib(m.last_stage_bytes)}.",
    ]
    body = [f"name: {json.dumps(m.name)}", _line("layers", m.layers)]
    experts = _compact(m.experts)
    dense_layers = sum(1 for e in m.experts if e == 0)
    body.append(
        _line("experts", experts, f"{dense_layers} dense layer(s)" if dense_layers else "routed, per layer")
    )
    body.append(_line("active_experts", m.active_experts, "top-k routing"))
    expert_bytes = _moe_values(m, m.expert_bytes)
    body.append(
        _line("expert_bytes", expert_bytes, _mib(expert_bytes) if isinstance(expert_bytes, int) else "")
    )
    dense = _compact(m.dense_bytes)
    body.append(_line("dense_bytes", dense, _mib(dense) if isinstance(dense, int) else ""))
    kinds = sorted(set(m.kinds))
    if len(kinds) > 1:
        body.append(_line("kinds", _period(m.kinds)))
        for key, table in (("state_bytes", m.state_bytes), ("kv_bytes_per_token", m.kv_bytes_per_token)):
            if any(table.get(k, 0) for k in kinds):
                body.append(_line(key, "{" + ", ".join(f"{k}: {table.get(k, 0)}" for k in kinds) + "}"))
    else:
        for key, table in (("state_bytes", m.state_bytes), ("kv_bytes_per_token", m.kv_bytes_per_token)):
            if table.get(kinds[0], 0):
                body.append(_line(key, table[kinds[0]], f"every layer ({kinds[0]})"))
    if m.first_stage_bytes:
        body.append(_line("first_stage_bytes", m.first_stage_bytes, _mib(m.first_stage_bytes)))
    if m.embedding_bytes:
        body.append(
            _line("embedding_bytes", m.embedding_bytes, "of them token embeddings (llama.cpp: host RAM)")
        )
    if m.vocab_size:
        body.append(_line("vocab_size", m.vocab_size, "tokens (the output logits' width)"))
    if m.last_stage_bytes:
        body.append(_line("last_stage_bytes", m.last_stage_bytes, _mib(m.last_stage_bytes)))
    if m.max_context:
        body.append(_line("max_context", m.max_context))
    if m.nextn_layers:
        body.append(_line("nextn_layers", m.nextn_layers, "MTP blocks after the layers (llama.cpp slots)"))
    if m.other_weight_bytes:
        body.append(
            _line(
                "other_weight_bytes", m.other_weight_bytes, f"{_mib(m.other_weight_bytes)}, no stage holds it"
            )
        )
    if m.kv_type != DEFAULT_KV_TYPE:
        body.append(_line("kv_type", m.kv_type, "the KV cache type kv_bytes_per_token is at (-ctk/-ctv)"))
    if m.gguf is not None:
        body.append(_line("gguf", json.dumps(m.gguf), "the file llama-server -m loads"))
    if m.hf_model is not None:
        body.append(_line("hf_model", json.dumps(m.hf_model), "what vllm serve / SGLang load"))
    if m.expert_tensors:
        body.append(
            "expert_tensors:                   # routed expert tensors of each layer, all experts, bytes"
        )
        for name, sizes in m.expert_tensors.items():
            value = _compact(sizes)
            text = f"  {name}: {_flow(value, 4) if isinstance(value, list) else value}"
            body.append(text)
    if m.ffn_tensors:
        body.append("ffn_tensors:                      # other feed-forward tensors (in dense_bytes), bytes")
        for name, sizes in m.ffn_tensors.items():
            value = _compact(sizes)
            body.append(f"  {name}: {_flow(value, 4) if isinstance(value, list) else value}")
    if m.geometry:
        body.append("geometry:                         # llama.cpp's compute graph (docs/engines.md)")
        for key, value in m.geometry.items():
            text = json.dumps(value) if isinstance(value, (bool, str)) else value
            body.append(f"  {key}: {_flow(value, 4) if isinstance(value, list) else text}")
    if profile is not None:
        body.append(f"profile: {json.dumps(profile)}")
    return "\n".join(head + body) + "\n"
