"""Problem -> range-walk table -> arcs -> the route's solver -> plan, baseline and oracle check.

Which solver answers, and why, is ``solver.solvers.route``'s to say; this module builds the tables,
runs the route, evaluates the plan and prices what it leaves out.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from solver.engines import engine_of, evaluate
from solver.planning.background import Pending
from solver.planning.classes import Built, Solved, placed_in, settled, solve_classes
from solver.planning.hints import Hint, Reload, hints_of
from solver.planning.infeasible import explain
from solver.problem.baselines import Baseline
from solver.problem.placement import Placement, bounds_ok, feasible
from solver.problem.problem import Problem
from solver.solvers import Limits, Solution, TooLarge
from solver.solvers.arcs import Arcs
from solver.solvers.orders import AnyOrder
from solver.solvers.proportional import solve_proportional
from solver.solvers.route import POLICY, Policy, Route, forced_times, oracle, solve


@dataclass
class Oracle:
    """An independent solver's answer and whether it matches the product's."""

    name: str
    status: str
    plan: Placement | None
    agrees: bool
    wall_ms: float


@dataclass
class Result:
    """Everything a report needs about one planning run."""

    problem: Problem
    status: str
    plan: Placement | None
    baseline: Baseline
    solution: Solution
    arcs: Arcs
    table_ms: float
    wall_ms: float
    reason: str | None = None
    oracle: Oracle | None = None
    idle_cost_ms: dict[int, float | None] | None = None
    default: Baseline | None = None  # what the engine does unasked, where that is not the proportional split
    route: Route | None = None  # the solver the route tried first, why, and what follows it
    hints: list[Hint] = dataclasses.field(default_factory=list)  # what would help, each planned again
    candidates: list | None = None  # n_ubatch auto: each micro-batch's plan (solver.planning.ubatch)
    solved: tuple[Problem, Placement] | None = None  # the solver's, where ``plan`` is shown as it runs

    @property
    def refilled(self) -> Placement | None:
        """The solver's plan, where the plan shown is it filled again as its command runs."""
        if self.solved is None or self.plan is None:
            return None
        plan = self.solved[1]
        return plan if [s.offload for s in plan.stages] != [s.offload for s in self.plan.stages] else None

    @property
    def compared(self) -> Baseline:
        """What the report sets the plan beside: the engine's own default, else the proportional split."""
        return self.default or self.baseline


def run_oracle(
    p: Problem,
    arcs: Arcs,
    solution: Solution,
    limits: Limits,
    orders: list[tuple[int, ...]] | None = None,
    policy: Policy = POLICY,
) -> Oracle:
    """Solve again with the route's oracle and compare plans (an unproven plan need only be no
    better). With the engine's allowed ``orders``, in each of them; with none allowed, no plan is the
    only answer."""
    if orders is not None and not orders:
        return Oracle("the engine's orders", "infeasible", None, not solution.found, 0.0)
    check = oracle(arcs, solution, policy, orders)
    try:
        got = settled(arcs, solve(check, arcs, limits, policy), limits, policy)
    except TooLarge:
        return Oracle(check.solver, "skipped", None, True, 0.0)
    if got.status == "unknown":  # the time limit stopped it before any plan: nothing to compare
        return Oracle(check.solver, "stopped", None, True, got.wall_ms)
    plan = evaluate(p, got.gpus, got.cuts) if got.found else None
    if (solution.status == "optimal" or not solution.found) and got.status != "feasible":
        agrees = (got.status, got.gpus, got.cuts) == (solution.status, solution.gpus, solution.cuts)
    else:  # one side stopped by the time limit: both must have a plan
        agrees = got.found and solution.found
    return Oracle(check.solver, got.status, plan, agrees, got.wall_ms)


def plan_rig(
    p: Problem,
    limits: Limits | None = None,
    check: bool = False,
    policy: Policy = POLICY,
    default: str | None = None,
    reload: Reload | None = None,
    built: Built | None = None,
    with_default: bool = True,
) -> Result:
    """Plan one problem end to end, in each way its engine may run a plan (solver.planning.classes:
    the plan, its arcs and oracle are the chosen way's; the baseline is evaluated in the way it runs)
    (``policy``: the route's thresholds; the plan is shown as its own command runs where the chosen
    way counts a bound for it, ``Engine.as_run``, filled again under those figures where they leave
    more room; ``default``: which of the
    engine's defaults to set the plan beside, its first by default; ``reload(**overrides)``: the
    problem of the same files with other settings, for the hints, which only a run given it has;
    ``built``: the problem's classes and tables, where they are built already; ``with_default``: False
    leaves ``Result.default`` None, for a plan that is not shown). A default that is a search of its
    own does not depend on the plan, so it is computed beside it (``solver.planning.background``)."""
    if not with_default:
        return _planned(p, limits, check, policy, reload, built)
    engine = engine_of(p)
    with Pending(lambda: engine.default_split(p, default), engine.default_searches) as pending:
        result = _planned(p, limits, check, policy, reload, built)
        result.default = pending.result()
    return result


