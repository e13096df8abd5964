"""What llama.cpp does unasked since ``--fit`` (on by default since late 2025): ``fit`` (the algorithm,
solver.engines.llamacpp.fit) run on the rig with moesplit's own memory count as its dry run, and the
command it prints scored like any other (solver.engines.llamacpp.score).

The dry run (``ProblemOracle``) places the dry run's ``-c -ngl -ts -ot`` as ``solve score`` does and
reports per GPU ``model`` = what the card must hold for its layers and tensors (``Card.need_bytes``:
weights, KV cache at the context, the first/last stage's extras with the output logits) and ``compute`` =
the engine's buffer on the card (``Problem.buffers``); a card with nothing on it uses nothing, as in
llama.cpp. ``free`` is the rig's ``free``: the margin is fit's own (1024 MiB per device), and the rig's
``reserve`` is the plan's alone, so fit's placement fits the plan's rooms whenever a card's ``reserve``
is at most 1024 MiB.

Where the model file has a ``geometry:`` block (``solve model from-gguf`` writes one), the dry run is
``ExactOracle`` instead, llama.cpp's own count (``llama-fit-params --fit-print``): per device the weights
its buffers hold (each layer's ``dense_bytes`` on the layer's device, not a sliding-window cache the
model file counts as state, each expert tensor where the dry run's ``-ot`` rules put it, the output on
the output's device), the KV cache and the compute buffer that ``memory.estimate`` gives for the dry
run's own placement (its ``-ot`` rules too, those to another GPU's buffer included: fit's "extra
layer"). A rule fit writes for an extra layer (``blk\\.N\\.ffn_down.*``) also takes the layer's shared
expert and router tensors along: where the model file lists them (``ffn_tensors``, which from-gguf
writes) they go where the rule sends them, else they stay in the layer's ``dense_bytes``.

``fit_rig`` takes fit's margin per GPU (``-fitt``; 1024 MiB each by default), so the same fit can run
on a view of the devices other than the rig's own (the engine tier's emulated cards: every rpc device
reporting the host's memory free, a card emulated by its margin).
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from solver.engines.base import Engine
from solver.engines.export import LLAMA_MAX_SPLITS, Offload
from solver.engines.export_hosts import Hosts, llama_rpc_lines
from solver.engines.llamacpp import memory
from solver.engines.llamacpp.args import parse_llama_args
from solver.engines.llamacpp.commandmemory import command_flags, command_placement
from solver.engines.llamacpp.devices import CPU, devices_of, layer_devices, placed_bytes
from solver.engines.llamacpp.fields import LlamaFields
from solver.engines.llamacpp.fit import (
    DeviceMemory,
    DryRun,
    FitDevice,
    FitResult,
    Measurement,
    MiB,
    ModelInfo,
    Oracle,
    UserParams,
    fit,
)
from solver.engines.llamacpp.otrules import Names
from solver.engines.llamacpp.score import run_problem, score
from solver.engines.llamacpp.tensors import Costs
from solver.problem.baselines import Baseline
from solver.problem.problem import Problem
from solver.problem.scored import Scored
from solver.units import format_size

#: fit's default margin per device (``-fitt``, common/arg.cpp).
FIT_MARGIN = 1024 * MiB


@dataclass(frozen=True)
class FitRig:
    """The rig as llama.cpp's fit sees it: the device flags every command carries (``--rpc``/``--device``
    for a rig across machines, as the plan's export gives them), and per model device (in llama.cpp's
    order) its rig GPU and its name and buffer type (``CUDA<i>``, ``RPC<i>`` with ``RPC0[host:port]``)."""

    words: tuple[str, ...]
    gpus: tuple[int, ...]
    devices: tuple[FitDevice, ...]

    @classmethod
    def of(cls, p: Problem) -> FitRig:
        gpus = list(range(p.n_gpus))
        if len(p.host_names) == 1:
            devs = [FitDevice(f"CUDA{g}", p.gpu_names[g], f"CUDA{g}") for g in gpus]
            return cls((), tuple(gpus), tuple(devs))
        hosts = Hosts(tuple(p.host_names[h] for h in p.hosts), local=p.host_names[0])
        _, _, flags = llama_rpc_lines(hosts, gpus)
        endpoints = flags[1].split(",")
        remote = [g for g in gpus if hosts.names[g] != hosts.local]
        local = [g for g in gpus if hosts.names[g] == hosts.local]
        order = gpus if "--device" in flags else remote + local
        devs = []
        for g in order:
            if g in remote:
                i = remote.index(g)
                devs.append(FitDevice(f"RPC{i}", endpoints[i], f"RPC0[{endpoints[i]}]"))
            else:
                i = local.index(g)
                devs.append(FitDevice(f"CUDA{i}", p.gpu_names[g], f"CUDA{i}"))
        return cls(tuple(flags), tuple(order), tuple(devs))


def kv_words(p: Problem) -> list[str]:
    """``-c`` and the KV cache types every dry run and the fitted command carry."""
    words = ["-c", str(p.context)]
    if p.kv_type != "f16":
        words += ["-ctk", p.kv_type, "-ctv", p.kv_type, "-fa", "on"]
    return words


@dataclass
class ProblemOracle:
    """fit's dry run answered by moesplit's own memory count (see the module docstring)."""

    p: Problem
    rig: FitRig
    engine: Engine

    def __call__(self, run: DryRun) -> Measurement:
        words = [*self.rig.words, *run.args()[2:], *kv_words(self.p)]  # run.args() starts with -c
        scored = score(self.p, parse_llama_args(words), self.engine)
        need = {c.gpu: c.need_bytes for c in scored.cards if c.gpu is not None}
        buffers = self.p.buffers if len(self.p.buffers) else [0] * self.p.n_gpus
        devices = []
        for g in self.rig.gpus:
            free = int(self.p.free[g])
            used = need.get(g, 0)
            compute = int(buffers[g]) if g in need else 0
            devices.append(DeviceMemory(free, free, used, 0, compute))
        host = next(c for c in scored.cards if c.gpu is None)
        return Measurement(tuple(devices), DeviceMemory(0, 0, host.need_bytes, 0, 0))


def _padded(n: int) -> int:
    """``n`` bytes padded to the CPU/RPC buffer's alignment, as llama.cpp pads each tensor (the model file
    gives a layer's dense bytes as one sum, so the sum is padded: exact where every tensor is a multiple
    of 32 bytes, as the K-quant and f32 tensors of these models are)."""
    return (n + memory.ALIGNMENT - 1) // memory.ALIGNMENT * memory.ALIGNMENT


@dataclass
class ExactOracle:
    """fit's dry run answered as llama.cpp counts it, for a model file with a geometry (see the module
    docstring): weights from moesplit's byte counts placed as the dry run's ``-ngl -ts -ot`` place them,
    context and compute from ``memory.estimate`` of the same placement."""

    p: Problem
    rig: FitRig
    pm: memory.PlanMemory

    @functools.cached_property
    def _ffn_tensors(self) -> tuple[tuple[tuple[int, str], ...], Names]:
        """Each layer's FFN tensors the model file lists, (layer, kind), and their GGUF names, each
        pattern's matches kept: fit's dry runs repeat their patterns over many placements."""
        keys = tuple((layer, name) for name, _ in self.pm.ffn for layer in range(len(self.pm.dense)))
        return keys, Names(tuple(Offload(layer, name).name for layer, name in keys))

    def _matching(self, pattern: str) -> tuple[tuple[int, str], ...]:
        """The FFN tensors an ``-ot`` pattern selects (``std::regex_search``)."""
        keys, names = self._ffn_tensors
        return tuple(keys[i] for i in names.found(pattern))

    def __call__(self, run: DryRun) -> Measurement:
        words = [*self.rig.words, *run.args()[2:], *kv_words(self.p)]
        args = parse_llama_args(words)
        q, _ = run_problem(self.p, args)
        dev = devices_of(q, args)
        layers, output = layer_devices(q, args, dev)
        placed, _, _ = placed_bytes(q, Costs.of(q), args, dev, layers)
        k = q.n_gpus
        weights = [0] * (k + 1)  # the CPU last
        moved: dict[tuple[int, str], int] = {}  # each FFN tensor a rule moves: the first rule's index
        for i, (pattern, _) in enumerate(args.overrides):
            for tensor in self._matching(pattern):
                moved.setdefault(tensor, i)
        for layer, d in enumerate(layers):
            home = k if d == CPU else d
            stays = self.pm.dense[layer]
            for name, sizes in self.pm.ffn:
                size, i = sizes[layer], moved.get((layer, name))
                if not size or i is None:
                    continue
                pattern, buft = args.overrides[i]
                to = dev.of_buffer(buft, f"{pattern}={buft}")
                to = k if to == CPU else to
                if to != home:
                    stays -= size
                    weights[to] += _padded(size)
            weights[home] += _padded(stays)
        for g in range(k + 1):
            weights[g] += int(placed[:, g].sum())
        weights[k if output == CPU else output] += q.last_stage_bytes - self.pm.last_extra
        first = k if not layers or layers[0] == CPU else layers[0]
        weights[first] += q.first_stage_bytes - self.pm.first_extra
        placement = command_placement(self.pm.geometry, args, dev, layers, output)
        est = memory.estimate(
            self.pm.geometry, placement, command_flags(q, args), self.pm.offload_min_batch, self.pm.stored
        )
        pos = {gpu: i for i, gpu in enumerate(dev.model)}
        devices = []
        for g in self.rig.gpus:
            free = int(self.p.free[g])
            use = est.devices[pos[g]] if g in pos else memory.Usage()
            devices.append(DeviceMemory(free, free, weights[g], use.context, use.compute))
        host = DeviceMemory(0, 0, weights[k], est.host.context, est.host.compute)
        return Measurement(tuple(devices), host)


def oracle_for(p: Problem, rig: FitRig, engine: Engine) -> Oracle:
    """The dry run fit runs on: llama.cpp's own count where the model file has a geometry and the flags
    are ones llama.cpp accepts (``ExactOracle``), moesplit's memory count otherwise (``ProblemOracle``)."""
    pm = LlamaFields.of(p).llama_memory
    if isinstance(pm, memory.PlanMemory) and pm.dense and memory.refusal(pm.geometry, pm.flags) is None:
        return ExactOracle(p, rig, pm)
    return ProblemOracle(p, rig, engine)


