"""llama.cpp: whole expert tensors stay on their layer's GPU or run on the CPU.

A *unit* is one expert tensor of one layer (with its bias and scale tensors, which move with it). A
unit left on the CPU costs ``cpu_ms(u) = 1000 * active_experts * bytes(u) / (experts[layer(u)] *
host_bandwidth)`` per token; a unit held on GPU g adds its active share of bytes to the layer's read
(solver.engines.bandwidth); every MoE layer with a unit on the CPU costs ``2 * switch_ms``. A stage
holds the set of its units that makes its time least within its room (solver.engines.fill).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from solver.baselines import Baseline, cuts_of
from solver.engines.bandwidth import BytesSpeed, dense_ms, per_byte_ms, speed_of
from solver.engines.base import PlanCell, Required, Shape, StageCell, Weights, ms
from solver.engines.fill import Units, best_set, dense_table, grain_of, pack, uniform_table
from solver.export import Command, context_flag, device_order, llama_flags, placeholder, stage_sizes
from solver.export_hosts import llama_rpc_lines
from solver.kvcache import KV_TYPES
from solver.plan import Placement, StageFill, bounds_ok, feasible
from solver.rangewalk import need_table, room_of
from solver.scales import FINE_TIME_SCALE, MASS_SCALE, SPARE_UNLIMITED
from solver.units import format_size, per_layer

if TYPE_CHECKING:
    from solver.config import ModelConfig, RigConfig
    from solver.engines.llamaargs import LlamaArgs
    from solver.export import Line
    from solver.problem import Problem
    from solver.scored import Scored

#: llama.cpp's compute buffer on each GPU besides the output logits (graph intermediates at the default
#: n_ubatch 512 with flash attention; docs/engines.md, "Memory the engine takes").
COMPUTE_BUFFER = 256 * 2**20
#: Tokens of the default micro-batch (``-ub``): the output device holds their float32 logits.
N_UBATCH = 512
#: Integer units per ms the fill decides in (1e-9 ms); lowered for a model whose sums would overflow.
DECISION_SCALE = 10**9


@dataclass(frozen=True)
class Costs:
    """Every per-unit and per-layer cost, in float ms and as integers of 1e-12 ms (FINE_TIME_SCALE).

    Units in (layer, slot) order. size (U,): bytes; fill_size: the bytes the fill counts, rounded up
    to its grain (fill.grain_of; the same but for tensor sizes that share no large divisor); cpu (U,):
    ms on the CPU; held (U, k): ms its active share adds to
    its layer's GPU read on each GPU; dense (L, k): ms of each layer's other reads (or ``layer_ms``);
    switch (k,): ms of one layer with a unit on the CPU, on each GPU: to the CPU and back, and on a
    GPU of another host than the first (an rpc-server's), the network hop there and back too, since
    ``-ot ...=CPU`` keeps those experts on the main host's CPU.
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
        order = np.lexsort((p.unit_slot if len(p.unit_slot) else np.zeros_like(p.unit_layer), p.unit_layer))
        layer = p.unit_layer[order]
        slot = p.unit_slot[order] if len(p.unit_slot) else np.zeros_like(layer)
        size = p.unit_bytes[order]
        per_byte, dense = per_byte_ms(p), dense_ms(p)
        share = p.active_experts / np.maximum(p.experts_per_layer[layer], 1)
        held = (share * size)[:, None] * per_byte[None, :]
        has = np.zeros(p.n_layers + 1, dtype=np.int64)
        has[np.unique(layer) + 1] = 1
        remote = (p.hosts != 0) if len(p.host_names) > 1 else np.zeros(p.n_gpus, dtype=bool)
        switch = 2.0 * speed_of(p).switch_ms + np.where(remote, 2.0 * p.network_ms, 0.0)
        most_room = int((p.free - p.reserve).max(initial=0))
        grain = grain_of(size, most_room)
        fill_size = -(-size // grain) * grain
        return cls(order, layer, slot, size, fill_size, p.unit_ms[order], held, dense, switch, np.cumsum(has))

    def units(self, g: int, scale: int) -> Units:
        """GPU g's units for the fill, valued in integers of ``scale`` per ms."""
        n = len(self.dense)
        value = np.rint(self.cpu * scale).astype(np.int64) - np.rint(self.held[:, g] * scale).astype(np.int64)
        key, sigma = pack(value, round(float(self.switch[g]) * scale), n)
        return Units(self.layer, self.slot, self.fill_size, key, sigma, n)


def decision_scale(c: Costs) -> int:
    """The largest power of ten up to DECISION_SCALE whose packed fill keys cannot overflow int64."""
    scale = DECISION_SCALE
    total_ms = float(np.abs(c.cpu).sum()) + float(np.abs(c.held).sum(axis=0).max(initial=0.0))
    worst = (total_ms + float(c.switch.max(initial=0.0)) * len(c.dense) + 1.0) * (len(c.dense) + 1)
    while scale > 1 and worst * scale >= 2**61:
        scale //= 10
    return scale


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
        need = need_table(p)
        room = room_of(p, need)
        c = Costs.of(p)
        k, n = p.n_gpus, p.n_layers
        cpu12 = _units_ms(c.cpu)
        mass = np.rint(c.cpu / max(float(c.cpu.sum()), 1e-300) * MASS_SCALE).astype(np.int64)
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
        scale = decision_scale(c)
        a = np.arange(n + 1)[:, None]
        b = np.arange(n + 1)[None, :]
        layers_moe = c.n_moe[b] - c.n_moe[a]
        for gs in _classes(c, scale):
            units = c.units(gs[0], scale)
            h12 = _units_ms(c.held[:, gs[0]])
            carried = [h12, cpu12, mass, c.size]
            fills = uniform_table(units, carried, room[gs]) or dense_table(units, carried, room[gs])
            full = np.mod(fills.key, n + 1)
            h_sum, c_sum, m_sum, bytes_sum = fills.sums
            d = dense12[:, gs].T  # (G, L+1)
            gpu[gs] = d[:, None, :] - d[:, :, None] + h_sum
            sw12 = round(float(c.switch[gs[0]]) * FINE_TIME_SCALE)
            missed[gs] = (cpu_prefix[b] - cpu_prefix[a])[None] - c_sum + sw12 * (layers_moe[None] - full)
            held_bytes[gs] = bytes_sum
            held_mass[gs] = m_sum
        visible = size_prefix[b] - size_prefix[a]
        return cls(p, need, room, gpu, missed, held_bytes, held_mass, np.broadcast_to(visible, room.shape))

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


def _rescale(fine: np.ndarray, scale: int) -> np.ndarray:
    """Integers of 1e-12 ms as integers of 1/scale ms (rounded half up)."""
    step = FINE_TIME_SCALE // scale
    return fine if step == 1 else (fine + step // 2) // step


def _classes(c: Costs, scale: int) -> list[list[int]]:
    """GPUs whose units and switches are valued alike (the fill depends on the GPU only through them)."""
    groups: dict[tuple, list[int]] = {}
    for g in range(c.held.shape[1]):
        key = (np.rint(c.held[:, g] * scale).astype(np.int64).tobytes(), float(c.switch[g]))
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
    names = [p.unit_names[int(i)] for i in c.order]
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


def slot_devices(weights: np.ndarray, n_blocks: int, n_gpu_layers: int) -> list[int | None]:
    """``load_tensors``: the device (a position in the model's device list) of slots 0..n_blocks, None
    for the CPU; slot n_blocks is the output layer.

    ``weights`` are the devices' split (the ``--tensor-split`` values, or their free memory), as float32,
    not all zero. ``splits`` is their cumulative float32 sum over its total; with ``i_gpu_start =
    max(n_blocks + 1 - ngl, 0)`` and ``act = min(ngl, n_blocks + 1)``, slot il goes to
    ``upper_bound(splits, float(il - i_gpu_start) / act)``, or to the CPU outside [i_gpu_start,
    i_gpu_start + act).
    """
    if len(weights) == 0:
        return [None] * (n_blocks + 1)
    splits = np.cumsum(np.asarray(weights, dtype=np.float32), dtype=np.float32)
    splits = splits / splits[-1]
    start = max(n_blocks + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_blocks + 1)
    out: list[int | None] = []
    for il in range(n_blocks + 1):
        if il < start or il - start >= act:
            out.append(None)
            continue
        x = np.float32(il - start) / np.float32(act)
        out.append(min(int(np.searchsorted(splits, x, side="right")), len(splits) - 1))
    return out


def free_memory_split(free: np.ndarray, n_layers: int, extra_blocks: int = 0) -> list[int]:
    """Layers per device when ``--tensor-split`` is not given: llama.cpp splits by free memory.

    Every slot on the GPUs (``slot_devices`` with all layers offloaded); the file's ``extra_blocks``
    after the planned layers (MTP) and the output slot come last; the counts are the planned layers'.
    """
    n_blocks = n_layers + extra_blocks
    where = slot_devices(free.astype(np.float32), n_blocks, n_blocks + 1)[:n_layers]
    return np.bincount(np.array(where, dtype=np.int64), minlength=len(free)).tolist()


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


#: What stands in for the model file when the model file does not name it.
GGUF_PLACEHOLDER = "your GGUF file (its first shard); a model from `solve model from-gguf` names it"


def _why_not(p: Problem, plan: Placement, n_cpu: int) -> str:
    """Why the free-memory split with ``--n-cpu-moe n_cpu`` (the least that fits every GPU, or every
    layer's experts on the CPU when none does) is no placement: the limit that binds, named."""
    short = [s for s in plan.stages if not s.fits]
    if short:
        s = short[0]
        need = format_size(s.cache_bytes - s.room_bytes)
        return (
            f"does not fit even with every expert on the CPU: GPU {s.gpu} ({s.name}) lacks {need} "
            f"for its layers {s.start}-{s.end - 1}"
        )
    split = f"split by free memory, --n-cpu-moe {n_cpu}"
    if p.host_memory is not None and plan.host_bytes > p.host_memory:
        return (
            f"{split} (the least that fits the GPUs) leaves {format_size(plan.host_bytes)} of experts in "
            f"host memory, more than host_memory ({format_size(p.host_memory)})"
        )
    return f"{split} breaks a GPU's min_layers or max_layers"


class LlamaCpp(BytesSpeed):
    """llama.cpp: expert tensors on their layer's GPU or on the CPU, which runs them."""

    name = "llama.cpp"
    note = "expert tensors on a GPU or, beyond VRAM, on the CPU"
    rig_keys = ("host_bandwidth", "host_memory")
    miss_rate_key = "host_bandwidth"
    reads_llama_bench = True
    miss_label = "CPU time (experts in host memory)"
    kv_types = tuple(KV_TYPES)
    columns: ClassVar[list[tuple[str, StageCell]]] = [
        ("experts\non GPU", lambda s: format_size(s.cache_bytes)),
        ("experts\non CPU", lambda s: format_size(s.host_bytes)),
        ("GPU\nms", lambda s: ms(s.compute_ms)),
        ("CPU\nms", lambda s: ms(s.miss_ms - s.switch_ms)),
        ("switch\nms", lambda s: ms(s.switch_ms)),
    ]
    summary: ClassVar[list[tuple[str, PlanCell]]] = [
        ("GPU time", lambda q: f"{sum(s.compute_ms for s in q.stages):.3f} ms"),
        ("CPU time", lambda q: f"{sum(s.miss_ms - s.switch_ms for s in q.stages):.3f} ms"),
        ("switches", lambda q: f"{sum(s.switch_ms for s in q.stages):.3f} ms"),
        ("experts on GPU", lambda q: format_size(sum(s.cache_bytes for s in q.stages))),
        ("experts on CPU", lambda q: format_size(q.host_bytes)),
    ]
    sweep: ClassVar[list[tuple[str, PlanCell]]] = [
        ("experts\non CPU", lambda q: format_size(q.host_bytes)),
        ("CPU\nms", lambda q: ms(sum(s.miss_ms - s.switch_ms for s in q.stages))),
    ]
    required = (
        Required("model", "active_experts", "the experts each token uses per MoE layer"),
        Required("rig", "host_bandwidth", "how fast the CPU streams offloaded experts, e.g. '60 GB/s'"),
    )

    def problem_fields(self, rig: RigConfig, model: ModelConfig, experts: np.ndarray) -> dict:
        units = llama_units(model, rig.host_bandwidth, experts)
        memory = {
            "buffers": [COMPUTE_BUFFER] * len(rig.gpus),
            "last_stage_extra": 4 * N_UBATCH * (model.vocab_size or 0),  # float32 logits of a micro-batch
            "first_stage_bytes": model.first_stage_bytes - model.embedding_bytes,  # embeddings stay in RAM
        }
        return (
            self.speed_fields(rig, model, experts) | units | memory | {"host_bandwidth": rig.host_bandwidth}
        )

    def table(self, p: Problem) -> LlamaTable:
        return LlamaTable.build(p)

    def stage_fill(self, p: Problem, g: int, a: int, b: int) -> StageFill:
        return stage_fill(p, g, a, b)

    def miss_total_ms(self, p: Problem) -> float:
        c = Costs.of(p)
        return float(c.cpu.sum()) + float(c.switch.max(initial=0.0)) * int(c.n_moe[-1])

    def default_split(self, p: Problem) -> Baseline:
        """Layers split by free memory (no ``--tensor-split``), with the smallest ``--n-cpu-moe`` that
        makes every GPU fit."""
        cuts = cuts_of(free_memory_split(p.free, p.n_layers, p.nextn_layers))
        gpus = list(range(p.n_gpus))
        if not bounds_ok(p, cuts):
            return Baseline(
                cuts, False, None, "free-memory", reason="the free-memory split leaves a GPU without layers"
            )

        def placed(n_cpu: int) -> Placement:
            return self.evaluate(p, gpus, cuts, partial(cpu_moe_fill, n_cpu_moe=n_cpu))

        # the GPUs fit from some N on (each more layer's experts on the CPU frees VRAM): bisect for it;
        # host memory only gets tighter with N, so if that N breaks it, every larger one does too
        lo, hi = 0, p.n_layers
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if all(s.fits for s in placed(mid).stages) else (mid + 1, hi)
        plan = placed(lo)
        if feasible(p, plan):
            return Baseline(cuts, True, plan, "free-memory", f"split by free memory, --n-cpu-moe {lo}")
        return Baseline(cuts, False, plan, "free-memory", _why_not(p, plan, lo))

    def stage_json(self, stage) -> dict:
        return {
            "held_tensors": stage.held_pairs,
            "tensors": stage.visible_pairs,
            "cpu_ms": stage.miss_ms - stage.switch_ms,
            "switch_ms": stage.switch_ms,
            "offload": [{"layer": layer, "tensors": list(names)} for layer, names in stage.offload],
        }

    def export(self, plan: Shape) -> list[Line]:
        """``llama-server -m MODEL.gguf -c CONTEXT --split-mode layer -ngl 999 --tensor-split ... -ot ...``
        with ``-ctk/-ctv`` and ``-fa on`` for a KV cache type other than f16 and ``-fit off`` when asked;
        across hosts, the rpc-server lines first."""
        gpus, cuts, n_layers, launch = plan.gpus, plan.cuts, plan.n_layers, plan.launch
        offload, names, extra_blocks, hosts = plan.offload, plan.names, plan.extra_blocks, plan.hosts
        split = llama_flags(stage_sizes(cuts, n_layers), n_layers + extra_blocks, offload, names)
        model, notes = placeholder(launch.gguf, "MODEL.gguf", GGUF_PLACEHOLDER)
        context, more = context_flag("-c", launch.context)
        tail = []
        if launch.kv_type != self.kv_types[0]:  # a quantised V cache needs flash attention
            tail = ["-ctk", launch.kv_type, "-ctv", launch.kv_type, "-fa", "on"]
        tail += ["-fit", "off"] if launch.fit_off else []
        head = ["llama-server", "-m", model, *context]
        if hosts is not None and hosts.spans(gpus):
            lines, env, devices = llama_rpc_lines(hosts, gpus)
            return [*notes, *more, *lines, Command((*head, *devices, *split, *tail), env)]
        return [*notes, *more, Command((*head, *split, *tail), device_order(gpus))]

    def read_command(self, words: list[str]) -> LlamaArgs:
        """llama-server, llama-cli or llama-bench words (solver.engines.llamaargs)."""
        from solver.engines.llamaargs import parse_llama_args

        return parse_llama_args(words)

    def score(self, p: Problem, args: LlamaArgs) -> Scored:
        """Where the command puts every layer and expert tensor, timed (solver.engines.llamascore)."""
        from solver.engines.llamascore import score

        return score(p, args, self)
