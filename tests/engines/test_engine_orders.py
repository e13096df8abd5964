"""Every plan runs on its engine: over several hosts vLLM (Ray) and SGLang get only GPU orders they can
run, with idle GPUs and in a free order too, so their own export never refuses the plan, and the
oracle in those orders agrees."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from solver.engines import export_lines
from solver.engines.export_hosts import Hosts
from solver.planning.planner import plan_rig
from tests.helpers.enginefactory import random_engine_problem
from tests.helpers.tiers import examples


def _over_hosts(seed: int, engine: str, idle: bool = False, order: str = "auto"):
    p = random_engine_problem(seed, engine, n_layers=12, n_gpus=4)
    rng = np.random.default_rng(seed)
    hosts = np.sort(rng.integers(0, 3, p.n_gpus))
    if engine == "sglang" and seed % 2:  # equally many GPUs on each host: the plans SGLang can run
        hosts = np.array([0, 0, 1, 1])
    names = [f"10.0.0.{h + 2}" for h in range(int(hosts.max()) + 1)]
    used = sorted(set(hosts.tolist()))
    return dataclasses.replace(
        p,
        order=order,
        idle_gpus=idle,
        gpu_host=np.array([used.index(h) for h in hosts]),
        host_names=[names[h] for h in used],
    )


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("idle", "order"), [(False, "auto"), (True, "auto"), (True, "as-given")])
def test_plans_over_hosts_export_and_agree(engine, seed, idle, order):
    p = _over_hosts(seed, engine, idle, order)
    r = plan_rig(p, check=True)
    assert r.oracle.agrees, (r.status, r.oracle)
    if r.plan is None:
        counts = np.bincount(p.hosts)
        assert r.reason and (
            (engine == "sglang" and len(set(counts.tolist())) > 1) or "fit" in r.reason or r.reason
        )
        return
    hosts = Hosts(tuple(p.host_names[h] for h in p.hosts), local=p.host_names[0])
    export_lines(engine, r.plan.gpus, r.plan.cuts, p.n_layers, hosts=hosts)  # raises if the engine refuses


def test_sglang_with_unequal_hosts_says_why():
    p = _over_hosts(1, "sglang")
    p = dataclasses.replace(p, gpu_host=np.array([0, 0, 0, 1]), host_names=["a", "b"])
    r = plan_rig(p)
    assert r.status == "infeasible" and "equally many pipeline stages" in r.reason


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_most_random_rigs_over_hosts_have_a_plan(engine):
    planned = [plan_rig(_over_hosts(seed, engine)).plan is not None for seed in range(1, 12, 2)]
    assert sum(planned) >= 4


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_idle_gpus_over_hosts_keep_the_engines_host_rules(engine):
    """Random rigs over hosts with idle GPUs: the plan that leaves GPUs out still keeps the engine's
    host rules (SGLang: as many stages on every node it uses; vLLM: Ray's node and GPU order). Forty
    seeds, the first ``tiers.QUICK_EXAMPLES`` in the quick tier."""
    for seed in range(examples(40)):
        p = _over_hosts(seed, engine, idle=True)
        r = plan_rig(p, check=True)
        assert r.oracle.agrees
        if r.plan is not None:
            hosts = Hosts(tuple(p.host_names[h] for h in p.hosts), local=p.host_names[0])
            export_lines(engine, r.plan.gpus, r.plan.cuts, p.n_layers, hosts=hosts)
