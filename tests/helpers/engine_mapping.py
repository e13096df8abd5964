"""The engines' own mapping from flags to layers and devices, re-implemented to check the exports.

Each function follows the upstream source named in its docstring, statement by statement (docs/exports.md
links them); float32 arithmetic is numpy float32, whose operations round like C++ ``float`` under SSE.
"""

from __future__ import annotations

import bisect
import re

import numpy as np

from tests.helpers.shellparse import parse

LLAMA_MAX_DEVICES = 16  # src/llama.cpp: llama_max_devices()
# What both Python's re and ECMAScript std::regex read the same way: the subset the exports may use.
PORTABLE_REGEX = re.compile(r"[A-Za-z0-9_^$|?()\[\]\\.-]+")


#: Words of each program's command before its flags (vllm serve takes the model as a word).
PROGRAM_WORDS = {"llama-server": 1, "rpc-server": 1, "vllm": 3, "python": 3, "ray": 2}


def shell_words(lines: list[str], shell: str = "posix") -> list[list[str]]:
    """Each statement of the lines, read by ``shell``'s rules (tests/helpers/shellparse.py), as the words of a
    POSIX line would be: ``export NAME=VALUE``, ``NAME=VALUE ... argv [&]``, flags, or ``# comment``."""
    out: list[list[str]] = []
    for statement in parse(lines, shell):
        kind = statement[0]
        if kind == "comment":
            out.append(["#", statement[1]])
        elif kind == "set":
            out.append(["export", f"{statement[1]}={statement[2]}"])
        elif kind == "run":
            _, env, argv, background = statement
            out.append([*(f"{n}={v}" for n, v in env), *argv, *(["&"] if background else [])])
        elif kind == "words":
            out.append(list(statement[1]))
    return out


def parse_lines(lines: list[str], shell: str = "posix") -> tuple[dict[str, str], dict[str, str]]:
    """The environment the lines set (``export NAME=VALUE``, or before a command on its line) and the
    flags (``--flag value``) of their commands and flag lines, after each program's own words."""
    env: dict[str, str] = {}
    flags: dict[str, str] = {}
    for words in shell_words(lines, shell):
        if words[0] == "#":
            continue
        more, words = command_env(words)
        env.update(more)
        if not words:
            continue
        words = words[PROGRAM_WORDS.get(words[0], 0) :]
        assert len(words) % 2 == 0, words
        for flag, value in zip(words[::2], words[1::2]):
            assert flag.startswith("-") and flag not in flags, words
            flags[flag] = value
    return env, flags


def main_argv(lines: list[str], shell: str = "posix") -> list[str]:
    """The words of the lines' last command (the engine's server)."""
    runs = [command_env(w)[1] for w in shell_words(lines, shell) if w[0] not in ("#", "export")]
    return runs[-1]


def visible(env: dict[str, str], n: int) -> list[int]:
    """The rig GPU behind each of the engine's CUDA devices 0..n-1 (CUDA_VISIBLE_DEVICES renumbers)."""
    if "CUDA_VISIBLE_DEVICES" not in env:
        return list(range(n))
    return cuda_visible(env["CUDA_VISIBLE_DEVICES"])


def cuda_visible(value: str) -> list[int]:
    """The devices ``CUDA_VISIBLE_DEVICES=value`` lists, in its order: CUDA stops at the first entry
    that is not a device index (the CUDA C Programming Guide, "CUDA Environment Variables")."""
    devices = []
    for entry in value.split(","):
        if not entry.isdigit():
            break
        devices.append(int(entry))
    return devices


# llama.cpp


def llama_tensor_split(value: str) -> list[np.float32]:
    """common/arg.cpp, ``-ts``: split on ``[,/]+``, refuse llama_max_devices() values or more, std::stof."""
    parts = re.split(r"[,/]+", value)
    if len(parts) >= LLAMA_MAX_DEVICES:
        raise ValueError(f"got {len(parts)} input configs, but system only has {LLAMA_MAX_DEVICES} devices")
    return [np.float32(float(p)) for p in parts]


def llama_slot_devices(tensor_split: list[np.float32], n_layer: int, n_gpu_layers: int, n_devices: int):
    """src/llama-model.cpp, load_tensors: the device of each slot 0..n_layer (slot n_layer is the output).

    ``splits`` is the cumulative float sum normalised by its total; slot il goes to
    ``upper_bound(splits, float(il - i_gpu_start) / act_gpu_layers)``, or to the CPU (None).
    """
    splits = [*tensor_split[:n_devices], *[np.float32(0)] * (n_devices - len(tensor_split))]
    if all(s == 0 for s in splits):
        raise ValueError("all-zero tensor split: llama.cpp would use free memory instead")
    split_sum = np.float32(0)
    for i in range(n_devices):
        split_sum = np.float32(split_sum + splits[i])
        splits[i] = split_sum
    for i in range(n_devices):
        splits[i] = np.float32(splits[i] / split_sum)
    i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)
    act_gpu_layers = min(n_gpu_layers, n_layer + 1)
    devices: list[int | None] = []
    for il in range(n_layer + 1):
        if il < i_gpu_start or il - i_gpu_start >= act_gpu_layers:
            devices.append(None)
            continue
        x = np.float32(np.float32(il - i_gpu_start) / np.float32(act_gpu_layers))
        devices.append(bisect.bisect_right(splits, x))  # std::upper_bound
    return devices


