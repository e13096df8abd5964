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
        least = _least_need(p, g)
        if least is not None and least[0] > int(avail[g]):
            need, count = least
            return (
                f"{_gpu(p, g)} cannot hold its minimum of {_layers(count)}: it needs "
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
    longest = _longest_ranges(p, walk)
    if longest.sum() < n:
        each = ", ".join(f"{p.gpu_names[g]} {int(v)}" for g, v in enumerate(longest))
        return (
            f"the GPUs can hold at most {int(longest.sum())} of the {n} layers between them "
            f"(the longest range each fits: {each})"
        )
    return _core_reason(p, walk)


def _longest_ranges(p: Problem, walk: RangeWalk) -> np.ndarray:
    """Per GPU, the most layers of any range it can run within its memory and max_layers, shape (k,)."""
    n = p.n_layers
    length = np.arange(n + 1)[None, :] - np.arange(n + 1)[:, None]
    ok = (walk.room >= 0) & (length[None] <= p.max_layers[:, None, None])
    return np.where(ok, length[None], 0).max(axis=(1, 2))


def _core_reason(p: Problem, walk: RangeWalk, time_limit: float = 10.0) -> str:
    """Name the rules that conflict, from CP-SAT's sufficient assumptions for infeasibility.

    One assumption per GPU says "its memory limit holds", one per GPU "its layer limits hold",
    and one "first_stage_min_layers holds". The core is shrunk by deletion to a minimal set: each
    rule in it is needed for the conflict, so relaxing any one of them makes a plan possible.
    """
    from ortools.sat.python import cp_model

    n, k = p.n_layers, p.n_gpus
    g, a, b = np.nonzero(np.broadcast_to(np.triu(np.ones((n + 1, n + 1), dtype=bool), 1), (k, n + 1, n + 1)))
    length = b - a
    rules = [("memory", i) for i in range(k)] + [("layers", i) for i in range(k)] + [("first", -1)]
    model = cp_model.CpModel()
    lits = [model.new_bool_var(f"{kind}{i}") for kind, i in rules]
    x = [model.new_bool_var("") for _ in range(len(g))]
    broken = {
        "memory": walk.room[g, a, b] < 0,
        "layers": (length < p.min_layers[g]) | (length > p.max_layers[g]),
        "first": (a == 0) & (length < p.first_stage_min_layers),
    }
    for r, (kind, i) in enumerate(rules):
        hit = broken[kind] & ((g == i) if i >= 0 else True)
        for j in np.flatnonzero(hit):
            model.add_implication(x[j], lits[r].Not())
    for gi in range(k):
        model.add_exactly_one([x[j] for j in np.flatnonzero(g == gi)])
    if p.order == "as-given":
        model.add(sum(x[j] for j in np.flatnonzero((g == 0) & (a == 0))) == 1)
        model.add(sum(x[j] for j in np.flatnonzero((g == k - 1) & (b == n))) == 1)
        for gi in range(1, k):
            for q in range(1, n):
                into = [x[j] for j in np.flatnonzero((g == gi - 1) & (b == q))]
                out = [x[j] for j in np.flatnonzero((g == gi) & (a == q))]
                model.add(sum(into) == sum(out))
    else:
        model.add(sum(x[j] for j in np.flatnonzero(a == 0)) == 1)
        for q in range(1, n):
            model.add(sum(x[j] for j in np.flatnonzero(b == q)) == sum(x[j] for j in np.flatnonzero(a == q)))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = time_limit

    def infeasible(active: list[int]) -> bool:
        model.clear_assumptions()
        model.add_assumptions([lits[r] for r in active])
        return solver.solve(model) == cp_model.INFEASIBLE

    core = list(range(len(rules)))
    if not infeasible(core):
        return f"no way to cut the {n} layers over the {k} GPUs fits every GPU's memory and layer limits"
    for r in list(core):
        trial = [c for c in core if c != r]
        if infeasible(trial):
            core = trial
    names = []
    for i in sorted({rules[r][1] for r in core if rules[r][1] >= 0}):
        parts = [
            w
            for w, kind in (("memory", "memory"), ("layer limits", "layers"))
            if rules.index((kind, i)) in core
        ]
        names.append(f"{_gpu(p, i)}'s {' and '.join(parts)}")
    if rules.index(("first", -1)) in core:
        names.append(f"first_stage_min_layers {p.first_stage_min_layers}")
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"no split respects {listed} at once; relaxing any one of them makes a plan possible"


def _least_need(p: Problem, g: int) -> tuple[int, int] | None:
    """(bytes, layers) of GPU g's least demanding allowed range, over the positions it may take."""
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
            needs.append((int(p.free[g] - p.reserve[g]) - p.room(g, a, b), b - a))
    return min(needs) if needs else None
