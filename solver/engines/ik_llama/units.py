"""ik_llama.cpp's units and the bytes its layer split weighs.

A unit is what the fill holds or leaves on the CPU as one. ik fuses a layer's up and gate expert
products into one op (``GGML_OP_MOE_FUSED_UP_GATE``, on by default: common/common.h
``fused_moe_up_gate = true``; src/llama-build-context.cpp ``llm_build_moe_ffn``). The op runs where the
up tensor is and copies the gate tensor there when the two are apart (ggml/src/ggml-backend.cpp
``ggml_backend_sched_backend_id_from_cur``: the first weight source decides), so a plan never separates
them: ``ffn_gate_exps`` and ``ffn_up_exps`` of a layer (with their bias and scale tensors) are one unit,
and a GGUF's merged ``ffn_gate_up_exps`` is one tensor anyway. Every other expert tensor is a unit of its
own, as in mainline (solver.engines.llamacpp.tensors).

The split weighs each layer slot by ``get_layer_sizes`` (src/llama.cpp): every tensor of the block,
experts included wherever they end up, plus its KV cache at the full context; the output slot the output
matrix and the logits beyond the largest compute buffer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from solver.engines.llamacpp.fields import LlamaFields
from solver.engines.llamacpp.layout import COMPUTE_BUFFER
from solver.engines.llamacpp.tensors import DEFAULT_EXPERT_TENSORS, base_tensor, llama_units
from solver.problem.problem import Problem

if TYPE_CHECKING:
    from solver.files.config import ModelConfig

#: The expert tensors ik runs as one fused op: a unit of the fill (with their bias and scale tensors).
FUSED = ("ffn_gate_exps", "ffn_up_exps")


@dataclass(frozen=True)
class IkFields(LlamaFields):
    """llama.cpp's fields (solver.engines.llamacpp.fields) with ik's fused units, and what ik's split
    weighs besides: ``logits_bytes`` the float32 logits of a micro-batch (part of the output slot only
    beyond ``max_compute``), ``max_compute`` the per-device compute estimate the greedy adds per device
    (``max_compute`` in llm_load_tensors; moesplit's compute buffer)."""

    logits_bytes: int = 0
    max_compute: int = COMPUTE_BUFFER


def group_of(name: str) -> str:
    """The unit a tensor name belongs to: up and gate (and their bias/scale) are one."""
    base = base_tensor(name)
    return FUSED[0] if base in FUSED else base


def ik_units(model: ModelConfig, host_bandwidth: int, experts: np.ndarray) -> dict:
    """mainline's units (llama_units) with each layer's gate and up units fused into one (``fuse``)."""
    return fuse(llama_units(model, host_bandwidth, experts))


def fuse(u: dict) -> dict:
    """Units (LlamaFields' unit_* arrays, by layer then slot) with each layer's gate and up units merged:
    layer, bytes, CPU ms per token, tensor names and slot (the merged unit takes the first one's slot).
    A unit that already stands for a layer's three tensors (a model without ``expert_tensors``) stays."""
    merged: dict[tuple[int, str], int] = {}
    keep: list[int] = []
    layer, size, ms = list(u["unit_layer"]), list(u["unit_bytes"]), list(u["unit_ms"])
    slot, names = list(u["unit_slot"]), [list(n) for n in u["unit_names"]]
    for i, group in enumerate(names):
        key = (int(layer[i]), group_of(group[0]) if tuple(group) != DEFAULT_EXPERT_TENSORS else "all")
        if key in merged:
            j = merged[key]
            size[j] += size[i]
            ms[j] += ms[i]
            names[j] += group
        else:
            merged[key] = i
            keep.append(i)
    return {
        "unit_layer": np.array([layer[i] for i in keep], dtype=np.int64),
        "unit_slot": np.array([slot[i] for i in keep], dtype=np.int64),
        "unit_bytes": np.array([size[i] for i in keep], dtype=np.int64),
        "unit_ms": np.array([ms[i] for i in keep], dtype=np.float64),
        "unit_names": [tuple(names[i]) for i in keep],
    }


def layer_sizes(p: Problem) -> list[int]:
    """``get_layer_sizes`` on the problem, slots 0..n_blocks (the output last).

    A planned layer: its dense weights and KV cache at the problem's context (``layer_bytes``) and all
    its expert tensors. An MTP block after them (counted in ik's n_layer): its KV cache only, taken as
    the last layer's (ik counts an MTP block's tensors only with MTP on, which a plan does not turn on).
    The output slot: the output matrix and the logits beyond ``max_compute``
    (``max(n_vocab * n_ubatch * 4, max_compute) - max_compute``).
    """
    f = IkFields.of(p)
    experts = np.zeros(p.n_layers, dtype=np.int64)
    np.add.at(experts, f.unit_layer, f.unit_bytes)
    sizes = [int(x) for x in p.layer_bytes + experts]
    kv = p.kv_per_layer
    last_kv = int(kv[-1]) * p.context if kv is not None and len(kv) else 0
    sizes += [last_kv] * f.nextn_layers
    head = int(p.last_stage_bytes) - f.logits_bytes
    sizes.append(head + max(f.logits_bytes, f.max_compute) - f.max_compute)
    return sizes


def expert_sizes(p: Problem) -> list[int]:
    """Bytes of each slot's expert tensors (0 for MTP blocks and the output), for ``--fit``."""
    f = IkFields.of(p)
    out = np.zeros(p.n_layers + f.nextn_layers + 1, dtype=np.int64)
    np.add.at(out, f.unit_layer, f.unit_bytes)
    return [int(x) for x in out]


def with_fields(p: Problem, **change: object) -> Problem:
    """The problem with some of ik's fields changed."""
    return dataclasses.replace(p, engine_fields=dataclasses.replace(IkFields.of(p), **change))
