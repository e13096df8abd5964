"""llama.cpp's table: for every (GPU, range) the set of its units that makes the stage's time least
within its room (solver.engines.llamacpp.fill), and one stage's fill from the definition."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solver.engines.base import Weights
from solver.engines.llamacpp.fields import LlamaFields
from solver.engines.llamacpp.fill import Fills, Units, best_set, dense_tables, uniform_table
from solver.engines.llamacpp.tensors import Costs, decision_scale
from solver.problem.placement import StageFill
from solver.problem.problem import Problem
from solver.problem.rangewalk import need_table, room_of
from solver.problem.scales import FINE_TIME_SCALE, MASS_SCALE, SPARE_UNLIMITED


def _units_ms(values: np.ndarray) -> np.ndarray:
    return np.rint(values * FINE_TIME_SCALE).astype(np.int64)


@dataclass(frozen=True)
class LlamaTable:
    """Rooms of every (GPU, range) and its best fill: GPU time, CPU and switch time, bytes and mass held."""

    p: Problem
    need: np.ndarray
    room: np.ndarray
    gpu: np.ndarray
    missed: np.ndarray
    held_bytes: np.ndarray
    held_mass: np.ndarray
    visible_bytes: np.ndarray

    @classmethod
    def build(cls, p: Problem) -> LlamaTable:
        return cls.build_many([p])[0]

    @classmethod
    def build_many(cls, ps: Sequence[Problem]) -> list[LlamaTable]:
        """The table of each problem; problems whose GPUs value their units alike (one rig at several
        contexts) share each class's fill DP (``dense_tables``), which only their rooms tell apart."""
        parts = [_Part.of(p) for p in ps]
        groups: dict[tuple, list[tuple[_Part, list[int]]]] = {}
        for part in parts:
            for gs in _classes(part.c, part.scale):
                groups.setdefault(part.class_key(gs), []).append((part, gs))
        for members in groups.values():
            part0, gs0 = members[0]
            units, carried = part0.units(gs0)
            dense = []
            for part, gs in members:
                uniform = uniform_table(units, carried, part.room[gs])
                if uniform is None:
                    dense.append((part, gs))
                else:
                    part.fills[tuple(gs)] = uniform
            if dense:
                tables = dense_tables(units, carried, [part.room[gs] for part, gs in dense])
                for (part, gs), fills in zip(dense, tables):
                    part.fills[tuple(gs)] = fills
        return [part.table(cls) for part in parts]

    def weigh(self, g: np.ndarray, a: np.ndarray, b: np.ndarray, scale: int, mass: bool) -> Weights:
        gpu = _rescale(self.gpu[g, a, b], scale)
        missed = _rescale(self.missed[g, a, b], scale)
        return Weights(
            gpu=gpu,
            time=gpu + missed,
            missed=missed,
            mass=self.held_mass[g, a, b] if mass else np.zeros(len(g), dtype=np.int64),
            host=self.visible_bytes[g, a, b] - self.held_bytes[g, a, b],
            spare=np.full(len(g), SPARE_UNLIMITED, dtype=np.int64),
        )

    def const_units(self, scale: int) -> int:
        return 0


