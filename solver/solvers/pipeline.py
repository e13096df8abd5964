"""The request objective's pipelined prompt: a plan whose stages keep every expert on their GPUs
overlaps the prompt's micro-batches across its stages, so its prompt takes the flow shop's makespan,
not the sum of its stages' times the arcs carry.

The makespan is no sum over arcs, so the path solvers (DP, CP-SAT) answer the table as if every
prompt ran stage after stage, which is exact for every plan that leaves experts in host memory and
too long for those that do not. Enumeration (``solver.solvers.exhaustive``) scores the makespan
itself, and its ``settle`` sets the path solvers' answer against the best plan that pipelines.
"""

from __future__ import annotations

import numpy as np

from solver.solvers.arcs import Arcs


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
