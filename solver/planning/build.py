"""The engine's (GPU, range) table pruned to the arcs a feasible plan can use, weighed in integers.

The solvers read only the result (``solver.solvers.arcs.Arcs``); building it asks the engine for its
worst window (the time scale) and its weights, so it lives here, above both.
"""

from __future__ import annotations

import numpy as np

from solver.engines import Table, engine_of
from solver.problem.problem import Problem
from solver.problem.scales import COARSE_TIME_SCALE, COEFF_BUDGET, FINE_TIME_SCALE
from solver.solvers.arcs import Arcs, Objective


def _time_scale(p: Problem, n_arcs: int, worst_ms: float | None = None) -> int:
    """Largest power of ten <= 10^12 that keeps CP-SAT's objective sums within COEFF_BUDGET
    (``worst_ms``: more than any plan's objective, by default the engine's worst window).

    problem.resolve refuses rigs where even 10^6 would not fit, so files never reach the error.
    """
    worst_ms = engine_of(p).worst_window_ms(p) if worst_ms is None else worst_ms
    scale = FINE_TIME_SCALE
    while scale > COARSE_TIME_SCALE and worst_ms * scale * max(n_arcs, 1) >= COEFF_BUDGET:
        scale //= 10
    if worst_ms * scale * max(n_arcs, 1) >= COEFF_BUDGET:
        raise ValueError("the rig's times are too large to score in whole units of 1e-6 ms")
    return scale


def _reachable(
    keep: np.ndarray, gpu: np.ndarray, start: np.ndarray, end: np.ndarray, p: Problem
) -> np.ndarray:
    """Keep only arcs on some path from layer 0 to layer L of at most k arcs.

    With the order as given, stage s is GPU s, so reachability is tracked per stage and each
    stage's arcs are visited once; a free order repeats whole passes until nothing changes.
    """
    n, k = p.n_layers, p.n_gpus
    layered = p.order == "as-given" and not p.idle_gpus
    stage = gpu if layered else np.zeros_like(gpu)
    nxt = stage + 1 if layered else stage
    rows = k + 1 if layered else 1
    fwd = np.zeros((rows, n + 1), dtype=bool)
    bwd = np.zeros((rows, n + 1), dtype=bool)
    fwd[0, 0] = True
    bwd[rows - 1, n] = True
    if layered:
        by_stage = np.split(
            np.flatnonzero(keep)[np.argsort(gpu[keep], kind="stable")],
            np.cumsum(np.bincount(gpu[keep], minlength=k))[:-1],
        )
        for s in range(k):
            ids = by_stage[s]
            fwd[s + 1, end[ids[fwd[s, start[ids]]]]] = True
        for s in range(k - 1, -1, -1):
            ids = by_stage[s]
            bwd[s, start[ids[bwd[s + 1, end[ids]]]]] = True
        return keep & fwd[stage, start] & bwd[nxt, end]
    ids = np.flatnonzero(keep)
    for _ in range(k):
        before = fwd.sum() + bwd.sum()
        fwd[0, end[ids[fwd[0, start[ids]]]]] = True
        bwd[0, start[ids[bwd[0, end[ids]]]]] = True
        if fwd.sum() + bwd.sum() == before:
            break
    return keep & fwd[stage, start] & bwd[nxt, end]


