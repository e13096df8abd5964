"""What a llama.cpp command does on a rig, timed: the stages its devices run, each card's memory, and
the window (where every layer and expert tensor goes: solver.engines.llamacpp.devices).

Time (as the plan's, solver.engines.llamacpp): each GPU stage's layers cost ``gpu_ms`` with the
active share of every expert tensor it holds, its own or another layer's; a tensor on the CPU costs
``cpu_ms``, and its layer ``2 * switch_ms`` (a remote GPU's layer the network hop to the main host and
back as well); a tensor held on another GPU than its layer's costs ``2 * switch_ms`` (and the network
hop both ways when the two are on different hosts); a layer on the CPU costs its dense bytes (and its
KV cache at the decode depth) and its experts' active share at ``host_bandwidth``; stage boundaries,
and a card holding only the output, cost a hand-off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from solver.engines.bandwidth import host_read_of, speed_of, with_constants
from solver.engines.base import Engine
from solver.engines.llamacpp.args import LlamaArgs
from solver.engines.llamacpp.commandmemory import refusal, with_command_memory
from solver.engines.llamacpp.devices import CPU, Devices, devices_of, layer_devices, placed_bytes
from solver.engines.llamacpp.fields import LlamaFields
from solver.engines.llamacpp.flags import KV_TYPE_BYTES
from solver.engines.llamacpp.tensors import Costs
from solver.files.kvcache import KV_TYPES
from solver.problem.placement import Placement, Stage, StageFill, handoffs_ms
from solver.problem.problem import Problem, at_context
from solver.problem.scored import Card, Scored


def run_problem(p: Problem, args: LlamaArgs) -> tuple[Problem, list[str]]:
    """The rig as the command runs it: ``-c`` for the context, ``-ctk``/``-ctv`` for the KV bytes (the
    problem's are at its ``kv_type``, half K and half V), llama-bench's ``-d`` for the depth."""
    notes = []
    context = p.context if not args.ctx_size else args.ctx_size
    if args.ctx_size == 0:
        notes.append(
            f"-c 0 means the model's training context, which the model file does not give; "
            f"scored at the rig's {p.context:,}"
        )
    scale = sum(Fraction(*KV_TYPE_BYTES[t]) for t in (args.type_k, args.type_v)) / (2 * KV_TYPES[p.kv_type])
    q = at_context(p, context, scale)
    if args.depth is not None:
        q = with_constants(q, depth=args.depth)
    return q, notes


#: Where a command puts layers: (layers' devices, output's device, the args whose ``overrides`` are every
#: tensor rule in search order, notes). mainline's is ``mainline_layout``; another engine brings its own.
Layout = Callable[[Problem, LlamaArgs, Devices], tuple[list[int], int, LlamaArgs, list[str]]]
#: What a score of a command that places nothing says (mainline's --fit is on by default).
UNASKED = (
    "recent llama.cpp builds fit memory by themselves (--fit, on by default) when no -ngl, -ts, -ot "
    "or -ncmoe is given; this is the placement without it"
)


def mainline_layout(p: Problem, args: LlamaArgs, dev: Devices) -> tuple[list[int], int, LlamaArgs, list[str]]:
    """llama.cpp's ``load_tensors`` slot split (solver.engines.llamacpp.devices.layer_devices); the
    rules are the command's own."""
    layers, output = layer_devices(p, args, dev)
    return layers, output, args, []


def score(
    p: Problem,
    args: LlamaArgs,
    engine: Engine,
    layout: Layout = mainline_layout,
    unasked: str | None = UNASKED,
) -> Scored:
    """The command's placement on the rig and its predicted window (see the module docstring), its
    stages added up by ``engine`` (llama.cpp's); ``layout`` puts the layers and gives the rules,
    ``unasked`` is the note for a command that places nothing."""
    q, notes = run_problem(p, args)
    dev = devices_of(q, args)
    if len(args.tensor_split) > len(dev.model):
        notes.append(
            f"-ts gives {len(args.tensor_split)} shares for the {len(dev.model)} GPU(s) the model runs on; "
            f"llama.cpp ignores the last {len(args.tensor_split) - len(dev.model)}"
        )
    layers, output, args, layout_notes = layout(q, args, dev)
    notes += layout_notes
    q, host_compute, memory_notes = with_command_memory(q, args, dev, layers, output)
    c = Costs.of(q)
    placed, cpu_names, rule_notes = placed_bytes(q, c, args, dev, layers)
    bounds = _stages(layers)
    fills = [_fill(q, c, placed, cpu_names, g, a, b, output) for g, a, b in bounds]
    stages = [Stage.of(q, g, a, b, f) for (g, a, b), f in zip(bounds, fills)]
    cards = [_card(q, c, placed, g, a, b, output, f) for (g, a, b), f in zip(bounds, fills)]
    runs = [g for g, _, _ in bounds]
    extra_ms = 0.0
    for g in range(q.n_gpus):  # cards that run no layer but hold the output or other layers' tensors
        if g not in runs and (placed[:, g].any() or output == g):
            held = placed[:, g] > 0
            extra_ms += float(_held_ms(c, placed, g)[held].sum())
            need = q.stage_bytes + (q.last_stage_bytes if output == g else 0) + int(placed[held, g].sum())
            cards.append(
                Card(g, q.gpu_names[g], None, output == g, 0, 0, 0, int(held.sum()), need, _avail(q, g))
            )
    cpu_end = next((i for i, d in enumerate(layers) if d != CPU), q.n_layers)
    cpu_ms = _cpu_layers_ms(q, c, placed, cpu_end)
    from_cpu = (placed[:, : q.n_gpus] > 0) & (c.layer < cpu_end)[:, None]
    extra_ms += float(from_cpu.sum(axis=0) @ c.switch)
    if runs and output not in (CPU, runs[-1]):
        extra_ms += handoffs_ms(q, [runs[-1], output])
    compute = sum(s.compute_ms for s in stages) + handoffs_ms(q, runs)
    window, held_mass = engine.totals(q, fills, compute)
    if cpu_ms or extra_ms:
        window += cpu_ms + extra_ms
        held_mass += float(c.cpu[from_cpu.any(axis=1)].sum()) / max(float(c.cpu.sum()), 1e-300)
    cpu_card = _cpu_card(q, c, placed, cpu_end, output)
    if not host_compute and placed[:, q.n_gpus].any():  # no geometry: the plan's allowance
        host_compute = q.host_reserve
    cards.insert(0, dataclasses.replace(cpu_card, need_bytes=cpu_card.need_bytes + host_compute))
    notes = [*args.notes, *notes, *rule_notes, *memory_notes]
    placed_by_user = args.n_gpu_layers is not None or args.tensor_split or args.overrides
    fit_off = any(
        w.split(" ")[0] in ("-fit", "--fit") and w.split(" ")[-1] in ("off", "0") for w in args.ignored
    )
    if not (placed_by_user or fit_off or args.bench) and unasked:
        notes.append(unasked)
    if args.ignored:
        notes.append(f"not modelled: {' '.join(args.ignored)}")
    why = refusal(q, args)
    if why:
        notes.append(f"llama.cpp will not start this command: {why}")
    placement = Placement(stages, window, held_mass)
    return Scored(q, placement, cards, (0, cpu_end), cpu_ms, extra_ms, notes, refused=why)


def _stages(layers: list[int]) -> list[tuple[int, int, int]]:
    """(GPU, start, end) of each run of layers on one GPU, in layer order (the CPU's are left out)."""
    out: list[tuple[int, int, int]] = []
    for layer, g in enumerate(layers):
        if g == CPU:
            continue
        if out and out[-1][0] == g and out[-1][2] == layer:
            out[-1] = (g, out[-1][1], layer + 1)
        else:
            out.append((g, layer, layer + 1))
    return out


def _avail(p: Problem, g: int) -> int:
    return int(p.free[g]) - int(p.reserve[g])


def _room(p: Problem, g: int, a: int, b: int, output: bool) -> int:
    """What GPU g has for expert tensors after layers [a, b), their buffers and the ends it holds."""
    first = p.first_stage_bytes if a == 0 else 0
    last = p.last_stage_bytes if output else 0
    return _avail(p, g) - p.stage_bytes - first - last - int(p.layer_bytes[a:b].sum())


def _hops(p: Problem) -> np.ndarray:
    """ms of a trip from GPU g to GPU h and back, shape (k, k): two switches, and the network both ways
    between hosts."""
    far = p.hosts[:, None] != p.hosts[None, :]
    return 2.0 * speed_of(p).switch_ms + np.where(far, 2.0 * p.network_ms, 0.0)


def _held_ms(c: Costs, placed: np.ndarray, g: int) -> np.ndarray:
    """GPU ms each unit's bytes on GPU g add to g's reads (its whole ``held`` where g holds all of it)."""
    return c.held[:, g] * (placed[:, g] / np.maximum(c.size, 1))


def _fill(
    p: Problem, c: Costs, placed: np.ndarray, cpu_names: list[list[str]], g: int, a: int, b: int, output: int
) -> StageFill:
    """Stage [a, b) on GPU g: its reads (its own held tensors and any other layer's it holds), its
    tensors on the CPU and their layers' switches, and a trip there and back per tensor held away."""
    k = p.n_gpus
    mine = (c.layer >= a) & (c.layer < b)
    here = placed[:, g] > 0
    on_cpu = placed[:, k] > 0
    cpu_share = placed[:, k] / np.maximum(c.size, 1)
    held_ms = _held_ms(c, placed, g)
    away = (placed[:, :k] > 0) & mine[:, None]
    away[:, g] = False
    switch = float(c.switch[g]) * len(np.unique(c.layer[mine & on_cpu])) + float(
        away.sum(axis=0) @ _hops(p)[g]
    )
    guests = ~mine & here
    gpu_ms = float(c.dense[a:b, g].sum()) + float(held_ms[mine & here].sum())
    if guests.any():
        gpu_ms += float(held_ms[guests].sum())
    room = _room(p, g, a, b, output == g)
    own, guest_bytes = int(placed[mine, g].sum()), int(placed[guests, g].sum())
    total = float(c.cpu.sum())
    on_gpu = mine & (cpu_share < 1)
    return StageFill(
        room=room,
        cache_bytes=own,
        held=int((mine & ~on_cpu).sum()),
        visible=int(mine.sum()),
        held_mass=float((c.cpu * (1.0 - cpu_share))[on_gpu].sum()) / total if total else 0.0,
        miss_ms=float((c.cpu * cpu_share)[mine & on_cpu].sum()) + switch,
        host_bytes=int(placed[mine, k].sum()),
        offload=[(int(c.layer[u]), tuple(cpu_names[u])) for u in np.flatnonzero(mine & on_cpu)],
        fits=room >= own + guest_bytes,
        gpu_ms=gpu_ms,
        switch_ms=switch,
    )


def _card(
    p: Problem, c: Costs, placed: np.ndarray, g: int, a: int, b: int, output: int, f: StageFill
) -> Card:
    k = p.n_gpus
    mine = (c.layer >= a) & (c.layer < b)
    here = placed[:, g] > 0
    guests = ~mine & here
    elsewhere = int(((placed[:, :k] > 0) & mine[:, None]).sum() - (mine & here).sum())
    own = int(placed[mine, g].sum())
    return Card(
        gpu=g,
        name=p.gpu_names[g],
        layers=(a, b),
        output=output == g,
        held=int((mine & here).sum()),
        offloaded=int((mine & (placed[:, k] > 0)).sum()),
        elsewhere=elsewhere,
        guests=int(guests.sum()),
        need_bytes=_avail(p, g) - f.room + own + int(placed[guests, g].sum()),
        avail_bytes=_avail(p, g),
    )


def _cpu_layers_ms(p: Problem, c: Costs, placed: np.ndarray, end: int) -> float:
    """Layers [0, end) on the CPU: their dense bytes (and KV cache at the decode depth) and their
    experts' active share at host_bandwidth."""
    if end == 0:
        return 0.0
    k = p.n_gpus
    mine = (c.layer < end) & (placed[:, k] > 0)
    experts = float((c.cpu * placed[:, k] / np.maximum(c.size, 1))[mine].sum())
    rate = LlamaFields.of(p).host_bandwidth
    return 1000.0 * float(host_read_of(p)[:end].sum()) / float(rate or 1) + experts


def _cpu_card(p: Problem, c: Costs, placed: np.ndarray, end: int, output: int) -> Card:
    """Host memory: the layers left on the CPU and every expert tensor there, against ``host_memory``."""
    k = p.n_gpus
    on_cpu = placed[:, k] > 0
    mine = c.layer < end
    return Card(
        gpu=None,
        name="CPU",
        layers=(0, end) if end else None,
        output=output == CPU,
        held=int((mine & on_cpu).sum()),
        offloaded=0,
        elsewhere=int(((placed[:, :k] > 0) & mine[:, None]).sum()),
        guests=int((~mine & on_cpu).sum()),
        need_bytes=int(p.layer_bytes[:end].sum()) + int(placed[:, k].sum()),
        avail_bytes=p.host_memory,
    )