def _planned(
    p: Problem,
    limits: Limits | None,
    check: bool,
    policy: Policy,
    reload: Reload | None,
    built: Built | None,
) -> Result:
    """``plan_rig`` but for the default."""
    t0 = time.perf_counter()
    limits = limits or Limits()
    if limits.started is None:  # the limit bounds the whole run: the tables count
        limits = dataclasses.replace(limits, started=t0)
    engine = engine_of(p)
    rule = engine.orders(p)
    allowed = None if rule is None else [*rule.gpus, *(AnyOrder(gpus) for gpus in rule.free)]
    best, solved = solve_classes(p, limits, policy, allowed, built)
    p, table, arcs, chosen, solution = best.problem, best.table, best.arcs, best.route, best.solution
    table_ms = sum(s.table_ms for s in solved)
    plan = best.plan
    if plan is not None and not feasible(p, plan):
        raise AssertionError(f"the solver returned an infeasible plan: {plan.gpus} {plan.cuts}")
    base = solve_proportional(arcs)  # the contract's baseline, for every engine
    split = base.status == "heuristic" and bounds_ok(p, base.cuts)
    placed = placed_in(solved, base.gpus, base.cuts) if split else None
    base_plan = placed[1] if placed is not None else evaluate(p, base.gpus, base.cuts) if split else None
    baseline = Baseline(list(base.cuts), placed is not None, base_plan, reason=base.reason)
    ran = engine.as_run(p, plan) if plan is not None else None
    shown_p, shown = ran if ran is not None else (p, plan)
    wall_ms = (time.perf_counter() - t0) * 1e3
    status = solution.status if solution.found or solution.status == "infeasible" else "unknown"
    result = Result(shown_p, status, shown, baseline, solution, arcs, table_ms, wall_ms, route=chosen)
    result.solved = None if ran is None else (p, plan)
    if status == "infeasible":
        ruled = rule is not None and rule.reason
        result.reason = rule.reason if ruled else explain(p, table, arcs, limits.left(t0), policy)
    elif status == "unknown" and solution.reason is not None:
        result.reason = solution.reason
    elif status == "unknown":
        result.reason = "the time limit ran out before any placement was found; allow more time"
    if plan is not None and len(plan.gpus) < p.n_gpus:
        mine = plan.request_ms(p.generate) if p.objective == "request" else plan.window_ms
        result.idle_cost_ms = idle_report(arcs, plan, limits, policy, mine)
    if check:
        result.oracle = _checked(solved, best, limits, allowed, policy)
    if reload is not None:
        own = dataclasses.replace(result, problem=p, plan=plan)  # the problem its table is of

        def replan(q: Problem, lim: Limits) -> Result:
            return plan_rig(q, lim, policy=policy, with_default=False)

        result.hints = hints_of(own, table, reload, replan, limits, policy)
    return result


def _checked(
    solved: list[Solved], best: Solved, limits: Limits, allowed: list | None, policy: Policy
) -> Oracle:
    """The oracle on every problem solved (each way the engine may run a plan): the chosen one's
    answer, agreeing only where every one agrees."""
    checks = [run_oracle(s.problem, s.arcs, s.solution, limits, allowed, policy) for s in solved]
    mine = next(c for s, c in zip(solved, checks, strict=True) if s is best)
    return dataclasses.replace(mine, agrees=all(c.agrees for c in checks))


def idle_report(
    arcs: Arcs, plan: Placement, limits: Limits, policy: Policy = POLICY, mine: float | None = None
) -> dict[int, float | None] | None:
    """Per idle GPU, how many ms more the best window (request: request time, ``mine`` the plan's)
    of a plan that uses it is than the plan's
    (None: no plan can use it), within ``policy.idle_cost_s`` seconds and what is left of the time
    limit (``forced_times`` says which solver prices them). The mass objective ranks the plans that
    use it by mass first; a ``host_memory`` limit is not applied to those plans (the figure is then
    a lower bound). None: not computed (a solve cut short)."""
    now = time.perf_counter()
    end = min(limits.deadline(now) or np.inf, now + policy.idle_cost_s)
    if end <= now:
        return None
    idle = sorted(set(range(arcs.n_gpus)) - set(plan.gpus))
    forced = forced_times(arcs, idle, end, limits, policy)
    if forced is None:
        return None
    base = plan.window_ms if mine is None else mine
    return {g: None if t is None else round(arcs.window_ms(t) - base, 6) for g, t in forced.items()}
