"""Idle GPUs and host runs in the solvers: exact, and the same in every solver.

Random agreement of the DP (its host/idle states), exhaustive enumeration and, where its model covers
the rig (every GPU used), CP-SAT; hand-worked rigs (a slow card left idle, a network
hop that decides whether the plan crosses machines); the shipped two-host rig through the CLI with its
exports replayed by each engine's own ordering rules (tests/helpers/engine_mapping.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.engines import build_table, evaluate
from solver.engines.strata import StrataFields
from solver.planning.build import build_arcs
from solver.planning.planner import plan_rig
from solver.problem.placement import feasible
from solver.problem.problem import Problem
from solver.solvers import Limits, Solution
from solver.solvers.cpsat import forced_time, solve_cpsat
from solver.solvers.exhaustive import solve_exhaustive
from solver.solvers.policy import Policy
from solver.solvers.route import exact_dp
from solver.solvers.subsetdp import forced_times
from tests.helpers.clirun import invoke
from tests.helpers.engine_mapping import (
    command_env,
    host_sections,
    llama_model_devices,
    llama_slot_devices,
    llama_tensor_split,
    option,
    vllm_pp_indices,
    vllm_ray_form,
    vllm_ray_ranks,
)
from tests.helpers.enginefactory import random_engine_problem
from tests.helpers.factory import random_problem
from tests.helpers.tiers import examples


def with_hosts(p: Problem, hosts: list[int], network_ms: float, idle: bool) -> Problem:
    """``p`` with each GPU on host ``hosts[g]`` (renumbered by first appearance) and idle GPUs or not."""
    names = list(dict.fromkeys(hosts))
    return dataclasses.replace(
        p,
        gpu_host=np.array([names.index(h) for h in hosts], dtype=np.int64),
        host_names=[f"h{h}" for h in names],
        network_handoff_ms=network_ms,
        idle_gpus=idle,
    )


def brute_force(p: Problem) -> tuple[float, list[int]] | None:
    """The best window over every feasible placement, from plan.evaluate and plan.feasible alone."""
    best = None
    sizes = range(1, p.n_gpus + 1) if p.idle_gpus else [p.n_gpus]
    for s in sizes:
        for gpus in itertools.permutations(range(p.n_gpus), s):
            for cuts in itertools.combinations(range(1, p.n_layers), s - 1):
                plan = evaluate(p, gpus, cuts)
                if feasible(p, plan) and (best is None or plan.window_ms < best[0] - 1e-9):
                    best = (plan.window_ms, list(gpus))
    return best


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    k=st.integers(1, 4),
    n_layers=st.integers(2, 7),
    order=st.sampled_from(["as-given", "auto"]),
    objective=st.sampled_from(["time", "mass", "throughput"]),
    engine=st.sampled_from(["strata", "llama.cpp", "vllm"]),
    n_hosts=st.integers(1, 3),
    network_ms=st.sampled_from([0.0, 0.3, 4.0]),
    idle=st.booleans(),
    tight=st.sampled_from([0.6, 1.0, 2.0]),
    twins=st.booleans(),
    data=st.data(),
)
@pytest.mark.slow
def test_dp_exhaustive_and_cpsat_agree_with_hosts_and_idle(
    seed, k, n_layers, order, objective, engine, n_hosts, network_ms, idle, tight, twins, data
):
    kw = dict(n_layers=n_layers, n_gpus=k, order=order, objective=objective, tight=tight, twins=twins)
    p = random_problem(seed, **kw) if engine == "strata" else random_engine_problem(seed, engine, **kw)
    hosts = data.draw(st.lists(st.integers(0, n_hosts - 1), min_size=k, max_size=k))
    if order == "as-given":
        hosts = sorted(hosts)
    p = with_hosts(p, hosts, network_ms, idle)
    arcs = build_arcs(p, build_table(p))
    ex = solve_exhaustive(arcs)
    dp = exact_dp(arcs)
    assert (dp.status, dp.gpus, dp.cuts) == (ex.status, ex.gpus, ex.cuts)
    cp = solve_cpsat(arcs, Limits(workers=1))  # host entries priced where idle GPUs meet hosts
    assert (cp.status, cp.gpus, cp.cuts) == (ex.status, ex.gpus, ex.cuts)
    if ex.found:
        plan = evaluate(p, ex.gpus, ex.cuts)
        assert feasible(p, plan)
        if objective == "time" and p.engine == "strata" and p.host_memory is None:
            assert plan.window_ms == pytest.approx(brute_force(p)[0], abs=1e-6)


def hand_rig(
    layer_ms, max_layers, hosts, network_ms, handoff_ms=0.5, n_layers=6, order="as-given"
) -> Problem:
    """A rig where everything fits and nothing misses: the window is compute plus hand-offs."""
    k = len(layer_ms)
    p = random_problem(1, n_layers=n_layers, n_gpus=k, order=order, tight=50.0)
    p = dataclasses.replace(
        p,
        engine_fields=StrataFields(miss_ms=0.0),
        handoff_ms=handoff_ms,
        layer_ms=np.array(layer_ms, dtype=np.float64),
        min_layers=np.ones(k, dtype=np.int64),
        max_layers=np.array(max_layers, dtype=np.int64),
        first_stage_min_layers=1,
        gpu_names=[f"G{g}" for g in range(k)],
    )
    return with_hosts(p, hosts, network_ms, idle=True)


def test_a_slow_card_is_left_idle_and_the_report_says_what_it_would_cost():
    # an RTX 2060 (3 ms a layer) listed before two RTX 3080s (1 ms, at most 4 layers each), 6 layers:
    # all three: 1 * 3 + 5 * 1 + 2 hand-offs * 0.5 = 9.0 ms; the 3080s alone: 6 + 0.5 = 6.5 ms
    p = hand_rig([3.0, 1.0, 1.0], [6, 4, 4], [0, 0, 0], 0.5)
    r = plan_rig(p, check=True)
    assert r.plan.gpus == [1, 2] and r.plan.cuts == [3]  # 3 + 3 beats 2 + 4 on the bottleneck
    assert r.plan.window_ms == pytest.approx(6.5)
    assert r.idle_cost_ms == {0: pytest.approx(2.5)}
    assert r.oracle.agrees
    every = plan_rig(dataclasses.replace(p, idle_gpus=False))
    assert every.plan.window_ms == pytest.approx(9.0)


@pytest.mark.parametrize(("network_ms", "gpus", "window"), [(0.1, [0, 1], 6.1), (5.0, [1, 2], 8.05)])
def test_the_network_hop_decides_whether_the_plan_crosses_machines(network_ms, gpus, window):
    # host 0: one fast card (0.5 ms a layer, at most 4); host 1: two 1 ms cards (at most 4 each);
    # 8 layers, hand-off 0.05 ms on one machine. Crossing: 4 * 0.5 + 4 * 1 + network;
    # staying on host 1: 8 * 1 + 0.05. Crossing, both host orders tie and the smaller order wins.
    p = hand_rig([0.5, 1.0, 1.0], [4, 4, 4], [0, 1, 1], network_ms, handoff_ms=0.05, n_layers=8, order="auto")
    r = plan_rig(p, check=True)
    assert r.plan.gpus == gpus and r.plan.window_ms == pytest.approx(window)
    assert r.oracle.agrees


def replay_llama(lines: list[str], names: list[str], local: str, n_layers: int) -> list[int]:
    """The rig GPU of each layer slot (and the output) as llama.cpp's RPC and device rules place them."""

    def rig_gpu(host: str, cuda: int) -> int:
        return [g for g, h in enumerate(names) if h == host][cuda]

    sections = host_sections(lines)
    servers = {}
    for host, commands in sections.items():
        for words in commands if host != local else []:
            env, cmd = command_env(words)
            servers[(host, int(option(cmd, "--port")))] = rig_gpu(host, int(env["CUDA_VISIBLE_DEVICES"]))
    env, flags = {}, []
    for words in sections[local]:
        more, rest = command_env(words)
        env.update(more)
        flags += rest
    rpc = option(flags, "--rpc").split(",")
    local_cuda = [int(x) for x in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x]
    if "CUDA_VISIBLE_DEVICES" not in env:
        local_cuda = list(range(names.count(local)))
    devices = llama_model_devices(rpc, option(flags, "--device"), len(local_cuda))
    physical = []
    for name in devices:
        if name.startswith("RPC"):
            host, port = rpc[int(name[3:])].rsplit(":", 1)
            physical.append(servers[(host, int(port))])
        else:
            physical.append(rig_gpu(local, local_cuda[int(name[4:])]))
    ts = llama_tensor_split(option(flags, "--tensor-split"))
    slots = llama_slot_devices(ts, n_layers, int(option(flags, "-ngl")), len(devices))
    return [physical[d] for d in slots]


