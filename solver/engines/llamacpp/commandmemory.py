"""The memory llama.cpp takes besides the weights for one command on a rig: the compute buffer of each
device and of the host for the command's own placement and flags (solver.engines.llamacpp.memory), in
place of what the plan counted for every role, and whether llama.cpp starts the command at all.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable

import numpy as np

from solver.engines.llamacpp import memory
from solver.engines.llamacpp.args import LlamaArgs, parse_llama_args
from solver.engines.llamacpp.devices import CPU, Devices, devices_of, layer_devices
from solver.engines.llamacpp.fields import LlamaFields
from solver.engines.llamacpp.table import fill_of
from solver.engines.llamacpp.tensors import Costs
from solver.problem.placement import Placement, StageFill, feasible
from solver.problem.problem import Problem
from solver.units import format_size


def command_flags(p: Problem, args: LlamaArgs) -> memory.Flags:
    """``-c -b -ub -fa -ctk -ctv`` as the command gives them, llama.cpp's defaults otherwise (``-fa``:
    auto, which is on for these models; llama-bench's default is off)."""
    fa = args.flash_attn or ("off" if args.bench else "on")
    return memory.Flags(
        n_ctx=max(p.context, 1),
        n_batch=args.n_batch or memory.N_BATCH,
        n_ubatch=args.n_ubatch or memory.N_UBATCH,
        flash_attn=fa != "off",
        type_k=args.type_k,
        type_v=args.type_v,
    )


def refusal(p: Problem, args: LlamaArgs) -> str | None:
    """Why llama.cpp would not create the context for this command, or None."""
    pm = LlamaFields.of(p).llama_memory
    g = pm.geometry if isinstance(pm, memory.PlanMemory) else None
    return memory.refusal(g, command_flags(p, args))


def command_placement(
    g: memory.Geometry, args: LlamaArgs, dev: Devices, layers: list[int], output: int
) -> memory.Placement:
    """The command's placement in memory.Placement's terms: every layer slot's device (the nextn slots
    with the output's) and its ``-ot`` rules with their buffers (``CPU``, ``CUDAi``, ``RPC0[host:port]``,
    another GPU's buffer too: fit's "extra layer") as the model device (``RPCi``) they name."""
    pos = {gpu: i for i, gpu in enumerate(dev.model)}
    slots = [-1 if d == CPU else pos[d] for d in layers]
    slots += [-1 if output == CPU else pos[output]] * (g.n_layer_all + 1 - len(slots))
    rules = []
    for pattern, buft in args.overrides:
        gpu = CPU if buft == "CPU" else dev.of_buffer(buft, f"{pattern}={buft}")
        rules.append((pattern, "CPU" if gpu == CPU else f"RPC{pos[gpu]}"))
    return memory.Placement(len(dev.model), overrides=tuple(rules), slots=tuple(slots))


def with_command_memory(
    p: Problem, args: LlamaArgs, dev: Devices, layers: list[int], output: int
) -> tuple[Problem, int, list[str]]:
    """``p`` with each GPU's compute buffer the command's own (where the plan computed it, not where a
    GPU's ``buffer:`` key gives it; in ``Problem.buffers`` and the plan memory's ``buffers`` too) and the
    first and last stages' role extras taken off (so no longer the ways a plan may run, which count the
    roles: ``LlamaFields.classes`` dropped); the host's compute buffer; and a note saying so. ``p``
    unchanged, 0 and no note for a model file without a geometry (the allowance stays) or flags
    llama.cpp refuses."""
    pm = LlamaFields.of(p).llama_memory
    flags = command_flags(p, args)
    if not isinstance(pm, memory.PlanMemory) or memory.refusal(pm.geometry, flags):
        return p, 0, []
    placement = command_placement(pm.geometry, args, dev, layers, output)
    est = memory.estimate(pm.geometry, placement, flags, pm.offload_min_batch, pm.stored)
    reserve = p.reserve.copy()
    buffers = p.buffers.copy() if len(p.buffers) else np.zeros(p.n_gpus, dtype=np.int64)
    own = list(pm.buffers)
    for i, gpu in enumerate(dev.model):
        if pm.buffers[gpu] is not None:
            reserve[gpu] += est.devices[i].compute - pm.buffers[gpu]
            buffers[gpu] = own[gpu] = est.devices[i].compute
    counted = dataclasses.replace(pm, buffers=tuple(own), first_extra=0, last_extra=0)
    q = dataclasses.replace(
        p,
        reserve=np.asarray(reserve, dtype=np.int64),
        buffers=np.asarray(buffers, dtype=np.int64),
        first_stage_bytes=p.first_stage_bytes - pm.first_extra,
        last_stage_bytes=p.last_stage_bytes - pm.last_extra,
        engine_fields=dataclasses.replace(LlamaFields.of(p), llama_memory=counted, classes=()),
    )
    each = ", ".join(
        f"{p.gpu_names[gpu]} {format_size(est.devices[i].compute)}" for i, gpu in enumerate(dev.model)
    )
    state = "on" if est.pipeline_parallel else "off"
    note = (
        f"compute buffers for this command (-ub {flags.n_ubatch}, -fa {'on' if flags.flash_attn else 'off'}, "
        f"pipeline parallelism {state}): {each}; host {format_size(est.host.compute)}"
    )
    return q, est.host.compute, [note]


