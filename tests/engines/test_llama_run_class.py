"""A llama.cpp plan counts the compute buffers of the way its own command runs: pipeline parallelism on
with every expert tensor held (no ``-ot``), off with the op offload when some stay in host memory; over
several hosts each kind of GPU's first and last stage extras come from its own figures."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from solver.cli.score import command_words, plan_export
from solver.engines import engine_of
from solver.engines.llamacpp import memory, runclass
from solver.engines.llamacpp.args import parse_llama_args
from solver.engines.llamacpp.commandmemory import as_run, command_flags, command_placement, kept_fill
from solver.engines.llamacpp.devices import devices_of, layer_devices
from solver.engines.llamacpp.fields import LlamaFields
from solver.planning.planner import plan_rig
from solver.planning.resolve import Overrides, load_problem
from solver.problem.placement import feasible
from solver.problem.problem import Problem
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
    command, within max(2 %, 64 MiB) on every GPU: a plan that holds every expert counts its class's
    exact figures, one that leaves some in host memory is shown as its own command runs (the solver
    counted a bound over which tensors stay there)."""
    rigs = (SHIPPED if seeds.start == 0 else []) + _rigs(seeds, tmp_path)
    seen = offloading = 0
    for rig in rigs:
        p = _llama(rig)
        if p is None:
            continue
        r = plan_rig(p)
        if r.plan is None:
            continue
        offloading += r.plan.host_bytes > 0
        for c in compared(r):
            seen += 1
            assert c.agrees(), (rig.stem, c)
    assert seen and offloading


def _next_on_llama() -> Problem:
    return load_problem(
        ROOT / "rigs" / "qwen3-next-5080-3090.yaml", Overrides(engine="llama.cpp", host_bandwidth=60e9)
    )


def test_a_plan_that_offloads_is_filled_again_as_its_command_runs() -> None:
    """Qwen3-Next-80B over an RTX 5080 and a 3090: the offload class counts the first GPU's op offload
    by its bound (926 MiB against the 518 its command takes), so the solver's plan leaves room unused;
    shown as it runs, the plan holds more, is faster, and every GPU counts what its command takes."""
    r = plan_rig(_next_on_llama())
    assert r.plan is not None and r.refilled is not None
    assert sum(s.held_pairs for s in r.plan.stages) > sum(s.held_pairs for s in r.refilled.stages)
    assert r.plan.window_ms < r.refilled.window_ms
    assert (r.plan.gpus, r.plan.cuts) == (r.refilled.gpus, r.refilled.cuts)
    assert all(c.agrees() for c in compared(r))
    assert feasible(r.problem, r.plan)


def test_a_plan_shown_as_it_runs_scores_as_shown() -> None:
    """The shown plan's export, scored, fits every card and gives the shown window: the export says
    what the plan shows."""
    r = plan_rig(_next_on_llama())
    lines = plan_export(r)
    assert lines is not None
    engine = engine_of(r.problem)
    scored = engine.score(r.problem, engine.read_command(command_words(lines)))
    assert scored.fits
    assert scored.placement.window_ms == pytest.approx(r.plan.window_ms, rel=1e-9)


def test_the_kept_fill_keeps_what_the_plan_keeps() -> None:
    """``kept_fill`` under the plan's own problem gives back the plan's every stage."""
    r = plan_rig(_next_on_llama())
    again = engine_of(r.problem).evaluate(r.problem, r.plan.gpus, r.plan.cuts, kept_fill(r.plan))
    assert again.stages == r.plan.stages


def test_a_held_plan_is_not_filled_again() -> None:
    """A held class counts its plans exactly: ``as_run`` leaves them be."""
    r = plan_rig(load_problem(ROOT / "rigs" / "two-hosts.yaml"))
    assert r.plan is not None and r.plan.host_bytes == 0
    assert r.refilled is None and as_run(r.problem, r.plan) is None


def test_a_plan_shown_as_it_runs_counts_the_hosts_buffer_of_its_command(tmp_path: Path) -> None:
    """Under a ``host_memory`` limit the solver counts the host's compute buffer by the larger of its
    cases; the plan shown counts its command's own (``memory.estimate``'s host figure)."""
    text = (ROOT / "rigs" / "qwen3-next-5080-3090.yaml").read_text()
    text = text.replace('model: "../models/', f'model: "{ROOT}/models/')
    rig = tmp_path / "next-host.yaml"
    rig.write_text(text + "engine: llama.cpp\nhost_bandwidth: 60 GB/s\nhost_memory: 64 GiB\n")
    p = load_problem(rig)
    r = plan_rig(p)
    assert r.plan is not None and r.solved is not None and r.plan.host_bytes > 0
    pm = LlamaFields.of(r.problem).llama_memory
    lines = plan_export(r)
    assert lines is not None
    args = parse_llama_args(command_words([ln for ln in lines if not ln.lstrip().startswith("#")]))
    dev = devices_of(p, args)
    layers, output = layer_devices(p, args, dev)
    placement = command_placement(pm.geometry, args, dev, layers, output)
    est = memory.estimate(pm.geometry, placement, command_flags(p, args), pm.offload_min_batch, pm.stored)
    assert r.problem.host_reserve == est.host.compute != r.solved[0].host_reserve


@pytest.mark.parametrize("rig", ["qwen3-30b-3060x2", "two-hosts", "gpt-oss-4090-3090-3060"])
def test_a_plan_on_one_device_alone_is_counted_only_where_one_may_run(rig: str) -> None:
    """A rig of several GPUs without idle ones never runs a plan on one device alone, so its ``only``
    figures (seven op-offload placements) are not simulated; every class counts what it counts with
    them, and a rig that may leave GPUs idle counts them."""
    p = load_problem(ROOT / "rigs" / f"{rig}.yaml", Overrides(engine="llama.cpp", host_bandwidth=60e9))
    pm = LlamaFields.of(p).llama_memory
    local = [h == p.hosts[0] for h in p.hosts]
    g, f, backend, stored = pm.geometry, pm.flags, pm.offload_min_batch, pm.stored
    several = None if not backend else not all(local)
    lean = runclass._offload_roles(g, f, backend, stored, several, alone=False)
    full = runclass._offload_roles(g, f, backend, stored, several, alone=True)
    assert all(r.only is None for r in lean) and all(r.only is not None for r in full)
    assert [(r.first, r.middle, r.last) for r in lean] == [(r.first, r.middle, r.last) for r in full]
    assert runclass.class_counts(g, f, local, backend, stored, bool(backend), False) == tuple(
        runclass._counts(c.name, c.held, kinds, False)
        for c, kinds in zip(
            runclass.class_counts(g, f, local, backend, stored, bool(backend), False),
            _kinds(g, f, local, full),
            strict=True,
        )
    )
    assert runclass.class_counts(g, f, local, backend, stored, bool(backend), True)  # idle: counted


def _kinds(g, f, local: list[bool], roles) -> list[list[memory.Roles]]:
    """Each class's roles per GPU from the offload roles ``roles`` (main machine, others), with ``only``."""
    on = memory.pipeline_roles(g, f, True)
    main, other = roles
    by = {"bound": (on.most(main), on.most(other)), "pipeline": (on, on), "offload": (main, other)}
    return [[here if h else there for h in local] for here, there in by.values()]
