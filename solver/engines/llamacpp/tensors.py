"""llama.cpp's units and what each costs: a unit is one expert tensor of one layer, with its bias and
scale tensors, which move with it.

A unit left on the CPU costs ``cpu_ms(u) = 1000 * active_experts * bytes(u) / (experts[layer(u)] *
host_bandwidth)`` per token; a unit held on GPU g adds its active share of bytes to the layer's read
(solver.engines.bandwidth); every MoE layer with a unit on the CPU costs ``2 * switch_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from solver.engines.bandwidth import dense_ms, per_byte_ms, speed_of
from solver.engines.llamacpp.fields import LlamaFields
from solver.engines.llamacpp.fill import Units, grain_of, pack, unit_values
from solver.problem.problem import Problem
from solver.units import per_layer

if TYPE_CHECKING:
    from solver.files.config import ModelConfig

#: The tensors one default unit stands for: a MoE layer's three routed expert tensors.
DEFAULT_EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
#: Endings of the tensors that move with their expert tensor (llama.cpp keeps them together).
COMPANIONS = (".bias", ".scale")


def base_tensor(name: str) -> str:
    """The expert tensor a name belongs to: itself, or the tensor a bias or scale goes with."""
    for end in COMPANIONS:
        if name.endswith(end):
            return name[: -len(end)]
    return name


def llama_units(model: ModelConfig, host_bandwidth: int, experts: np.ndarray) -> dict:
    """The units by layer, then tensor order: layer, bytes, CPU ms per token, tensor names and slot.

    A unit is one expert tensor of one layer with its bias and scale tensors (``expert_tensors``), or,
    without that key, one per MoE layer of ``experts[l] * expert_bytes[l]`` bytes standing for its
    three expert tensors.
    """
    n = model.layers
    if model.expert_tensors is None:
        sizes = experts * np.array(per_layer(model.expert_bytes, n), dtype=object)
        groups = {DEFAULT_EXPERT_TENSORS[0]: [(DEFAULT_EXPERT_TENSORS, [int(x) for x in sizes])]}
    else:
        groups: dict[str, list] = {}
        for name, value in model.expert_tensors.items():
            groups.setdefault(base_tensor(name), []).append(((name,), per_layer(value, n)))
    rows = []
    for slot, members in enumerate(groups.values()):
        names = tuple(x for tensor_names, _ in members for x in tensor_names)
        for layer in range(n):
            size = sum(int(per[layer]) for _, per in members)
            if size > 0 and experts[layer] > 0:
                rows.append((layer, slot, size, names))
    rows.sort(key=lambda r: r[:2])
    layer = np.array([r[0] for r in rows], dtype=np.int64)
    size = np.array([r[2] for r in rows], dtype=np.int64)
    ms = 1000.0 * model.active_experts * size.astype(np.float64) / (experts[layer] * float(host_bandwidth))
    return {
        "unit_layer": layer,
        "unit_slot": np.array([r[1] for r in rows], dtype=np.int64),
        "unit_bytes": size,
        "unit_ms": ms,
        "unit_names": [r[3] for r in rows],
    }


#: Integer units per ms the fill decides in (1e-9 ms); lowered for a model whose sums would overflow.
DECISION_SCALE = 10**9


@dataclass(frozen=True)
class Costs:
    """Every per-unit and per-layer cost, in float ms and as integers of 1e-12 ms (FINE_TIME_SCALE).

    Units in (layer, slot) order. size (U,): bytes; fill_size: the bytes the fill counts, rounded up
    to its grain (fill.grain_of; the same but for tensor sizes that share no large divisor); cpu (U,):
    ms on the CPU; held (U, k): ms its active share adds to its layer's GPU read on each GPU, with its
    part of the layer's fixed MoE time (``moe_layer_ms`` over the layer's units); dense (L, k): ms of
    each layer's other reads (or ``layer_ms``); switch (k,): ms of one layer with a unit on the CPU, on
    each GPU: to the CPU and back, and on a GPU of another host than the first (an rpc-server's), the
    network hop there and back too, since ``-ot ...=CPU`` keeps those experts on the main host's CPU.
    """

    order: np.ndarray
    layer: np.ndarray
    slot: np.ndarray
    size: np.ndarray
    fill_size: np.ndarray
    cpu: np.ndarray
    held: np.ndarray
    dense: np.ndarray
    switch: np.ndarray
    n_moe: np.ndarray

    @classmethod
    def of(cls, p: Problem) -> Costs:
        f = LlamaFields.of(p)
        order = np.lexsort((f.unit_slot if len(f.unit_slot) else np.zeros_like(f.unit_layer), f.unit_layer))
        layer = f.unit_layer[order]
        slot = f.unit_slot[order] if len(f.unit_slot) else np.zeros_like(layer)
        size = f.unit_bytes[order]
        per_byte, dense = per_byte_ms(p), dense_ms(p)
        share = f.active_experts / np.maximum(p.experts_per_layer[layer], 1)
        held = (share * size)[:, None] * per_byte[None, :] + _moe_share(p, layer)
        has = np.zeros(p.n_layers + 1, dtype=np.int64)
        has[np.unique(layer) + 1] = 1
        remote = (p.hosts != 0) if len(p.host_names) > 1 else np.zeros(p.n_gpus, dtype=bool)
        switch = 2.0 * speed_of(p).switch_ms + np.where(remote, 2.0 * p.network_ms, 0.0)
        most_room = int((p.free - p.reserve).max(initial=0))
        grain = grain_of(size, most_room)
        fill_size = -(-size // grain) * grain
        return cls(order, layer, slot, size, fill_size, f.unit_ms[order], held, dense, switch, np.cumsum(has))

    def units(self, g: int, scale: int) -> Units:
        """GPU g's units for the fill, valued in integers of ``scale`` per ms."""
        n = len(self.dense)
        value = unit_values(self.cpu - self.held[:, g], self.size, scale)
        key, sigma = pack(value, round(float(self.switch[g]) * scale), n)
        return Units(self.layer, self.slot, self.fill_size, key, sigma, n)


def _moe_share(p: Problem, layer: np.ndarray) -> np.ndarray:
    """Each unit's part of its layer's fixed MoE time on each GPU, shape (U, k): the layer's cost split
    evenly over its expert tensors, so a GPU holding all of them pays it once and one holding none
    nothing (0 where the GPU's time is its own ``layer_ms``)."""
    sp = speed_of(p)
    count = np.bincount(layer, minlength=p.n_layers)[layer] if len(layer) else np.zeros(0)
    per_unit = sp.moe_layer_ms / np.maximum(count, 1)
    return np.where(sp.given[None, :], 0.0, per_unit[:, None] * np.ones(p.n_gpus)[None, :])


def decision_scale(c: Costs) -> int:
    """The largest power of ten up to DECISION_SCALE whose packed fill keys cannot overflow int64."""
    scale = DECISION_SCALE
    total_ms = float(np.abs(c.cpu).sum()) + float(np.abs(c.held).sum(axis=0).max(initial=0.0))
    worst = (total_ms + float(c.switch.max(initial=0.0)) * len(c.dense) + 1.0) * (len(c.dense) + 1)
    while scale > 1 and worst * scale >= 2**61:
        scale //= 10
    return scale