#: How many times ``as_run`` counts a plan's command and fills it again under its figures, at most.
REFILLS = 3


def plan_command_memory(p: Problem, plan: Placement) -> Problem | None:
    """``p`` counting what the plan's exported command takes (``with_command_memory``; under a
    ``host_memory`` limit the host's compute buffer the command's too); None where its flags cannot say
    the plan."""
    from solver.engines import plan_lines

    try:
        lines = plan_lines(p, plan)
    except ValueError:
        return None
    args = parse_llama_args(shlex.split(next(ln for ln in reversed(lines) if "llama-server" in ln)))
    dev = devices_of(p, args)
    layers, output = layer_devices(p, args, dev)
    q, host, _ = with_command_memory(p, args, dev, layers, output)
    return q if p.host_memory is None else dataclasses.replace(q, host_reserve=host)


def kept_fill(plan: Placement) -> Callable[[Problem, int, int, int], StageFill]:
    """A fill that keeps on each stage's GPU what ``plan`` keeps there (every unit but those it lists
    in host memory), under whatever problem it is given."""
    off = {(layer, names) for s in plan.stages for layer, names in s.offload}

    def fill(q: Problem, g: int, a: int, b: int) -> StageFill:
        c = Costs.of(q)
        names = LlamaFields.of(q).unit_names
        units = enumerate(c.order)
        held = np.array([(int(c.layer[u]), names[int(i)]) not in off for u, i in units], dtype=bool)
        return fill_of(q, c, g, a, b, held, fits=None)

    return fill


def as_run(p: Problem, plan: Placement) -> tuple[Problem, Placement] | None:
    """The plan as its own command runs, where ``p`` counts a bound for it (the op offload's room, the
    figures of a GPU beside host expert tensors, each role's larger figure): each GPU's compute buffer
    the command's own; then each stage filled again under those figures while that holds more and the
    new plan's own command fits too (each such plan is at least as fast: the room is at least the
    bound's). None where ``p`` counts the plan exactly already (every expert tensor held: pipeline
    parallelism on), the model file has no geometry, a stage runs layers on the CPU, or the export
    cannot say the plan."""
    fields = LlamaFields.of(p)
    if p.held_only or not isinstance(fields.llama_memory, memory.PlanMemory):
        return None
    if any(s.cpu_layers for s in plan.stages):
        return None
    from solver.engines import engine_of

    engine = engine_of(p)
    best = None
    for _ in range(REFILLS):
        q = plan_command_memory(p, plan)
        if q is None:
            break
        kept = engine.evaluate(q, plan.gpus, plan.cuts, kept_fill(plan))
        if not feasible(q, kept):
            break
        best = q, kept
        again = engine.evaluate(q, plan.gpus, plan.cuts)
        if [s.offload for s in again.stages] == [s.offload for s in plan.stages]:
            break
        plan = again
    return best
