"""The request objective's pipelined prompt: a plan whose stages keep every expert on their GPUs
overlaps the prompt's micro-batches across its stages, so its prompt takes the flow shop's makespan,
not the sum of its stages' times the arcs carry.

The makespan is no sum over arcs, so the path solvers (DP, CP-SAT) answer the table as if every
prompt ran stage after stage, which is exact for every plan that leaves experts in host memory and
too long for those that do not. ``settle`` then scores the plans that do not exhaustively, on the
arcs that leave nothing in host memory, and keeps the better of the two answers by the same key as
enumeration (``solver.solvers.exhaustive``), which scores the makespan itself.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from solver.solvers import Limits, Solution, TooLarge
from solver.solvers.arcs import Arcs, subset
from solver.solvers.policy import POLICY, Policy


def makespan(prompt: np.ndarray) -> np.ndarray:
    """Per plan, the last micro-batch's finish on the last stage: ``prompt`` (plans, stages, J) in
    stage order; finish[s][j] = max(finish[s-1][j], finish[s][j-1]) + t[s][j]."""
    n, stages, batches = prompt.shape
    done = np.zeros((n, stages), dtype=np.int64)
    for j in range(batches):
        prev = np.zeros(n, dtype=np.int64)
        for s in range(stages):
            done[:, s] = np.maximum(done[:, s], prev) + prompt[:, s, j]
            prev = done[:, s]
    return done[:, -1] if stages else np.zeros(n, dtype=np.int64)


def plan_times(arcs: Arcs, ids: np.ndarray) -> np.ndarray:
    """Each plan's summed arc time (``ids`` (plans, stages), arc numbers in stage order), with the
    makespan in place of the prompt's sum where the plan pipelines its prompt."""
    total = arcs.time[ids].sum(axis=1)
    if arcs.prompt is None or ids.shape[1] < 2 or arcs.prompt.shape[1] < 2:
        return total
    piped = (arcs.host[ids] == 0).all(axis=1)
    if piped.any():
        rows = arcs.prompt[ids[piped]]
        total[piped] += makespan(rows) - rows.sum(axis=(1, 2))
    return total


def settle(arcs: Arcs, solution: Solution, limits: Limits | None = None, policy: Policy = POLICY) -> Solution:
    """The path solvers' answer on a request table, set against the best plan that pipelines its
    prompt (enumerated on the arcs that leave nothing in host memory); unchanged on other tables.
    Past ``policy.max_placements`` such placements the answer comes back unproven, with the reason."""
    from solver.solvers.exhaustive import plan_key, solve_exhaustive

    if arcs.prompt is None or arcs.prompt.shape[1] < 2 or not solution.found or not (arcs.host == 0).any():
        return solution
    resident = subset(arcs, arcs.host == 0)
    try:
        piped = solve_exhaustive(resident, limits, policy)
    except TooLarge as exc:
        return dataclasses.replace(
            solution,
            status="feasible",
            reason=f"plans that keep every expert on the GPUs pipeline the prompt and are scored one by "
            f"one: {exc}",
        )
    if not piped.found:
        return solution
    if plan_key(arcs, piped.gpus, piped.cuts) < plan_key(arcs, solution.gpus, solution.cuts):
        return dataclasses.replace(solution, gpus=piped.gpus, cuts=piped.cuts, bound=None)
    return solution
