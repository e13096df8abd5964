"""Where a llama.cpp command puts things on a rig: its devices, the device of every layer, and the
bytes of every expert tensor on each GPU or the CPU.

Devices: the rig's GPUs on the machine listed first, in rig order, are CUDA0.. after
CUDA_VISIBLE_DEVICES renumbers them; ``--rpc`` endpoints are the GPUs of the other hosts (an
endpoint ``host:port`` is the next GPU of that host in rig order), registered before the local ones,
as llama.cpp does; ``-dev`` picks and orders them; ``-sm none`` keeps the ``-mg`` device only.
Layers: ``slot_devices`` over the ``-ts`` values (or each device's ``free``), the output slot last,
``-ngl`` leaving the first slots on the CPU. Tensors: the first ``-ot``/``-ncmoe``/``-cmoe`` rule
found in a tensor's name sends it to that buffer type; a unit's bias and scale tensors go with it;
a unit that stands for three tensors (a model without ``expert_tensors``) splits its bytes evenly
among them.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

import numpy as np

from solver.engines.export import Offload
from solver.engines.llamacpp.args import LlamaArgs
from solver.engines.llamacpp.fields import LlamaFields
from solver.engines.llamacpp.flags import FFN_EXPS_REGEX, MAX_BLOCKS
from solver.engines.llamacpp.layout import slot_devices
from solver.engines.llamacpp.otrules import Names
from solver.engines.llamacpp.tensors import Costs, base_tensor
from solver.errors import ArgsError
from solver.problem.problem import Problem

#: Non-expert tensors of a block, for telling a user when an -ot rule also matches them.
DENSE_TENSORS = (
    "attn_norm.weight",
    "attn_q.weight",
    "attn_k.weight",
    "attn_v.weight",
    "attn_output.weight",
    "attn_qkv.weight",
    "attn_q_a.weight",
    "attn_kv_a_mqa.weight",
    "ffn_norm.weight",
    "post_attention_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_shexp.weight",
    "ffn_up_shexp.weight",
    "ffn_down_shexp.weight",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_down.weight",
)
#: The CPU's column in a placement's bytes table.
CPU = -1


@dataclasses.dataclass(frozen=True)
class Devices:
    """The command's devices as rig GPUs: behind each CUDA number, each RPC device, and the model's
    device list (what ``-ts`` positions and the layer split refer to), in order."""

    cuda: list[int]
    rpc: list[int]
    model: list[int]
    endpoints: tuple[str, ...] = ()

    def names(self) -> list[str]:
        """Every buffer type llama.cpp would list: the CPU and each device."""
        return [
            "CPU",
            *[f"CUDA{i}" for i in range(len(self.cuda))],
            *[f"RPC{i}" for i in range(len(self.rpc))],
        ]

    def of_buffer(self, buft: str, rule: str) -> int:
        """The rig GPU (or CPU) a buffer type names; ArgsError for one llama.cpp would not know.

        An RPC device's buffer type is ``RPC<d>[host:port]`` (``ggml_backend_buft_name``: device d of the
        server at that endpoint; what ``--fit`` prints), or ``RPC<i>`` for the i-th RPC device."""
        if buft == "CPU":
            return CPU
        served = re.fullmatch(r"RPC(\d+)\[(.+)\]", buft)
        if served:
            if served.group(2) not in self.endpoints:
                raise ArgsError(
                    f"-ot {rule}: no --rpc endpoint {served.group(2)} (this command's: "
                    f"{', '.join(self.endpoints) or 'none'})"
                )
            if served.group(1) != "0":
                raise ArgsError(f"-ot {rule}: each --rpc endpoint is one GPU of the rig (device RPC0)")
            return self.rpc[self.endpoints.index(served.group(2))]
        m = re.fullmatch(r"(CUDA|RPC)(\d+)", buft)
        devices = self.cuda if m and m.group(1) == "CUDA" else self.rpc
        if m is None or int(m.group(2)) >= len(devices):
            raise ArgsError(f"-ot {rule}: unknown buffer type {buft!r} (this rig: {', '.join(self.names())})")
        return devices[int(m.group(2))]


def devices_of(p: Problem, args: LlamaArgs) -> Devices:
    """The rig GPUs behind the command's devices (see the module docstring)."""
    local = [g for g in range(p.n_gpus) if p.hosts[g] == 0]
    cuda = local
    if args.visible is not None:
        wrong = [i for i in args.visible if i >= len(local)]
        if wrong:
            raise ArgsError(
                f"CUDA_VISIBLE_DEVICES={','.join(map(str, args.visible))}: {p.host_names[0]} has GPUs "
                f"0-{len(local) - 1} in the rig"
            )
        cuda = [local[i] for i in args.visible]
    rpc = _rpc_gpus(p, args.rpc)
    registry = {f"rpc{i}": g for i, g in enumerate(rpc)} | {f"cuda{i}": g for i, g in enumerate(cuda)}
    if args.devices is None:
        model = list(registry.values())
    elif args.devices == ("none",):
        model = []
    else:
        model = []
        for name in args.devices:
            if name.lower() not in registry:
                known = ", ".join(n.upper() for n in registry) or "none"
                raise ArgsError(f"-dev {','.join(args.devices)}: no device {name} (this rig: {known})")
            if registry[name.lower()] in model:
                raise ArgsError(f"-dev {','.join(args.devices)}: {name} is listed twice")
            model.append(registry[name.lower()])
    if args.split_mode in ("row", "tensor"):
        raise ArgsError(
            f"-sm {args.split_mode} splits every matrix over the GPUs; a score places whole layers "
            f"(-sm layer or none)"
        )
    if args.split_mode == "none":
        if args.main_gpu >= len(model):
            raise ArgsError(f"-mg {args.main_gpu}: invalid main GPU ({len(model)} devices)")
        model = [] if args.main_gpu < 0 else [model[args.main_gpu]]
    return Devices(cuda, rpc, model, args.rpc)


