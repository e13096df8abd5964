"""The memory llama.cpp takes besides the weights for one command on a rig: the compute buffer of each
device and of the host for the command's own placement and flags (solver.engines.llamacpp.memory), in
place of what the plan counted for every role, and whether llama.cpp starts the command at all.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from solver.engines.llamacpp import memory
from solver.engines.llamacpp.args import LlamaArgs
from solver.engines.llamacpp.devices import CPU, Devices
from solver.engines.llamacpp.fields import LlamaFields
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
    GPU's ``buffer:`` key gives it) and the first and last stages' role extras taken off (so no longer
    the ways a plan may run, which count the roles: ``LlamaFields.classes`` dropped); the host's
    compute buffer; and a note saying so. ``p`` unchanged, 0 and no note for a model file without a
    geometry (the allowance stays) or flags llama.cpp refuses."""
    pm = LlamaFields.of(p).llama_memory
    flags = command_flags(p, args)
    if not isinstance(pm, memory.PlanMemory) or memory.refusal(pm.geometry, flags):
        return p, 0, []
    placement = command_placement(pm.geometry, args, dev, layers, output)
    est = memory.estimate(pm.geometry, placement, flags, pm.offload_min_batch, pm.stored)
    reserve = p.reserve.copy()
    for i, gpu in enumerate(dev.model):
        if pm.buffers[gpu] is not None:
            reserve[gpu] += est.devices[i].compute - pm.buffers[gpu]
    q = dataclasses.replace(
        p,
        reserve=np.asarray(reserve, dtype=np.int64),
        first_stage_bytes=p.first_stage_bytes - pm.first_extra,
        last_stage_bytes=p.last_stage_bytes - pm.last_extra,
        engine_fields=dataclasses.replace(LlamaFields.of(p), classes=()),
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
