"""The product's solver: CP-SAT over the arcs as a path through the layer boundaries.

Data -> model -> solve -> read back, as in OR-Tools' samples. One Boolean per arc (GPU, start,
end); every GPU takes exactly one arc; flow is conserved at every inner boundary, so the chosen
arcs form one path from layer 0 to layer L. With the order as given, GPU s must hand over to GPU
s+1 at the same boundary. With a free order, identical GPUs start in rig order (symmetry).

The objective is lexicographic, solved as a chain of levels: held mass (mass objective) or the
slowest stage (throughput objective: min-max, by bisection on a threshold with feasibility
solves), time (every plan within the best whole 1e-6 ms ties), the plan's spare KV (max-min, the
same way; no solve when no arc limits it), the bottleneck, the cut list, then the GPU order (free
order). ``host_limit`` is one linear constraint in every model. After each level its
proven value is kept as a constraint, and arcs that cannot belong to any plan meeting the levels so
far are dropped (``solver.solvers.paths.best_through`` bounds each arc's best whole plan), so later levels
solve small models.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from ortools.sat.python import cp_model

from solver import interrupt
from solver.arcs import Arcs, Objective, subset
from solver.arcs import by_gpu as arcs_by_gpu
from solver.scales import MASS_SCALE
from solver.solvers import Limits, Solution, Stopped, Work, check_deadline, relaxed_bound, stage_key, usable
from solver.solvers.paths import best_through, through_any
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


#: Variables written between two looks at the deadline (a million arcs take seconds to write).
VAR_CHUNK = 2**14


def _build(arcs: Arcs, deadline: float | None = None) -> tuple[cp_model.CpModel, list]:
    """The path model: variables, one arc per GPU, flow conservation and symmetry breaking.

    Past ``deadline`` it raises Stopped: it looks at the clock between chunks of variables and
    between groups of constraints, and gives up after the first chunk when the model would not be
    written by then at that pace, so a model too large for the time left is given up, not
    finished."""

    def check() -> None:
        check_deadline(deadline)

    m = cp_model.CpModel()
    x: list = []
    t0 = time.perf_counter()
    for lo in range(0, len(arcs), VAR_CHUNK):
        check()
        x += list(m.new_bool_var_series("x", pd.RangeIndex(lo, min(len(arcs), lo + VAR_CHUNK))))
        pace = (time.perf_counter() - t0) / len(x)  # the constraints take about as long again
        if lo == 0 and deadline is not None and time.perf_counter() + 2 * pace * len(arcs) > deadline:
            raise Stopped
    xs = np.empty(len(x), dtype=object)
    xs[:] = x
    n, k = arcs.n_layers, arcs.n_gpus
    by_gpu = arcs_by_gpu(arcs)
    for g, ids in enumerate(by_gpu):
        if g % 64 == 0:
            check()
        (m.add_at_most_one if arcs.idle else m.add_exactly_one)(xs[ids].tolist())
    if arcs.host_limit is not None:
        _bound_total(m, arcs.host, 0, arcs.host_limit)
    if arcs.order == "as-given" and not arcs.idle:
        for g in range(1, k):
            check()
            prev, cur = by_gpu[g - 1], by_gpu[g]
            for p in np.union1d(arcs.end[prev], arcs.start[cur]):
                into = xs[prev[arcs.end[prev] == p]].tolist()
                out = xs[cur[arcs.start[cur] == p]].tolist()
                m.add(cp_model.LinearExpr.sum(into) == cp_model.LinearExpr.sum(out))
    else:
        ending, starting = _grouped(arcs.end, n + 1), _grouped(arcs.start, n + 1)
        m.add(cp_model.LinearExpr.sum(xs[starting[0]].tolist()) == 1)
        for p in range(1, n):
            check()
            into, out = xs[ending[p]].tolist(), xs[starting[p]].tolist()
            if into or out:
                m.add(cp_model.LinearExpr.sum(into) == cp_model.LinearExpr.sum(out))
        if arcs.order == "as-given":  # idle GPUs as given: the next stage's GPU comes later in the rig
            for g in range(k):
                check()
                for p in np.unique(arcs.end[by_gpu[g]]):
                    if p < n:
                        into = xs[by_gpu[g][arcs.end[by_gpu[g]] == p]].tolist()
                        later = starting[p][arcs.gpu[starting[p]] > g]
                        m.add(cp_model.LinearExpr.sum(into) <= cp_model.LinearExpr.sum(xs[later].tolist()))
        for i, j in arcs.twins:
            check()
            _twin_order(m, xs, arcs, by_gpu[i], by_gpu[j])
        if arcs.n_hosts > 1 and (arcs.order == "auto" or _priced(arcs)):
            m.entries = _host_runs(m, xs, arcs, check)  # priced in every time sum where _priced
    return m, x


def _grouped(values: np.ndarray, size: int) -> list[np.ndarray]:
    """Arc numbers with each value 0..size-1 of ``values``, ascending: one sort for all of them."""
    order = np.argsort(values, kind="stable")
    cut = np.searchsorted(values[order], np.arange(size + 1))
    return [order[cut[v] : cut[v + 1]] for v in range(size)]


def _priced(arcs: Arcs) -> bool:
    """Whether a plan's time holds ``entry_units`` per host run beyond its arcs: idle GPUs over hosts
    whose network hop differs from the hand-off (see ``solver.arcs``)."""
    return arcs.idle and arcs.entry_units != 0 and arcs.n_hosts > 1


def _time(m: cp_model.CpModel, x: list, a: Arcs) -> np.ndarray | cp_model.LinearExpr:
    """A plan's summed time: its arcs', plus ``entry_units`` per host entry where those are priced."""
    if not _priced(a):
        return a.time
    entries = cp_model.LinearExpr.sum(m.entries)
    return cp_model.LinearExpr.weighted_sum(x, a.time.tolist()) + a.entry_units * entries


def _bound_time(m: cp_model.CpModel, a: Arcs, hi: int) -> None:
    """Constraint: a plan's summed time (``_time``) is at most ``hi``."""
    extra = [(e.index, a.entry_units) for e in m.entries] if _priced(a) else []
    _bound_total(m, a.time, cp_model.INT_MIN, hi, extra)


