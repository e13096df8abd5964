"""The engines' tables (docs/engines.md) against their fills straight from the definition, and the three
exact solvers agreeing under every engine."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.engines import build_table, evaluate, stage_fill
from solver.planning.build import build_arcs
from solver.problem.scales import SPARE_UNLIMITED
from solver.solvers import plan_arcs
from solver.solvers.cpsat import solve_cpsat
from solver.solvers.exhaustive import solve_exhaustive
from solver.solvers.route import exact_dp
from tests.helpers.enginefactory import random_engine_problem, with_engine_fields
from tests.helpers.llamafill import best_fill_by_brute_force as _best_by_brute_force
from tests.helpers.tiers import examples

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seed", range(30))
def test_llama_fill_is_the_best_subset(seed):
    p = random_engine_problem(seed, "llama.cpp", n_layers=5, n_gpus=3)
    if seed % 3 == 0:  # GPUs 1 and 2 behind an rpc-server on another machine
        p = dataclasses.replace(
            p, gpu_host=np.array([0, 1, 1]), host_names=["main", "far"], network_handoff_ms=0.7
        )
    _assert_fills_are_the_best_subsets(p)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("seed", [1547, 2044, *range(20)])
def test_llama_fill_ties_follow_the_cpu_list(seed, packed, monkeypatch):
    """Small stages whose sets of equal time differ in which layer's tensors stay on the CPU (seed
    1547: a 20-byte tensor of layer 1 against its 8- and 12-byte ones; 2044: a layer held whole
    against the same bytes over two layers): the fill follows every tie rule down to the last, with
    the DP's key and bytes packed in one integer and, as for keys too large to pack, apart."""
    from solver.engines.llamacpp import fill

    relaxed: list[str] = []
    for name in ("_relax", "_relax_packed"):
        monkeypatch.setattr(fill, name, _counted(getattr(fill, name), name, relaxed))
    if not packed:
        monkeypatch.setattr(fill, "PACKED_LIMIT", 0)
    _assert_fills_are_the_best_subsets(random_engine_problem(seed, "llama.cpp", n_layers=3, n_gpus=2))
    assert set(relaxed) <= {"_relax_packed" if packed else "_relax"}  # none where units are alike


def _counted(f, name: str, calls: list[str]):
    """``f``, noting ``name`` in ``calls`` at each call."""

    def counted(*args):
        calls.append(name)
        return f(*args)

    return counted


def _assert_fills_are_the_best_subsets(p) -> None:
    """Every (GPU, range) that fits: the stage's fill and the table's cell are the brute force's."""
    table = build_table(p)
    for g, a, b in zip(*np.nonzero(table.room >= 0)):
        want = _best_by_brute_force(p, int(g), int(a), int(b))
        f = stage_fill(p, int(g), int(a), int(b))
        held = sorted(
            u
            for u in range(len(p.engine_fields.unit_layer))
            if a <= p.engine_fields.unit_layer[u] < b
            and (int(p.engine_fields.unit_layer[u]), p.engine_fields.unit_names[u]) not in f.offload
        )
        assert held == want[1]
        assert f.gpu_ms + f.miss_ms == pytest.approx(want[0], abs=1e-9)
        w = table.weigh(np.array([g]), np.array([a]), np.array([b]), 10**12, mass=True)
        assert (w.gpu[0] + w.missed[0]) / 1e12 == pytest.approx(want[0], abs=1e-9)
        assert w.time[0] == w.gpu[0] + w.missed[0]
        assert w.host[0] == f.host_bytes


