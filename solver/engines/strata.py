"""Strata: a per-expert VRAM cache walked in profile order; a miss costs miss_ms per unit mass.

The miss cost is Strata's own field of the problem (``StrataFields``), from the rig's ``miss_ms``
(``StrataKeys``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from solver.engines.base import Engine, PlanCell, Resolved, Shape, StageCell, Weights, ms
from solver.engines.export import Comment, Flags, Line, SetEnv, Text, device_order, joined
from solver.engines.stageargs import StageArgs, layers_per_stage, parse_stage_args, score_stages
from solver.files.config import EngineKeys, NonNegMs
from solver.problem.placement import StageFill
from solver.problem.problem import EngineFields
from solver.problem.rangewalk import RangeWalk, expert_prefix, need_table, walk_range, walk_table
from solver.problem.scales import MASS_SCALE, SPARE_UNLIMITED
from solver.units import format_size

if TYPE_CHECKING:
    from solver.files.config import ModelConfig, RigConfig
    from solver.files.yamlfile import YamlDoc
    from solver.problem.problem import Problem
    from solver.problem.scored import Scored


class StrataKeys(EngineKeys):
    """Strata's own rig keys: miss_ms, what fetching the whole routed mass costs a token, ms."""

    miss_ms: NonNegMs = 190.0


@dataclass(frozen=True)
class StrataFields(EngineFields):
    """miss_ms: what fetching the whole routed mass from host memory costs a token, ms."""

    miss_ms: float = 190.0


def miss_ms(p: Problem) -> float:
    """The problem's miss cost (the default one for a problem built without Strata's fields)."""
    return StrataFields.of(p).miss_ms


@dataclass(frozen=True)
class StrataTable:
    """The range walk of every (GPU, range), with the weights its held pairs give."""

    p: Problem
    need: np.ndarray
    room: np.ndarray
    walk: RangeWalk

    @classmethod
    def build(cls, p: Problem) -> StrataTable:
        walk = walk_table(p)
        return cls(p, need_table(p), walk.room, walk)

    def weigh(self, g: np.ndarray, a: np.ndarray, b: np.ndarray, scale: int, mass: bool) -> Weights:
        p, n = self.p, self.p.n_layers
        miss_units = np.rint(miss_ms(p) * p.mass * scale).astype(np.int64)
        saved = self.walk.held_sum(miss_units)[g, a, b]
        by_layer = np.zeros(n, dtype=np.int64)
        np.add.at(by_layer, p.pair_layer, miss_units)
        visible = np.concatenate([[0], np.cumsum(by_layer)])
        held_mass = np.zeros_like(g)
        if mass:
            held_mass = self.walk.held_sum(np.rint(p.mass * MASS_SCALE).astype(np.int64))[g, a, b]
        experts = expert_prefix(p)
        gpu = (b - a) * np.rint(p.layer_ms * scale).astype(np.int64)[g]
        return Weights(
            gpu=gpu,
            time=gpu - saved,
            missed=visible[b] - visible[a] - saved,
            mass=held_mass,
            host=experts[b] - experts[a] - self.walk.held_bytes()[g, a, b],
            spare=np.full(len(g), SPARE_UNLIMITED, dtype=np.int64),
        )

    def const_units(self, scale: int) -> int:
        return round(miss_ms(self.p) * scale)


def stage_fill(p: Problem, g: int, a: int, b: int) -> StageFill:
    """Walk ranks in order over [a, b) and stop at the first pair that does not fit."""
    w = walk_range(p, g, a, b)
    held_mass = float(p.mass[w.held].sum())
    cache = int(p.pair_bytes[w.held].sum())
    experts = expert_prefix(p)
    return StageFill(
        room=w.room,
        cache_bytes=cache,
        held=w.n_held,
        visible=len(w.visible),
        held_mass=held_mass,
        miss_ms=miss_ms(p) * (float(p.mass[w.visible].sum()) - held_mass),
        host_bytes=int(experts[b] - experts[a]) - cache,
        fits=w.room >= 0,
    )


