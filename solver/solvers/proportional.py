"""The heuristic engines use: cuts in proportion to speed (``1/layer_ms``), blind to memory."""

from __future__ import annotations

import math

from solver.solvers import Limits, Solution
from solver.solvers.arcs import Arcs


def round_half_away(x: float) -> int:
    """Round to the nearest integer, halves away from zero."""
    return math.floor(abs(x) + 0.5) * (1 if x >= 0 else -1)


def proportional_cuts(layer_ms: list[float], n_layers: int, first_stage_min_layers: int) -> list[int] | None:
    """``cut_i = clamp(round(acc_i / total * L), lo_i, hi_i)`` with stage s on GPU s.

    None when some ``lo_i > hi_i``: the k stages cannot be cut from L layers at all, so there is no
    proportional split (only ``lo_0 = first_stage_min_layers`` can exceed ``hi_0 = L - (k-1)``;
    every later ``lo_i`` is at most its ``hi_i``).
    """
    k = len(layer_ms)
    inv = [1.0 / t for t in layer_ms]
    total = sum(inv)
    cuts: list[int] = []
    acc = 0.0
    for i in range(k - 1):
        acc += inv[i]
        lo = first_stage_min_layers if i == 0 else cuts[-1] + 1
        hi = n_layers - (k - 1 - i)
        if lo > hi:
            return None
        cuts.append(min(max(round_half_away(acc / total * n_layers), lo), hi))
    return cuts


def no_split_reason(n_gpus: int, n_layers: int, first_stage_min_layers: int) -> str:
    """Why there is no proportional split, in one sentence."""
    if n_gpus > n_layers:
        return f"no proportional split: {n_gpus} GPUs cannot each run a layer of {n_layers}"
    return (
        f"no proportional split: a first stage of at least {first_stage_min_layers} layers "
        f"(first_stage_min_layers) leaves fewer than one layer for each of the other {n_gpus - 1} GPUs"
    )


def solve_proportional(arcs: Arcs, limits: Limits | None = None) -> Solution:
    """The proportional split in rig order, blind to memory (its stages need not be arcs).

    Status "heuristic" with its cuts, or "infeasible" with a ``reason`` when no split exists.
    """
    cuts = proportional_cuts([float(t) for t in arcs.layer_ms], arcs.n_layers, arcs.first_stage_min_layers)
    if cuts is None:
        reason = no_split_reason(arcs.n_gpus, arcs.n_layers, arcs.first_stage_min_layers)
        return Solution("proportional", "infeasible", reason=reason)
    return Solution("proportional", "heuristic", tuple(range(arcs.n_gpus)), tuple(cuts))