@dataclass(eq=False)
class _Part:
    """One problem's share of building its table: its rooms, costs, sums over layers, and the fill
    of each class of GPUs (``_classes``) once computed."""

    p: Problem
    need: np.ndarray
    room: np.ndarray
    c: Costs
    scale: int
    fills: dict[tuple[int, ...], Fills]

    @classmethod
    def of(cls, p: Problem) -> _Part:
        need = need_table(p)
        c = Costs.of(p)
        return cls(p, need, room_of(p, need), c, decision_scale(c), {})

    def units(self, gs: list[int]) -> tuple[Units, list[np.ndarray]]:
        """The class's units and the per-unit integers its fill carries: held time, CPU time, mass, bytes."""
        c = self.c
        cpu12 = _units_ms(c.cpu)
        mass = np.rint(c.cpu / max(float(c.cpu.sum()), 1e-300) * MASS_SCALE).astype(np.int64)
        return c.units(gs[0], self.scale), [_units_ms(c.held[:, gs[0]]), cpu12, mass, c.size]

    def class_key(self, gs: list[int]) -> tuple:
        """What the class's fill DP depends on besides the rooms."""
        units, carried = self.units(gs)
        arrays = (units.layer, units.slot, units.size, units.value, *carried)
        return (units.sigma, units.n_layers, *(x.tobytes() for x in arrays))

    def table(self, cls: type[LlamaTable]) -> LlamaTable:
        """The table from the fills of every class."""
        p, c, room = self.p, self.c, self.room
        k, n = p.n_gpus, p.n_layers
        cpu12 = _units_ms(c.cpu)
        cpu_prefix = np.zeros(n + 1, dtype=np.int64)
        np.add.at(cpu_prefix, c.layer + 1, cpu12)
        cpu_prefix = np.cumsum(cpu_prefix)
        size_prefix = np.zeros(n + 1, dtype=np.int64)
        np.add.at(size_prefix, c.layer + 1, c.size)
        size_prefix = np.cumsum(size_prefix)
        dense12 = np.concatenate([np.zeros((1, k), dtype=np.int64), np.cumsum(_units_ms(c.dense), axis=0)])
        gpu = np.zeros(room.shape, dtype=np.int64)
        missed = np.zeros(room.shape, dtype=np.int64)
        held_bytes = np.zeros(room.shape, dtype=np.int64)
        held_mass = np.zeros(room.shape, dtype=np.int64)
        a = np.arange(n + 1)[:, None]
        b = np.arange(n + 1)[None, :]
        layers_moe = c.n_moe[b] - c.n_moe[a]
        for gs in _classes(c, self.scale):
            fills = self.fills[tuple(gs)]
            full = np.mod(fills.key, n + 1)
            h_sum, c_sum, m_sum, bytes_sum = fills.sums
            d = dense12[:, gs].T  # (G, L+1)
            gpu[gs] = d[:, None, :] - d[:, :, None] + h_sum
            sw12 = round(float(c.switch[gs[0]]) * FINE_TIME_SCALE)
            missed[gs] = (cpu_prefix[b] - cpu_prefix[a])[None] - c_sum + sw12 * (layers_moe[None] - full)
            held_bytes[gs] = bytes_sum
            held_mass[gs] = m_sum
        visible = np.broadcast_to(size_prefix[b] - size_prefix[a], room.shape)
        return cls(p, self.need, room, gpu, missed, held_bytes, held_mass, visible)


def _rescale(fine: np.ndarray, scale: int) -> np.ndarray:
    """Integers of 1e-12 ms as integers of 1/scale ms (rounded half up)."""
    step = FINE_TIME_SCALE // scale
    return fine if step == 1 else (fine + step // 2) // step


def _classes(c: Costs, scale: int) -> list[list[int]]:
    """GPUs whose units, held times and switches are valued alike (the fill and the sums it carries
    depend on the GPU only through them)."""
    groups: dict[tuple, list[int]] = {}
    for g in range(c.held.shape[1]):
        key = (c.units(g, scale).value.tobytes(), _units_ms(c.held[:, g]).tobytes(), float(c.switch[g]))
        groups.setdefault(key, []).append(g)
    return list(groups.values())


def stage_fill(p: Problem, g: int, a: int, b: int) -> StageFill:
    """The set of the range's units that makes the stage's time least within its room."""
    c = Costs.of(p)
    room = p.room(g, a, b)
    held = np.zeros(len(c.layer), dtype=bool)
    if room >= 0:
        ids, _ = best_set(c.units(g, decision_scale(c)), a, b, room)
        held[ids] = True
    return fill_of(p, c, g, a, b, held, fits=room >= 0)


def cpu_moe_fill(p: Problem, g: int, a: int, b: int, n_cpu_moe: int) -> StageFill:
    """``--n-cpu-moe N``: the experts of layers < N on the CPU, every other expert tensor on the GPU.

    ``fits`` says whether the kept tensors fit the room (the engine would run out of memory if not).
    """
    c = Costs.of(p)
    held = c.layer >= n_cpu_moe
    return fill_of(p, c, g, a, b, held, fits=None)


def fill_of(p: Problem, c: Costs, g: int, a: int, b: int, held: np.ndarray, fits: bool | None) -> StageFill:
    """A stage that keeps ``held`` (a mask over the units in (layer, slot) order) of its range on GPU g;
    ``fits`` None: whether they fit the room."""
    room = p.room(g, a, b)
    mine = (c.layer >= a) & (c.layer < b)
    on_gpu, on_cpu = mine & held, mine & ~held
    cpu_layers = np.unique(c.layer[on_cpu])
    switch = float(c.switch[g]) * len(cpu_layers)
    held_bytes = int(c.size[on_gpu].sum())
    total = float(c.cpu.sum())
    names = [LlamaFields.of(p).unit_names[int(i)] for i in c.order]
    return StageFill(
        room=room,
        cache_bytes=held_bytes,
        held=int(on_gpu.sum()),
        visible=int(mine.sum()),
        held_mass=float(c.cpu[on_gpu].sum()) / total if total else 0.0,
        miss_ms=float(c.cpu[on_cpu].sum()) + switch,
        host_bytes=int(c.size[on_cpu].sum()),
        offload=[(int(c.layer[u]), names[u]) for u in np.flatnonzero(on_cpu)],
        fits=(room >= held_bytes) if fits is None else fits,
        gpu_ms=float(c.dense[a:b, g].sum()) + float(c.held[on_gpu, g].sum()),
        switch_ms=switch,
    )
