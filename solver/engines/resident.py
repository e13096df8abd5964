"""vLLM and SGLang: every weight resident, nothing offloaded; spare KV tokens per stage.

A range fits a GPU only when its room holds every expert of its layers as well. What is left, over
the KV bytes one token costs the stage's layers, is the stage's spare KV in tokens; the engine sizes
every stage's KV cache to the smallest, so a plan's spare KV is the minimum over its stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from solver.engines.bandwidth import BytesSpeed, all_held_ms
from solver.engines.base import PlanCell, StageCell, StageFill, Weights, ms, tokens
from solver.export import Command, context_flag, device_order, joined, placeholder, stage_sizes
from solver.export_hosts import sglang_node_lines, vllm_ray_lines
from solver.rangewalk import expert_prefix, need_table, room_of
from solver.scales import SPARE_UNLIMITED
from solver.units import format_size

if TYPE_CHECKING:
    from solver.baselines import Baseline
    from solver.config import ModelConfig, RigConfig
    from solver.export import Launch, Line, Offload
    from solver.export_hosts import Hosts
    from solver.plan import Placement
    from solver.problem import Problem


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


class Resident(BytesSpeed):
    """Every weight resident on its stage's GPU; the KV cache takes what is left."""

    holds = "weights, every expert, session"
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

    def problem_fields(self, rig: RigConfig, model: ModelConfig, experts: np.ndarray) -> dict:
        return self.speed_fields(rig, model, experts)

    def table(self, p: Problem) -> ResidentTable:
        return ResidentTable.build(p)

    def stage_fill(self, p: Problem, g: int, a: int, b: int) -> StageFill:
        return stage_fill(p, g, a, b)

    def totals(self, p: Problem, fills: list[StageFill], compute_ms: float) -> tuple[float, float]:
        return compute_ms, 1.0

    def partition(self, n_layers: int, k: int) -> list[int]:
        """Layers per stage when no partition is given."""
        raise NotImplementedError

    def default_split(self, p: Problem) -> Baseline:
        """The engine's even partition, GPUs in rig order."""
        from solver.baselines import Baseline, cuts_of
        from solver.plan import bounds_ok, evaluate, feasible

        cuts = cuts_of(self.partition(p.n_layers, p.n_gpus))
        if not bounds_ok(p, cuts):
            return Baseline(
                cuts, False, None, "even", reason="the rig has more GPUs than the model has layers"
            )
        plan = evaluate(p, list(range(p.n_gpus)), cuts)
        return Baseline(cuts, feasible(p, plan), plan, "even", "the engine's even partition")

    def stage_json(self, stage) -> dict:
        return {"spare_kv_tokens": stage.spare_tokens}

    def plan_json(self, plan: Placement | None) -> dict:
        return {"spare_kv_tokens": plan.spare_tokens if plan else None}

    def export(
        self,
        gpus: list[int],
        cuts: list[int],
        n_layers: int,
        offload: list[Offload] | tuple[Offload, ...],
        names: list[str] | None,
        extra_blocks: int,
        hosts: Hosts | None,
        launch: Launch,
    ) -> list[Line]:
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
