"""Strata (SPEC 3): a per-expert VRAM cache walked in profile order; a miss costs miss_ms per unit mass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.arcs import SPARE_UNLIMITED
from solver.engines import StageFill, Weights, expert_prefix
from solver.problem import MASS_SCALE, Problem
from solver.rangewalk import RangeWalk, need_table, walk_range, walk_table


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
        miss_units = np.rint(p.miss_ms * p.mass * scale).astype(np.int64)
        saved = self.walk.held_sum(miss_units)[g, a, b]
        by_layer = np.zeros(n, dtype=np.int64)
        np.add.at(by_layer, p.pair_layer, miss_units)
        visible = np.concatenate([[0], np.cumsum(by_layer)])
        held_mass = np.zeros_like(g)
        if mass:
            held_mass = self.walk.held_sum(np.rint(p.mass * MASS_SCALE).astype(np.int64))[g, a, b]
        experts = expert_prefix(p)
        return Weights(
            saved=saved,
            missed=visible[b] - visible[a] - saved,
            mass=held_mass,
            host=experts[b] - experts[a] - self.walk.held_bytes()[g, a, b],
            spare=np.full(len(g), SPARE_UNLIMITED, dtype=np.int64),
        )

    def miss_units(self, scale: int) -> int:
        return round(self.p.miss_ms * scale)


def stage_fill(p: Problem, g: int, a: int, b: int) -> StageFill:
    """Walk ranks in order over [a, b) and stop at the first pair that does not fit (SPEC 3)."""
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
        miss_ms=p.miss_ms * (float(p.mass[w.visible].sum()) - held_mass),
        host_bytes=int(experts[b] - experts[a]) - cache,
        fits=w.room >= 0,
    )
