"""Whole layers on the CPU before the first stage (llama.cpp's ``-ngl``, rig key ``cpu_layers``): the
table's first ranges against their definition, the exact solvers agreeing on them, the export as
llama.cpp's loader maps it, and ``solve score`` of the export giving the plan back."""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.engines import build_table, engine_of, evaluate, plan_lines, stage_fill
from solver.engines.export import llama_flags
from solver.engines.llamacpp import memory
from solver.engines.llamacpp.cpumemory import CpuLayers
from solver.planning.build import build_arcs
from solver.planning.planner import plan_rig
from solver.planning.resolve import Overrides, load_problem
from solver.problem.placement import feasible
from solver.solvers import Limits, TooLarge, plan_arcs
from solver.solvers.cpsat import solve_cpsat
from solver.solvers.exhaustive import solve_exhaustive
from solver.solvers.route import exact_dp
from tests.helpers.enginefactory import random_engine_problem
from tests.helpers.llamafill import best_fill_by_brute_force
from tests.helpers.tiers import examples

ROOT = Path(__file__).resolve().parents[2]
#: The rate the factory's units are timed at (tests.helpers.enginefactory).
RATE = 2e4


def with_cpu_layers(p, host_memory: int | None = None):
    """``p`` with ``cpu_layers`` on (no geometry: no compute buffer grows), its CPU rate the units'."""
    f = dataclasses.replace(p.engine_fields, cpu_layers=CpuLayers(), host_bandwidth=RATE)
    return dataclasses.replace(p, engine_fields=f, host_memory=host_memory)


def _cpu_ms(p, c: int) -> float:
    f = p.engine_fields
    return 1000.0 * float(f.dense_bytes[:c].sum()) / RATE + float(f.unit_ms[f.unit_layer < c].sum())


def _best_first_range(p, g: int, b: int) -> float | None:
    """Least time of [0, b) on GPU g over every c from the definition: c = 0 the stage as it is, c > 0
    layers [0, c) on the CPU and the brute-force fill of [c, b) in the first stage's room."""
    f = p.engine_fields
    best = best_fill_by_brute_force(p, g, 0, b)
    times = [best[0]] if best else []
    least = max(int(p.min_layers[g]), p.first_stage_min_layers, 1)
    first = dataclasses.replace(p, reserve=p.reserve + p.first_stage_bytes)  # room(g, c, b) as a first stage
    for c in range(1, b - least + 1):
        if p.hosts[g] != 0:
            break
        got = best_fill_by_brute_force(first, g, c, b)
        if got is None:
            continue
        if p.host_room is not None:
            held = set(got[1])
            host = sum(int(f.unit_bytes[u]) for u in range(len(f.unit_layer)) if f.unit_layer[u] < b)
            host -= sum(int(f.unit_bytes[u]) for u in held)
            if host + int(p.layer_bytes[:c].sum()) > p.host_room:
                continue
        times.append(got[0] + _cpu_ms(p, c))
    return min(times) if times else None


def _cells_agree(p) -> int:
    """Every first range of the table, and its stage fill, against ``_best_first_range``; every other
    range as the table without CPU layers has it. Returns how many first ranges left layers on the CPU."""
    table = build_table(p)
    plain = build_table(
        dataclasses.replace(p, engine_fields=dataclasses.replace(p.engine_fields, cpu_layers=None))
    )
    assert np.array_equal(table.room[:, 1:], plain.room[:, 1:])
    assert np.array_equal(table.gpu[:, 1:], plain.gpu[:, 1:])
    assert np.array_equal(table.missed[:, 1:], plain.missed[:, 1:])
    on_cpu = 0
    for g in range(p.n_gpus):
        for b in range(1, p.n_layers + 1):
            want = _best_first_range(p, g, b)
            assert (table.room[g, 0, b] >= 0) == (want is not None), (g, b)
            if want is None:
                continue
            w = table.weigh(np.array([g]), np.array([0]), np.array([b]), 10**12, mass=True)
            assert (w.gpu[0] + w.missed[0]) / 1e12 == pytest.approx(want, abs=1e-9)
            f = stage_fill(p, g, 0, b)
            assert f.gpu_ms + f.miss_ms == pytest.approx(want, abs=1e-9)
            assert f.cpu_layers == table.cpu_layers[g, 0, b]
            assert f.room == table.room[g, 0, b]
            assert w.host[0] == f.host_bytes
            on_cpu += f.cpu_layers > 0
    return on_cpu


