"""The product's solver: CP-SAT over the arcs as a path through the layer boundaries.

Data -> model -> solve -> read back, as in OR-Tools' samples. One Boolean per arc (GPU, start,
end); every GPU takes exactly one arc; flow is conserved at every inner boundary, so the chosen
arcs form one path from layer 0 to layer L. With the order as given, GPU s must hand over to GPU
s+1 at the same boundary. With a free order, identical GPUs start in rig order (symmetry).

The objective is lexicographic, solved as a chain of solves on the same model, each fixing the
level it proved before the next: held mass (mass objective), time (all plans within the best
whole 1e-6 ms tie), the bottleneck, the cut list (a binary number over the boundaries, at most 60
at a time), then the GPU order (free order).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from ortools.sat.python import cp_model

from solver.arcs import Arcs
from solver.solvers import Limits, Solution

CHUNK_BITS = 60


class _Progress(cp_model.CpSolverSolutionCallback):
    """Reports each improving solution's objective and the bound to a callable."""

    def __init__(self, report: Callable[[float, float], None]):
        super().__init__()
        self._report = report

    def on_solution_callback(self) -> None:
        self._report(self.objective_value, self.best_objective_bound)


def _build(arcs: Arcs) -> tuple[cp_model.CpModel, list[cp_model.IntVar]]:
    """The path model: variables, one-arc-per-GPU, flow conservation and symmetry breaking."""
    m = cp_model.CpModel()
    x = [m.new_bool_var(f"x{i}") for i in range(len(arcs))]
    n, k = arcs.n_layers, arcs.n_gpus
    by_gpu = [np.flatnonzero(arcs.gpu == g) for g in range(k)]
    for ids in by_gpu:
        m.add_exactly_one([x[i] for i in ids])
    if arcs.order == "as-given":
        for g in range(1, k):
            ends = {int(b): [] for b in arcs.end[by_gpu[g - 1]]}
            for i in by_gpu[g - 1]:
                ends[int(arcs.end[i])].append(x[i])
            starts: dict[int, list] = {}
            for i in by_gpu[g]:
                starts.setdefault(int(arcs.start[i]), []).append(x[i])
            for p in set(ends) | set(starts):
                m.add(sum(ends.get(p, [])) == sum(starts.get(p, [])))
    else:
        m.add(sum(x[i] for i in np.flatnonzero(arcs.start == 0)) == 1)
        for p in range(1, n):
            into = [x[i] for i in np.flatnonzero(arcs.end == p)]
            out = [x[i] for i in np.flatnonzero(arcs.start == p)]
            if into or out:
                m.add(sum(into) == sum(out))
        for i, j in arcs.twins:
            m.add(_expr(x, by_gpu[i], arcs.start[by_gpu[i]]) < _expr(x, by_gpu[j], arcs.start[by_gpu[j]]))
    return m, x


def _expr(x: list, ids: np.ndarray, coeffs: np.ndarray) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.weighted_sum([x[i] for i in ids], [int(c) for c in coeffs])


class _Chain:
    """Runs the lexicographic solves on one model under one deadline."""

    def __init__(self, arcs: Arcs, limits: Limits):
        self.arcs = arcs
        self.limits = limits
        self.model, self.x = _build(arcs)
        self.deadline = None if limits.time_limit is None else time.perf_counter() + limits.time_limit
        self.values: np.ndarray | None = None
        self.proven = True
        self.bound: float | None = None
        self.solves = 0

    def _solver(self) -> cp_model.CpSolver:
        """CP-SAT with presolve and probing off.

        CP-SAT 9.15's presolve returns wrong answers on some of these models (a feasible model
        called INFEASIBLE, and wrong optima; google/or-tools#5274), which the random agreement
        tests caught; and probing spends ~0.5 s adding 500K binary clauses to a model whose LP
        relaxation is already tight. Without both, the box solves in milliseconds.
        """
        s = cp_model.CpSolver()
        s.parameters.num_workers = self.limits.workers
        s.parameters.random_seed = self.limits.seed
        s.parameters.cp_model_presolve = False
        s.parameters.cp_model_probing_level = 0
        if self.deadline is not None:
            s.parameters.max_time_in_seconds = max(0.01, self.deadline - time.perf_counter())
        return s

    def step(self, expr: cp_model.LinearExpr, sense: str, progress: bool = False) -> int | None:
        """Optimise ``expr``; return its proven value, or None (infeasible, or stopped unproven)."""
        m = self.model
        (m.minimize if sense == "min" else m.maximize)(expr)
        if self.values is not None:
            m.clear_hints()
            for var, val in zip(self.x, self.values):
                m.add_hint(var, bool(val))
        cb = _Progress(self.limits.progress) if progress and self.limits.progress else None
        s = self._solver()
        status = s.solve(m, cb)
        self.solves += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if status == cp_model.MODEL_INVALID:
                raise RuntimeError(f"CP-SAT rejected the model: {m.validate()}")
            self.proven = status == cp_model.INFEASIBLE and self.values is None
            return None
        self.values = np.array([s.boolean_value(v) for v in self.x], dtype=bool)
        if status != cp_model.OPTIMAL:
            self.proven = False
            self.bound = s.best_objective_bound
            return None
        return int(s.value(expr))


