"""The resolved problem: plain numpy arrays of layer bytes, rooms, speeds and masses (solver.planning.resolve
builds one from files); the per-layer byte rules it is built by, and the same problem at another
context.

The arrays here are the ones every engine's arithmetic, the solvers' tables and the reports read. What
only one engine reads (Strata's miss cost, llama.cpp's expert tensors, the speed-from-bytes constants)
is that engine's ``EngineFields`` subclass, defined beside the engine and built by it
(``Engine.resolve_fields``), reached through ``Problem.engine_fields``: a new engine adds its own
fields without touching this module."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction
from math import ceil
from typing import TypeVar

import numpy as np

from solver.files.config import DEFAULT_ENGINE, ModelConfig
from solver.files.kvcache import DEFAULT_KV_TYPE
from solver.units import format_size, per_layer

#: The engine's per-layer estimate: an RTX 5080 (84 SMs at 2.617 GHz) runs a layer in 0.33 ms.
REFERENCE_LAYER_MS, REFERENCE_SMS, REFERENCE_GHZ = 0.33, 84, 2.617


def estimate_layer_ms(sms: int, clock_ghz: float) -> float:
    """``layer_ms = 0.33 * (84 * 2.617) / max(1, sms * clock_ghz)``: Strata's estimate."""
    return REFERENCE_LAYER_MS * (REFERENCE_SMS * REFERENCE_GHZ) / max(1.0, sms * clock_ghz)


F = TypeVar("F", bound="EngineFields")


@dataclass(frozen=True)
class EngineFields:
    """What one engine's arithmetic reads beyond the problem's shared arrays; each engine subclasses it
    beside its own rules (a problem built as bare arrays carries this empty base, and each engine's
    fields their defaults)."""

    @classmethod
    def of(cls: type[F], p: Problem) -> F:
        """The problem's fields of this kind, or their defaults when it carries none."""
        return p.engine_fields if isinstance(p.engine_fields, cls) else cls()

    def gpu_key(self, g: int) -> tuple:
        """What, besides the shared arrays, tells GPU g apart from an otherwise identical one."""
        return ()


@dataclass(frozen=True)
class Problem:
    """Everything the planner needs, as arrays. L layers, k GPUs, N ranked pairs.

    layer_bytes (L,)   bytes a stage holds per layer it runs (dense + state + KV at ``context``)
    expert_bytes (L,)  bytes of one cached expert of each layer
    experts (L,)       routed experts per layer (None: the profile's pairs per layer)
    host_memory        bytes of host RAM for the experts no GPU holds (None: no limit)
    host_reserve       bytes of host_memory the engine itself takes where experts run on the host (its
                       host compute buffer); ``host_room`` is what is left for the experts
    engine             strata | llama.cpp | vllm | sglang (solver.engines)
    engine_fields      what only that engine reads (its EngineFields subclass, beside the engine)
    kv_per_layer (L,)  KV bytes one token costs each layer: a context changes every engine's layer
                       bytes by it (``at_context``); the resident engines' spare KV and the speed model
                       read it too
    gpu_host (k,)      index into host_names of each GPU's machine (None: all on one); a boundary
                       between hosts costs network_handoff_ms (None: handoff_ms), within one handoff_ms
    idle_gpus          the plan may leave GPUs out
    held_only          a plan must hold every unit (the engine counts this problem's memory only for
                       the plans that leave none in host memory: Engine.plan_classes)
    kv_type            the KV cache type the engine runs (solver.files.kvcache); kv bytes are at it
    pair_layer (N,)    layer of rank r; pair_bytes (N,) its cached size; mass (N,) its routed mass
    free, reserve (k,) bytes (reserve: the rig's plus the engine's own buffers on the card)
    buffers (k,)       the engine's own buffers on each card, the part of reserve the engine takes
    layer_ms (k,) ms per layer; min_layers, max_layers (k,)
    """

    rig: str
    model: str
    layer_bytes: np.ndarray
    expert_bytes: np.ndarray
    pair_layer: np.ndarray
    pair_bytes: np.ndarray
    mass: np.ndarray
    free: np.ndarray
    reserve: np.ndarray
    layer_ms: np.ndarray
    min_layers: np.ndarray
    max_layers: np.ndarray
    gpu_names: list[str]
    stage_bytes: int = 0
    first_stage_bytes: int = 0
    last_stage_bytes: int = 0
    first_stage_min_layers: int = 1
    handoff_ms: float = 0.0
    order: str = "as-given"
    objective: str = "time"
    context: int = 0
    #: Tokens one request generates after its prompt (the ``request`` objective; None otherwise).
    generate: int | None = None
    files: dict[str, str] = field(default_factory=dict)
    experts: np.ndarray | None = None
    host_memory: int | None = None
    engine: str = DEFAULT_ENGINE
    engine_fields: EngineFields = field(default_factory=EngineFields)
    kv_per_layer: np.ndarray | None = None
    gpu_host: np.ndarray | None = None
    host_names: list[str] = field(default_factory=lambda: ["local"])
    network_handoff_ms: float | None = None
    idle_gpus: bool = False
    kv_type: str = DEFAULT_KV_TYPE
    buffers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    host_reserve: int = 0
    held_only: bool = False

    @property
    def n_layers(self) -> int:
        return len(self.layer_bytes)

    @property
    def host_room(self) -> int | None:
        """Bytes of host RAM the experts left there may take: ``host_memory`` less ``host_reserve``
        (None: no limit; 0 when the engine's own buffer leaves nothing, so no expert may stay there)."""
        return None if self.host_memory is None else max(self.host_memory - self.host_reserve, 0)

    @property
    def n_gpus(self) -> int:
        return len(self.free)

    @property
    def experts_per_layer(self) -> np.ndarray:
        """Routed experts of each layer, shape (L,); problems built as bare arrays count the profile's."""
        if self.experts is not None:
            return self.experts
        return np.bincount(self.pair_layer, minlength=self.n_layers).astype(np.int64)

    @property
    def hosts(self) -> np.ndarray:
        """Host index of each GPU, shape (k,)."""
        return self.gpu_host if self.gpu_host is not None else np.zeros(self.n_gpus, dtype=np.int64)

    @property
    def network_ms(self) -> float:
        """What a boundary between two hosts costs."""
        return self.handoff_ms if self.network_handoff_ms is None else self.network_handoff_ms

    @property
    def most_arcs(self) -> int:
        """How many (GPU, start, end) arcs there could be before pruning."""
        return self.n_gpus * self.n_layers * (self.n_layers + 1) // 2

    def room(self, g: int, a: int, b: int) -> int:
        """Exact room of GPU g running layers [a, b); negative means it does not fit."""
        return (
            int(self.free[g])
            - int(self.reserve[g])
            - self.stage_bytes
            - (self.first_stage_bytes if a == 0 else 0)
            - (self.last_stage_bytes if b == self.n_layers else 0)
            - int(self.layer_bytes[a:b].sum())
        )