@pytest.mark.parametrize("seed", range(24))
def test_first_ranges_take_their_best_cpu_layers(seed):
    p = random_engine_problem(seed, "llama.cpp", n_layers=5, n_gpus=2, tight=0.5)
    if seed % 4 == 3:  # GPU 1 behind an rpc-server: only the main machine's GPU may start on the CPU
        p = dataclasses.replace(
            p, gpu_host=np.array([0, 1]), host_names=["main", "far"], network_handoff_ms=0.7
        )
    host = None
    if seed % 3 == 1:  # a host limit that some first ranges' CPU layers break
        host = int(p.layer_bytes[:2].sum() + p.engine_fields.unit_bytes.sum() * 0.6)
    _cells_agree(with_cpu_layers(p, host))


def test_tight_rigs_do_leave_layers_on_the_cpu():
    """The random rigs above are not all planned on the GPUs alone: over these seeds some first ranges
    run best, or only, with layers on the CPU."""
    counts = [
        _cells_agree(
            with_cpu_layers(random_engine_problem(seed, "llama.cpp", n_layers=5, n_gpus=2, tight=0.5))
        )
        for seed in range(8)
    ]
    assert sum(counts) > 0


def _answers(p):
    """Exhaustive enumeration, CP-SAT and the DP (unless a host limit binds it: TooLarge, as without
    CPU layers) on the problem's table."""
    arcs = build_arcs(p, build_table(p))
    sols = [solve_exhaustive(arcs), solve_cpsat(arcs, Limits(workers=1))]
    with contextlib.suppress(TooLarge):
        sols.append(exact_dp(arcs))
    return sols


@st.composite
def cpu_problems(draw: st.DrawFn):
    k = draw(st.integers(1, 3))
    p = random_engine_problem(
        draw(st.integers(0, 10**6)),
        "llama.cpp",
        n_layers=draw(st.integers(min(2 * k + 1, 7), 7)),
        n_gpus=k,
        order=draw(st.sampled_from(["as-given", "auto"])),
        objective=draw(st.sampled_from(["time", "mass", "throughput"])),
        tight=draw(st.floats(0.3, 1.2)),
    )
    host = None
    if draw(st.booleans()):
        host = int(draw(st.floats(0.2, 1.5)) * (p.engine_fields.unit_bytes.sum() + p.layer_bytes[:2].sum()))
    return dataclasses.replace(with_cpu_layers(p, host), idle_gpus=draw(st.booleans()))


def _same(sols) -> bool:
    return len({(s.status, s.gpus, s.cuts) for s in sols}) == 1


@pytest.mark.parametrize("seed", range(12))
def test_solvers_agree_with_cpu_layers(seed):
    p = random_engine_problem(seed, "llama.cpp", n_layers=6, n_gpus=1 + seed % 3, tight=0.4, order="auto")
    sols = _answers(with_cpu_layers(p))
    assert _same(sols), [(s.name, s.status, s.gpus, s.cuts) for s in sols]


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cpu_problems())
def test_solvers_agree_on_random_rigs_with_cpu_layers(p):
    sols = _answers(p)
    assert _same(sols), [(s.name, s.status, s.gpus, s.cuts) for s in sols]
    ex = sols[0]
    if ex.found:  # every stage is an arc of the table, and the plan evaluates feasible
        arcs = build_arcs(p, build_table(p))
        assert (plan_arcs(arcs, ex.gpus, ex.cuts) >= 0).all()
        assert feasible(p, evaluate(p, ex.gpus, ex.cuts))


@pytest.mark.parametrize(
    ("sizes", "n_blocks", "c"),
    [
        ([94], 94, 1),
        ([94], 94, 17),
        ([52, 42], 94, 8),
        ([10, 30, 8], 48, 9),
        ([47, 1], 48, 46),
        ([5, 5, 5], 16, 4),
        ([30, 16], 47, 5),  # GLM-4.5-Air: an MTP block after the planned 46 layers, on the last device
        ([46], 47, 20),
    ],
)
def test_ngl_and_tensor_split_put_each_layer_where_planned(sizes, n_blocks, c):
    """llama.cpp's load_tensors (memory.layer_devices: ``i_gpu_start``, ``act_gpu_layers``, the -ts
    fractions in float32) reads the export's ``-ngl`` and ``--tensor-split`` back as the plan: the
    first c slots on the CPU, then each stage's layers on its device, the extra blocks and output on
    the last."""
    words = llama_flags(sizes, n_blocks, [], None, cpu_layers=c)
    ngl = int(words[words.index("-ngl") + 1])
    split = tuple(float(x) for x in words[words.index("--tensor-split") + 1].split(","))
    g = SimpleNamespace(n_layer_all=n_blocks)  # all that the slot split reads of a geometry
    got = memory.layer_devices(g, memory.Placement(len(sizes), n_gpu_layers=ngl, tensor_split=split))
    stages = [d for d, n in enumerate(sizes) for _ in range(n)]
    want = [-1] * c + stages[c:] + [len(sizes) - 1] * (n_blocks + 1 - len(stages))
    assert got == want


