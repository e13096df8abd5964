"""The heuristic engines use: cuts in proportion to speed (``1/layer_ms``), blind to memory (SPEC 3)."""

from __future__ import annotations

import math

from solver.arcs import Arcs
from solver.solvers import Limits, Solution, plan_arcs


def round_half_away(x: float) -> int:
    """Round to the nearest integer, halves away from zero."""
    return math.floor(abs(x) + 0.5) * (1 if x >= 0 else -1)


def proportional_cuts(layer_ms: list[float], n_layers: int, first_stage_min_layers: int) -> list[int]:
    """``cut_i = clamp(round(acc_i / total * L), lo_i, hi_i)`` with stage s on GPU s."""
    k = len(layer_ms)
    inv = [1.0 / t for t in layer_ms]
    total = sum(inv)
    cuts: list[int] = []
    acc = 0.0
    for i in range(k - 1):
        acc += inv[i]
        lo = first_stage_min_layers if i == 0 else cuts[-1] + 1
        hi = n_layers - (k - 1 - i)
        cuts.append(min(max(round_half_away(acc / total * n_layers), lo), hi))
    return cuts


def solve_proportional(arcs: Arcs, limits: Limits | None = None) -> Solution:
    """The proportional split in rig order; ``info['feasible']`` says if every stage is an arc."""
    cuts = tuple(
        proportional_cuts([float(t) for t in arcs.layer_ms], arcs.n_layers, arcs.first_stage_min_layers)
    )
    gpus = tuple(range(arcs.n_gpus))
    feasible = bool((plan_arcs(arcs, gpus, cuts) >= 0).all())
    return Solution("proportional", "heuristic", gpus, cuts, info={"feasible": feasible})
