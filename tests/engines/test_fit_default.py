"""The plan against llama.cpp's --fit (solver.engines.llamacpp.fitdefault): never predicted slower on any
shipped llama.cpp rig or random rig, and fit's printed command scores as the JSON ``default`` says."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from solver.engines import engine_of
from solver.engines.llamacpp.args import parse_llama_args
from solver.engines.llamacpp.fields import LlamaFields
from solver.planning.planner import plan_rig
from solver.planning.resolve import load_problem
from solver.solvers import Limits
from tests.conftest import SHIPPED_RIGS
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
