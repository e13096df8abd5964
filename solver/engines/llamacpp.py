"""llama.cpp: whole expert tensors stay on their layer's GPU or run on the CPU.

A *unit* is one expert tensor of one layer. A stage takes its layers' units largest first (then by
layer, then by tensor name as the model lists them), each if it fits in what the room has left,
else skips it; a unit left on the CPU costs
``cpu_ms(u) = 1000 * active_experts * bytes(u) / (experts[layer(u)] * host_bandwidth)`` per window.

Units of equal size are taken in (layer, name) order, and once one of them does not fit none of the
rest does, so a range takes the first ``min(count, left // size)`` of each size: one pass per distinct
unit size (a handful) over every range at once, with prefix sums over each size's units.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from solver.engines.base import Engine, PlanCell, Required, StageCell, StageFill, Weights
from solver.export import device_order, llama_flags, stage_sizes
from solver.export_hosts import llama_rpc_lines
from solver.rangewalk import need_table, room_of
from solver.scales import MASS_SCALE, SPARE_UNLIMITED
from solver.units import format_size

if TYPE_CHECKING:
    from solver.baselines import Baseline
    from solver.config import ModelConfig, RigConfig
    from solver.export import Offload
    from solver.export_hosts import Hosts
    from solver.problem import Problem


@dataclass(frozen=True)
class _Size:
    """The units of one size, in fill order: their layers and where they sit in the unit arrays."""

    size: int
    lo: int
    hi: int
    layers: np.ndarray


@dataclass(frozen=True)
class LlamaTable:
    """Rooms of every (GPU, range) and the greedy tensor fill of any set of them."""

    p: Problem
    need: np.ndarray
    room: np.ndarray
    sizes: list[_Size]

    @classmethod
    def build(cls, p: Problem) -> LlamaTable:
        need = need_table(p)
        bounds = np.flatnonzero(np.diff(p.unit_bytes)) + 1
        edges = [0, *bounds.tolist(), len(p.unit_bytes)]
        sizes = [
            _Size(int(p.unit_bytes[lo]), lo, hi, p.unit_layer[lo:hi]) for lo, hi in pairwise(edges) if hi > lo
        ]
        return cls(p, need, room_of(p, need), sizes)

    def weigh(self, g: np.ndarray, a: np.ndarray, b: np.ndarray, scale: int, mass: bool) -> Weights:
        p = self.p
        cpu = np.rint(p.unit_ms * scale).astype(np.int64)
        share = np.rint(p.unit_ms / max(float(p.unit_ms.sum()), 1e-300) * MASS_SCALE).astype(np.int64)
        left = self.room[g, a, b].copy()
        saved, seen, held_mass, held_bytes, visible_bytes = (
            np.zeros(len(g), dtype=np.int64) for _ in range(5)
        )
        for s in self.sizes:
            first = np.searchsorted(s.layers, a, side="left")
            count = np.searchsorted(s.layers, b, side="left") - first
            take = np.minimum(count, left // s.size)
            left -= take * s.size
            held_bytes += take * s.size
            visible_bytes += count * s.size
            start = s.lo + first
            saved += _span_sum(cpu, start, start + take)
            seen += _span_sum(cpu, start, start + count)
            if mass:
                held_mass += _span_sum(share, start, start + take)
        return Weights(
            saved=saved,
            missed=seen - saved,
            mass=held_mass,
            host=visible_bytes - held_bytes,
            spare=np.full(len(g), SPARE_UNLIMITED, dtype=np.int64),
        )

    def miss_units(self, scale: int) -> int:
        return int(np.rint(self.p.unit_ms * scale).astype(np.int64).sum())


def _span_sum(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sum of ``values[lo:hi]`` for each (lo, hi), exactly in int64."""
    prefix = np.concatenate([[0], np.cumsum(values)])
    return prefix[hi] - prefix[lo]


