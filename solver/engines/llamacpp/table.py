"""llama.cpp's table: for every (GPU, range) the set of its units that makes the stage's time least
within its room (solver.engines.llamacpp.fill), and one stage's fill from the definition. With
``cpu_layers`` (``CpuRanges``; their compute buffers: solver.engines.llamacpp.cpumemory) a first range
[0, b) also takes the number c of its first layers left wholly on the CPU that makes it least: the
fill of [c, b) in the room those layers leave, plus their CPU time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solver.engines.bandwidth import host_read_of
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
    """Rooms of every (GPU, range) and its best fill: GPU time, CPU and switch time, bytes and mass held;
    with CPU layers, ``cpu_layers`` (k, L+1, L+1) the layers each first range leaves on the CPU and
    ``host_extra`` the host bytes they add beyond its experts (their weights and KV cache, and what
    they add to the host's compute buffer)."""

    p: Problem
    need: np.ndarray
    room: np.ndarray
    gpu: np.ndarray
    missed: np.ndarray
    held_bytes: np.ndarray
    held_mass: np.ndarray
    visible_bytes: np.ndarray
    cpu_layers: np.ndarray | None = None
    host_extra: np.ndarray | None = None

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
                for rooms, key in part.room_sets(gs):
                    uniform = uniform_table(units, carried, rooms)
                    if uniform is None:
                        dense.append((part, key, rooms))
                    else:
                        part.fills[key] = uniform
            if dense:
                tables = dense_tables(units, carried, [rooms for _, _, rooms in dense])
                for (part, key, _), fills in zip(dense, tables):
                    part.fills[key] = fills
        return [part.table(cls) for part in parts]

    def weigh(self, g: np.ndarray, a: np.ndarray, b: np.ndarray, scale: int, mass: bool) -> Weights:
        gpu = _rescale(self.gpu[g, a, b], scale)
        missed = _rescale(self.missed[g, a, b], scale)
        host = self.visible_bytes[g, a, b] - self.held_bytes[g, a, b]
        if self.host_extra is not None:
            host = host + self.host_extra[g, a, b]
        return Weights(
            gpu=gpu,
            time=gpu + missed,
            missed=missed,
            mass=self.held_mass[g, a, b] if mass else np.zeros(len(g), dtype=np.int64),
            host=host,
            spare=np.full(len(g), SPARE_UNLIMITED, dtype=np.int64),
        )

    def const_units(self, scale: int) -> int:
        return 0


@dataclass(eq=False)
class _Part:
    """One problem's share of building its table: its rooms, costs, sums over layers, and the fill
    of each class of GPUs (``_classes``) once computed, keyed by the class and which rooms it answers
    (``room_sets``); with CPU layers, ``cpu`` (``CpuRanges``)."""

    p: Problem
    need: np.ndarray
    room: np.ndarray
    c: Costs
    scale: int
    fills: dict[tuple, Fills]
    cpu: CpuRanges | None = None

    @classmethod
    def of(cls, p: Problem) -> _Part:
        need = need_table(p)
        c = Costs.of(p)
        part = cls(p, need, room_of(p, need), c, decision_scale(c), {})
        if LlamaFields.of(p).cpu_layers is not None:
            part.cpu = CpuRanges.of(p, c, need)
        return part

    def room_sets(self, gs: list[int]) -> list[tuple[np.ndarray, tuple]]:
        """The room arrays the class's fill answers, each with its key in ``fills``: the stages' own,
        and with CPU layers the rooms of [c, b) after c layers on the CPU."""
        sets = [(self.room[gs], ("gpu", *gs))]
        if self.cpu is not None:
            sets.append((self.cpu.room[gs], ("cpu", *gs)))
        return sets

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

    def sums(self, which: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """GPU time, CPU and switch time (integers of 1e-12 ms), bytes and mass held of every (g, a, b)
        from the fills of the rooms ``which`` names (``room_sets``)."""
        p, c = self.p, self.c
        k, n = p.n_gpus, p.n_layers
        shape = (k, n + 1, n + 1)
        cpu_prefix = _layer_prefix(c, _units_ms(c.cpu), n)
        dense12 = np.concatenate([np.zeros((1, k), dtype=np.int64), np.cumsum(_units_ms(c.dense), axis=0)])
        gpu, missed, held_bytes, held_mass = (np.zeros(shape, dtype=np.int64) for _ in range(4))
        a = np.arange(n + 1)[:, None]
        b = np.arange(n + 1)[None, :]
        layers_moe = c.n_moe[b] - c.n_moe[a]
        for gs in _classes(c, self.scale):
            fills = self.fills[(which, *gs)]
            full = np.mod(fills.key, n + 1)
            h_sum, c_sum, m_sum, bytes_sum = fills.sums
            d = dense12[:, gs].T  # (G, L+1)
            gpu[gs] = d[:, None, :] - d[:, :, None] + h_sum
            sw12 = round(float(c.switch[gs[0]]) * FINE_TIME_SCALE)
            missed[gs] = (cpu_prefix[b] - cpu_prefix[a])[None] - c_sum + sw12 * (layers_moe[None] - full)
            held_bytes[gs] = bytes_sum
            held_mass[gs] = m_sum
        return gpu, missed, held_bytes, held_mass

    def table(self, cls: type[LlamaTable]) -> LlamaTable:
        """The table from the fills of every class (and, with CPU layers, each first range's best c)."""
        p, c, room = self.p, self.c, self.room
        n = p.n_layers
        gpu, missed, held_bytes, held_mass = self.sums("gpu")
        size_prefix = _layer_prefix(c, c.size, n)
        b = np.arange(n + 1)
        visible = np.broadcast_to(size_prefix[b][None, :] - size_prefix[b][:, None], room.shape)
        if self.cpu is None:
            return cls(p, self.need, room, gpu, missed, held_bytes, held_mass, visible)
        cpu_sums = self.sums("cpu")
        cpu_room, layers = self.cpu.choose(room, gpu + missed, visible[0, 0], cpu_sums)
        room, gpu, missed, held_bytes, held_mass = (
            x.copy() for x in (room, gpu, missed, held_bytes, held_mass)
        )
        g, b = np.nonzero(cpu_room >= 0)
        cs = layers[g, b]
        cg, cm, chb, chm = cpu_sums
        room[g, 0, b] = cpu_room[g, b]
        gpu[g, 0, b] = cg[g, cs, b]
        missed[g, 0, b] = cm[g, cs, b] + self.cpu.ms12[cs]
        held_bytes[g, 0, b] = chb[g, cs, b]
        held_mass[g, 0, b] = chm[g, cs, b]
        on_cpu = np.zeros(room.shape, dtype=np.int64)
        extra = np.zeros(room.shape, dtype=np.int64)
        on_cpu[g, 0, b] = cs
        extra[g, 0, b] = self.cpu.host[cs]
        return cls(p, self.need, room, gpu, missed, held_bytes, held_mass, visible, on_cpu, extra)


def _layer_prefix(c: Costs, per_unit: np.ndarray, n: int) -> np.ndarray:
    """Sum of ``per_unit`` over the units of layers < x, shape (L+1,)."""
    prefix = np.zeros(n + 1, dtype=np.int64)
    np.add.at(prefix, c.layer + 1, per_unit)
    return np.cumsum(prefix)


@dataclass(frozen=True)
class CpuRanges:
    """What leaving layers [0, c) wholly on the CPU does to a first range [0, b) on GPU g.

    room (k, L+1, L+1)  room of GPU g running [c, b) after them (-1 where it cannot: c = 0, the GPU
                        not on the main machine, fewer than its stage's least layers left to it)
    ms, ms12 (L+1,)     their CPU time: dense bytes (and KV cache at the decode depth) and the
                        experts' active share at host_bandwidth (float ms, integers of 1e-12 ms)
    host (L+1,)         host bytes they take beyond their experts: weights and KV cache, and what the
                        host's compute buffer grows by with them there (against host_memory)
    """

    room: np.ndarray
    ms: np.ndarray
    ms12: np.ndarray
    host: np.ndarray
    host_room: int | None

    @classmethod
    def of(cls, p: Problem, c: Costs, need: np.ndarray) -> CpuRanges:
        """The ranges of ``p`` (``need``: ``need_table(p)``)."""
        f = LlamaFields.of(p)
        n = p.n_layers
        figures = f.cpu_layers
        rate = float(f.host_bandwidth or 1)
        dense = np.concatenate([[0.0], np.cumsum(host_read_of(p))])
        ms = 1000.0 * dense / rate + np.array([float(c.cpu[c.layer < x].sum()) for x in range(n + 1)])
        host = np.concatenate([[0], np.cumsum(p.layer_bytes)])
        if figures.host is not None and p.host_memory is not None:
            host[1:n] += np.maximum(figures.host[1:] - p.host_reserve, 0)
        buffers = _buffer_growth(p, figures)  # (k, 2, L+1): as a first stage, and as the only one
        avail = np.maximum(p.free - p.reserve, -1)
        a = np.arange(n + 1)[:, None]
        b = np.arange(n + 1)[None, :]
        last = b == n  # (1, L+1)
        grown = np.where(last[None], buffers[:, 1, :, None], buffers[:, 0, :, None])
        room = avail[:, None, None] - (need + p.first_stage_bytes)[None] - grown
        least = np.maximum(np.maximum(p.min_layers, p.first_stage_min_layers), 1)
        ok = (a >= 1)[None] & (b - a >= least[:, None, None]) & (p.hosts == 0)[:, None, None]
        if figures.first is None and figures.only is not None:
            ok &= last[None]
        if figures.only is None and figures.first is not None:
            ok &= ~last[None]
        room = np.where(ok & (room >= 0), room, -1)
        return cls(room, ms, np.rint(ms * FINE_TIME_SCALE).astype(np.int64), host, p.host_room)

    def choose(
        self, room: np.ndarray, time: np.ndarray, visible: np.ndarray, sums: tuple[np.ndarray, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each first range's best c: (its room, -1 where every layer on the GPU is best or nothing
        fits, and c), shape (k, L+1) each. The least time of the range wins (the CPU layers' time
        added), then the fewest layers on the CPU; a c whose host bytes alone exceed ``host_room``
        is not taken. ``room``, ``time``: the table's own; ``visible`` (L+1,): the bytes of every
        unit of [0, b); ``sums``: ``_Part.sums`` of the fills in ``self.room``."""
        gpu, missed, held_bytes, _ = sums
        total = gpu + missed + self.ms12[None, :, None]
        ok = self.room >= 0
        if self.host_room is not None:
            ok &= visible[None, None, :] - held_bytes + self.host[None, :, None] <= self.host_room
        big = np.iinfo(np.int64).max
        total = np.where(ok, total, big)
        best = np.argmin(total, axis=1)  # (k, L+1): the first least c
        best_time = np.take_along_axis(total, best[:, None, :], axis=1)[:, 0, :]
        own = np.where(room[:, 0, :] >= 0, time[:, 0, :], big)
        take = (best_time < own) & (best_time < big)
        k = np.arange(room.shape[0])[:, None]
        chosen_room = np.where(take, self.room[k, best, np.arange(room.shape[1])[None, :]], -1)
        return chosen_room, np.where(take, best, 0)

    def best(self, p: Problem, c: Costs, g: int, b: int) -> tuple[int, np.ndarray | None]:
        """``choose`` for one range from the definition: (c, held mask over the units; None where
        every layer on the GPU is best or nothing fits)."""
        units = c.units(g, decision_scale(c))
        own = p.room(g, 0, b)
        best_time = _fine_time(c, g, 0, b, _held(c, units, 0, b, own)) if own >= 0 else None
        best_c, best_held = 0, None
        for x in range(1, b):
            room = int(self.room[g, x, b])
            if room < 0:
                continue
            held = _held(c, units, x, b, room)
            if self.host_room is not None:
                mine = c.layer < b
                if int(c.size[mine & ~held].sum()) + int(self.host[x]) > self.host_room:
                    continue
            t = _fine_time(c, g, x, b, held) + int(self.ms12[x])
            if best_time is None or t < best_time:
                best_time, best_c, best_held = t, x, held
        return best_c, best_held


def _held(c: Costs, units: Units, a: int, b: int, room: int) -> np.ndarray:
    """The fill of [a, b) within ``room`` as a mask over the units."""
    held = np.zeros(len(c.layer), dtype=bool)
    ids, _ = best_set(units, a, b, room)
    held[ids] = True
    return held


def _fine_time(c: Costs, g: int, a: int, b: int, held: np.ndarray) -> int:
    """GPU g's time for [a, b) holding ``held``, in integers of 1e-12 ms summed as the table sums them."""
    mine = (c.layer >= a) & (c.layer < b)
    gpu = int(_units_ms(c.dense[a:b, g]).sum()) + int(_units_ms(c.held[mine & held, g]).sum())
    cpu = int(_units_ms(c.cpu[mine & ~held]).sum())
    layers = np.unique(c.layer[mine])
    full = sum(1 for la in layers if held[c.layer == la].all())
    sw12 = round(float(c.switch[g]) * FINE_TIME_SCALE)
    return gpu + cpu + sw12 * (len(layers) - full)


def _buffer_growth(p: Problem, figures) -> np.ndarray:
    """How much the GPU's compute buffer grows with c layers on the CPU beyond what the problem counts,
    as a first stage of several and as the only stage, shape (k, 2, L+1) (0 at c = 0 and c = L, which
    no range takes): 0 without a geometry and on a GPU whose ``buffer:`` key replaces the computed
    figure."""
    k, n = p.n_gpus, p.n_layers
    out = np.zeros((k, 2, n + 1), dtype=np.int64)
    pm = LlamaFields.of(p).llama_memory
    buffers = getattr(pm, "buffers", None)
    if buffers is None:
        return out
    for g, counted in enumerate(buffers):
        if counted is None:
            continue
        first = counted + pm.first_extra
        for role, fig in enumerate((figures.first, figures.only)):
            if fig is not None:
                out[g, role, 1:n] = np.maximum(fig[1:] - (first + (pm.last_extra if role else 0)), 0)
    return out


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
    """The set of the range's units that makes the stage's time least within its room (with CPU
    layers, a first range's best number of them too: ``CpuRanges.best``)."""
    c = Costs.of(p)
    if a == 0 and LlamaFields.of(p).cpu_layers is not None:
        ranges = CpuRanges.of(p, c, need_table(p))
        n_cpu, held = ranges.best(p, c, g, b)
        if held is not None:
            return _cpu_first_fill(p, c, ranges, g, n_cpu, b, held)
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


def _cpu_first_fill(
    p: Problem, c: Costs, ranges: CpuRanges, g: int, n_cpu: int, b: int, held: np.ndarray
) -> StageFill:
    """Stage [0, b) on GPU g with layers [0, n_cpu) wholly on the CPU and ``held`` of the rest's units."""
    mine = (c.layer >= n_cpu) & (c.layer < b)
    on_gpu, on_cpu = mine & held, mine & ~held
    switch = float(c.switch[g]) * len(np.unique(c.layer[on_cpu]))
    total = float(c.cpu.sum())
    names = [LlamaFields.of(p).unit_names[int(i)] for i in c.order]
    return StageFill(
        room=int(ranges.room[g, n_cpu, b]),
        cache_bytes=int(c.size[on_gpu].sum()),
        held=int(on_gpu.sum()),
        visible=int((c.layer < b).sum()),
        held_mass=float(c.cpu[on_gpu].sum()) / total if total else 0.0,
        miss_ms=float(c.cpu[on_cpu].sum()) + switch + float(ranges.ms[n_cpu]),
        host_bytes=int(c.size[(c.layer < b) & ~held].sum()) + int(ranges.host[n_cpu]),
        offload=[(int(c.layer[u]), names[u]) for u in np.flatnonzero(on_cpu)],
        gpu_ms=float(c.dense[n_cpu:b, g].sum()) + float(c.held[on_gpu, g].sum()),
        switch_ms=switch,
        cpu_layers=n_cpu,
    )


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
