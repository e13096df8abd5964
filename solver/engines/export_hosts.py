"""Exports for a rig that spans machines: llama.cpp over rpc-server, SGLang over several nodes.

A GPU's CUDA number on its host is its position among that host's GPUs in the rig (the order ``solve probe
--host`` writes them in). tests/test_export_hosts.py re-implements each engine's device ordering and checks
every layer lands on its stage's GPU; docs/exports.md says why each form is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from solver.engines.export import NO_DEVICES, Command, Comment, Line

RPC_PORT = 50052  # rpc-server's default port


@dataclass(frozen=True)
class Hosts:
    """Where each rig GPU is (``names[g]``, by rig index) and the machine that runs the main command."""

    names: tuple[str, ...]
    local: str = "local"
    port: int = RPC_PORT

    def cuda(self, gpu: int) -> int:
        """The GPU's CUDA number on its own host: its position among that host's GPUs in the rig."""
        return sum(1 for g in range(gpu) if self.names[g] == self.names[gpu])

    def spans(self, gpus: list[int]) -> bool:
        """Whether the plan's GPUs need anything but the local machine."""
        return any(self.names[g] != self.local for g in gpus)


def host_runs(hosts: Hosts, gpus: list[int]) -> list[tuple[str, list[int]]]:
    """(host, its GPUs in pipeline order) for each host in pipeline order; a host's stages must be one run."""
    runs: list[tuple[str, list[int]]] = []
    for g in gpus:
        if runs and runs[-1][0] == hosts.names[g]:
            runs[-1][1].append(g)
        elif any(name == hosts.names[g] for name, _ in runs):
            raise ValueError(f"host {hosts.names[g]}'s stages are not consecutive in the pipeline")
        else:
            runs.append((hosts.names[g], [g]))
    return runs


def llama_rpc_lines(
    hosts: Hosts, gpus: list[int]
) -> tuple[list[Line], tuple[tuple[str, str], ...], list[str]]:
    """The rpc-server lines for every remote host and the main machine's heading, the main command's
    ``CUDA_VISIBLE_DEVICES`` (if any) and its device flags.

    Every remote GPU gets its own rpc-server (``CUDA_VISIBLE_DEVICES`` = that one GPU, ports from
    ``hosts.port`` up), so each ``--rpc`` endpoint is one device whatever the rpc-server version. llama.cpp
    orders the model's devices RPC first (in ``--rpc`` order), then the local GPUs (in CUDA order); when
    the local stages are not the last ones, ``--device`` lists the devices in pipeline order instead. A
    main machine with no stage hides its GPUs (NO_DEVICES).
    """
    runs = host_runs(hosts, gpus)
    lines: list[Line] = []
    endpoints: dict[int, str] = {}
    for host, run in runs:
        if host == hosts.local:
            continue
        lines.append(
            Comment(f"on {host}: one rpc-server per GPU (never expose rpc-server to an open network)")
        )
        for j, g in enumerate(run):
            port = hosts.port + j
            endpoints[g] = f"{host}:{port}"
            argv = ("rpc-server", "--host", "0.0.0.0", "--port", str(port))
            lines.append(Command(argv, (("CUDA_VISIBLE_DEVICES", str(hosts.cuda(g))),), background=True))
    local = [g for g in gpus if hosts.names[g] == hosts.local]
    lines.append(Comment(f"on {hosts.local}: the main command"))
    env: tuple[tuple[str, str], ...] = ()
    if not local:
        env = (("CUDA_VISIBLE_DEVICES", NO_DEVICES),)
    elif [hosts.cuda(g) for g in local] != list(range(len(local))):
        env = (("CUDA_VISIBLE_DEVICES", ",".join(str(hosts.cuda(g)) for g in local)),)
    remote = [g for g in gpus if g in endpoints]
    flags = ["--rpc", ",".join(endpoints[g] for g in remote)]
    if gpus != remote + local:
        names = [f"RPC{remote.index(g)}" if g in endpoints else f"CUDA{local.index(g)}" for g in gpus]
        flags += ["--device", ",".join(names)]
    return lines, env, flags


def sglang_node_lines(
    hosts: Hosts, gpus: list[int], partition: str, head: list[str], tail: list[str]
) -> list[Line]:
    """Each host's lines, node ranks in pipeline order; SGLang needs equally many stages on every node.

    SGLang gives node r the pipeline ranks [r * pp/nnodes, (r + 1) * pp/nnodes) and each rank the GPU
    ``pp_rank % (pp/nnodes)``; ``CUDA_VISIBLE_DEVICES`` on each node lists its GPUs in pipeline order.
    ``head`` is the server command before its pipeline flags, ``tail`` what follows them.
    """
    runs = host_runs(hosts, gpus)
    if any(len(run) * len(runs) != len(gpus) for _, run in runs):
        raise ValueError("SGLang runs equally many pipeline stages on every node")
    lines: list[Line] = []
    for rank, (host, run) in enumerate(runs):
        env = (
            ("CUDA_VISIBLE_DEVICES", ",".join(str(hosts.cuda(g)) for g in run)),
            ("SGLANG_PP_LAYER_PARTITION", partition),
        )
        flags = ["--pp-size", str(len(gpus)), "--nnodes", str(len(runs)), "--node-rank", str(rank)]
        flags += ["--dist-init-addr", f"{runs[0][0]}:5000"]
        lines += [Comment(f"on {host}: node {rank} of {len(runs)}"), Command((*head, *flags, *tail), env)]
    return lines


def vllm_ray_lines(
    hosts: Hosts, gpus: list[int], partition: str, server: list[str], tail: list[str]
) -> list[Line]:
    """A Ray cluster of exactly the plan's GPUs, its head on the first stage's host, and vLLM's command.

    vLLM ranks the Ray workers driver node first, then nodes with fewer workers, then by IP address (as
    a string), and on each node gives them its GPUs in ascending order. So each host's GPUs must run in
    ascending CUDA order and the other hosts in order of stage count; hosts with as many stages must run
    in order of IP address, which a comment line asks for when it matters. ``server`` is vLLM's
    command before its pipeline flags, ``tail`` what follows them.
    """
    runs = host_runs(hosts, gpus)
    head = runs[0][0]
    for host, run in runs:
        if [hosts.cuda(g) for g in run] != sorted(hosts.cuda(g) for g in run):
            raise ValueError(f"vLLM over Ray runs {host}'s GPUs in ascending order; plan with that order")
    order = [(len(run), host) for host, run in runs[1:]]
    if [n for n, _ in order] != sorted(n for n, _ in order):
        raise ValueError("vLLM over Ray puts nodes with fewer GPUs first; plan with that host order")
    lines: list[Line] = []
    for host, run in runs:
        devices = ",".join(str(hosts.cuda(g)) for g in sorted(run))
        start = ("--head", "--port", "6379") if host == head else ("--address", f"{head}:6379")
        lines += [
            Comment(f"on {host}"),
            Command(("ray", "start", *start), (("CUDA_VISIBLE_DEVICES", devices),)),
        ]
    for a, b in pairwise(order):
        if a[0] == b[0]:
            lines.append(
                Comment(f"vLLM orders nodes of as many GPUs by IP address: needs IP({a[1]}) < IP({b[1]})")
            )
    lines.append(Comment(f"on {head}: vLLM (ray status should show exactly {len(gpus)} GPUs)"))
    flags = ("--pipeline-parallel-size", str(len(gpus)), "--distributed-executor-backend", "ray")
    return [*lines, Command((*server, *flags, *tail), (("VLLM_PP_LAYER_PARTITION", partition),))]
