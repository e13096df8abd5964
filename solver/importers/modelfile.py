"""The one shape every model importer fills, and the model file it is written as (SPEC 2.2, 6.1)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ImportedModel:
    """A model read from a GGUF header or a Hugging Face config, per layer where it varies. L layers.

    experts (L,)         routed experts of each layer, 0 for a dense layer
    expert_bytes (L,)    bytes of one routed expert: the layer's expert tensors over its experts, rounded up
    expert_tensors       tensor name after ``blk.N.`` (``.weight`` dropped, ``.bias`` kept, e.g.
                         ``ffn_gate_exps``, ``ffn_down_exps.bias``) -> bytes per layer (L,), 0 where absent
    dense_bytes (L,)     every other tensor of the layer (attention, router, shared experts, norms)
    kinds (L,)           layer kind names (e.g. ``full``, ``linear``, ``sliding``)
    state_bytes          fixed per-layer session state by kind (linear attention / SSM), bytes
    kv_bytes_per_token   KV cache bytes per token by kind
    sources              model-file key -> where its number came from, written as comments
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