def llama_overrides(value: str, bufts: set[str]) -> list[tuple[str, str]]:
    """common/arg.cpp, parse_tensor_buffer_overrides: ``pattern=buft`` rules, split on ',' then '='."""
    rules = []
    for override in value.split(","):
        pos = override.find("=")
        if pos < 0:
            raise ValueError("invalid value")
        pattern, buft = override[:pos], override[pos + 1 :]
        if buft not in bufts:
            raise ValueError("unknown buffer type")
        rules.append((pattern, buft))
    return rules


def llama_tensor_buft(name: str, rules: list[tuple[str, str]]) -> str | None:
    """src/llama-model-loader.cpp create_tensor: the first rule whose regex is found in the name wins."""
    for pattern, buft in rules:
        assert PORTABLE_REGEX.fullmatch(pattern) and "(?" not in pattern, pattern
        if re.search(pattern, name):  # std::regex_search with the default ECMAScript grammar
            return buft
    return None


def llama_cpu_moe_rules(n_cpu_moe: int) -> list[tuple[str, str]]:
    """common/arg.cpp ``--n-cpu-moe N``: one CPU rule per layer i < N, ``llm_ffn_exps_block_regex(i)``
    (common/common.h: ``"blk\\.%d" LLM_FFN_EXPS_REGEX``, ``"\\.ffn_(up|down|gate|gate_up)_(ch|)exps"``)."""
    return [(f"blk\\.{i}\\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU") for i in range(n_cpu_moe)]


def llama_split_none(devices: list[str], main_gpu: int) -> list[str]:
    """src/llama.cpp, llama_model_load_from_file_impl: ``-sm none`` keeps only ``devices[main_gpu]``
    (none when main_gpu < 0)."""
    if main_gpu < 0:
        return []
    assert main_gpu < len(devices), "invalid value for main_gpu"
    return [devices[main_gpu]]


# vLLM and SGLang


def _partition(value: str, num_hidden_layers: int, pp_size: int) -> list[int]:
    try:
        partitions = [int(layer) for layer in value.split(",")]
    except ValueError as err:
        raise ValueError(f"Invalid partition string: {value}") from err
    if len(partitions) != pp_size:
        raise ValueError(f"{len(partitions)=} does not match {pp_size=}.")
    if sum(partitions) != num_hidden_layers:
        raise ValueError(f"{sum(partitions)=} does not match {num_hidden_layers=}.")
    return partitions


