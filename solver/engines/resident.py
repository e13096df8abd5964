"""vLLM and SGLang: every weight resident, nothing offloaded; spare KV tokens per stage.

A range fits a GPU only when its room holds every expert of its layers as well. What is left, over
the KV bytes one token costs the stage's layers, is the stage's spare KV in tokens; the engine sizes
every stage's KV cache to the smallest, so a plan's spare KV is the minimum over its stages.

Their own fields of the problem (``ResidentFields``) are the speed model's and the checkpoint their
command loads; the memory each card keeps from the KV cache (the rig's ``gpu_memory_utilization``,
one of their own rig keys, ``ResidentKeys``) goes into the shared ``reserve``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations, groupby, islice, permutations, product
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from solver.engines.bandwidth import BytesFields, BytesKeys, BytesSpeed, all_held_ms
from solver.engines.base import Orders, PlanCell, Resolved, Shape, StageCell, Weights, ms, tokens
from solver.engines.export import Command, context_flag, device_order, joined, placeholder, stage_sizes
from solver.engines.export_hosts import sglang_node_lines, vllm_ray_lines
from solver.engines.stageargs import StageArgs, layers_per_stage, parse_stage_args, score_stages
from solver.files.cards import DRIVER_MIB
from solver.files.config import Share
from solver.problem.baselines import Baseline, cuts_of
from solver.problem.placement import Placement, StageFill, bounds_ok, feasible
from solver.problem.rangewalk import expert_prefix, need_table, room_of
from solver.problem.scales import SPARE_UNLIMITED
from solver.units import format_size

if TYPE_CHECKING:
    from solver.engines.export import Launch, Line
    from solver.engines.export_hosts import Hosts
    from solver.files.config import ModelConfig, RigConfig
    from solver.problem.problem import Problem
    from solver.problem.scored import Scored


class ResidentKeys(BytesKeys):
    """The speed model's rig keys and the share of each card's total memory the engine may use (None:
    ``GPU_MEMORY_UTILIZATION``)."""

    gpu_memory_utilization: Share | None = None


@dataclass(frozen=True)
class ResidentFields(BytesFields):
    """hf_model: the checkpoint directory (a path from the working directory) or Hugging Face id the
    command serves (None: unknown)."""

    hf_model: str | None = None


def kv_prefix(p: Problem) -> np.ndarray:
    """KV bytes one token costs layers < x, shape (L+1,)."""
    return np.concatenate([[0], np.cumsum(p.kv_per_layer)])


def spare_tokens(left: np.ndarray, kv: np.ndarray) -> np.ndarray:
    """``floor(left / kv)`` where a token costs bytes, SPARE_UNLIMITED where it costs none."""
    return np.where(kv > 0, left // np.maximum(kv, 1), SPARE_UNLIMITED)


@dataclass(frozen=True)
class ResidentTable:
    """Rooms after every expert of the range; no cache, no misses."""

    p: Problem
    need: np.ndarray
    room: np.ndarray

    @classmethod
    def build(cls, p: Problem) -> ResidentTable:
        experts = expert_prefix(p)
        need = need_table(p) + (experts[None, :] - experts[:, None])
        return cls(p, need, room_of(p, need))

    def weigh(self, g: np.ndarray, a: np.ndarray, b: np.ndarray, scale: int, mass: bool) -> Weights:
        zero = np.zeros(len(g), dtype=np.int64)
        kv = kv_prefix(self.p)
        units = np.rint(all_held_ms(self.p) * scale).astype(np.int64)  # (L, k)
        prefix = np.concatenate([np.zeros((1, self.p.n_gpus), dtype=np.int64), np.cumsum(units, axis=0)])
        gpu = prefix[b, g] - prefix[a, g]
        return Weights(gpu, gpu, zero, zero, zero, spare_tokens(self.room[g, a, b], kv[b] - kv[a]))

    def const_units(self, scale: int) -> int:
        return 0


def stage_fill(p: Problem, g: int, a: int, b: int) -> StageFill:
    """Every expert of [a, b) resident; the stage's share of the model's experts stands for its mass."""
    room = p.room(g, a, b)
    experts = p.experts_per_layer
    bytes_ = int((experts[a:b] * p.expert_bytes[a:b]).sum())
    kv = int(p.kv_per_layer[a:b].sum())
    left = room - bytes_
    total = int(experts.sum())
    return StageFill(
        room=room,
        cache_bytes=bytes_,
        held=int(experts[a:b].sum()),
        visible=int(experts[a:b].sum()),
        held_mass=int(experts[a:b].sum()) / total if total else 0.0,
        miss_ms=0.0,
        host_bytes=0,
        spare_tokens=(left // kv if kv else None) if left >= 0 else None,
        fits=left >= 0,
        gpu_ms=float(all_held_ms(p)[a:b, g].sum()),
    )


#: What stands in for the model when the model file does not name it.
HF_PLACEHOLDER = "the checkpoint directory or Hugging Face id to serve (a model file's hf_model names it)"
#: Share of each card's total memory the engine may use (vLLM's ``gpu_memory_utilization`` default;
#: SGLang's ``mem_fraction_static`` is of the same size): the rest stays free.
GPU_MEMORY_UTILIZATION = 0.9
#: Activation memory of the engine's profiling run, kept from the KV cache (docs/engines.md).
ACTIVATIONS = 2**30
#: Allowed GPU orders (or GPU sets) planned one by one at most; beyond, the rest are not planned.
MAX_ORDERS = 5040


def _host_runs(p: Problem, gpus: tuple[int, ...] | None = None) -> list[list[int]]:
    """Each host's GPUs of ``gpus`` (all by default) in rig order, hosts in order of first appearance."""
    hosts = p.hosts
    used = range(p.n_gpus) if gpus is None else gpus
    firsts = list(dict.fromkeys(int(hosts[g]) for g in used))
    return [[g for g in used if hosts[g] == h] for h in firsts]


