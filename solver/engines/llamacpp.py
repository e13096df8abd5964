"""llama.cpp (SPEC 6.2): whole expert tensors stay on their layer's GPU or run on the CPU.

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
from itertools import pairwise

import numpy as np

from solver.arcs import SPARE_UNLIMITED
from solver.engines import StageFill, Weights, room_of
from solver.problem import MASS_SCALE, Problem
from solver.rangewalk import need_table


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