def vllm_pp_indices(env: dict[str, str], num_hidden_layers: int, pp_rank: int, pp_size: int):
    """vllm/distributed/utils.py, get_pp_indices: [start, end) of a pipeline rank."""
    value = env.get("VLLM_PP_LAYER_PARTITION")
    if value is not None:
        partitions = _partition(value, num_hidden_layers, pp_size)
    else:
        partitions = [num_hidden_layers // pp_size] * pp_size
        for i in range(2, num_hidden_layers % pp_size + 2):
            partitions[-i] += 1
    start_layer = sum(partitions[:pp_rank])
    return start_layer, start_layer + partitions[pp_rank]


def vllm_local_device(pp_rank: int, tp_size: int = 1, tp_rank: int = 0) -> int:
    """vllm/distributed/parallel_state.py: ranks are laid out (pp, tp), so global rank = pp_rank * tp_size +
    tp_rank; one node's multiprocessing executor gives rank r the CUDA device r."""
    return pp_rank * tp_size + tp_rank


def sglang_gpu_id(pp_rank: int, pp_size_per_node: int, tp_size_per_node: int = 1, tp_rank: int = 0) -> int:
    """python/sglang/srt/entrypoints/engine.py, the scheduler's gpu_id (base_gpu_id 0, gpu_id_step 1)."""
    return (pp_rank % pp_size_per_node) * tp_size_per_node + (tp_rank % tp_size_per_node)


def sglang_pp_indices(env: dict[str, str], num_hidden_layers: int, pp_rank: int, pp_size: int):
    """python/sglang/srt/distributed/utils.py, get_pp_indices: [start, end) of a pipeline rank."""
    value = env.get("SGLANG_PP_LAYER_PARTITION")
    if value is not None:
        partitions = _partition(value, num_hidden_layers, pp_size)
        start_layer = sum(partitions[:pp_rank])
        return start_layer, start_layer + partitions[pp_rank]
    base_layers, remainder = divmod(num_hidden_layers, pp_size)
    if pp_rank >= pp_size - remainder:
        start_layer = pp_rank * (base_layers + 1) - (pp_size - remainder)
        return start_layer, start_layer + base_layers + 1
    return pp_rank * base_layers, (pp_rank + 1) * base_layers


# Across hosts


def host_sections(lines: list[str], shell: str = "posix") -> dict[str, list[list[str]]]:
    """The statements under each ``on HOST`` comment, as words (shell_words); a host may have several
    sections."""
    sections: dict[str, list[list[str]]] = {}
    host = ""
    for words in shell_words(lines, shell):
        heading = re.match(r"on ([^\s:]+)", words[1]) if words[0] == "#" else None
        if heading:
            host = heading.group(1)
            sections.setdefault(host, [])
        elif words[0] != "#":
            sections.setdefault(host, []).append(words)
    return sections


def command_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """``NAME=VALUE ... cmd args`` and ``export NAME=VALUE``: the variables, and the command's words."""
    env: dict[str, str] = {}
    if words[0] == "export":
        words = words[1:]
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, value = words[0].split("=", 1)
        env[name] = value
        words = words[1:]
    return env, words


def section_env_flags(commands: list[list[str]]) -> tuple[dict[str, str], list[str]]:
    """A host section's variables and the words of its commands, each merged in order."""
    env: dict[str, str] = {}
    flags: list[str] = []
    for words in commands:
        more, rest = command_env(words)
        env.update(more)
        flags += rest
    return env, flags


def vllm_ray_form(
    lines: list[str], shell: str = "posix"
) -> tuple[dict[str, list[int]], str, dict[str, str], list[str]]:
    """The Ray form of a vLLM export: each node's visible GPUs (from its ``ray start``), the head node,
    and the driver's variables and flags (every other command)."""
    nodes: dict[str, list[int]] = {}
    driver = ""
    env: dict[str, str] = {}
    flags: list[str] = []
    for host, commands in host_sections(lines, shell).items():
        for words in commands:
            more, cmd = command_env(words)
            if cmd[:2] == ["ray", "start"]:
                nodes[host] = cuda_visible(more["CUDA_VISIBLE_DEVICES"])
                driver = host if "--head" in cmd else driver
            else:
                env.update(more)
                flags += cmd
    return nodes, driver, env, flags


def option(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def llama_model_devices(rpc: list[str], device_arg: str | None, n_local: int) -> list[str]:
    """src/llama.cpp, llama_model_load_from_file_impl: the model's device names, in the order -ts indexes.

    ``--rpc`` registers one RPC device per endpoint (an rpc-server that sees one GPU), named ``RPC<n>`` in
    registration order (ggml-rpc.cpp, ggml_backend_rpc_add_server); with ``--device`` the devices are the
    ones it names, in its order (common/arg.cpp, parse_device_list); without, RPC devices come first,
    then the local GPUs.
    """
    registry = [f"RPC{n}" for n in range(len(rpc))] + [f"CUDA{i}" for i in range(n_local)]
    if device_arg is None:
        return registry
    names = device_arg.split(",")
    lowered = [r.lower() for r in registry]
    assert all(n.lower() in lowered for n in names), names  # ggml_backend_dev_by_name, case-insensitive
    return [registry[lowered.index(n.lower())] for n in names]


def vllm_ray_ranks(nodes: dict[str, list[int]], driver: str) -> list[tuple[str, int]]:
    """vllm/executor/ray_distributed_executor.py, _init_workers_ray: (node, GPU) of each rank.

    One worker per GPU of the cluster; workers sorted by (not on the driver's node, workers on their node,
    node IP as a string); on each node the i-th worker (local_rank) gets the i-th smallest GPU id.
    """
    workers = [node for node, gpus in nodes.items() for _ in gpus]
    counts = {node: len(gpus) for node, gpus in nodes.items()}
    ranked = sorted(workers, key=lambda node: (0 if node == driver else 1, counts[node], node))
    seen: dict[str, int] = {}
    placed = []
    for node in ranked:
        local_rank = seen.get(node, 0)
        seen[node] = local_rank + 1
        placed.append((node, sorted(nodes[node])[local_rank]))
    return placed


def sglang_rank_ranges(nnodes: int, pp_size: int, tp_size: int, node_rank: int):
    """python/sglang/srt/entrypoints/engine.py, _calculate_rank_ranges."""
    pp_size_per_node = max(pp_size // nnodes, 1)
    nnodes_per_pp_rank = max(nnodes // pp_size, 1)
    pp_rank_range = range(
        pp_size_per_node * (node_rank // nnodes_per_pp_rank),
        pp_size_per_node * (node_rank // nnodes_per_pp_rank + 1),
    )
    tp_size_per_node = tp_size // nnodes_per_pp_rank
    tp_rank_range = range(
        tp_size_per_node * (node_rank % nnodes_per_pp_rank),
        tp_size_per_node * (node_rank % nnodes_per_pp_rank + 1),
    )
    return pp_rank_range, tp_rank_range, pp_size_per_node, tp_size_per_node
