"""A placement evaluated exactly as SPEC 3 defines it: per-stage walks, window and held mass."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from solver.problem import Problem
from solver.rangewalk import walk_range


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: GPU ``gpu`` runs layers [start, end) and caches what fits."""

    gpu: int
    name: str
    start: int
    end: int
    room_bytes: int
    cache_bytes: int
    held_pairs: int
    visible_pairs: int
    held_mass: float
    compute_ms: float
    stage_ms: float = 0.0  # SPEC 7: compute plus the miss time of its layers' traffic it does not hold

    @property
    def fits(self) -> bool:
        return self.room_bytes >= 0


@dataclass(frozen=True)
class Placement:
    """Stages in pipeline order, with the predicted window (ms) and held mass."""

    stages: list[Stage]
    window_ms: float
    held_mass: float

    @property
    def cuts(self) -> list[int]:
        return [s.start for s in self.stages[1:]]

    @property
    def gpus(self) -> list[int]:
        return [s.gpu for s in self.stages]

    @property
    def held_pairs(self) -> int:
        return sum(s.held_pairs for s in self.stages)

    @property
    def bottleneck_ms(self) -> float:
        """The slowest stage's ``stage_ms``: what the throughput objective minimises."""
        return max(s.stage_ms for s in self.stages)


def bounds_ok(p: Problem, cuts: list[int] | tuple[int, ...]) -> bool:
    """Cuts strictly increasing inside (0, L) with one per stage boundary."""
    b = [0, *cuts, p.n_layers]
    return len(b) == p.n_gpus + 1 and all(x < y for x, y in pairwise(b))


def evaluate(p: Problem, gpus: list[int] | tuple[int, ...], cuts: list[int] | tuple[int, ...]) -> Placement:
    """Walk each stage and add up ``window_ms`` and ``held_mass`` in floating point."""
    bounds = [0, *cuts, p.n_layers]
    stages = []
    for s, g in enumerate(gpus):
        a, b = bounds[s], bounds[s + 1]
        w = walk_range(p, g, a, b)
        held_mass = float(p.mass[w.held].sum())
        compute_ms = (b - a) * float(p.layer_ms[g])
        stages.append(
            Stage(
                gpu=int(g),
                name=p.gpu_names[g],
                start=a,
                end=b,
                room_bytes=w.room,
                cache_bytes=int(p.pair_bytes[w.held].sum()),
                held_pairs=w.n_held,
                visible_pairs=len(w.visible),
                held_mass=held_mass,
                compute_ms=compute_ms,
                stage_ms=compute_ms + p.miss_ms * (float(p.mass[w.visible].sum()) - held_mass),
            )
        )
    held = float(np.sum([s.held_mass for s in stages]))
    window = sum(s.compute_ms for s in stages) + p.handoff_ms * (len(stages) - 1) + p.miss_ms * (1.0 - held)
    return Placement(stages=stages, window_ms=window, held_mass=held)


def feasible(p: Problem, plan: Placement) -> bool:
    """Every SPEC 3 rule: layer counts within each GPU's limits and every room >= 0."""
    for i, s in enumerate(plan.stages):
        n = s.end - s.start
        low = max(int(p.min_layers[s.gpu]), p.first_stage_min_layers if i == 0 else 1)
        if not (low <= n <= p.max_layers[s.gpu]) or not s.fits:
            return False
    return sorted(plan.gpus) == list(range(p.n_gpus))
