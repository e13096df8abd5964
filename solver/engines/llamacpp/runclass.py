"""How llama.cpp runs a plan, and the compute buffers each way takes on every GPU.

llama.cpp turns pipeline parallelism on only with several devices, every layer on GPUs and no tensor
override (``memory.pipeline_parallel``): a plan that holds every expert tensor (its export writes no
``-ot``) runs with it on and no op offload; a plan that leaves one in host memory runs with it off, and
on a GPU backend the first device copies each host expert tensor into its compute buffer. The two take
different buffers, so a plan is counted in its own class:

* ``pipeline``: every expert tensor held; the pipeline-parallel figures, no offload copy;
* ``offload``: some expert tensor in host memory; the figures without pipeline parallelism, the first
  device's with the op offload (a bound over which tensors stay there: ``memory.offload_compute``);
* ``bound``: either, each role's larger figure: what any plan fits under.

A plan whose layers are not all on GPUs runs as ``offload`` too (pipeline parallelism is off).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from solver.engines.llamacpp import memory
from solver.engines.llamacpp.fields import LlamaFields
from solver.problem.problem import Problem

#: The classes a plan may run in, as ``Counts.name`` gives them.
PIPELINE, OFFLOAD, BOUND = "pipeline", "offload", "bound"


@dataclass(frozen=True)
class Counts:
    """What a class counts on each GPU: ``buffers`` (the middle role's, the figure of every stage) and
    what the first and last stages take beyond it (``head``, ``tail``); ``held``: its plans hold every
    expert tensor (pipeline parallelism on)."""

    name: str
    held: bool
    buffers: tuple[int, ...]
    head: int
    tail: int


def _counts(name: str, held: bool, kinds: list[memory.Roles], idle: bool) -> Counts:
    """Each GPU's count from its own roles' figures ``kinds`` (GPUs of one machine share them): every
    GPU its middle figure, the first and last stages the most any GPU's role takes beyond its own middle
    (a stage may fall to any GPU); one GPU alone its ``only`` figure (with idle GPUs, any GPU may run the
    whole model: the last stage's extra covers it)."""
    if len(kinds) == 1:
        return Counts(name, held, (_only(kinds[0]),), 0, 0)
    head = max(max(r.first - r.middle, 0) for r in kinds)
    tail = max(max(r.last - r.middle, 0) for r in kinds)
    if idle:
        tail += max(max(_only(r) - (r.middle + head + tail), 0) for r in kinds)
    return Counts(name, held, tuple(r.middle for r in kinds), head, tail)


def _only(r: memory.Roles) -> int:
    """The ``only`` figure, counted wherever a plan may run on one device alone."""
    if r.only is None:
        raise AssertionError("a plan may run on one device alone, but its figure was not counted")
    return r.only


def _offload_roles(
    g: memory.Geometry, flags: memory.Flags, backend: int, stored: tuple, several: bool | None, alone: bool
) -> tuple[memory.Roles, memory.Roles]:
    """The roles' figures with expert tensors in host memory, on the main machine's GPUs and on the
    others: the most any kinds of them in every layer take (``memory.host_tensor_compute``), or the
    figure with none there where larger. ``several``: None where no device offloads their products
    (the CPU runs them); False on one machine, whose first device offloads (it runs the first stage);
    True over several, where the first GPU of the main machine offloads, which may run any stage, so
    every GPU there counts each role's offloading figure and a remote one the most it takes while
    another device offloads. ``alone``: whether a plan may run on one device alone (``only`` is
    counted; its seven placements are simulated only then)."""
    off = memory.pipeline_roles(g, flags, False)
    if several is None:
        first, middle, last = memory.host_tensor_compute(g, flags, 0, stored, 3, 0)
        last = max(last, memory.last_layer_host_compute(g, flags, stored))
        one = memory.host_tensor_compute(g, flags, 0, stored, 1, 0)[0] if alone else None
        plain = off.most(memory.Roles(first, middle, last, one))
        return plain, plain
    only = memory.offload_compute(g, flags, backend, stored, "only") if alone else None
    by = {
        o: memory.host_tensor_compute(g, flags, backend, stored, 3, o)
        for o in ((0, 1, 2) if several else (0,))
    }
    margin = memory.OFFLOAD_MARGIN
    if not several:
        plain = off.most(memory.Roles(by[0][0] + margin, by[0][1], by[0][2], only))
        return plain, plain
    main = memory.Roles(by[0][0] + margin, by[1][1] + margin, by[2][2] + margin, only)
    other = [max(f[d] for o, f in by.items() if o != d) for d in range(3)]
    return off.most(main), off.most(memory.Roles(*other, only))


def class_counts(
    g: memory.Geometry,
    flags: memory.Flags,
    local: list[bool],
    backend: int,
    stored: tuple,
    offloads: bool,
    idle: bool,
) -> tuple[Counts, ...]:
    """The counts of ``bound``, ``pipeline`` and ``offload`` for GPUs on the main machine or not
    (``local``), where the op offload (from ``backend``'s batch; ``stored``: the weights' bytes) runs
    the host expert tensors' products on a GPU (``offloads``) or not."""
    on = memory.pipeline_roles(g, flags, True)
    several = (not all(local)) if offloads else None
    main, other = _offload_roles(g, flags, backend, stored, several, len(local) == 1 or idle)
    kinds = {
        BOUND: (on.most(main), on.most(other)),
        PIPELINE: (on, on),
        OFFLOAD: (main, other),
    }
    return tuple(
        _counts(name, name == PIPELINE, [here if h else there for h in local], idle)
        for name, (here, there) in kinds.items()
    )


def plan_memory(pm: memory.PlanMemory, c: Counts, replaced: list[bool]) -> memory.PlanMemory:
    """``pm`` counting class ``c`` (None where a GPU's ``buffer:`` key replaces the figure)."""
    buffers = tuple(None if r else b for r, b in zip(replaced, c.buffers, strict=True))
    return dataclasses.replace(pm, buffers=buffers, first_extra=c.head, last_extra=c.tail)


def class_problems(p: Problem) -> tuple[Problem, ...]:
    """The problem of each class a plan may run in, ``pipeline`` first (its plans must hold every
    expert tensor: ``Problem.held_only``), then ``offload``; none when the model file has no geometry
    (the allowance counts the same either way) or where both count alike (the problem itself is then
    exact)."""
    fields = LlamaFields.of(p)
    pm = fields.llama_memory
    if not isinstance(pm, memory.PlanMemory) or not fields.classes:
        return ()
    by_name = {c.name: c for c in fields.classes}
    pipe, off = by_name[PIPELINE], by_name[OFFLOAD]
    if (pipe.buffers, pipe.head, pipe.tail) == (off.buffers, off.head, off.tail):
        return ()
    return tuple(_problem(p, pm, c) for c in (pipe, off))


def _problem(p: Problem, pm: memory.PlanMemory, c: Counts) -> Problem:
    """``p`` counting class ``c`` in place of what it counts."""
    counted = [b is not None for b in pm.buffers]
    buffers = np.array(
        [c.buffers[g] if mine else int(p.buffers[g]) for g, mine in enumerate(counted)], dtype=np.int64
    )
    fields = dataclasses.replace(
        LlamaFields.of(p), llama_memory=plan_memory(pm, c, [not m for m in counted]), classes=()
    )
    return dataclasses.replace(
        p,
        reserve=p.reserve - p.buffers + buffers,
        buffers=buffers,
        first_stage_bytes=p.first_stage_bytes - pm.first_extra + c.head,
        last_stage_bytes=p.last_stage_bytes - pm.last_extra + c.tail,
        held_only=c.held,
        engine_fields=fields,
    )
