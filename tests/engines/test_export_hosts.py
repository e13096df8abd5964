"""Exports across hosts (docs/exports.md, "Across hosts") are exact under each engine's own device
ordering, re-implemented.

Random multi-host rigs and plans (each host's stages one run, any order of hosts and of GPUs within them),
exported with export_lines(hosts=...), then read back host by host: llama.cpp's rpc-server and --rpc /
--device ordering, vLLM's Ray worker ranking, SGLang's per-node rank ranges.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from solver.engines import export_lines
from solver.engines.export import LLAMA_ALL_LAYERS, LLAMA_MAX_SPLITS, Launch, Offload
from solver.engines.export_hosts import Hosts
from tests.helpers.engine_mapping import (
    command_env,
    cuda_visible,
    host_sections,
    llama_model_devices,
    llama_slot_devices,
    llama_tensor_split,
    option,
    section_env_flags,
    sglang_gpu_id,
    sglang_pp_indices,
    sglang_rank_ranges,
    vllm_pp_indices,
    vllm_ray_form,
    vllm_ray_ranks,
)
from tests.helpers.tiers import examples

POOL = ("10.0.0.2", "10.0.0.11", "10.0.0.3", "192.168.1.7", "local")


@st.composite
def host_plans(draw, max_stages: int = LLAMA_MAX_SPLITS, equal_runs: bool = False):
    """(hosts, gpus in pipeline order, cuts, n_layers): each used host's GPUs one consecutive run."""
    n_hosts = draw(st.integers(1, 4))
    names = draw(st.permutations(POOL))[:n_hosts]
    per_host = draw(st.lists(st.integers(1, 4), min_size=n_hosts, max_size=n_hosts))
    rig = [name for name, n in zip(names, per_host) for _ in range(n)]
    rig = draw(st.permutations(rig))  # a rig file may list hosts interleaved
    local = draw(st.sampled_from([*names, "elsewhere"]))
    order = draw(st.permutations(names))
    used = draw(st.integers(1, n_hosts))
    take = draw(st.integers(1, min(per_host))) if equal_runs else None
    gpus: list[int] = []
    for name in order[:used]:
        mine = draw(st.permutations([g for g, h in enumerate(rig) if h == name]))
        gpus += mine[: take or draw(st.integers(1, len(mine)))]
    assume(len(gpus) <= max_stages)
    n_layers = draw(st.integers(len(gpus), 200))
    cuts = sorted(
        draw(st.sets(st.integers(1, max(1, n_layers - 1)), min_size=len(gpus) - 1, max_size=len(gpus) - 1))
    )
    return Hosts(tuple(rig), local), gpus, cuts, n_layers


def rig_gpu(hosts: Hosts, host: str, cuda: int) -> int:
    """The rig GPU that is CUDA device ``cuda`` on ``host``."""
    return [g for g in range(len(hosts.names)) if hosts.names[g] == host][cuda]


def plan_slots(gpus: list[int], cuts: list[int], n_layers: int) -> list[int]:
    return [gpus[sum(c <= layer for c in cuts)] for layer in range(n_layers)]


@settings(max_examples=examples(300), deadline=None)
@given(plan=host_plans(), offloaded=st.sets(st.integers(0, 199), max_size=5))
def test_llama_rpc_runs_every_layer_on_its_gpu(plan, offloaded):
    hosts, gpus, cuts, n_layers = plan
    offload = [Offload(layer, "ffn_down_exps") for layer in sorted(offloaded) if layer < n_layers]
    lines = export_lines("llama.cpp", gpus, cuts, n_layers, offload, hosts=hosts)
    if not hosts.spans(gpus):
        return  # the single-host form, proven in test_export.py
    sections = host_sections(lines)
    servers: dict[tuple[str, int], int] = {}  # endpoint -> rig GPU
    for host, commands in sections.items():
        if host == hosts.local:
            continue
        for words in commands:
            env, cmd = command_env(words)
            assert cmd[0] == "rpc-server" and cmd[-1] == "&" and option(cmd, "--host") == "0.0.0.0"
            servers[(host, int(option(cmd, "--port")))] = rig_gpu(
                hosts, host, int(env["CUDA_VISIBLE_DEVICES"])
            )
    env, flags = section_env_flags(sections[hosts.local])
    assert flags.index("--rpc") < flags.index("--device") if "--device" in flags else True
    rpc = option(flags, "--rpc").split(",")
    assert len(set(rpc)) == len(rpc)
    local_cuda = cuda_visible(env["CUDA_VISIBLE_DEVICES"]) if "CUDA_VISIBLE_DEVICES" in env else None
    if local_cuda is None:  # every GPU of the local host is visible, in CUDA order
        local_cuda = list(range(sum(1 for h in hosts.names if h == hosts.local)))
    devices = llama_model_devices(
        rpc, option(flags, "--device") if "--device" in flags else None, len(local_cuda)
    )
    physical = []
    for name in devices:
        if name.startswith("RPC"):
            host, port = rpc[int(name[3:])].rsplit(":", 1)
            physical.append(servers[(host, int(port))])
        else:
            physical.append(rig_gpu(hosts, hosts.local, local_cuda[int(name[4:])]))
    ts = llama_tensor_split(option(flags, "--tensor-split"))
    slots = llama_slot_devices(ts, n_layers, int(option(flags, "-ngl")), len(devices))
    assert [physical[d] for d in slots] == [*plan_slots(gpus, cuts, n_layers), gpus[-1]]
    assert ("-ot" in flags) == bool(offload)
    assert int(option(flags, "-ngl")) == LLAMA_ALL_LAYERS