def _plan_time(arcs: Arcs, plan: np.ndarray) -> int:
    """``_time`` of a plan given as arc numbers: its host runs counted in stage order."""
    total = int(arcs.time[plan].sum())
    if _priced(arcs):
        hosts = arcs.hosts[arcs.gpu[plan[np.argsort(arcs.start[plan])]]]
        total += arcs.entry_units * int(1 + np.count_nonzero(hosts[1:] != hosts[:-1]))
    return total


def _time_slack(arcs: Arcs) -> int:
    """How far a plan's arc time alone may exceed its ``_time``: entries that pay back (a network hop
    cheaper than the hand-off) at most once per host."""
    return max(0, -arcs.entry_units) * arcs.n_hosts if _priced(arcs) else 0


def _prune(chain: _Chain, weight: Callable[[Arcs], np.ndarray], sense: str, limit: int) -> None:
    """Keep the arcs whose best whole plan can reach ``limit``. With idle GPUs the bound is the best
    path through the arc over any arcs at all (``_through_any``), a relaxation of any plan."""
    a = chain.arcs
    if a.idle:
        through = through_any(a, weight(a), sense)
    else:
        through = best_through(a, weight(a), sense, chain.policy.exact_free_order_states)
    chain.keep(through >= limit if sense == "max" else through <= limit)


def _host_runs(m: cp_model.CpModel, xs: np.ndarray, arcs: Arcs, check: Callable[[], None]) -> list:
    """Each host's stages are one run. The run of host h enters at boundary p when an arc of h
    starts there and none of h ends there: e_h(p) = s_h(p) AND NOT t_h(p), linearised exactly
    (e >= s - t, e <= s, e <= 1 - t, with s and t 0/1 sums), and at most one entry per host.
    Returns every entry variable (their count is the plan's host runs)."""
    host = arcs.hosts[arcs.gpu]
    size = arcs.n_layers + 1
    starting = _grouped(host * size + arcs.start, arcs.n_hosts * size)
    ending = _grouped(host * size + arcs.end, arcs.n_hosts * size)
    every = []
    for h in range(arcs.n_hosts):
        check()
        entries = []
        for p in range(arcs.n_layers):
            starts = xs[starting[h * size + p]].tolist()
            if not starts:
                continue
            ends = xs[ending[h * size + p]].tolist()
            s, t = cp_model.LinearExpr.sum(starts), cp_model.LinearExpr.sum(ends)
            e = m.new_bool_var("")
            m.add(e >= s - t)
            m.add(e <= s)
            m.add(e <= 1 - t)
            entries.append(e)
        m.add(cp_model.LinearExpr.sum(entries) <= 1)
        every += entries
    return every


