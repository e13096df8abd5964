"""A llama.cpp plan's own count of each GPU's compute buffer beside what its exported command takes.

The command's figure is ``memory.estimate`` of the export's own placement and flags (what ``solve
score`` counts; the estimate is held to llama.cpp's by tests/engines/test_fit_exact.py and the engine
tier), so a plan counts exactly when the two agree on every GPU it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from solver.cli.score import command_words, plan_export
from solver.engines.llamacpp import memory
from solver.engines.llamacpp.args import parse_llama_args
from solver.engines.llamacpp.commandmemory import command_flags, command_placement
from solver.engines.llamacpp.devices import devices_of, layer_devices
from solver.engines.llamacpp.fields import LlamaFields
from solver.planning.planner import Result


@dataclass(frozen=True)
class Counted:
    """One GPU of a plan: its compute buffer as the plan counted it and as the export's command takes it."""

    gpu: int
    planned: int
    command: int

    def agrees(self) -> bool:
        """Within max(2 %, 64 MiB) of the command's figure."""
        return abs(self.planned - self.command) <= max(0.02 * self.command, 64 * 2**20)


def planned_compute(r: Result) -> dict[int, int]:
    """Each planned GPU's compute buffer as the plan counts it: its buffer, with the first and last
    stages' extras (a GPU whose ``buffer:`` key replaced the figure is left out)."""
    pm = LlamaFields.of(r.problem).llama_memory
    plan = r.plan
    assert plan is not None and isinstance(pm, memory.PlanMemory)
    out = {}
    for i, s in enumerate(plan.stages):
        if pm.buffers[s.gpu] is None:
            continue
        first = pm.first_extra if i == 0 else 0
        last = pm.last_extra if i == len(plan.stages) - 1 else 0
        out[s.gpu] = pm.buffers[s.gpu] + first + last
    return out


def compared(r: Result) -> list[Counted]:
    """Each planned GPU's count beside ``memory.estimate`` of the plan's exported command."""
    p = r.problem
    pm = LlamaFields.of(p).llama_memory
    lines = plan_export(r)
    assert lines is not None and isinstance(pm, memory.PlanMemory)
    words = command_words([ln for ln in lines if not ln.lstrip().startswith("#")])
    args = parse_llama_args(words)
    dev = devices_of(p, args)
    layers, output = layer_devices(p, args, dev)
    placement = command_placement(pm.geometry, args, dev, layers, output)
    est = memory.estimate(pm.geometry, placement, command_flags(p, args), pm.offload_min_batch, pm.stored)
    command = {gpu: est.devices[i].compute for i, gpu in enumerate(dev.model)}
    return [Counted(g, n, command[g]) for g, n in planned_compute(r).items()]