def fit_rig(p: Problem, engine: Engine, margins: Sequence[int] | None = None) -> tuple[FitResult, list[str]]:
    """fit on the rig at its context (set, so never shrunk) with no placement given, as llama-server runs
    with no -ngl/-ts/-ot; and the words of the command it amounts to (device flags, ``-c``, KV types and
    fit's printed ``-ngl -ts -ot``; empty where fit gives up). ``margins``: the bytes fit keeps free on
    each rig GPU (``-fitt``, in rig order; default ``FIT_MARGIN`` each)."""
    rig = FitRig.of(p)
    if margins is not None and len(margins) != p.n_gpus:
        raise ValueError(f"{len(margins)} margins for {p.n_gpus} GPUs")
    n_expert = (
        0 if not len(LlamaFields.of(p).unit_layer) else int(p.experts.max()) if p.experts is not None else 1
    )
    model = ModelInfo(p.n_layers, p.context, n_expert)  # n_ctx_train: only read with the context unset
    each = (FIT_MARGIN,) * p.n_gpus if margins is None else tuple(margins)
    user = UserParams(margins=tuple(each[g] for g in rig.gpus), n_ctx=p.context)
    res = fit(model, rig.devices, user, oracle_for(p, rig, engine))
    printed = res.command()
    if printed is None:
        return res, []
    return res, [*rig.words, *kv_words(p), *shlex.split(printed)[2:]]