def kept_arcs(p: Problem, room: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(GPU, start, end) of every range that fits (``room`` >= 0), keeps the layer limits and lies on
    some path from layer 0 to layer L (as given: exactly the ranges of some split; a free order may
    count a GPU twice). None of them: no split fits."""
    n, k = p.n_layers, p.n_gpus
    g, a, b = np.nonzero(room >= 0)
    length = b - a
    minlen = np.where(a == 0, np.maximum(p.min_layers[g], p.first_stage_min_layers), p.min_layers[g])
    keep = (length >= minlen) & (length <= p.max_layers[g])
    first_min = np.maximum(p.min_layers, p.first_stage_min_layers)
    if p.idle_gpus:  # any subset of the others may cover the rest
        others_max = p.max_layers.sum() - p.max_layers[g]
        keep &= a + (n - b) <= others_max
    elif p.order == "as-given":
        head_min = np.concatenate([[0], np.cumsum(np.r_[first_min[:1], p.min_layers[1:]])])[g]
        head_max = np.concatenate([[0], np.cumsum(p.max_layers)])[g]
        tail = np.concatenate([np.cumsum(p.min_layers[::-1])[::-1], [0]])
        tail_max = np.concatenate([np.cumsum(p.max_layers[::-1])[::-1], [0]])
        keep &= (a == 0) == (g == 0)
        keep &= (b == n) == (g == k - 1)
        keep &= (a >= head_min) & (a <= head_max)
        keep &= (n - b >= tail[g + 1]) & (n - b <= tail_max[g + 1])
    else:
        others_min = p.min_layers.sum() - p.min_layers[g]
        others_max = p.max_layers.sum() - p.max_layers[g]
        keep &= (a + (n - b) >= others_min) & (a + (n - b) <= others_max)
        keep &= (k > 1) | ((a == 0) & (b == n))
    keep = _reachable(keep, g, a, b, p) if keep.any() else keep
    return g[keep], a[keep], b[keep]


def build_arcs(p: Problem, table: Table) -> Arcs:
    """Prune the engine's (GPU, range) table to the arcs a feasible plan can use and weigh them."""
    n, k = p.n_layers, p.n_gpus
    g, a, b = kept_arcs(p, table.room)
    if p.held_only:  # a range whose fill leaves a unit in host memory is no arc of this problem's plans
        host = table.weigh(g, a, b, FINE_TIME_SCALE, False).host > 0
        room = np.array(table.room, copy=True)
        room[g[host], a[host], b[host]] = -1
        g, a, b = kept_arcs(p, room)
    request = p.objective == "request"
    prompt = _prompt_ms(p, table, g, a, b) if request else None
    worst = None if prompt is None else _request_worst_ms(p, prompt)
    scale = _time_scale(p, len(g), worst)
    objective = Objective.TIME if request else Objective(p.objective)
    w = table.weigh(g, a, b, scale, objective.maximises)
    hop = round(p.handoff_ms * scale)
    entry = round(p.network_ms * scale) - hop if len(p.host_names) > 1 else 0
    hosts = len(set(p.hosts.tolist()))
    if p.idle_gpus:
        time = w.time + hop
        const = table.const_units(scale) - hop - entry
    else:
        time = w.time
        const = table.const_units(scale) + hop * (k - 1) + entry * (hosts - 1)
    batches = None
    if prompt is not None:  # one request: generate x the decode window, plus each stage's prompt time
        tokens = p.generate or 0
        batches = np.rint(prompt * scale).astype(np.int64)
        time = tokens * time + batches.sum(axis=1)
        const, entry = tokens * const, tokens * entry
    return Arcs(
        n_layers=n,
        n_gpus=k,
        order=p.order,
        objective=objective,
        first_stage_min_layers=p.first_stage_min_layers,
        layer_ms=p.layer_ms,
        gpu=g,
        start=a,
        end=b,
        time=time,
        mass=w.mass,
        bottleneck=w.gpu,
        const_time=const,
        time_scale=scale,
        twins=_twins(p),
        stage=w.gpu + w.missed,
        spare=w.spare,
        host=w.host,
        host_limit=p.host_room,
        gpu_host=p.hosts.astype(np.int64),
        idle=p.idle_gpus,
        entry_units=entry if p.idle_gpus else 0,
        prompt=batches,
    )


def _prompt_ms(p: Problem, table: Table, g: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each arc's ms per micro-batch of the prompt, (arcs, micro-batches), with its stage's experts in
    host memory as the table's fill leaves them."""
    host = table.weigh(g, a, b, FINE_TIME_SCALE, False).host
    return engine_of(p).prompt_arc_ms(p, g, a, b, host)


def _request_worst_ms(p: Problem, prompt: np.ndarray) -> float:
    """More than any plan's request time: generate x the worst window, plus k of the slowest stage
    prompts."""
    slowest = float(prompt.sum(axis=1).max(initial=0.0))
    return (p.generate or 0) * engine_of(p).worst_window_ms(p) + p.n_gpus * slowest + 1.0


def _twins(p: Problem) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, of identical GPUs next in rig order within their class."""
    if p.order != "auto":
        return []
    keys = [
        (
            int(p.free[g]),
            int(p.reserve[g]),
            float(p.layer_ms[g]),
            int(p.min_layers[g]),
            int(p.max_layers[g]),
            int(p.hosts[g]),
            *p.engine_fields.gpu_key(g),
        )
        for g in range(p.n_gpus)
    ]
    last: dict[tuple, int] = {}
    out = []
    for g, key in enumerate(keys):
        if key in last:
            out.append((last[key], g))
        last[key] = g
    return out