def _twin_order(
    m: cp_model.CpModel, xs: np.ndarray, arcs: Arcs, first: np.ndarray, second: np.ndarray
) -> None:
    """Identical GPUs in rig order: ``first`` starts before ``second``.

    Stated per boundary p over "started by p" variables (``second`` may have started by p only if
    ``first`` started before p), so the LP relaxation also excludes fractional mixes of a plan and
    its twin swap. A single weighted inequality start_first < start_second admitted such mixes, and
    proving a 4 x 128 tie set then ran past a minute; written over the arcs directly, this form
    put half a million terms in the model. Only boundaries where one of the two starts an arc get
    a variable (the others add nothing), each defined from the last, so a pruned table's model
    stays small: 24 GPUs x 256 layers built it 37 times in 30 s with every boundary.
    """
    where = np.union1d(arcs.start[first], arcs.start[second])
    if not len(where):
        return
    started = []
    for ids in (first, second):
        ids = ids[np.argsort(arcs.start[ids], kind="stable")]
        lo, hi = (
            np.searchsorted(arcs.start[ids], where),
            np.searchsorted(arcs.start[ids], where, side="right"),
        )
        by_start = [xs[ids[a:b]].tolist() for a, b in zip(lo, hi)]
        run = [m.new_bool_var("") for _ in where]
        for i, terms in enumerate(by_start):
            m.add(run[i] == (run[i - 1] if i else 0) + cp_model.LinearExpr.sum(terms))
        started.append(run)
    a, b = started
    m.add(b[0] == 0)
    for i in range(1, len(where)):
        m.add(b[i] <= a[i - 1])


def _set_total(m: cp_model.CpModel, coeffs: np.ndarray, sense: str) -> None:
    """Objective ``sum coeffs[i] * x[i]`` written straight into the proto (the API's loop is slow)."""
    m.clear_objective()
    obj = m.proto.objective
    obj.vars.extend(range(len(coeffs)))
    if sense == "min":
        obj.coeffs.extend(coeffs.tolist())
    else:
        obj.coeffs.extend((-coeffs).tolist())
        obj.scaling_factor = -1


def _bound_total(
    m: cp_model.CpModel, coeffs: np.ndarray, lo: int, hi: int, extra: list[tuple[int, int]] = ()
) -> None:
    """Constraint ``lo <= sum coeffs[i] * x[i] (+ the ``extra`` (variable, coefficient) terms) <= hi``,
    written straight into the proto."""
    linear = m.proto.constraints.add().linear
    linear.vars.extend(range(len(coeffs)))
    linear.coeffs.extend(coeffs.tolist())
    for var, coeff in extra:
        linear.vars.append(var)
        linear.coeffs.append(coeff)
    linear.domain.extend([lo, hi])


@dataclass
class _Chain:
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
            m, x = _build(self.arcs, self.deadline)
        except Stopped:
            self.proven = False
            return "stopped", None
        for fix in self.fixes:
            fix(m, x, self.arcs)
        expr = objective(m, x, self.arcs)
        if isinstance(expr, np.ndarray):
            _set_total(m, expr, sense)
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


def _start(arcs: Arcs, limits: Limits, hint: Solution | None, t0: float, policy: Policy = POLICY) -> _Chain:
    """A chain over the whole table, the hint its incumbent where it is a usable plan (an incumbent
    prunes arcs by its value, so it must keep the host-memory limit)."""
    chain = _Chain(arcs, arcs, limits, np.arange(len(arcs)), limits.deadline(t0), policy=policy)
    chain.chosen = usable(arcs, hint)
    return chain


