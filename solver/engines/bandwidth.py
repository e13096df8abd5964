"""Speed from bytes: a decode step reads every weight it uses once, so its time is bytes over bandwidth.

For llama.cpp, vLLM and SGLang the GPU time of layer l on GPU g is

    gpu_ms(l, g) = layer_overhead_ms + 1000 * read(l, g) / (mem_bandwidth[g] * gpu_efficiency)
                   + moe_layer_ms * (share of layer l's expert tensors g runs)
    read(l, g)   = dense_bytes[l] + depth * kv_bytes_per_token[kind l]
                   + (active_experts / experts[l]) * (bytes of layer l's experts held on g)

(``moe_layer_ms``: the MoE block's own kernels, llama.cpp's alone; 0 for the other engines), and a
GPU whose rig entry gives ``layer_ms`` keeps that figure per layer instead (a user's own
measurement wins; its held experts then cost nothing more). The defaults of the effective constants
come from public measurements: docs/reference.md, "Speed from bytes", gives each source.

The fields this model reads (``BytesFields``: the resolved speed settings, dense bytes, active experts)
live here because the three engines share them; each engine's own fields extend them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from solver.engines.base import Engine, Required
from solver.files.cards import DRIVER_MIB, Card, find_card
from solver.files.config import EngineKeys, NonNegMs, Share, Whole
from solver.problem.problem import EngineFields, Problem
from solver.units import per_layer

if TYPE_CHECKING:
    from solver.files.config import GpuConfig, ModelConfig, RigConfig
    from solver.files.yamlfile import YamlDoc

#: Share of a card's memory bandwidth a llama.cpp decode reaches (docs/reference.md, "Speed from bytes").
GPU_EFFICIENCY = 0.8
#: Fixed cost per layer per token (kernel launches and small kernels), ms.
LAYER_OVERHEAD_MS = 0.05
#: One change of device along a token's path (CPU <-> GPU), ms.
SWITCH_MS = 0.08
#: A GPU's fixed time per token of each MoE layer whose expert tensors it runs, beyond the layer's
#: overhead (llama.cpp's router top-k, the expert matrix products by id, the sum over the used
#: experts): public all-GPU CUDA runs of small-active models, where the time left grows with the
#: MoE layers, not per token (docs/fidelity-sources.md, "moe_layer_ms").
MOE_LAYER_MS = 0.04


class BytesKeys(EngineKeys):
    """The speed model's rig keys (None: the default constant; docs/reference.md, "Speed from bytes"):
    the share of bandwidth a decode reaches, the fixed cost per layer, one change of device, and the
    KV tokens a decode step reads (``depth``)."""

    gpu_efficiency: Share | None = None
    layer_overhead_ms: NonNegMs | None = None
    switch_ms: NonNegMs | None = None
    depth: Whole = 0


@dataclass(frozen=True)
class Speed:
    """The rig's speed settings, resolved: per GPU (k,) and rig-wide.

    bandwidth: bytes/s of each GPU (0 where its ``layer_ms`` is given instead); given: the GPU's own
    ``layer_ms`` counts per layer; moe_layer_ms: a GPU's fixed time per token of each MoE layer whose
    expert tensors it runs (the engine's; 0 where it has none).
    """

    bandwidth: np.ndarray
    given: np.ndarray
    efficiency: float
    overhead_ms: float
    switch_ms: float
    depth: int
    moe_layer_ms: float = 0.0


@dataclass(frozen=True)
class BytesFields(EngineFields):
    """What the speed model reads, shared by the engines timed by bytes (llama.cpp, vLLM, SGLang).

    speed: bandwidths and constants (None: every GPU's time per layer is its layer_ms); dense_bytes
    (L,): the weights a token reads per layer besides experts; active_experts: the experts a token uses
    per MoE layer.
    """

    speed: Speed | None = None
    dense_bytes: np.ndarray | None = None
    active_experts: int = 0

    def at_host_bandwidth(self, rate: float) -> BytesFields:
        """The fields with the CPU streaming host memory at ``rate`` bytes/s: unchanged where no
        expert runs on the CPU."""
        return self

    def gpu_key(self, g: int) -> tuple:
        """The GPU's bandwidth and whether its layer_ms is given."""
        if self.speed is None:
            return ()
        return float(self.speed.bandwidth[g]), bool(self.speed.given[g])


def gpu_bandwidth(gpu: GpuConfig) -> int | None:
    """The GPU's memory bandwidth: its rig entry's, else the card table's for its name (a name several
    cards share is told apart by the memory its ``free`` implies), else None."""
    if gpu.mem_bandwidth is not None:
        return gpu.mem_bandwidth
    try:
        card = card_of(gpu)
    except ValueError:
        return None
    return card.bandwidth if card is not None else None


def card_of(gpu: GpuConfig) -> Card | None:
    """The card table's entry for the GPU's name, None when it has none; ValueError naming the choices
    when the name fits several cards its free memory does not tell apart."""
    if gpu.name is None:
        return None
    return find_card(gpu.name, total_mib=gpu.free // 2**20 + DRIVER_MIB)


def resolve_speed(rig: RigConfig) -> Speed:
    """Per-GPU bandwidths and the rig-wide constants, defaults filled in."""
    given = np.array([g.layer_ms is not None for g in rig.gpus], dtype=bool)
    bandwidth = np.array(
        [0.0 if giv else float(gpu_bandwidth(g) or 0) for g, giv in zip(rig.gpus, given)], dtype=np.float64
    )
    keys = rig.keys(BytesKeys)
    return Speed(
        bandwidth=bandwidth,
        given=given,
        efficiency=GPU_EFFICIENCY if keys.gpu_efficiency is None else keys.gpu_efficiency,
        overhead_ms=LAYER_OVERHEAD_MS if keys.layer_overhead_ms is None else keys.layer_overhead_ms,
        switch_ms=SWITCH_MS if keys.switch_ms is None else keys.switch_ms,
        depth=keys.depth,
    )


def with_constants(
    p: Problem,
    *,
    host_bandwidth: float | None = None,
    gpu_efficiency: float | None = None,
    layer_overhead_ms: float | None = None,
    switch_ms: float | None = None,
    handoff_ms: float | None = None,
    depth: int | None = None,
    moe_layer_ms: float | None = None,
) -> Problem:
    """The problem with other effective constants (what calibration tries): CPU times follow
    ``host_bandwidth``, GPU times the rest. None keeps a constant as it is."""
    sp = speed_of(p)
    speed = dataclasses.replace(
        sp,
        efficiency=sp.efficiency if gpu_efficiency is None else gpu_efficiency,
        overhead_ms=sp.overhead_ms if layer_overhead_ms is None else layer_overhead_ms,
        switch_ms=sp.switch_ms if switch_ms is None else switch_ms,
        depth=sp.depth if depth is None else depth,
        moe_layer_ms=sp.moe_layer_ms if moe_layer_ms is None else moe_layer_ms,
    )
    fields = BytesFields.of(p)
    if host_bandwidth is not None:
        fields = fields.at_host_bandwidth(host_bandwidth)
    fields = dataclasses.replace(fields, speed=speed)
    return dataclasses.replace(
        p, engine_fields=fields, handoff_ms=p.handoff_ms if handoff_ms is None else handoff_ms
    )


def speed_of(p: Problem) -> Speed:
    """The problem's speed settings; a problem built without them times every GPU by its layer_ms."""
    speed = BytesFields.of(p).speed
    if speed is not None:
        return speed
    k = p.n_gpus
    return Speed(np.zeros(k), np.ones(k, dtype=bool), 1.0, 0.0, 0.0, 0)


def per_byte_ms(p: Problem) -> np.ndarray:
    """ms one byte read costs each GPU, shape (k,); 0 where the GPU's time is its own ``layer_ms``."""
    sp = speed_of(p)
    rate = sp.bandwidth * sp.efficiency
    return np.where(sp.given | (rate <= 0), 0.0, 1000.0 / np.maximum(rate, 1e-300))


def dense_ms(p: Problem) -> np.ndarray:
    """GPU ms of each layer's reads other than experts, on each GPU, shape (L, k): the overhead plus
    dense and KV bytes over bandwidth, or ``layer_ms`` where the GPU gives it."""
    sp = speed_of(p)
    dense = dense_of(p)
    kv = p.kv_per_layer if p.kv_per_layer is not None else np.zeros(p.n_layers, dtype=np.int64)
    read = dense.astype(np.float64) + sp.depth * kv.astype(np.float64)
    ms = sp.overhead_ms + read[:, None] * per_byte_ms(p)[None, :]
    return np.where(sp.given[None, :], p.layer_ms[None, :], ms)


def host_read_of(p: Problem) -> np.ndarray:
    """The bytes a token reads per layer besides experts when the layer runs on the CPU, shape (L,):
    its dense weights and, at the decode ``depth``, its KV cache, all in host memory."""
    kv = p.kv_per_layer if p.kv_per_layer is not None else np.zeros(p.n_layers, dtype=np.int64)
    return dense_of(p).astype(np.float64) + speed_of(p).depth * kv.astype(np.float64)


def dense_of(p: Problem) -> np.ndarray:
    """The weights a token reads per layer besides experts, shape (L,) (0 where unknown)."""
    dense = BytesFields.of(p).dense_bytes
    return dense if dense is not None else np.zeros(p.n_layers, dtype=np.int64)


def moe_ms(p: Problem) -> np.ndarray:
    """The fixed GPU ms of each MoE layer whose experts a GPU runs all of, on each GPU, shape (L, k): 0
    for a layer without experts and on a GPU whose time is its own ``layer_ms``."""
    sp = speed_of(p)
    moe = (p.experts_per_layer > 0).astype(np.float64) * sp.moe_layer_ms
    return np.where(sp.given[None, :], 0.0, moe[:, None] * np.ones(p.n_gpus)[None, :])


def all_held_ms(p: Problem) -> np.ndarray:
    """GPU ms of each layer with every expert held, shape (L, k)."""
    share = BytesFields.of(p).active_experts / np.maximum(p.experts_per_layer, 1)
    experts = (share * p.experts_per_layer * p.expert_bytes).astype(np.float64)
    return dense_ms(p) + experts[:, None] * per_byte_ms(p)[None, :] + moe_ms(p)


class BytesSpeed(Engine):
    """An engine whose GPU time is bytes over bandwidth (llama.cpp, vLLM, SGLang)."""

    #: The speed model's constants (``resolve_speed``).
    rig_keys: ClassVar[tuple[str, ...]] = ("gpu_efficiency", "layer_overhead_ms", "switch_ms", "depth")
    rig_schema: ClassVar[type[EngineKeys]] = BytesKeys

    required: ClassVar[tuple[Required, ...]] = (
        Required(
            "model",
            "active_experts",
            "the experts each token uses per MoE layer, for the bytes a GPU reads",
            when=lambda rig: any(g.layer_ms is None for g in rig.gpus),
        ),
    )

    def check_gpus(self, rig: RigConfig, doc: YamlDoc) -> None:
        """Every GPU needs its memory bandwidth (``mem_bandwidth``, or a card name the table knows)
        unless it gives ``layer_ms``."""
        for i, gpu in enumerate(rig.gpus):
            if gpu.layer_ms is not None or gpu.mem_bandwidth is not None:
                continue
            try:
                known = card_of(gpu)
            except ValueError as exc:
                raise doc.error(("gpus", i, "name"), f"{exc}, or give mem_bandwidth") from None
            if known is None:
                named = f"card {gpu.name!r} is not in the card table; " if gpu.name else ""
                raise doc.error(
                    ("gpus", i),
                    f"{named}needs mem_bandwidth (the vendor's figure, e.g. '936 GB/s'), or layer_ms",
                )

    def speed_fields(
        self, rig: RigConfig, model: ModelConfig, experts: np.ndarray
    ) -> tuple[dict, list[float]]:
        """``BytesFields``'s values (what the speed model reads), and each GPU's time per layer with every
        expert held, averaged over the layers (what the proportional split weighs GPUs by)."""
        n = model.layers
        speed = resolve_speed(rig)
        dense = np.array(per_layer(model.dense_bytes, n), dtype=np.float64)
        share = (model.active_experts or 0) / np.maximum(experts, 1)
        expert_read = share * experts * np.array(per_layer(model.expert_bytes, n), dtype=np.float64)
        rate = speed.bandwidth * speed.efficiency
        per_byte = np.where(speed.given | (rate <= 0), 0.0, 1000.0 / np.maximum(rate, 1e-300))
        mean = speed.overhead_ms + (dense + expert_read).mean() * per_byte
        fields = {
            "speed": speed,
            "dense_bytes": dense.astype(np.int64),
            "active_experts": model.active_experts or 0,
        }
        return fields, [g.layer_ms if g.layer_ms is not None else float(m) for g, m in zip(rig.gpus, mean)]

    def slowest_gpu_ms(self, p: Problem) -> float:
        return float(all_held_ms(p).sum(axis=0).max(initial=0.0))
