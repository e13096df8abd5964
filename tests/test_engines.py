"""The engines' tables (SPEC 6) against their fills straight from the definition, and the three
exact solvers agreeing under every engine."""

from __future__ import annotations

import numpy as np
import pytest
from enginefactory import random_engine_problem
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.arcs import build_arcs
from solver.engines import build_table, stage_fill
from solver.plan import evaluate
from solver.scales import SPARE_UNLIMITED
from solver.solvers import plan_arcs
from solver.solvers.cpsat import solve_cpsat
from solver.solvers.dp import solve_dp
from solver.solvers.exhaustive import solve_exhaustive


def _fill_by_hand(p, g: int, a: int, b: int) -> tuple[int, list[int]]:
    """SPEC 6.2 read literally: units of [a, b) by bytes descending, layer, tensor order; take if it fits."""
    room = p.room(g, a, b)
    units = [u for u in range(len(p.unit_layer)) if a <= p.unit_layer[u] < b]
    units.sort(key=lambda u: (-int(p.unit_bytes[u]), int(p.unit_layer[u]), p.unit_names[u]))
    used, held = 0, []
    for u in units:
        if used + int(p.unit_bytes[u]) <= room:
            used += int(p.unit_bytes[u])
            held.append(u)
    return used, held


@pytest.mark.parametrize("seed", range(30))
def test_llama_table_matches_the_fill(seed):
    p = random_engine_problem(seed, "llama.cpp", n_layers=7, n_gpus=3)
    table = build_table(p)
    g, a, b = np.nonzero(table.room >= 0)
    scale = 10**9
    w = table.weigh(g, a, b, scale, mass=True)
    cpu = np.rint(p.unit_ms * scale).astype(np.int64)
    for i in range(len(g)):
        used, held = _fill_by_hand(p, int(g[i]), int(a[i]), int(b[i]))
        seen = [u for u in range(len(p.unit_layer)) if a[i] <= p.unit_layer[u] < b[i]]
        assert w.saved[i] == cpu[held].sum()
        assert w.missed[i] == cpu[seen].sum() - cpu[held].sum()
        assert w.host[i] == p.unit_bytes[seen].sum() - used
        f = stage_fill(p, int(g[i]), int(a[i]), int(b[i]))
        assert (f.cache_bytes, f.held, f.visible) == (used, len(held), len(seen))
        assert f.miss_ms == pytest.approx(float(p.unit_ms[seen].sum() - p.unit_ms[held].sum()), abs=1e-9)
    assert table.miss_units(scale) == cpu.sum()


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


@pytest.mark.parametrize("objective", ["time", "mass", "throughput"])
@pytest.mark.parametrize("engine", ["llama.cpp", "vllm", "sglang"])
@settings(max_examples=200, deadline=None)
@given(rig=rigs())
def test_solvers_agree_under_every_engine(engine, objective, rig):
    seed, n_layers, n_gpus, order = rig
    p = random_engine_problem(
        seed, engine, n_layers=n_layers, n_gpus=n_gpus, order=order, objective=objective
    )
    arcs = build_arcs(p, build_table(p))
    ex = solve_exhaustive(arcs)
    dp = solve_dp(arcs)
    cp = solve_cpsat(arcs)
    assert (ex.status, ex.gpus, ex.cuts) == (dp.status, dp.gpus, dp.cuts) == (cp.status, cp.gpus, cp.cuts)
    if ex.found:
        plan = evaluate(p, ex.gpus, ex.cuts)
        ids = plan_arcs(arcs, ex.gpus, ex.cuts)
        assert plan.window_ms == pytest.approx(arcs.window_ms(int(arcs.time[ids].sum())), abs=1e-6)
        assert plan.bottleneck_ms == pytest.approx(int(arcs.stage[ids].max()) / arcs.time_scale, abs=1e-6)