def test_the_two_host_rig_exports_replay_on_the_planned_gpus(tmp_path):
    names = ["a", "a", "b", "b"]
    res = invoke("rigs/two-hosts.yaml", "--export", "llama.cpp")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    gpus, cuts, n = out["gpus"], out["cuts"], out["stages"][-1]["end"]
    assert [s["host"] for s in out["stages"]] == [names[g] for g in gpus]
    layers = [gpus[sum(c <= layer for c in cuts)] for layer in range(n)]
    assert replay_llama(out["export"]["lines"], names, "a", n) == [*layers, gpus[-1]]

    # gpt-oss-120b fits these cards under vLLM only without its default headroom and activations
    text = Path("rigs/two-hosts.yaml").read_text().replace("../models/", f"{Path('models').resolve()}/")
    (tmp_path / "rig.yaml").write_text(
        text.replace("    reserve: 700 MiB\n", "    reserve: 700 MiB\n    buffer: 0\n")
    )
    res = invoke(tmp_path / "rig.yaml", "--engine", "vllm", "--export", "vllm")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    gpus, cuts = out["gpus"], out["cuts"]
    nodes, driver, env, flags = vllm_ray_form(out["export"]["lines"])
    pp = int(option(flags, "--pipeline-parallel-size"))
    ranks = vllm_ray_ranks(nodes, driver)
    rig = [[g for g, h in enumerate(names) if h == ranks[r][0]][ranks[r][1]] for r in range(pp)]
    got = [(vllm_pp_indices(env, n, r, pp), rig[r]) for r in range(pp)]
    assert got == list(zip(zip([0, *cuts], [*cuts, n]), gpus, strict=True))