def _over_hosts(p: Problem) -> bool:
    return len(set(p.hosts.tolist())) > 1


def _gpu_sets(p: Problem) -> Iterator[tuple[int, ...]]:
    """The GPU sets a plan may use, each in rig order: every GPU, or with idle GPUs every non-empty
    set, the larger first."""
    if not p.idle_gpus:
        yield tuple(range(p.n_gpus))
        return
    for size in range(p.n_gpus, 0, -1):
        yield from combinations(range(p.n_gpus), size)


def _ray_orders(runs: list[list[int]], most: int) -> list[tuple[int, ...]]:
    """The orders Ray runs ``runs`` (each host's GPUs ascending) in, at most ``most``: any host first,
    the others by ascending GPU count, hosts of equal count in any order."""
    out: list[tuple[int, ...]] = []
    for i, first in enumerate(runs):
        rest = sorted(runs[:i] + runs[i + 1 :], key=len)
        groups = [list(group) for _, group in groupby(rest, key=len)]
        for choice in product(*(permutations(group) for group in groups)):
            out.append(tuple(g for gpus in [first, *(r for grp in choice for r in grp)] for g in gpus))
            if len(out) >= most:
                return out
    return out


class Resident(BytesSpeed):
    """Every weight resident on its stage's GPU; the KV cache takes what is left."""

    holds = "weights, every expert, session"
    rig_keys = (*BytesSpeed.rig_keys, "gpu_memory_utilization")
    rig_schema = ResidentKeys
    note = "every weight in VRAM, one pipeline stage per GPU"
    host_fallback = "llama.cpp"
    #: The environment variable that takes the layers per stage.
    partition_env: ClassVar[str]
    #: The flag that takes the number of pipeline stages, and the one that takes the context.
    size_flag: ClassVar[str]
    context_flag: ClassVar[str]
    columns: ClassVar[list[tuple[str, StageCell]]] = [
        ("experts", lambda s: format_size(s.cache_bytes)),
        ("spare KV", lambda s: tokens(s.spare_tokens) if s.fits else "does not fit"),
        ("GPU\nms", lambda s: ms(s.compute_ms)),
    ]
    summary: ClassVar[list[tuple[str, PlanCell]]] = [
        ("spare KV", lambda q: tokens(q.spare_tokens) if all(s.fits for s in q.stages) else "-"),
    ]
    sweep: ClassVar[list[tuple[str, PlanCell]]] = [("spare KV", lambda q: tokens(q.spare_tokens))]

    def resolve_fields(self, rig: RigConfig, model: ModelConfig, experts: np.ndarray) -> Resolved:
        """The speed model's fields and the model's checkpoint, and each card's memory the engine keeps
        from its KV cache: what ``gpu_memory_utilization`` leaves of the card's total, and the
        activations of its profiling run."""
        given = rig.keys(ResidentKeys).gpu_memory_utilization
        util = GPU_MEMORY_UTILIZATION if given is None else given
        total = [g.free + DRIVER_MIB * 2**20 for g in rig.gpus]
        buffers = [int((1 - util) * t) + ACTIVATIONS for t in total]
        speed, layer_ms = self.speed_fields(rig, model, experts)
        return Resolved(ResidentFields(**speed, hf_model=model.hf_model), buffers=buffers, layer_ms=layer_ms)

    def launch(self, p: Problem, fit_off: bool = False) -> Launch:
        """The checkpoint, with the context and KV cache type."""
        return dataclasses.replace(super().launch(p, fit_off), hf_model=ResidentFields.of(p).hf_model)

    def table(self, p: Problem) -> ResidentTable:
        return ResidentTable.build(p)

    def stage_fill(self, p: Problem, g: int, a: int, b: int) -> StageFill:
        return stage_fill(p, g, a, b)

    def totals(self, p: Problem, fills: list[StageFill], compute_ms: float) -> tuple[float, float]:
        return compute_ms, 1.0

    def partition(self, n_layers: int, k: int) -> list[int]:
        """Layers per stage when no partition is given."""
        raise NotImplementedError

    def default_split(self, p: Problem, which: str | None = None) -> Baseline:
        """The engine's even partition, GPUs in rig order."""
        cuts = cuts_of(self.partition(p.n_layers, p.n_gpus))
        if not bounds_ok(p, cuts):
            return Baseline(
                cuts, False, None, "even", reason="the rig has more GPUs than the model has layers"
            )
        plan = self.evaluate(p, list(range(p.n_gpus)), cuts)
        return Baseline(cuts, feasible(p, plan), plan, "even", "the engine's even partition")

    def stage_json(self, stage) -> dict:
        return {"cpu_ms": 0.0, "switch_ms": 0.0, "spare_kv_tokens": stage.spare_tokens}

    def plan_json(self, plan: Placement | None) -> dict:
        return {"spare_kv_tokens": plan.spare_tokens if plan else None}

    def export(self, plan: Shape) -> list[Line]:
        gpus, cuts, n_layers, launch = plan.gpus, plan.cuts, plan.n_layers, plan.launch
        offload, hosts = plan.offload, plan.hosts
        if offload:
            raise ValueError(f"{self.name} keeps every weight on its GPU: nothing to offload")
        partition = joined(stage_sizes(cuts, n_layers))
        model, notes = placeholder(launch.hf_model, "MODEL", HF_PLACEHOLDER)
        tail, more = context_flag(self.context_flag, launch.context)
        head = self.server(model)
        if hosts is not None and hosts.spans(gpus):
            return [*notes, *more, *self.across_hosts(hosts, gpus, partition, head, tail)]
        env = (*device_order(gpus), (self.partition_env, partition))
        return [*notes, *more, Command((*head, self.size_flag, str(len(gpus)), *tail), env)]

    def server(self, model: str) -> list[str]:
        """The command that serves ``model``, before its pipeline flags."""
        raise NotImplementedError

    def read_command(self, words: list[str]) -> StageArgs:
        """The partition variable, the pipeline size and CUDA_VISIBLE_DEVICES (solver.engines.stageargs)."""
        return parse_stage_args(self.name, words)

    def score(self, p: Problem, args: StageArgs) -> Scored:
        """Stage s on CUDA device s running the partition's layers, or the engine's even split."""
        k = args.stages or 1
        return score_stages(self, p, args, layers_per_stage(p, args, self.partition(p.n_layers, k)))

    def across_hosts(
        self, hosts: Hosts, gpus: list[int], partition: str, head: list[str], tail: list[str]
    ) -> list[Line]:
        """Each host's lines for a plan that spans machines."""
        raise NotImplementedError