def _rpc_gpus(p: Problem, endpoints: tuple[str, ...]) -> list[int]:
    """The rig GPU behind each ``--rpc`` endpoint: the next GPU of its host, in rig order."""
    taken: dict[int, int] = {}
    out = []
    for endpoint in endpoints:
        host = endpoint.rsplit(":", 1)[0]
        if host not in p.host_names[1:]:
            remote = ", ".join(p.host_names[1:]) or "none"
            raise ArgsError(
                f"--rpc {endpoint}: the rig has no other host {host!r} (its other hosts: {remote})"
            )
        h = p.host_names.index(host)
        gpus = [g for g in range(p.n_gpus) if p.hosts[g] == h]
        if taken.get(h, 0) >= len(gpus):
            raise ArgsError(f"--rpc: more endpoints on {host} than its {len(gpus)} GPUs in the rig")
        out.append(gpus[taken.get(h, 0)])
        taken[h] = taken.get(h, 0) + 1
    return out


def layer_devices(p: Problem, args: LlamaArgs, dev: Devices) -> tuple[list[int], int]:
    """The rig GPU (or CPU) of each planned layer, and of the output layer."""
    n_blocks = p.n_layers + LlamaFields.of(p).nextn_layers
    ngl = args.n_gpu_layers
    ngl = n_blocks + 1 if ngl is None or ngl < 0 else ngl
    k = len(dev.model)
    split = np.array(list(args.tensor_split[:k]) + [0.0] * (k - len(args.tensor_split[:k])), dtype=np.float32)
    if not split.any():
        split = p.free[dev.model].astype(np.float32)
    where = slot_devices(split, n_blocks, ngl)
    gpus = [CPU if d is None else dev.model[d] for d in where]
    return gpus[: p.n_layers], gpus[n_blocks]


def _dense_hit(pattern: str, n_blocks: int) -> str | None:
    """The first dense tensor of blocks 0..n_blocks-1 an -ot rule's pattern finds, if any (kept: fit's
    dry runs and a score repeat the same rules)."""
    names = _dense_names(n_blocks)
    return next((names.names[i] for i in names.found(pattern)), None)


@functools.lru_cache(maxsize=8)
def _dense_names(n_blocks: int) -> Names:
    """The dense tensors of blocks 0..n_blocks-1, block by block."""
    return Names(tuple(f"blk.{i}.{t}" for i in range(n_blocks) for t in DENSE_TENSORS))


def _mains(names: tuple[str, ...]) -> list[str]:
    """A unit's own tensors (its bias and scale tensors go with them)."""
    return [n for n in names if base_tensor(n) == n] or list(names[:1])


#: An ``-ncmoe`` rule: the experts of one block, by number.
_NCMOE_RULE = re.compile(r"blk\\\.(0|[1-9][0-9]*)" + re.escape(FFN_EXPS_REGEX))