@pytest.mark.slow
def test_a_free_order_with_idle_gpus_beyond_the_dp_is_planned_by_cpsat(tmp_path):
    """12 distinct GPUs on 2 hosts, idle allowed, the network hop dearer than the hand-off: beyond the
    host/idle DP, CP-SAT prices each host entry and plans it."""
    gpus = "\n".join(f"  - {{free: 6 GiB, layer_ms: {1 + g / 10}, host: h{g % 2}}}" for g in range(12))
    text = "name: big\nmodel: m.yaml\norder: auto\nidle_gpus: true\nnetwork_handoff_ms: 0.5\ngpus:\n"
    (tmp_path / "rig.yaml").write_text(text + gpus + "\n")
    res = invoke(tmp_path / "rig.yaml", "--model", "models/qwen3-30b-a3b-q4_k_m.yaml", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["status"] == "optimal" and out["solver"]["name"] == "cp-sat"
    hosts = [g % 2 for g in out["gpus"]]
    assert sum(a != b for a, b in itertools.pairwise(hosts)) <= 1  # each host's stages in one run


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    k=st.integers(3, 5),
    objective=st.sampled_from(["time", "mass", "throughput"]),
    data=st.data(),
)
@pytest.mark.slow
def test_cpsat_keeps_host_runs_in_a_free_order(seed, k, objective, data):
    """Every GPU used over two or three hosts in a free order: CP-SAT's run constraints against the DP."""
    p = random_problem(seed, n_layers=8, n_gpus=k, order="auto", objective=objective, tight=2.0)
    hosts = data.draw(st.lists(st.integers(0, 2), min_size=k, max_size=k).filter(lambda h: len(set(h)) > 1))
    p = with_hosts(p, hosts, 0.3, idle=False)
    arcs = build_arcs(p, build_table(p))
    dp, cp = exact_dp(arcs), solve_cpsat(arcs, Limits(workers=1))
    assert (cp.status, cp.gpus, cp.cuts) == (dp.status, dp.gpus, dp.cuts)
    if dp.found:
        assert feasible(p, evaluate(p, dp.gpus, dp.cuts))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    k=st.integers(2, 4),
    order=st.sampled_from(["as-given", "auto"]),
    objective=st.sampled_from(["time", "mass", "throughput"]),
)
def test_cpsat_descents_break_idle_ties_as_the_dp(seed, k, order, objective):
    """Tie-set enumeration off: CP-SAT's cut descent (a list may end) and order descent (as given too,
    the cuts no longer fix the GPUs) pick the DP's plan among idle-GPU ties."""
    p = random_problem(seed, n_layers=6, n_gpus=k, order=order, objective=objective, tight=4.0, twins=True)
    p = dataclasses.replace(p, idle_gpus=True)
    arcs = build_arcs(p, build_table(p))
    cp = cpsat_descents_only(arcs)
    dp = exact_dp(arcs)
    assert (cp.status, cp.gpus, cp.cuts) == (dp.status, dp.gpus, dp.cuts)