def solve_cpsat(
    arcs: Arcs, limits: Limits | None = None, hint: Solution | None = None, policy: Policy = POLICY
) -> Solution:
    """The exact plan by CP-SAT, or the best found when ``limits.time_limit`` stops the proof.

    Idle GPUs make each GPU's arcs at most one (as given, a stage's successor runs on a later
    GPU); host runs in a free order are constraints (``_host_runs``). With idle GPUs the arc bounds
    of ``best_through`` and ``relaxed_bound`` count exactly k stages, so arcs are pruned by the best
    path over any arcs instead (``_through_any``), and no relaxed bound is reported. When idle GPUs
    meet hosts whose network hop differs from the hand-off, each host entry costs time outside the
    arcs: the entry indicators of ``_host_runs`` carry it in every time sum (``_time``)."""
    t0 = time.perf_counter()
    limits = limits or Limits()
    chain = _start(arcs, limits, hint, t0, policy)
    bound = None
    done = len(arcs) > 0
    if done and arcs.objective is Objective.MASS:
        if chain.chosen is not None:
            _prune(chain, lambda a: a.mass, "max", int(arcs.mass[chain.chosen].sum()))
        best_mass = chain.step(lambda m, x, a: a.mass, "max", progress=True)
        done = best_mass is not None
        if done:
            bound = best_mass / MASS_SCALE
            chain.fixes.append(lambda m, x, a, v=best_mass: _bound_total(m, a.mass, v, cp_model.INT_MAX))
            _prune(chain, lambda a: a.mass, "max", best_mass)
        elif chain.bound is not None:
            bound = chain.bound / MASS_SCALE
    if done and arcs.objective is Objective.THROUGHPUT:
        top, lowest = _stage_level(chain)
        done = top is not None
        bound = (top if done else lowest) / 10**6 if lowest is not None else None
    if done:
        if chain.chosen is not None and arcs.objective is not Objective.MASS:
            cap = arcs.time_cap(_plan_time(arcs, chain.chosen))
            _prune(chain, lambda a: a.time, "min", cap + _time_slack(arcs))
        best_time = _time_level(chain, progress=arcs.objective is Objective.TIME)
        done = best_time is not None
        if arcs.objective is Objective.TIME:
            bound = arcs.window_ms(best_time) if done else _ms(arcs, chain.bound)
        if done:
            cap = arcs.time_cap(best_time)
            chain.fixes.append(lambda m, x, a, v=cap: _bound_time(m, a, v))
            _prune(chain, lambda a: a.time, "min", cap + _time_slack(arcs))
    done = done and _spare_level(chain) and _tie_breaks(chain)
    wall_ms, work = (time.perf_counter() - t0) * 1e3, Work(solves=chain.solves, arcs_left=len(chain.arcs))
    if chain.chosen is None:
        return Solution("cp-sat", "infeasible" if chain.proven else "unknown", wall_ms=wall_ms, work=work)
    gpus, cuts = _read(arcs, chain.chosen)
    status = "optimal" if done and chain.proven else "feasible"
    if bound is None or status == "feasible":
        bound = arcs.objective.tighter(bound, relaxed_bound(arcs))
    return Solution("cp-sat", status, gpus, cuts, bound, wall_ms=wall_ms, work=work)


def _time_level(chain: _Chain, progress: bool) -> int | None:
    """The smallest window key: a plan's summed time there, or None if stopped or infeasible.

    Plans compare in whole 1e-6 ms, so CP-SAT need not prove the fine optimum inside the best key
    (on rigs of near-equal plans that proof ran past 20 s for a 5e-13 gap): it stops within a key
    of its bound, and when the bound does not settle the incumbent's key, one feasibility solve
    asks for a plan a key better.
    """
    a = chain.root
    while True:
        state, value = chain.solve(_time, "min", progress, gap=a.coarse - 1)
        if state == "infeasible":
            chain.proven = chain.chosen is None
        if state != "optimal":
            return None
        bound = chain.last_bound
        if abs(bound) < 2**52 and a.time_key(math.ceil(bound)) >= a.time_key(value):
            return value
        below = a.time_cap(value) - a.coarse  # the largest summed time of a key one smaller
        chain.fixes.append(lambda m, x, arcs, v=below: _bound_time(m, arcs, v))
        state = _feasible(chain, np.ones(len(chain.arcs), dtype=bool))
        chain.fixes.pop()
        if state == "infeasible":
            return value
        if state == "stopped":
            chain.proven = False
            return None


def _feasible(chain: _Chain, within: np.ndarray) -> str:
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


def _threshold(chain: _Chain, values: np.ndarray, within: Callable[[Arcs, int], np.ndarray], value) -> tuple:
    """Bisect ``values`` (best first) for the first one some plan meets, with feasibility solves.

    ``within(arcs, v)`` marks the arcs a plan meeting v may use and ``value(plan)`` is a plan's own
    value, which the incumbent shows feasible. Returns (the proven value or None if the deadline
    stopped it, the best value not yet excluded); on success only arcs within it stay in play.
    """
    lo, hi = 0, len(values) - 1
    if chain.chosen is not None:
        hi = int(np.flatnonzero(values == value(chain.chosen))[0])
    while lo < hi:
        mid = (lo + hi) // 2
        state = _feasible(chain, within(chain.arcs, values[mid]))
        if state == "stopped":
            return None, int(values[lo])
        if state == "infeasible":
            lo = mid + 1
        else:
            hi = int(np.flatnonzero(values == value(chain.chosen))[0])
    chain.keep(within(chain.arcs, values[lo]))
    return int(values[lo]), int(values[lo])