def _moe_block(pattern: str) -> int | None:
    """The block an ``-ncmoe`` rule's pattern names, -1 for ``-cmoe``'s, None for other patterns."""
    if pattern == FFN_EXPS_REGEX:
        return -1
    m = _NCMOE_RULE.fullmatch(pattern)
    return int(m[1]) if m and int(m[1]) < MAX_BLOCKS else None


@dataclass(frozen=True)
class _UnitTensors:
    """One unit's tensors as ``-ot`` rules see them: its layer, each main tensor's full GGUF name with
    its companions' (bias, scale), and the same by their names after ``blk.N.`` (``short``,
    ``companions``)."""

    layer: int
    mains: tuple[tuple[str, tuple[str, ...]], ...]
    short: tuple[str, ...]
    companions: tuple[tuple[str, ...], ...]


@functools.lru_cache(maxsize=8)
def _unit_tensors(
    unit_names: tuple[tuple[str, ...], ...], order: tuple[int, ...], layer: tuple[int, ...]
) -> tuple[tuple[_UnitTensors, ...], Names]:
    """Each unit's tensors in Costs order (``order``: the units, ``layer``: theirs) and every full name
    among them, built once: fit's dry runs and a score place the same units again and again."""
    out = []
    for u, la in zip(order, layer):
        names = unit_names[u]
        mains = _mains(names)
        companions = tuple(tuple(n for n in names if n != name and base_tensor(n) == name) for name in mains)
        named = tuple(
            (Offload(la, name).name, tuple(Offload(la, x).name for x in comp))
            for name, comp in zip(mains, companions)
        )
        out.append(_UnitTensors(la, named, tuple(mains), companions))
    full = dict.fromkeys(x for unit in out for main, comp in unit.mains for x in (main, *comp))
    return tuple(out), Names(tuple(full))


def placed_bytes(
    p: Problem, c: Costs, args: LlamaArgs, dev: Devices, layers: list[int]
) -> tuple[np.ndarray, list[list[str]], list[str]]:
    """Bytes of each unit (in Costs order) on each GPU, the CPU last (shape (U, k+1)); the names of each
    unit's tensors on the CPU; notes on rules that reach past the expert tensors."""
    n_blocks = p.n_layers + LlamaFields.of(p).nextn_layers
    blocks = {pattern: _moe_block(pattern) for pattern, _ in args.overrides}
    # -ncmoe rules past the last block match nothing, so are not searched.
    given = [(pattern, buft) for pattern, buft in args.overrides if (blocks[pattern] or 0) < n_blocks]
    rules = [(pattern, buft, f"{pattern}={buft}") for pattern, buft in given]
    targets = [dev.of_buffer(buft, shown) for _, buft, shown in rules]
    notes = []
    for pattern, _, shown in rules:
        if blocks[pattern] is not None:
            continue
        hit = _dense_hit(pattern, n_blocks)
        if hit:
            notes.append(
                f"-ot {shown} also matches {hit} and other tensors that are not routed experts; "
                f"the score moves expert tensors only"
            )

    names = tuple(LlamaFields.of(p).unit_names)
    tensors, full = _unit_tensors(names, tuple(c.order.tolist()), tuple(c.layer.tolist()))
    first: dict[str, int] = {}
    for (pattern, _, _), target in zip(rules, targets):
        for i in full.found(pattern):
            first.setdefault(full.names[i], target)

    k = p.n_gpus
    out = [[0] * (k + 1) for _ in tensors]
    cpu_names: list[list[str]] = []
    parted: list[str] = []
    for row, unit, size in zip(out, tensors, c.size.tolist()):
        home = layers[unit.layer]
        on_cpu = []
        n = len(unit.mains)
        for j, (name, companions) in enumerate(unit.mains):
            d = first.get(name, home)
            row[d if d != CPU else k] += size * (j + 1) // n - size * j // n
            if companions:
                parted += [other for other in companions if first.get(other, home) != d]
            if d == CPU:
                on_cpu += [unit.short[j], *unit.companions[j]]
        cpu_names.append(on_cpu)
    if parted:
        notes.append(
            f"{len(parted)} bias or scale tensors ({parted[0]}, ...) are sent elsewhere than their expert "
            f"tensor; the score keeps each with its tensor"
        )
    return np.array(out, dtype=np.int64).reshape(len(tensors), k + 1), cpu_names, notes
