"""vLLM and SGLang (SPEC 6.3): every weight resident, nothing offloaded; spare KV tokens per stage.

A range fits a GPU only when its room holds every expert of its layers as well. What is left, over
the KV bytes one token costs the stage's layers, is the stage's spare KV in tokens; the engine sizes
every stage's KV cache to the smallest, so a plan's spare KV is the minimum over its stages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.arcs import SPARE_UNLIMITED
from solver.engines import StageFill, Weights, expert_prefix, room_of
from solver.problem import Problem
from solver.rangewalk import need_table


def kv_prefix(p: Problem) -> np.ndarray:
    """KV bytes one token costs layers < x, shape (L+1,)."""
    return np.concatenate([[0], np.cumsum(p.kv_per_layer)])


def spare_tokens(left: np.ndarray, kv: np.ndarray) -> np.ndarray:
    """``floor(left / kv)`` where a token costs bytes, SPARE_UNLIMITED where it costs none."""
    return np.where(kv > 0, left // np.maximum(kv, 1), SPARE_UNLIMITED)


@dataclass(frozen=True)
class ResidentTable:
    """Rooms after every expert of the range; no cache, no misses."""

    p: Problem
    need: np.ndarray
    room: np.ndarray

    @classmethod
    def build(cls, p: Problem) -> ResidentTable:
        experts = expert_prefix(p)
        need = need_table(p) + (experts[None, :] - experts[:, None])
        return cls(p, need, room_of(p, need))

    def weigh(self, g: np.ndarray, a: np.ndarray, b: np.ndarray, scale: int, mass: bool) -> Weights:
        zero = np.zeros(len(g), dtype=np.int64)
        kv = kv_prefix(self.p)
        return Weights(zero, zero, zero, zero, spare_tokens(self.room[g, a, b], kv[b] - kv[a]))

    def miss_units(self, scale: int) -> int:
        return 0


def stage_fill(p: Problem, g: int, a: int, b: int) -> StageFill:
    """Every expert of [a, b) resident; the stage's share of the model's experts stands for its mass."""
    room = p.room(g, a, b)
    experts = p.experts_per_layer
    bytes_ = int((experts[a:b] * p.expert_bytes[a:b]).sum())
    kv = int(p.kv_per_layer[a:b].sum())
    left = room - bytes_
    total = int(experts.sum())
    return StageFill(
        room=room,
        cache_bytes=bytes_,
        held=int(experts[a:b].sum()),
        visible=int(experts[a:b].sum()),
        held_mass=int(experts[a:b].sum()) / total if total else 0.0,
        miss_ms=0.0,
        host_bytes=0,
        spare_tokens=(left // kv if kv else None) if left >= 0 else None,
        fits=left >= 0,
    )


def default_partition(engine: str, n_layers: int, k: int) -> list[int]:
    """Layers per stage when no partition is given: even, the remainder on the stages before the last
    (vLLM's ``get_pp_indices``) or on the last stages (SGLang)."""
    counts = [n_layers // k] * k
    extra = n_layers % k
    if engine == "vllm":
        for i in range(2, extra + 2):
            counts[-i] += 1
    else:
        for i in range(1, extra + 1):
            counts[-i] += 1
    return counts