@settings(max_examples=examples(300), deadline=None)
@given(plan=host_plans(max_stages=64, equal_runs=True))
def test_sglang_nodes_run_every_layer_on_its_gpu(plan):
    hosts, gpus, cuts, n_layers = plan
    if not hosts.spans(gpus):
        return
    lines = export_lines("sglang", gpus, cuts, n_layers, hosts=hosts)
    placed: dict[int, tuple[tuple[int, int], int]] = {}  # pp rank -> ([start, end), rig GPU)
    for host, commands in host_sections(lines).items():
        env, flags = section_env_flags(commands)
        pp, nnodes, node_rank = (int(option(flags, f)) for f in ("--pp-size", "--nnodes", "--node-rank"))
        pp_ranks, tp_ranks, pp_per_node, tp_per_node = sglang_rank_ranges(nnodes, pp, 1, node_rank)
        visible = cuda_visible(env["CUDA_VISIBLE_DEVICES"])
        for pp_rank in pp_ranks:
            for tp_rank in tp_ranks:
                gpu = rig_gpu(hosts, host, visible[sglang_gpu_id(pp_rank, pp_per_node, tp_per_node, tp_rank)])
                placed[pp_rank] = (sglang_pp_indices(env, n_layers, pp_rank, pp), gpu)
    bounds = list(zip([0, *cuts], [*cuts, n_layers]))
    assert [placed[r] for r in range(len(gpus))] == list(zip(bounds, gpus))


@settings(max_examples=examples(300), deadline=None)
@given(plan=host_plans(max_stages=64))
def test_vllm_ray_runs_every_layer_on_its_gpu(plan):
    """Host names here are IP addresses, so vLLM's IP order is checked, not assumed."""
    hosts, gpus, cuts, n_layers = plan
    if not hosts.spans(gpus):
        return
    try:
        lines = export_lines("vllm", gpus, cuts, n_layers, hosts=hosts)
    except ValueError as exc:  # a host order or GPU order vLLM cannot run: say so
        assert "vLLM over Ray" in str(exc)
        return
    for line in lines:  # the export asks for these IP orders; where they fail, so would vLLM
        if line.startswith("# vLLM orders nodes"):
            a, b = line.split("IP(")[1].split(")")[0], line.split("IP(")[2].split(")")[0]
            assume(a < b)
    nodes, driver, env, flags = vllm_ray_form(lines)
    pp = int(option(flags, "--pipeline-parallel-size"))
    assert option(flags, "--distributed-executor-backend") == "ray" and pp == len(gpus)
    ranks = vllm_ray_ranks(nodes, driver)
    got = [(vllm_pp_indices(env, n_layers, r, pp), rig_gpu(hosts, *ranks[r])) for r in range(pp)]
    bounds = list(zip([0, *cuts], [*cuts, n_layers]))
    assert got == list(zip(bounds, gpus))


def test_a_two_host_llama_example_reads_as_documented():
    hosts = Hosts(("local", "local", "box2", "box2"), local="local")
    launch = Launch(gguf="model.gguf", context=16384)
    lines = export_lines("llama.cpp", [2, 3, 1, 0], [10, 20, 30], 48, hosts=hosts, launch=launch)
    assert lines == [
        "# on box2: one rpc-server per GPU (never expose rpc-server to an open network)",
        "CUDA_VISIBLE_DEVICES=0 rpc-server --host 0.0.0.0 --port 50052 &",
        "CUDA_VISIBLE_DEVICES=1 rpc-server --host 0.0.0.0 --port 50053 &",
        "# on local: the main command",
        "CUDA_VISIBLE_DEVICES=1,0 llama-server -m model.gguf -c 16384 --rpc box2:50052,box2:50053"
        " --split-mode layer -ngl 999 --tensor-split 10,10,10,19",
    ]


def test_what_engines_cannot_run_across_hosts_is_refused():
    hosts = Hosts(("a", "a", "b", "b"), local="a")
    with pytest.raises(ValueError, match="not consecutive"):
        export_lines("llama.cpp", [0, 2, 1], [1, 2], 4, hosts=hosts)
    with pytest.raises(ValueError, match="equally many"):
        export_lines("sglang", [0, 1, 2], [1, 2], 4, hosts=hosts)
    with pytest.raises(ValueError, match="ascending"):
        export_lines("vllm", [1, 0, 2], [1, 2], 4, hosts=hosts)
    with pytest.raises(ValueError, match="one machine"):
        export_lines("strata", [0, 2], [2], 4, hosts=hosts)