def stage_fill(p: Problem, g: int, a: int, b: int) -> StageFill:
    """Walk the range's units in fill order, taking each that fits: the definition, for reports and tests."""
    room = p.room(g, a, b)
    units = np.flatnonzero((p.unit_layer >= a) & (p.unit_layer < b))
    used, kept = 0, np.zeros(len(units), dtype=bool)
    if room >= 0:
        for i, u in enumerate(units):
            if used + int(p.unit_bytes[u]) <= room:
                used += int(p.unit_bytes[u])
                kept[i] = True
    return _fill(p, room, units, kept, fits=room >= 0)


def cpu_moe_fill(p: Problem, g: int, a: int, b: int, n_cpu_moe: int) -> StageFill:
    """``--n-cpu-moe N``: the experts of layers < N on the CPU, every other expert tensor on the GPU.

    ``fits`` says whether the kept tensors fit the room (the engine would run out of memory if not).
    """
    room = p.room(g, a, b)
    units = np.flatnonzero((p.unit_layer >= a) & (p.unit_layer < b))
    kept = p.unit_layer[units] >= n_cpu_moe
    return _fill(p, room, units, kept, fits=room >= int(p.unit_bytes[units[kept]].sum()))


def _fill(p: Problem, room: int, units: np.ndarray, kept: np.ndarray, fits: bool) -> StageFill:
    """A stage that keeps ``units[kept]`` on its GPU and leaves the rest to the CPU."""
    on_gpu, on_cpu = units[kept], units[~kept]
    on_cpu = on_cpu[np.argsort(p.unit_layer[on_cpu], kind="stable")]  # by layer, then fill order
    total = float(p.unit_ms.sum())
    return StageFill(
        room=room,
        cache_bytes=int(p.unit_bytes[on_gpu].sum()),
        held=len(on_gpu),
        visible=len(units),
        held_mass=float(p.unit_ms[on_gpu].sum()) / total if total else 0.0,
        miss_ms=float(p.unit_ms[on_cpu].sum()),
        host_bytes=int(p.unit_bytes[on_cpu].sum()),
        offload=[(int(p.unit_layer[u]), p.unit_names[u]) for u in on_cpu],
        fits=fits,
    )


def free_memory_split(free: np.ndarray, n_layers: int) -> list[int]:
    """Layers per device when ``--tensor-split`` is not given: llama.cpp splits by free memory.

    ``load_tensors`` puts layer il on the first device whose cumulative float32 share exceeds
    il / (L + 1) (the output layer is slot L, on the last device); the counts exclude that slot.
    """
    splits = np.cumsum(free.astype(np.float32), dtype=np.float32) / np.float32(free.astype(np.float32).sum())
    where = np.array(
        [
            np.searchsorted(splits, np.float32(il) / np.float32(n_layers + 1), side="right")
            for il in range(n_layers)
        ]
    )
    return np.bincount(np.minimum(where, len(free) - 1), minlength=len(free)).tolist()


#: The tensors one default unit stands for: a MoE layer's three routed expert tensors.
DEFAULT_EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


def _per_layer(value: int | list[int], n: int) -> list[int]:
    return list(value) if isinstance(value, list) else [value] * n


def llama_units(
    model: ModelConfig, host_bandwidth: int, experts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[str, ...]]]:
    """The units in fill order: (layer, bytes, CPU ms per window, tensor names).

    A unit is one expert tensor of one layer (``expert_tensors``), or, without that key, one per MoE
    layer of ``experts[l] * expert_bytes[l]`` bytes standing for its three expert tensors.
    """
    n = model.layers
    if model.expert_tensors is None:
        sizes = experts * np.array(_per_layer(model.expert_bytes, n), dtype=object)
        tensors = {DEFAULT_EXPERT_TENSORS: [int(x) for x in sizes]}
    else:
        tensors = {(name,): _per_layer(value, n) for name, value in model.expert_tensors.items()}
    rows = [
        (-size, layer, t, names)
        for t, (names, per) in enumerate(tensors.items())
        for layer, size in enumerate(per)
        if size > 0 and experts[layer] > 0
    ]
    rows.sort(key=lambda r: r[:3])
    layer = np.array([r[1] for r in rows], dtype=np.int64)
    size = np.array([-r[0] for r in rows], dtype=np.int64)
    ms = 1000.0 * model.active_experts * size.astype(np.float64) / (experts[layer] * float(host_bandwidth))
    return layer, size, ms, [r[3] for r in rows]