def forced_time(arcs: Arcs, g: int, limits: Limits, policy: Policy = POLICY) -> tuple[bool, int | None]:
    """(proven, the summed time of the best plan that uses GPU ``g``), entries included, plans ranked
    by (mass, time) as the objective's first level ranks them; None: no plan uses it. The same
    figure as ``solver.solvers.subsetdp.forced_times``, for rigs beyond that DP; not proven when the
    deadline stops it."""
    chain = _start(arcs, limits, None, time.perf_counter(), policy)

    def use(m: cp_model.CpModel, x: list, a: Arcs) -> None:
        m.add(cp_model.LinearExpr.sum([x[i] for i in np.flatnonzero(a.gpu == g)]) == 1)

    chain.fixes.append(use)
    if arcs.objective is Objective.MASS:
        state, most = chain.solve(lambda m, x, a: a.mass, "max")
        if state != "optimal":
            return state == "infeasible", None
        chain.fixes.append(lambda m, x, a, v=most: _bound_total(m, a.mass, v, cp_model.INT_MAX))
    best = _time_level(chain, progress=False)
    return chain.proven, best


def least_top_stage(arcs: Arcs, limits: Limits, hint: Solution | None, policy: Policy = POLICY) -> int | None:
    """The throughput objective's first level alone: the smallest slowest-stage key of any plan,
    proven; None when the deadline stops it or no plan exists (the whole solve then says which)."""
    chain = _start(arcs, limits, hint, time.perf_counter(), policy)
    top, _ = _stage_level(chain)
    return top if chain.proven else None


def _stage_level(chain: _Chain) -> tuple[int | None, int | None]:
    """Throughput: the smallest max stage key of any plan (min-max, by bisection on a threshold).

    Returns (the proven key or None, a proven lower bound on it or None when nothing is known).
    """
    root = chain.root
    keys = stage_key(root)
    if chain.chosen is None:
        state = _feasible(chain, np.ones(len(chain.arcs), dtype=bool))
        if state != "optimal":
            return None, None
    values = np.unique(keys[chain.ids])
    return _threshold(chain, values, lambda a, v: keys[chain.ids] <= v, lambda plan: keys[plan].max())


def _spare_level(chain: _Chain) -> bool:
    """The largest plan spare KV (max-min) among the plans tied so far; False if stopped.

    Free when no arc limits the spare (one value, no solve)."""
    spare = chain.root.spare
    values = np.unique(spare[chain.ids])[::-1]
    if len(values) == 1:
        return True
    got, _ = _threshold(chain, values, lambda a, v: a.spare >= v, lambda plan: spare[plan].min())
    return got is not None


def _ms(arcs: Arcs, bound: float | None) -> float | None:
    return None if bound is None else arcs.window_ms(int(bound))


#: A gap no objective reaches: the solve stops at its first plan. The tie-break solves below need
#: any plan within the tie set (a constraint), not the finest time inside it, whose proof is slow.
ANY_PLAN = 2**62


def _enumerate_ties(chain: _Chain) -> bool | None:
    """Find every plan in the tie set by repeated solves, each excluding the plans found so far.

    True: the set had at most ``policy.max_ties`` plans and ``chain.chosen`` is now the best of them by the
    tie-breaks (bottleneck, cuts, order), proven by exhaustion. False: too many ties, carry on
    with the levels. None: the deadline stopped it. Each solve has the objective level's shape
    (min time), which CP-SAT proves fast, unlike the min-max bottleneck level.
    """
    found = [chain.chosen]
    fixes = list(chain.fixes)
    while len(found) <= chain.policy.max_ties:
        chain.fixes = fixes + [_exclude(chain, plan) for plan in found]
        state, _ = chain.solve(lambda m, x, a: a.time, "min", gap=ANY_PLAN)
        if state == "stopped":
            chain.fixes, chain.chosen = fixes, found[0]
            return None
        if state == "infeasible":
            break
        found.append(chain.chosen)
    chain.fixes = fixes
    if len(found) > chain.policy.max_ties:
        chain.chosen = found[0]
        return False
    root = chain.root

    def key(plan: np.ndarray) -> tuple:
        gpus, cuts = _read(root, plan)
        return int(root.bottleneck[plan].max()), cuts, gpus

    chain.chosen = min(found, key=key)
    return True


