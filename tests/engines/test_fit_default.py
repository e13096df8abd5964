"""The plan against llama.cpp's --fit (solver.engines.llamacpp.fitdefault): never predicted slower on any
shipped llama.cpp rig or random rig, and fit's printed command scores as the JSON ``default`` says.

The random rigs are of two sorts: random toy problems in MiB (fit on moesplit's memory count, quick), and
random card mixes under the shipped models with a geometry (fit on llama.cpp's exact count, slow: a few
seconds each)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest

from solver.engines import engine_of
from solver.engines.llamacpp import fitdefault
from solver.engines.llamacpp.args import parse_llama_args
from solver.engines.llamacpp.fields import LlamaFields
from solver.planning.planner import plan_rig
from solver.planning.resolve import load_problem
from solver.solvers import Limits
from tests.conftest import ROOT, SHIPPED_RIGS
from tests.helpers.enginefactory import random_engine_problem, with_engine_fields

LLAMA_RIGS = [r for r in sorted(SHIPPED_RIGS.glob("*.yaml")) if "engine: llama.cpp" in r.read_text()]


def _never_slower(p) -> None:
    r = plan_rig(p, Limits(workers=1))
    fit = r.default
    assert fit is not None and fit.name == "fit"
    if fit.command is not None:
        scored = engine_of(p).score(p, parse_llama_args(fit.command))
        assert scored.window_ms == fit.plan.window_ms
    if fit.feasible:
        assert r.plan is not None, "fit's command fits but the planner found no plan"
        assert r.plan.window_ms <= fit.plan.window_ms * (1 + 1e-9), (r.plan.cuts, fit.command)


@pytest.mark.parametrize("rig", LLAMA_RIGS, ids=[r.stem for r in LLAMA_RIGS])
def test_the_plan_is_never_slower_than_fit_on_shipped_rigs(rig):
    _never_slower(load_problem(rig))


@pytest.mark.parametrize("seed", range(16))
def test_the_plan_is_never_slower_than_fit_on_random_rigs(seed):
    p = random_engine_problem(seed, "llama.cpp", n_layers=8 + seed % 5, n_gpus=1 + seed % 4)
    # bytes in MiB so fit's 1024 MiB margin leaves the cards room, as on a real rig; no layer limits
    # (--fit knows none)
    mib = 2**20
    scale = {f: getattr(p, f) * mib for f in ("layer_bytes", "expert_bytes", "pair_bytes")}
    units = LlamaFields.of(p).unit_bytes * mib
    p = dataclasses.replace(
        with_engine_fields(p, unit_bytes=units, host_bandwidth=20_000 * mib),
        **scale,
        free=p.free * mib + 1024 * mib,
        reserve=p.reserve * mib,
        stage_bytes=p.stage_bytes * mib,
        first_stage_bytes=p.first_stage_bytes * mib,
        last_stage_bytes=p.last_stage_bytes * mib,
        context=4096,
        min_layers=np.ones(p.n_gpus, dtype=np.int64),
        max_layers=np.full(p.n_gpus, p.n_layers, dtype=np.int64),
    )
    _never_slower(p)


#: Shipped models with a geometry (so fit's dry run is ``ExactOracle``), and the cards drawn from.
GEOMETRY_MODELS = (
    "qwen3-30b-a3b-q4_k_m",
    "gpt-oss-120b-mxfp4",
    "glm-4.5-air-q4_k_m",
    "qwen3-next-80b-a3b-q4_k_m",
)
CARDS = (("8 GiB", "448 GB/s"), ("12 GiB", "360 GB/s"), ("16 GiB", "288 GB/s"), ("24 GiB", "1008 GB/s"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_the_plan_is_never_slower_than_fit_on_random_cards(seed: int, tmp_path: Path) -> None:
    rng = random.Random(f"fit-cards-{seed}")
    model = ROOT / "models" / f"{GEOMETRY_MODELS[seed % len(GEOMETRY_MODELS)]}.yaml"
    lines = [f"model: {model}", "engine: llama.cpp", "host_bandwidth: 60 GB/s"]
    lines += [f"context: {rng.choice((4096, 8192, 32768))}", "gpus:"]
    for i in range(rng.randint(1, 4)):
        free, bandwidth = rng.choice(CARDS)
        lines += [
            f"  - name: GPU{i}",
            f"    free: {free}",
            f"    reserve: {rng.choice((300, 700, 1024))} MiB",
        ]
        lines += [f"    mem_bandwidth: {bandwidth}"]
    rig = tmp_path / "rig.yaml"
    rig.write_text("\n".join(lines) + "\n")
    p = load_problem(rig)
    rig_of = fitdefault.FitRig.of(p)
    assert isinstance(fitdefault.oracle_for(p, rig_of, engine_of(p)), fitdefault.ExactOracle)
    _never_slower(p)