def fit_scored(p: Problem, engine: Engine) -> tuple[FitResult, list[str], Scored | None]:
    """fit's command on the rig and its score (None where fit gives up)."""
    res, words = fit_rig(p, engine)
    if not words:
        return res, words, None
    return res, words, engine.score(p, parse_llama_args(words))


def fit_default(p: Problem, engine: Engine) -> Baseline:
    """llama.cpp's default since ``--fit``: fit's printed command on the rig, scored (``name`` "fit",
    ``command`` the words ``solve score`` reads)."""
    if p.n_gpus > LLAMA_MAX_SPLITS:
        return Baseline(
            [], False, None, "fit", reason=f"llama.cpp reads at most {LLAMA_MAX_SPLITS} -ts values back"
        )
    res, words, scored = fit_scored(p, engine)
    if scored is None:
        return Baseline([], False, None, "fit", reason=f"llama.cpp's --fit gives up: {res.message}")
    plan = scored.placement
    printed = res.command() or ""
    n_rules = len(res.overrides)
    note = " ".join(printed.split(" -ot ")[0].split()[2:]) + (f" and {n_rules} -ot rules" if n_rules else "")
    note = f"what --fit chooses (on by default since late 2025): {note}"
    if scored.fits:
        return Baseline(plan.cuts, True, plan, "fit", note, command=words)
    short = next(c for c in scored.cards if not c.fits)
    why = f"--fit's command does not fit {short.name}: it lacks {format_size(short.shortfall)}"
    return Baseline(plan.cuts, False, plan, "fit", note, reason=why, command=words)