def test_export_refuses_a_first_stage_wholly_on_the_cpu():
    with pytest.raises(ValueError, match="none"):
        llama_flags([4, 4], 8, [], None, cpu_layers=4)


def _rig(tmp_path: Path, free: str, n: int, cpu_layers: bool, depth: int = 0) -> Path:
    gpus = "".join(
        f"  - name: RTX 3060\n    free: {free}\n    reserve: 700 MiB\n    mem_bandwidth: 360 GB/s\n"
        for _ in range(n)
    )
    text = (
        f"name: cpu-layers\nmodel: {ROOT / 'models' / 'qwen3-235b-a22b-q4_k_m.yaml'}\nengine: llama.cpp\n"
        f"host_bandwidth: 60 GB/s\ncontext: 32768\ndepth: {depth}\ngpus:\n{gpus}"
        + ("cpu_layers: true\n" if cpu_layers else "")
    )
    path = tmp_path / "rig.yaml"
    path.write_text(text)
    return path


def _score_of_export(p, plan):
    line = next(x for x in plan_lines(p, plan) if x.startswith("llama-server"))
    engine = engine_of(p)
    return engine.score(p, engine.read_command(shlex.split(line)[3:]))


@pytest.mark.slow
@pytest.mark.parametrize(("free", "n", "depth"), [("11.5 GiB", 1, 0), ("6 GiB", 2, 0), ("6 GiB", 2, 8192)])
def test_a_rig_that_needs_cpu_layers_plans_and_scores_back(tmp_path, free, n, depth):
    """Qwen3-235B at 32K on one RTX 3060 (10.07 GiB needed, 10.00 there) and on two of 6 GiB: no plan
    with every layer on a GPU; with ``cpu_layers`` a plan whose export, scored, gives its window
    (1e-9) and prompt, fits every card, and the first GPU's memory as counted within the op offload's
    margin."""
    off = plan_rig(load_problem(_rig(tmp_path, free, n, False, depth)), Limits(workers=1))
    assert off.plan is None
    p = load_problem(_rig(tmp_path, free, n, True, depth))
    r = plan_rig(p, Limits(workers=1))
    assert r.plan is not None and r.plan.stages[0].cpu_layers > 0
    scored = _score_of_export(p, r.plan)
    assert scored.placement.window_ms == pytest.approx(r.plan.window_ms, rel=1e-9)
    assert scored.cpu_layers == (0, r.plan.stages[0].cpu_layers)
    if r.plan.prompt.tokens_per_s is not None:
        assert scored.placement.prompt.tokens_per_s == pytest.approx(r.plan.prompt.tokens_per_s, rel=1e-9)
    gpus = [c for c in scored.cards if c.gpu is not None]
    assert all(c.need_bytes <= c.avail_bytes for c in gpus)
    for i, s in enumerate(r.plan.stages):  # the first GPU's count is the CPU layers' own; the later
        card = next(c for c in gpus if c.gpu == s.gpu)  # ones keep the pipeline-parallel bound
        counted = card.avail_bytes - s.room_bytes
        assert counted >= card.need_bytes
        if i == 0:
            assert counted - card.need_bytes <= memory.OFFLOAD_MARGIN


def test_the_flag_is_the_key(tmp_path):
    with_key = load_problem(_rig(tmp_path, "11.5 GiB", 1, True))
    with_flag = load_problem(_rig(tmp_path, "11.5 GiB", 1, False), Overrides(cpu_layers=True))
    assert with_flag.engine_fields.cpu_layers is not None
    assert np.array_equal(with_key.engine_fields.cpu_layers.only, with_flag.engine_fields.cpu_layers.only)


def test_a_layer_on_the_cpu_reads_its_kv_cache_from_host_memory_at_depth(tmp_path):
    """``-ngl`` leaves layer 0 on the CPU: at a decode depth of d tokens it reads d tokens of its KV
    cache at host_bandwidth besides its weights."""
    args = ["-c", "32768", "-ngl", "94", "-ot", "exps=CPU"]
    got = []
    for depth in (0, 8192):
        p = load_problem(_rig(tmp_path, "11.5 GiB", 1, False, depth))
        engine = engine_of(p)
        got.append(engine.score(p, engine.read_command(args)))
    kv = int(p.kv_per_layer[0])
    gpu = sum(s.compute_ms for s in got[1].placement.stages) - sum(
        s.compute_ms for s in got[0].placement.stages
    )
    cpu = got[1].placement.window_ms - got[0].placement.window_ms - gpu
    assert cpu == pytest.approx(1000.0 * 8192 * kv / 60e9, rel=1e-9)
