"""Why no placement fits, in one sentence naming the binding fact."""

from __future__ import annotations

import numpy as np

from solver.problem import Problem
from solver.rangewalk import RangeWalk
from solver.units import format_size


def _gpu(p: Problem, g: int) -> str:
    return f"GPU {g} ({p.gpu_names[g]})"


def _layers(n: int) -> str:
    return f"{n} layer" if n == 1 else f"{n} layers"


def explain(p: Problem, walk: RangeWalk) -> str:
    """The first rule that makes every placement infeasible, checked from simplest to subtlest."""
    n, k = p.n_layers, p.n_gpus
    if k > n:
        return f"the rig has {k} GPUs but the model only {_layers(n)}; every GPU must run at least one layer"
    firsts = np.maximum(p.min_layers, p.first_stage_min_layers)
    if p.order == "as-given":
        least = int(firsts[0] + p.min_layers[1:].sum())
    else:
        least = int(p.min_layers.sum() + (firsts - p.min_layers).min())
    if least > n:
        return (
            f"the GPUs' minimum layers (with first_stage_min_layers {p.first_stage_min_layers}) "
            f"add up to {least}, more than the model's {n}"
        )
    if int(p.max_layers.sum()) < n:
        return f"the GPUs' max_layers add up to {int(p.max_layers.sum())}, fewer than the model's {n} layers"
    avail = p.free - p.reserve
    for g in range(k):
        need = _least_need(p, g)
        if need is not None and need > int(avail[g]):
            return (
                f"{_gpu(p, g)} cannot hold its minimum of {_layers(int(p.min_layers[g]))}: it needs "
                f"{format_size(need)} and has {format_size(int(avail[g]))} after its reserve"
            )
    weights = int(p.layer_bytes.sum()) + k * p.stage_bytes + p.first_stage_bytes + p.last_stage_bytes
    total = int(np.maximum(avail, 0).sum())
    if weights > total:
        return (
            f"the {n} layers need {format_size(weights)} for weights, session and stage buffers; "
            f"the {k} GPUs have {format_size(total)} free after reserves"
        )
    fits = (walk.room >= 0).any(axis=(1, 2))
    for g in np.flatnonzero(~fits):
        return f"{_gpu(p, int(g))} cannot hold any range of layers within its memory"
    return (
        f"no way to cut the {n} layers over the {k} GPUs gives every GPU a range that fits its memory "
        f"and its layer limits"
    )


def _least_need(p: Problem, g: int) -> int | None:
    """Fewest bytes GPU g needs for its shortest allowed range, over the positions it may take."""
    n, k, m = p.n_layers, p.n_gpus, int(p.min_layers[g])
    needs = []
    for a in range(n):
        b = a + (max(m, p.first_stage_min_layers) if a == 0 else m)
        if p.order == "as-given":
            if g == k - 1:
                b = n
            if (a == 0) != (g == 0) or (b == n) != (g == k - 1):
                continue
        if b <= n:
            needs.append(int(p.free[g] - p.reserve[g]) - p.room(g, a, b))
    return min(needs) if needs else None