class Vllm(Resident):
    """vLLM: even split with the remainder on the stages before the last (``get_pp_indices``)."""

    name = "vllm"
    partition_env = "VLLM_PP_LAYER_PARTITION"
    size_flag = "--pipeline-parallel-size"
    context_flag = "--max-model-len"

    def orders(self, p: Problem) -> Orders | None:
        """Over several hosts, Ray runs each node's GPUs in ascending order and the nodes after the
        driver's (the first) in ascending order of their stage count; nodes of equal count may come in
        either order (the export says which address must sort first). With idle GPUs, the same for
        every set of GPUs a plan may use."""
        if not _over_hosts(p):
            return None
        out: list[tuple[int, ...]] = []
        for gpus in _gpu_sets(p):
            runs = _host_runs(p, gpus)
            if p.order == "as-given":
                counts = [len(run) for run in runs[1:]]
                if counts == sorted(counts):
                    out.append(tuple(g for run in runs for g in run))
            else:
                out += _ray_orders(runs, MAX_ORDERS - len(out))
            if len(out) >= MAX_ORDERS:
                break
        if not out:
            return Orders(
                [],
                "vLLM over Ray runs the hosts after the first in ascending order of their "
                "GPU count; list them so, or use order: auto",
            )
        return Orders(out)

    def partition(self, n_layers: int, k: int) -> list[int]:
        counts = [n_layers // k] * k
        for i in range(2, n_layers % k + 2):
            counts[-i] += 1
        return counts

    def server(self, model: str) -> list[str]:
        return ["vllm", "serve", model]

    def across_hosts(
        self, hosts: Hosts, gpus: list[int], partition: str, head: list[str], tail: list[str]
    ) -> list[Line]:
        return vllm_ray_lines(hosts, gpus, partition, head, tail)


class Sglang(Resident):
    """SGLang: even split with the remainder on the last stages."""

    name = "sglang"
    partition_env = "SGLANG_PP_LAYER_PARTITION"
    size_flag = "--pp-size"
    context_flag = "--context-length"

    def orders(self, p: Problem) -> Orders | None:
        """Over several hosts SGLang runs equally many pipeline stages on every node; any order of
        the hosts and of each host's GPUs runs. With idle GPUs, every set of GPUs with as many on
        each host it uses (as given: in rig order, each host's GPUs together)."""
        if not _over_hosts(p):
            return None
        runs = _host_runs(p)
        if not p.idle_gpus:
            if len({len(gpus) for gpus in runs}) == 1:
                return None
            each = ", ".join(f"{p.host_names[int(p.hosts[gpus[0]])]}: {len(gpus)}" for gpus in runs)
            return Orders(
                [], f"SGLang runs equally many pipeline stages on every node; the hosts have {each} GPUs"
            )
        equal = [
            gpus for gpus in islice(_gpu_sets(p), 2**20) if len({len(r) for r in _host_runs(p, gpus)}) == 1
        ][:MAX_ORDERS]
        if p.order == "as-given":
            return Orders([tuple(g for run in _host_runs(p, gpus) for g in run) for gpus in equal])
        return Orders([], free=equal)

    def partition(self, n_layers: int, k: int) -> list[int]:
        counts = [n_layers // k] * k
        for i in range(1, n_layers % k + 1):
            counts[-i] += 1
        return counts

    def server(self, model: str) -> list[str]:
        return ["python", "-m", "sglang.launch_server", "--model-path", model]

    def across_hosts(
        self, hosts: Hosts, gpus: list[int], partition: str, head: list[str], tail: list[str]
    ) -> list[Line]:
        return sglang_node_lines(hosts, gpus, partition, head, tail)