class LlamaCpp(Engine):
    """llama.cpp: expert tensors on their layer's GPU or on the CPU, which runs them."""

    name = "llama.cpp"
    columns: ClassVar[list[tuple[str, StageCell]]] = [
        ("experts on GPU", lambda s: format_size(s.cache_bytes)),
        ("tensors kept", lambda s: f"{s.held_pairs:,}/{s.visible_pairs:,}"),
        ("on CPU", lambda s: format_size(s.host_bytes)),
        ("CPU", lambda s: f"{s.miss_ms:.2f} ms"),
    ]
    summary: ClassVar[list[tuple[str, PlanCell]]] = [
        ("CPU time", lambda q: f"{sum(s.miss_ms for s in q.stages):.3f} ms"),
        ("experts on GPU", lambda q: format_size(sum(s.cache_bytes for s in q.stages))),
        ("experts on CPU", lambda q: format_size(q.host_bytes)),
    ]
    required = (
        Required("model", "active_experts", "the experts each token uses per MoE layer"),
        Required("rig", "host_bandwidth", "how fast the CPU streams offloaded experts, e.g. '60 GB/s'"),
    )

    def problem_fields(self, rig: RigConfig, model: ModelConfig, experts: np.ndarray) -> dict:
        layer, size, ms, names = llama_units(model, rig.host_bandwidth, experts)
        return {"unit_layer": layer, "unit_bytes": size, "unit_ms": ms, "unit_names": names}

    def table(self, p: Problem) -> LlamaTable:
        return LlamaTable.build(p)

    def stage_fill(self, p: Problem, g: int, a: int, b: int) -> StageFill:
        return stage_fill(p, g, a, b)

    def miss_total_ms(self, p: Problem) -> float:
        return float(p.unit_ms.sum())

    def default_split(self, p: Problem) -> Baseline:
        """Layers split by free memory (no ``--tensor-split``), with the smallest ``--n-cpu-moe`` that
        makes every GPU fit."""
        from solver.baselines import Baseline, cuts_of
        from solver.plan import bounds_ok, evaluate, feasible

        cuts = cuts_of(free_memory_split(p.free, p.n_layers))
        gpus = list(range(p.n_gpus))
        if not bounds_ok(p, cuts):
            return Baseline(
                cuts, False, None, "free-memory", reason="the free-memory split leaves a GPU without layers"
            )
        for n_cpu in range(p.n_layers + 1):
            plan = evaluate(p, gpus, cuts, partial(cpu_moe_fill, n_cpu_moe=n_cpu))
            if feasible(p, plan):
                return Baseline(cuts, True, plan, "free-memory", f"split by free memory, --n-cpu-moe {n_cpu}")
        plan = evaluate(p, gpus, cuts, partial(cpu_moe_fill, n_cpu_moe=p.n_layers))
        return Baseline(cuts, False, plan, "free-memory", "does not fit even with every expert on the CPU")

    def stage_json(self, stage) -> dict:
        return {
            "held_tensors": stage.held_pairs,
            "tensors": stage.visible_pairs,
            "cpu_ms": stage.miss_ms,
            "offload": [{"layer": layer, "tensors": list(names)} for layer, names in stage.offload],
        }

    def export(
        self,
        gpus: list[int],
        cuts: list[int],
        n_layers: int,
        offload: list[Offload] | tuple[Offload, ...],
        names: list[str] | None,
        extra_blocks: int,
        hosts: Hosts | None,
    ) -> list[str]:
        sizes = stage_sizes(cuts, n_layers)
        flags = llama_flags(sizes, n_layers + extra_blocks, offload, names)
        if hosts is not None and hosts.spans(gpus):
            split, *override = flags
            servers, main, devices = llama_rpc_lines(hosts, gpus)
            return [*servers, *main, devices, split, *override]
        return [*device_order(gpus), *flags]
