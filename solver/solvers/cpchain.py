"""A chain of CP-SAT solves over a shrinking table: the incumbent, the levels fixed so far, one deadline.

Each solve builds the path model (``solver.solvers.cpmodel``) on the arcs still in play, adds the
levels already proven as constraints, and optimises one more; arcs that cannot belong to a plan
meeting the levels so far are dropped between solves (``prune``), so later levels solve small
models. ``threshold`` bisects a min-max or max-min level with feasibility solves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from solver import interrupt
from solver.problem.scales import MASS_SCALE
from solver.solvers import Limits, Solution, Stopped, cpmodel, usable
from solver.solvers.arcs import Arcs, Objective, subset
from solver.solvers.cpmodel import set_total
from solver.solvers.paths import best_through, narrow, through_any
from solver.solvers.policy import POLICY, Policy

Fix = Callable[[cp_model.CpModel, list, Arcs], None]


#: A level's objective: a linear expression, or one coefficient per arc variable.
Goal = Callable[[cp_model.CpModel, list, Arcs], cp_model.LinearExpr | np.ndarray]


class _Progress(cp_model.CpSolverSolutionCallback):
    """Reports each improving solution and the proven bound, in the user's units, to a callable."""

    def __init__(
        self, report: Callable[[str, float, float], None], what: str, scale: Callable[[float], float]
    ):
        super().__init__()
        self._report, self._what, self._scale = report, what, scale

    def on_solution_callback(self) -> None:
        self._report(self._what, self._scale(self.objective_value), self._scale(self.best_objective_bound))


@dataclass
class Chain:
    """The lexicographic solve: the arcs still in play, the levels fixed so far, one deadline."""

    root: Arcs
    arcs: Arcs
    limits: Limits
    ids: np.ndarray
    deadline: float | None
    chosen: np.ndarray | None = None
    fixes: list[Fix] = field(default_factory=list)
    proven: bool = True
    bound: float | None = None
    last_bound: float = 0.0
    solves: int = 0
    policy: Policy = POLICY

    def keep(self, mask: np.ndarray, spare_chosen: bool = True) -> None:
        """Drop the arcs outside ``mask`` (but, unless told, none the incumbent uses)."""
        if spare_chosen and self.chosen is not None:
            mask = mask | np.isin(self.ids, self.chosen)
        self.arcs = subset(self.arcs, mask)
        self.ids = self.ids[mask]

    def _solver(self) -> cp_model.CpSolver:
        """CP-SAT with presolve and probing off, and the whole LP built up front.

        CP-SAT 9.15's presolve returns wrong answers on some of these models (a feasible model
        called INFEASIBLE, and wrong optima; google/or-tools#5274), which the random agreement
        tests caught; probing spent ~0.5 s adding 500K binary clauses to the box's model; and
        with the flow constraints added to the LP lazily, the root bound of an 8-GPU path stayed
        far below the optimum for 20 s (added up front: 0.2 s).
        """
        s = cp_model.CpSolver()
        s.parameters.num_workers = self.limits.workers
        s.parameters.random_seed = self.limits.seed
        s.parameters.cp_model_presolve = False
        s.parameters.cp_model_probing_level = 0
        s.parameters.add_lp_constraints_lazily = False
        if self.deadline is not None:
            s.parameters.max_time_in_seconds = max(0.01, self.deadline - time.perf_counter())
        return s

    def solve(
        self, objective: Goal, sense: str, progress: bool = False, gap: int = 0
    ) -> tuple[str, int | None]:
        """Build the model on the arcs in play, apply the fixed levels, optimise one more.

        Returns ("optimal", value), ("infeasible", None), or ("stopped", None) when the deadline
        cut the proof short (``proven`` turns False and ``bound`` keeps CP-SAT's bound). A
        solution found on the way replaces ``chosen``. With ``gap``, "optimal" means within that
        many units of CP-SAT's bound, kept in ``last_bound``. Past the deadline it stops at once,
        without building the model (on 650,000 arcs that alone takes half a second).
        """
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            self.proven = False
            return "stopped", None
        try:
            m, x = cpmodel.build(self.arcs, self.deadline)
        except Stopped:
            self.proven = False
            return "stopped", None
        for fix in self.fixes:
            fix(m, x, self.arcs)
        expr = objective(m, x, self.arcs)
        if isinstance(expr, np.ndarray):
            set_total(m, expr, sense)
        else:
            (m.minimize if sense == "min" else m.maximize)(expr)
        if self.chosen is not None:  # the hint on every arc variable, written straight into the proto
            m.proto.solution_hint.vars.extend(range(len(x)))
            m.proto.solution_hint.values.extend(np.isin(self.ids, self.chosen).astype(np.int64).tolist())
        cb = None
        if progress and self.limits.progress:
            a = self.root
            if a.objective is Objective.MASS:
                cb = _Progress(self.limits.progress, "held mass", lambda v: v / MASS_SCALE)
            else:
                cb = _Progress(self.limits.progress, "window ms", lambda v: (a.const_time + v) / a.time_scale)
        s = self._solver()
        s.parameters.absolute_gap_limit = gap
        status = interrupt.solve(s, m, cb)
        self.solves += 1
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT rejected the model: {m.validate()}")
        if status == cp_model.INFEASIBLE:
            return "infeasible", None
        if status == cp_model.UNKNOWN:
            self.proven = False
            return "stopped", None
        picked = np.array(list(s.response_proto.solution), dtype=np.int64)[: len(x)] == 1  # x come first
        self.chosen = self.ids[picked]
        if status != cp_model.OPTIMAL:
            self.proven = False
            self.bound = s.best_objective_bound
            return "stopped", None
        self.last_bound = s.best_objective_bound
        return "optimal", int(expr[picked].sum()) if isinstance(expr, np.ndarray) else int(s.value(expr))

    def step(self, objective: Goal, sense: str, progress: bool = False) -> int | None:
        """``solve`` for a level that must have a plan: the proven value, or None if stopped."""
        state, value = self.solve(objective, sense, progress)
        if state == "infeasible":
            self.proven = self.chosen is None
        return value