def test_a_cut_list_that_ends_comes_before_a_longer_one_it_starts():
    """Cards of 3, 1 and 1 ms a layer (at least 2, 3 and 1 layers; at most 4, 4 and 1), 6 layers, no
    hand-off: G0 2 + G1 4 layers and G0 2 + G1 3 + G2 1 both take 10 ms with a 6 ms bottleneck, so the
    cut lists decide and [2] comes before [2, 5]; CP-SAT's cut descent (tie enumeration off) agrees."""
    p = hand_rig([3.0, 1.0, 1.0], [4, 4, 1], [0, 0, 0], 0.0, handoff_ms=0.0, n_layers=6)
    p = dataclasses.replace(p, min_layers=np.array([2, 3, 1], dtype=np.int64))
    arcs = build_arcs(p, build_table(p))
    cp = cpsat_descents_only(arcs)
    for sol in (cp, exact_dp(arcs), solve_exhaustive(arcs)):
        assert (sol.gpus, sol.cuts) == ((0, 1), (2,)), sol.name


def cpsat_descents_only(arcs) -> Solution:
    """CP-SAT with tie enumeration off, so its cut and order descents settle every tie."""
    return solve_cpsat(arcs, Limits(workers=1), policy=Policy(max_ties=0))


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    k=st.integers(2, 4),
    order=st.sampled_from(["as-given", "auto"]),
    objective=st.sampled_from(["time", "mass"]),
    network_ms=st.sampled_from([0.0, 0.5, 4.0]),
    data=st.data(),
)
def test_cpsat_prices_what_an_idle_gpu_would_cost_as_the_dp(seed, k, order, objective, network_ms, data):
    """Beyond the host/idle DP the report's idle costs come from CP-SAT forced to use the GPU: on small
    rigs both give the same best plan's time, to its whole 1e-6 ms, or both find none."""
    p = random_problem(seed, n_layers=7, n_gpus=k, order=order, objective=objective, tight=1.0)
    hosts = data.draw(st.lists(st.integers(0, 1), min_size=k, max_size=k))
    p = with_hosts(p, sorted(hosts) if order == "as-given" else hosts, network_ms, idle=True)
    arcs = build_arcs(p, build_table(p))
    if not len(arcs):
        return
    want = forced_times(arcs, list(range(k)))
    for g in range(k):
        proven, got = forced_time(arcs, g, Limits(workers=1))
        assert proven
        assert (got is None) == (want[g] is None)
        if got is not None:
            assert arcs.time_key(got) == arcs.time_key(want[g])


def test_idle_costs_beyond_the_dp_come_from_cpsat():
    """The idle-cost figures with the host/idle DP's size limit lowered equal the DP's own."""
    p = with_hosts(random_problem(11, n_layers=8, n_gpus=4, order="auto", tight=2.0), [0, 0, 1, 1], 2.0, True)
    p = dataclasses.replace(p, layer_ms=np.array([0.5, 0.75, 1.0, 9.0]))  # the last card is too slow to use
    by_dp = plan_rig(p, Limits(workers=1))
    assert by_dp.idle_cost_ms
    by_cpsat = plan_rig(p, Limits(workers=1), policy=Policy(max_subset_steps=0))
    assert by_cpsat.idle_cost_ms.keys() == by_dp.idle_cost_ms.keys()
    for g, cost in by_dp.idle_cost_ms.items():
        assert by_cpsat.idle_cost_ms[g] == pytest.approx(cost, abs=2e-6)
