"""A llama.cpp plan counts the compute buffers of the way its own command runs: pipeline parallelism on
with every expert tensor held (no ``-ot``), off with the op offload when some stay in host memory; over
several hosts each kind of GPU's first and last stage extras come from its own figures."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from solver.engines import engine_of
from solver.engines.llamacpp import memory
from solver.engines.llamacpp.fields import LlamaFields
from solver.planning.planner import plan_rig
from solver.planning.resolve import Overrides, load_problem
from tests.conftest import ROOT
from tests.engine.test_loader import random_rig
from tests.helpers.plan_memory import compared

MiB = 2**20
SHIPPED = sorted((ROOT / "rigs").glob("*.yaml"))


def test_the_main_machines_first_stage_is_not_counted_twice() -> None:
    """Over two hosts on CUDA a GPU of the main machine counts the op offload's middle figure (it may
    offload whatever stage it runs); running the first stage it needs no more than the larger of that
    and its own first stage's figure, and the stage's extra covers the remote GPUs' first role."""
    p = load_problem(ROOT / "rigs" / "two-hosts.yaml")
    pm = LlamaFields.of(p).llama_memory
    assert isinstance(pm, memory.PlanMemory) and pm.offload_min_batch
    own = max(
        memory.offload_compute(pm.geometry, pm.flags, pm.offload_min_batch, pm.stored, r)
        for r in ("first", "middle")
    )
    on = memory.pipeline_roles(pm.geometry, pm.flags, True)
    assert pm.buffers[0] + pm.first_extra <= own + max(on.first - on.middle, 64 * MiB)
    assert pm.buffers[2] + pm.first_extra >= on.first  # a remote GPU's own first stage


def test_each_class_counts_its_own_figures() -> None:
    """On one machine over CUDA: the held class the pipeline-parallel figures and no copy, the other
    the figures without it and the offload's on the first stage; the problem itself the larger."""
    p = load_problem(
        ROOT / "rigs" / "qwen3-30b-3060x2.yaml", Overrides(engine="llama.cpp", host_bandwidth=60e9)
    )
    pm = LlamaFields.of(p).llama_memory
    held, loose = engine_of(p).plan_classes(p)
    assert held.held_only and not loose.held_only
    on = memory.pipeline_roles(pm.geometry, pm.flags, True)
    first = memory.offload_compute(pm.geometry, pm.flags, pm.offload_min_batch, pm.stored, "first")
    assert LlamaFields.of(held).llama_memory.buffers == (on.middle, on.middle)
    assert held.first_stage_bytes - p.first_stage_bytes == (on.first - on.middle) - pm.first_extra
    lpm = LlamaFields.of(loose).llama_memory
    assert lpm.buffers[0] + lpm.first_extra == first
    assert all(a <= b for a, b in zip(lpm.buffers, pm.buffers)) and lpm.buffers[0] < on.middle
    for q in (held, loose):  # the first stage on GPU 0: no more than the problem itself counts
        assert q.buffers[0] + q.first_stage_bytes <= p.buffers[0] + p.first_stage_bytes


def _rigs(seeds: range, folder: Path) -> list[Path]:
    out = []
    for seed in seeds:
        path = random_rig(seed, folder)
        rig = yaml.safe_load(path.read_text())
        rig["backend"] = random.Random(seed).choice(["cuda", "rpc"])
        path.write_text(yaml.safe_dump(rig, sort_keys=False))
        out.append(path)
    return out


def _llama(rig: Path):
    p = load_problem(rig)
    if p.engine not in ("llama.cpp", "ik_llama.cpp"):
        p = load_problem(rig, Overrides(engine="llama.cpp", host_bandwidth=60e9))
    return p if isinstance(LlamaFields.of(p).llama_memory, memory.PlanMemory) else None


@pytest.mark.parametrize("seeds", [range(3), pytest.param(range(3, 40), marks=pytest.mark.slow)])
def test_a_plan_counts_what_its_command_takes(seeds: range, tmp_path: Path) -> None:
    """Every shipped rig (planned for llama.cpp where it names another engine) and random ones: each
    GPU's compute buffer as the plan counts it against ``memory.estimate`` of the plan's exported
    command. A plan that holds every expert counts each GPU within max(2 %, 64 MiB); one that leaves
    some in host memory is never short by more than that (the op offload's figure and the figures of
    the other GPUs are bounds over which tensors stay there)."""
    rigs = (SHIPPED if seeds.start == 0 else []) + _rigs(seeds, tmp_path)
    seen = 0
    for rig in rigs:
        p = _llama(rig)
        if p is None:
            continue
        r = plan_rig(p)
        if r.plan is None:
            continue
        for c in compared(r):
            seen += 1
            tolerance = max(0.02 * c.command, 64 * MiB)
            assert c.planned >= c.command - tolerance, (rig.stem, c)
            if r.plan.host_bytes == 0:
                assert c.agrees(), (rig.stem, c)
    assert seen
