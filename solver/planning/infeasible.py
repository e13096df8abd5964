"""Why no placement fits, in one sentence naming the binding fact."""

from __future__ import annotations

import time

import numpy as np

from solver import interrupt
from solver.engines import Table, engine_of
from solver.problem.problem import Problem, host_room_words
from solver.solvers.arcs import Arcs
from solver.solvers.paths import best_through
from solver.solvers.policy import POLICY, Policy
from solver.units import format_size


def _gpu(p: Problem, g: int) -> str:
    name = p.gpu_names[g]
    return f"GPU {g}" if name == f"GPU {g}" else f"GPU {g} ({name})"


def _layers(n: int) -> str:
    return f"{n} layer" if n == 1 else f"{n} layers"


def _span(a: int, b: int) -> str:
    """Layers [a, b) as the report shows them: ``layers 4-7`` or ``layer 3``."""
    return f"layer {a}" if b - a == 1 else f"layers {a}-{b - 1}"


def allowed(p: Problem) -> np.ndarray:
    """``ok[g, a, b]``: GPU g may run layers [a, b) by its layer limits and, as given, its position."""
    n, k = p.n_layers, p.n_gpus
    a = np.arange(n + 1)[None, :, None]
    b = np.arange(n + 1)[None, None, :]
    g = np.arange(k)[:, None, None]
    low = np.where(a == 0, np.maximum(p.min_layers, p.first_stage_min_layers)[g], p.min_layers[g])
    ok = (b - a >= low) & (b - a <= p.max_layers[g])
    if p.order == "as-given":
        ok &= ((a == 0) == (g == 0)) & ((b == n) == (g == k - 1))
    return ok


def explain(
    p: Problem,
    table: Table,
    arcs: Arcs | None = None,
    time_left: float | None = None,
    policy: Policy = POLICY,
) -> str:
    """The first rule that makes every placement infeasible, checked from simplest to subtlest.

    With ``arcs``, a host_memory limit no placement can meet is named too (the least any placement
    leaves in host memory is a DP bound over the arcs, exact for the order as given). ``time_left``
    caps the conflicting-rules search (at least 0.1 s).
    """
    n, k = p.n_layers, p.n_gpus
    if k > n:
        return f"the rig has {k} GPUs but the model only {_layers(n)}; every GPU must run at least one layer"
    if p.first_stage_min_layers > n:
        return f"first_stage_min_layers is {p.first_stage_min_layers}, more than the model's {_layers(n)}"
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
    ok = allowed(p)
    if not ok[:, 0, :].any():
        first = "GPU 0's max_layers is" if p.order == "as-given" else "the largest max_layers is"
        most = int(p.max_layers[0] if p.order == "as-given" else p.max_layers.max())
        return (
            f"the first stage needs at least {_layers(p.first_stage_min_layers)} (first_stage_min_layers) "
            f"but {first} {most}"
        )
    need = table.need
    avail = [int(p.free[g]) - int(p.reserve[g]) for g in range(k)]  # Python ints: frees near 2^63 add up
    for g in range(k):
        cheapest = np.where(ok[g], need, np.iinfo(np.int64).max)
        a, b = (int(i) for i in np.unravel_index(int(np.argmin(cheapest)), cheapest.shape))
        if int(need[a, b]) > avail[g]:
            return (
                f"{_gpu(p, g)} cannot hold its minimum of {_layers(b - a)} ({_span(a, b)}): it needs "
                f"{format_size(int(need[a, b]))} and has {format_size(avail[g])} after its reserve"
            )
    weights = int(need[0, n]) + (k - 1) * p.stage_bytes  # the whole model as one range, k stages' buffers
    total = sum(max(x, 0) for x in avail)
    if weights > total:
        what = engine_of(p).holds
        return (
            f"the {n} layers need {format_size(weights)} for {what} and stage buffers; "
            f"the {k} GPUs have {format_size(total)} free after reserves"
        )
    length = np.arange(n + 1)[None, :] - np.arange(n + 1)[:, None]
    longest = np.where(ok & (table.room >= 0), length[None], 0).max(axis=(1, 2))
    if longest.sum() < n:
        each = ", ".join(f"{int(v)} on {_gpu(p, g)}" for g, v in enumerate(longest))
        return (
            f"the GPUs can hold at most {int(longest.sum())} of the {n} layers between them "
            f"(the longest range each fits: {each})"
        )
    if arcs is not None and arcs.host_limit is not None and len(arcs):
        least = int(best_through(arcs, arcs.host, "min", policy.exact_free_order_states).min())
        if least > arcs.host_limit:
            return (
                f"every placement leaves at least {format_size(least)} of experts in host memory, more "
                f"than {host_room_words(p)}"
            )
    most = policy.core_time_s
    return _core_reason(p, table, most if time_left is None else min(most, max(time_left, 0.1)))


def _core_reason(p: Problem, table: Table, time_limit: float) -> str:
    """Name the rules that conflict, from CP-SAT's sufficient assumptions for infeasibility.

    One assumption per GPU says "its memory limit holds", one per GPU "its layer limits hold",
    and one "first_stage_min_layers holds". The core is shrunk by deletion to a minimal set: each
    rule in it is needed for the conflict, so relaxing any one of them makes a plan possible. All
    solves share ``time_limit`` seconds; a rule whose test runs out of time stays in the set, which
    is then still a conflict but no longer claimed minimal.
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
        "memory": table.room[g, a, b] < 0,
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
    deadline = time.perf_counter() + time_limit
    timed_out = False

    def infeasible(active: list[int]) -> bool:
        nonlocal timed_out
        model.clear_assumptions()
        model.add_assumptions([lits[r] for r in active])
        solver.parameters.max_time_in_seconds = max(0.05, deadline - time.perf_counter())
        status = interrupt.solve(solver, model)
        timed_out |= status == cp_model.UNKNOWN
        return status == cp_model.INFEASIBLE

    core = list(range(len(rules)))
    if not infeasible(core):
        if p.host_memory is not None:  # the GPUs' own rules admit a placement: the host limit binds
            return (
                f"every placement that fits the GPUs leaves more expert weights in host memory than "
                f"{host_room_words(p)} allows"
            )
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
    if timed_out:
        return f"no split respects {listed} at once"
    return f"no split respects {listed} at once; relaxing any one of them makes a plan possible"