def _kinds(model: ModelConfig) -> list[str]:
    n = model.layers
    return [model.kinds[i % len(model.kinds)] for i in range(n)] if model.kinds else ["default"] * n


def _by_kind(value: int | dict[str, int], kind: str) -> int:
    return value.get(kind, 0) if isinstance(value, dict) else value


def kv_per_layer_of(model: ModelConfig) -> list[int]:
    """``kv_bytes_per_token[kind l]`` for every layer: what one more token of KV costs it."""
    return [_by_kind(model.kv_bytes_per_token, kind) for kind in _kinds(model)]


def layer_bytes_of(model: ModelConfig, context: int) -> list[int]:
    """``dense_bytes[l] + state_bytes[kind l] + kv_bytes_per_token[kind l] * context``, exact ints."""
    n = model.layers
    kinds = _kinds(model)
    by_kind = _by_kind
    dense = per_layer(model.dense_bytes, n)
    return [
        dense[i]
        + by_kind(model.state_bytes, kinds[i])
        + by_kind(model.kv_bytes_per_token, kinds[i]) * context
        for i in range(n)
    ]


def at_context(p: Problem, context: int, kv_scale: Fraction = Fraction(1)) -> Problem:
    """The problem holding ``context`` tokens of KV cache, each value ``kv_scale`` times the model's
    ``kv_bytes_per_token`` (another cache type): a layer's cache is ``ceil(kv * context * kv_scale)``."""
    kv = p.kv_per_layer if p.kv_per_layer is not None else np.zeros(p.n_layers, dtype=np.int64)
    base = p.layer_bytes - kv * p.context
    cache = np.array([ceil(int(x) * context * kv_scale) for x in kv], dtype=np.int64)
    return dataclasses.replace(p, layer_bytes=base + cache, context=context)


def host_room_words(p: Problem) -> str:
    """The host limit a placement's experts must stay within, in words: ``host_memory``, less the
    engine's own host buffer where it counts one."""
    words = f"host_memory ({format_size(p.host_memory or 0)})"
    if p.host_reserve:
        words += f" less the engine's host compute buffer ({format_size(p.host_reserve)})"
    return words