def _exclude(chain: _Chain, plan: np.ndarray) -> Fix:
    """A no-good: the arcs of ``plan`` are not all chosen again."""

    def fix(m: cp_model.CpModel, x: list, a: Arcs) -> None:
        ids = np.flatnonzero(np.isin(chain.ids, plan))
        m.add(sum(x[i] for i in ids) <= len(plan) - 1)

    return fix


def _bottleneck_descent(chain: _Chain) -> bool:
    """Lower the bottleneck while some tied plan has a smaller one; True once it is proven.

    Each round keeps only arcs below the incumbent's bottleneck and asks for the best time: a
    plan within the tie set there is a better incumbent, and none proves the bottleneck. This
    stays a min-time model, where the min-max form of the level took CP-SAT minutes on 16 GPUs.
    """
    while True:
        worst = int(chain.root.bottleneck[chain.chosen].max())
        arcs, ids, chosen = chain.arcs, chain.ids, chain.chosen
        chain.keep(arcs.bottleneck < worst, spare_chosen=False)
        state, _ = chain.solve(lambda m, x, a: a.time, "min", gap=ANY_PLAN)
        if state == "stopped":
            chain.arcs, chain.ids = arcs, ids
            chain.chosen = chain.chosen if chain.chosen is not None else chosen
            return False
        if state == "infeasible":
            chain.arcs, chain.ids, chain.chosen = arcs, ids, chosen
            chain.keep(arcs.bottleneck <= worst)
            return True


def _tie_breaks(chain: _Chain) -> bool:
    """Bottleneck, then cut list, then GPU order; False if the time limit cut the chain short."""
    settled = _enumerate_ties(chain)
    if settled is not False:
        return bool(settled)

    if not _bottleneck_descent(chain):
        return False
    fixed = chain.arcs.order != "auto" and not chain.arcs.idle  # then the cuts fix the GPUs
    return _cut_descent(chain) and (fixed or _order_descent(chain))


def _cut_descent(chain: _Chain) -> bool:
    """The smallest cut list, fixed one cut at a time from the left.

    With the stages before it fixed, the next cut is the smallest end of the arc that starts where
    they stop: one min solve whose coefficients are layer numbers (a binary-weighted objective over
    all boundaries took CP-SAT minutes on 16 GPUs). With idle GPUs a tied plan whose list ends there
    comes first (list order), asked by one feasibility solve.
    """
    at, n = 0, chain.arcs.n_layers
    while at < n:
        a = chain.arcs
        last = (a.start == at) & (a.end == n)
        if a.idle and last.any() and ((a.start == at) & ~last).any():  # ending the list is smallest
            state = _feasible(chain, (a.start != at) | last)
            if state == "stopped":
                return False
            if state == "optimal":
                chain.keep((a.start != at) | last)
                return True
            chain.keep(~last)
        best = _smallest(chain, at, lambda a: a.end)
        if best is None:
            return False
        a = chain.arcs
        chain.keep(((a.start != at) | (a.end == best)) & ~((a.start > at) & (a.start < best)))
        at = best
    return True


def _order_descent(chain: _Chain) -> bool:
    """With the cuts fixed, the smallest GPU order, fixed one stage at a time from the first."""
    _, cuts = _read(chain.root, chain.chosen)
    for p in (0, *cuts):
        best = _smallest(chain, p, lambda a: a.gpu)
        if best is None:
            return False
        a = chain.arcs
        chain.keep((a.start == p) == (a.gpu == best))
    return True


def _smallest(chain: _Chain, at: int, key: Callable[[Arcs], np.ndarray]) -> int | None:
    """The smallest ``key`` (end, or GPU) of the arc starting at ``at`` over the plans still tied.

    A choice of one needs no solve; None if the deadline stopped the solve.
    """
    a = chain.arcs
    options = np.unique(key(a)[a.start == at])
    if len(options) == 1:
        return int(options[0])
    state, value = chain.solve(lambda m, x, a: np.where(a.start == at, key(a), 0), "min")
    return int(value) if state == "optimal" else None


def _read(arcs: Arcs, ids: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Chosen arc numbers -> (GPU of each stage, cut points)."""
    ids = ids[np.argsort(arcs.start[ids])]
    return tuple(int(g) for g in arcs.gpu[ids]), tuple(int(a) for a in arcs.start[ids][1:])