def solve_cpsat(arcs: Arcs, limits: Limits | None = None, hint: Solution | None = None) -> Solution:
    """The exact plan by CP-SAT, or the best found when ``limits.time_limit`` stops the proof."""
    t0 = time.perf_counter()
    limits = limits or Limits()
    if not len(arcs):
        return Solution("cp-sat", "infeasible", info={"wall_ms": 0.0, "solves": 0})
    chain = _Chain(arcs, limits)
    x = chain.x
    every = np.arange(len(arcs))
    if hint is not None and hint.found:
        chain.values = _plan_values(arcs, hint)
    time_expr = _expr(x, every, arcs.time)
    done = True
    bound = None
    if arcs.objective == "mass":
        mass_expr = _expr(x, every, arcs.mass)
        best_mass = chain.step(mass_expr, "max", progress=True)
        done = best_mass is not None
        bound = best_mass / 10**12 if done else (chain.bound / 10**12 if chain.bound is not None else None)
        if done:
            chain.model.add(mass_expr >= best_mass)
    if done:
        best_time = chain.step(time_expr, "min", progress=arcs.objective == "time")
        done = best_time is not None
        if arcs.objective == "time":
            bound = (
                arcs.window_ms(best_time)
                if done
                else (arcs.window_ms(int(chain.bound)) if chain.bound is not None else None)
            )
        if done:
            chain.model.add(time_expr <= arcs.time_cap(best_time))
    if done:
        done = _tie_breaks(chain)
    info = {"wall_ms": (time.perf_counter() - t0) * 1e3, "solves": chain.solves}
    if chain.values is None:
        status = "infeasible" if chain.proven else "unknown"
        return Solution("cp-sat", status, info=info)
    gpus, cuts = _read_plan(arcs, chain.values)
    return Solution("cp-sat", "optimal" if done and chain.proven else "feasible", gpus, cuts, bound, info)


def _tie_breaks(chain: _Chain) -> bool:
    """Bottleneck, then cut list, then GPU order; False if the time limit cut the chain short."""
    arcs, m, x = chain.arcs, chain.model, chain.x
    k, n = arcs.n_gpus, arcs.n_layers
    z = m.new_int_var(0, int(arcs.bottleneck.max()), "bottleneck")
    for g in range(k):
        ids = np.flatnonzero(arcs.gpu == g)
        m.add(z >= _expr(x, ids, arcs.bottleneck[ids]))
    best = chain.step(z, "min")
    if best is None:
        return False
    m.add(z <= best)
    starts = [p for p in range(1, n) if (arcs.start == p).any()]
    used = {
        p: _expr(x, np.flatnonzero(arcs.start == p), np.ones((arcs.start == p).sum(), np.int64))
        for p in starts
    }
    for lo in range(0, len(starts), CHUNK_BITS):
        chunk = starts[lo : lo + CHUNK_BITS]
        weights = [1 << (len(chunk) - 1 - i) for i in range(len(chunk))]
        u = [m.new_bool_var(f"u{p}") for p in chunk]
        for var, p in zip(u, chunk):
            m.add(var == used[p])
        best = chain.step(cp_model.LinearExpr.weighted_sum(u, weights), "max")
        if best is None:
            return False
        for i, var in enumerate(u):
            m.add(var == (best >> (len(chunk) - 1 - i) & 1))
    if arcs.order == "auto":
        _, cuts = _read_plan(arcs, chain.values)
        starts_of = (0, *cuts)
        stage_gpu = []
        for s, p in enumerate(starts_of):
            ids = np.flatnonzero(arcs.start == p)
            var = m.new_int_var(0, k - 1, f"g{s}")
            m.add(var == _expr(x, ids, arcs.gpu[ids]))
            stage_gpu.append(var)
        per_chunk = max(1, int(CHUNK_BITS // np.log2(max(k, 2))))
        for lo in range(0, k, per_chunk):
            chunk = stage_gpu[lo : lo + per_chunk]
            weights = [k ** (len(chunk) - 1 - j) for j in range(len(chunk))]
            expr = cp_model.LinearExpr.weighted_sum(chunk, weights)
            best = chain.step(expr, "min")
            if best is None:
                return False
            m.add(expr == best)
    return True


def _plan_values(arcs: Arcs, plan: Solution) -> np.ndarray:
    """The arc Booleans of a known plan (a hint)."""
    bounds = (0, *plan.cuts, arcs.n_layers)
    chosen = np.zeros(len(arcs), dtype=bool)
    for s, g in enumerate(plan.gpus):
        chosen |= (arcs.gpu == g) & (arcs.start == bounds[s]) & (arcs.end == bounds[s + 1])
    return chosen


def _read_plan(arcs: Arcs, values: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Chosen arcs -> (GPU of each stage, cut points)."""
    ids = np.flatnonzero(values)
    ids = ids[np.argsort(arcs.start[ids])]
    return tuple(int(g) for g in arcs.gpu[ids]), tuple(int(a) for a in arcs.start[ids][1:])