class Strata(Engine):
    """A per-expert cache fed from a routing profile; misses fetched from host memory."""

    name = "strata"
    profile = True
    export_noun = "flags"
    note = "a per-expert VRAM cache fed from a routing profile"
    rig_keys = ("miss_ms", "first_stage_min_layers", "host_memory")
    rig_schema = StrataKeys
    speed_keys = ("sms", "clock_ghz")
    columns: ClassVar[list[tuple[str, StageCell]]] = [
        ("cache", lambda s: format_size(s.cache_bytes)),
        ("pairs held", lambda s: f"{s.held_pairs:,}/{s.visible_pairs:,}"),
        ("mass", lambda s: f"{s.held_mass:.2%}"),
        ("compute\nms", lambda s: ms(s.compute_ms)),
    ]
    summary: ClassVar[list[tuple[str, PlanCell]]] = [
        ("held mass", lambda q: f"{q.held_mass:.2%}"),
        ("pairs held", lambda q: f"{q.held_pairs:,}"),
        ("cache", lambda q: format_size(sum(s.cache_bytes for s in q.stages))),
        ("experts in host RAM", lambda q: format_size(q.host_bytes)),
    ]
    sweep: ClassVar[list[tuple[str, PlanCell]]] = [
        ("held\nmass", lambda q: f"{q.held_mass:.2%}"),
        ("cache", lambda q: format_size(sum(s.cache_bytes for s in q.stages))),
    ]

    def check_gpus(self, rig: RigConfig, doc: YamlDoc) -> None:
        """Every GPU needs its time per layer: ``layer_ms``, or ``sms`` and ``clock_ghz`` to estimate it."""
        for i, gpu in enumerate(rig.gpus):
            if gpu.layer_ms is None and gpu.sms is None:
                raise doc.error(("gpus", i), "needs layer_ms, or both sms and clock_ghz")

    def table(self, p: Problem) -> StrataTable:
        return StrataTable.build(p)

    def stage_fill(self, p: Problem, g: int, a: int, b: int) -> StageFill:
        return stage_fill(p, g, a, b)

    def resolve_fields(self, rig: RigConfig, model: ModelConfig, experts: np.ndarray) -> Resolved:
        return Resolved(StrataFields(miss_ms=rig.keys(StrataKeys).miss_ms))

    def miss_total_ms(self, p: Problem) -> float:
        return miss_ms(p)

    def totals(self, p: Problem, fills: list[StageFill], compute_ms: float) -> tuple[float, float]:
        held = float(np.sum([f.held_mass for f in fills]))
        return compute_ms + miss_ms(p) * (1.0 - held), held

    def export(self, plan: Shape) -> list[Line]:
        """``--layer-split CUTS`` for the engine's command and its JSON config line."""
        gpus, cuts, offload, hosts = plan.gpus, plan.cuts, plan.offload, plan.hosts
        if offload:
            raise ValueError("strata keeps every weight on its GPU: nothing to offload")
        if hosts is not None and hosts.spans(gpus):
            raise ValueError("strata runs on one machine: its plan cannot span hosts")
        lines: list[Line] = [SetEnv(name, value) for name, value in device_order(gpus)]
        config = Text(f'"layer_split": {list(cuts)}')
        if not cuts:  # one stage: an empty --layer-split would be a broken flag
            return [*lines, Comment("one GPU runs every layer: no --layer-split needed"), config]
        return [*lines, Flags(("--layer-split", joined(cuts))), config]

    def read_command(self, words: list[str]) -> StageArgs:
        """``--layer-split CUTS`` and CUDA_VISIBLE_DEVICES (solver.engines.stageargs)."""
        return parse_stage_args(self.name, words)

    def score(self, p: Problem, args: StageArgs) -> Scored:
        """GPU s of the command's devices running the layers between its cuts, caching what fits."""
        return score_stages(self, p, args, layers_per_stage(p, args, None))