@pytest.mark.parametrize("seed", range(20))
def test_resident_rooms_hold_every_expert(seed):
    p = random_engine_problem(seed, "vllm", n_layers=6, n_gpus=3)
    table = build_table(p)
    experts = p.experts_per_layer * p.expert_bytes
    for g in range(p.n_gpus):
        for a in range(p.n_layers):
            for b in range(a + 1, p.n_layers + 1):
                left = p.room(g, a, b) - int(experts[a:b].sum())
                assert (table.room[g, a, b] >= 0) == (left >= 0)
                if left >= 0:
                    assert table.room[g, a, b] == left
                    kv = int(p.kv_per_layer[a:b].sum())
                    spare = table.weigh(np.array([g]), np.array([a]), np.array([b]), 10**9, False).spare[0]
                    assert spare == (left // kv if kv else SPARE_UNLIMITED)
                    assert stage_fill(p, g, a, b).spare_tokens == (left // kv if kv else None)


@st.composite
def rigs(draw):
    """(seed, layers, GPUs, order) of a small random rig."""
    return (
        draw(st.integers(0, 10**6)),
        draw(st.integers(3, 8)),
        draw(st.integers(1, 3)),
        draw(st.sampled_from(["as-given", "auto"])),
    )


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["time", "mass", "throughput"])
@pytest.mark.parametrize("engine", ["llama.cpp", "ik_llama.cpp", "vllm", "sglang"])
@settings(max_examples=examples(200), deadline=None)
@given(rig=rigs())
def test_solvers_agree_under_every_engine(engine, objective, rig):
    seed, n_layers, n_gpus, order = rig
    p = random_engine_problem(
        seed, engine, n_layers=n_layers, n_gpus=n_gpus, order=order, objective=objective
    )
    arcs = build_arcs(p, build_table(p))
    ex = solve_exhaustive(arcs)
    dp = exact_dp(arcs)
    cp = solve_cpsat(arcs)
    assert (ex.status, ex.gpus, ex.cuts) == (dp.status, dp.gpus, dp.cuts) == (cp.status, cp.gpus, cp.cuts)
    if ex.found:
        plan = evaluate(p, ex.gpus, ex.cuts)
        ids = plan_arcs(arcs, ex.gpus, ex.cuts)
        assert plan.window_ms == pytest.approx(arcs.window_ms(int(arcs.time[ids].sum())), abs=1e-6)
        assert plan.bottleneck_ms == pytest.approx(int(arcs.stage[ids].max()) / arcs.time_scale, abs=1e-6)


def test_sizes_without_a_large_common_divisor_fill_in_a_coarser_grain():
    """Tensor sizes that share no large divisor are counted in a grain the largest room holds at most
    MAX_STATES of, rounded up: every fill still fits its room, and the table and the stage's own fill
    agree."""
    from solver.engines.llamacpp.fill import MAX_STATES, grain_of

    sizes = np.array([100_000_001, 150_000_007, 99_999_989])
    assert grain_of(sizes, 8 * 2**30) == -(-(8 * 2**30) // MAX_STATES)
    assert grain_of(sizes * 0 + 2**21 * 9, 24 * 2**30) == 2**21 * 9  # a GGUF's sizes: exact
    p = random_engine_problem(3, "llama.cpp", n_layers=6, n_gpus=2)
    scale = 10**7  # bytes in the tens of millions: the sizes' divisor is small
    f = p.engine_fields
    odd = f.unit_bytes * scale + np.arange(len(f.unit_bytes)) % 7
    speed = dataclasses.replace(f.speed, bandwidth=f.speed.bandwidth * scale)  # the same ms per unit
    p = dataclasses.replace(
        with_engine_fields(p, speed=speed, dense_bytes=f.dense_bytes * scale, unit_bytes=odd),
        free=p.free * scale,
        reserve=p.reserve * scale,
        layer_bytes=p.layer_bytes * scale,
        stage_bytes=p.stage_bytes * scale,
        first_stage_bytes=p.first_stage_bytes * scale,
        last_stage_bytes=p.last_stage_bytes * scale,
    )
    table = build_table(p)
    for g, a, b in zip(*np.nonzero(table.room >= 0)):
        f = stage_fill(p, int(g), int(a), int(b))
        assert f.cache_bytes <= f.room
        w = table.weigh(np.array([g]), np.array([a]), np.array([b]), 10**12, mass=False)
        assert w.host[0] == f.host_bytes and (w.gpu[0] + w.missed[0]) / 1e12 == pytest.approx(
            f.gpu_ms + f.miss_ms
        )


def test_llama_cpp_refuses_more_gpus_than_its_tensor_split_takes(tmp_path):
    """Sixteen GPUs for one llama.cpp: exit 3 with the reason (its -ts takes at most 15 values), never a
    plan its export then refuses; with idle GPUs and --check too, where the oracle agrees."""
    from tests.helpers.clirun import invoke
    from tests.helpers.rigfiles import as_llama_rig

    rig = as_llama_rig(ROOT / "rigs" / "sixteen.yaml", tmp_path)
    for extra in ([], ["--idle-gpus", "--check"]):
        result = invoke(rig, *extra)
        assert result.exit_code == 3, result.output
        out = json.loads(result.stdout)
        assert "at most 15 GPUs" in out["reason"]
        assert out.get("oracle") is None or out["oracle"]["agrees"]


def test_the_rig_keys_an_engine_reads_are_the_rig_files_and_each_engine_only_key_has_an_engine():
    from solver.engines import REGISTRY
    from solver.files.config import RigConfig, rig_schema

    named = {key for engine in REGISTRY.values() for key in engine.rig_keys}
    assert named <= set(rig_schema(REGISTRY).model_fields)
    only_some = {"miss_ms", "host_bandwidth", "gpu_efficiency", "layer_overhead_ms", "switch_ms", "depth"}
    assert only_some | {"gpu_memory_utilization"} <= named
    own = {key for engine in REGISTRY.values() for key in engine.rig_schema.model_fields}
    assert only_some | {"gpu_memory_utilization"} <= own and not own & set(RigConfig.model_fields)


@pytest.mark.parametrize("seed", range(6))
def test_llama_tables_built_together_are_the_tables_built_alone(seed):
    """Problems that differ only in their rooms (one rig at several contexts) share one fill DP over
    the largest room's states: each table is the one its problem builds alone, cell for cell."""
    from solver.engines.llamacpp.table import LlamaTable

    p = random_engine_problem(seed, "llama.cpp", n_layers=6, n_gpus=3)
    ps = [dataclasses.replace(p, free=(p.free * s).astype(p.free.dtype)) for s in (1.0, 0.55, 0.8, 0.2)]
    together = LlamaTable.build_many(ps)
    for q, t in zip(ps, together):
        alone = LlamaTable.build(q)
        for name in ("need", "room", "gpu", "missed", "held_bytes", "held_mass", "visible_bytes"):
            assert np.array_equal(getattr(t, name), getattr(alone, name)), name
    assert len({t.room.tobytes() for t in together}) > 1