def start(arcs: Arcs, limits: Limits, hint: Solution | None, t0: float, policy: Policy = POLICY) -> Chain:
    """A chain over the whole table, the hint its incumbent where it is a usable plan (an incumbent
    prunes arcs by its value, so it must keep the host-memory limit)."""
    chain = Chain(arcs, arcs, limits, np.arange(len(arcs)), limits.deadline(t0), policy=policy)
    chain.chosen = usable(arcs, hint)
    return chain


def prune(chain: Chain, weight: Callable[[Arcs], np.ndarray], sense: str, limit: int) -> None:
    """Keep the arcs whose best whole plan can reach ``limit``. With idle GPUs the bound is the best
    path through the arc over any arcs at all (``paths.through_any``), a relaxation of any plan."""
    a = chain.arcs
    if a.idle:
        through = through_any(a, weight(a), sense)
    else:
        through = best_through(a, weight(a), sense, chain.policy.exact_free_order_states)
    chain.keep(through >= limit if sense == "max" else through <= limit)


def feasible(chain: Chain, within: np.ndarray) -> str:
    """Is there a plan on the arcs in play where ``within``, under the levels fixed so far?

    "optimal" (yes: it becomes the incumbent), "infeasible", or "stopped"; the arcs in play stay.
    """
    arcs, ids, chosen = chain.arcs, chain.ids, chain.chosen
    chain.keep(within, spare_chosen=False)
    state, _ = chain.solve(lambda m, x, a: np.zeros(len(a), dtype=np.int64), "min")
    chain.arcs, chain.ids = arcs, ids
    if state != "optimal":
        chain.chosen = chosen
    return state


def threshold(chain: Chain, values: np.ndarray, within: Callable[[Arcs, int], np.ndarray], value) -> tuple:
    """Bisect ``values`` (best first) for the first one some plan meets, with feasibility solves.

    ``within(arcs, v)`` marks the arcs a plan meeting v may use and ``value(plan)`` is a plan's own
    value, which the incumbent shows feasible. Returns (the proven value or None if the deadline
    stopped it, the best value not yet excluded); on success only arcs within it stay in play.
    """

    def own() -> int:  # the index of the incumbent's own value
        return int(np.flatnonzero(values == value(chain.chosen))[0])

    def probe(mid: int) -> int | None:
        state = feasible(chain, within(chain.arcs, values[mid]))
        return None if state == "stopped" else -1 if state == "infeasible" else own()

    lo, done = narrow(0, len(values) - 1 if chain.chosen is None else own(), probe)
    if not done:
        return None, int(values[lo])
    chain.keep(within(chain.arcs, values[lo]))
    return int(values[lo]), int(values[lo])


#: A gap no objective reaches: the solve stops at its first plan. The tie-break solves below need
#: any plan within the tie set (a constraint), not the finest time inside it, whose proof is slow.
ANY_PLAN = 2**62
