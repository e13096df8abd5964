"""Problem -> range-walk table -> arcs -> DP or CP-SAT -> plan, baseline and oracle check.

The exact DP answers first wherever it is cheap: the order as given, or a free order whose GPUs fall
into few classes of identical arcs. It settles the whole lexicographic chain (objective, spare KV,
bottleneck, cuts, order) in passes that take milliseconds, where CP-SAT spent minutes proving ties
on rigs with many equal plans. CP-SAT does what only it can: free orders over many distinct GPUs,
a host-memory limit the DP's optimum breaks, and anytime answers under --time-limit.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from solver.arcs import Arcs, build_arcs
from solver.baselines import Baseline
from solver.engines import build_table, engine_of, evaluate
from solver.infeasible import explain
from solver.plan import Placement, bounds_ok, feasible
from solver.problem import Problem
from solver.solvers import Limits, Solution, TooLarge
from solver.solvers.cpsat import forced_time, solve_cpsat
from solver.solvers.dp import MAX_STATES_FREE_ORDER, dp_states, solve_dp
from solver.solvers.exhaustive import count_placements, solve_exhaustive
from solver.solvers.orders import solve_in_orders
from solver.solvers.proportional import solve_proportional
from solver.solvers.pruned import applies, solve_pruned
from solver.solvers.subsetdp import MAX_STEPS, forced_times, subset_steps

EXHAUSTIVE_CHECK_LIMIT = 200_000
#: Seconds the report may spend pricing idle GPUs beyond the host/idle DP (CP-SAT, one per GPU).
IDLE_COST_S = 5.0
#: The DP answers first when its states times (L+1)^2 boundary pairs stay within this: a free order
#: over 10 distinct GPUs and 130 layers is 17.6 million, and its DP takes 1-4 s here by objective.
DP_FIRST_WORK = 20_000_000


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

    @property
    def compared(self) -> Baseline:
        """What the report sets the plan beside: the engine's own default, else the proportional split."""
        return self.default or self.baseline


def dp_hint(arcs: Arcs, limits: Limits | None = None) -> Solution | None:
    """The DP's best plan in rig order: exact when the order is fixed, a start when it is free (over
    hosts, in rig order with each host's GPUs brought together, so its stages form one run).

    None when there is none, or when the DP cannot answer under the host-memory limit. Without
    idle GPUs it is the plain DP over k + 1 stages, the cheapest plan there is: it runs to the end
    even past the deadline, so a limit spent before planning still answers with it; with idle GPUs
    the host/idle DP stops at the deadline of ``limits`` (None before it has a plan)."""
    limits = limits if arcs.idle else None
    try:
        if arcs.order == "auto" and arcs.n_hosts > 1:
            order = tuple(int(g) for g in np.argsort(arcs.hosts, kind="stable"))
            sol = _dp_in_order(arcs, order, limits)
        else:
            fixed = (
                arcs if arcs.order == "as-given" else dataclasses.replace(arcs, order="as-given", twins=[])
            )
            sol = solve_dp(fixed, limits)
    except TooLarge:
        return None
    return sol if sol.found else None


def dp_work(arcs: Arcs) -> int:
    """The DP's cost per pass, roughly: its states per boundary times its dense (L+1)^2 tables."""
    return dp_states(arcs) * (arcs.n_layers + 1) ** 2


def solve_plan(arcs: Arcs, limits: Limits) -> Solution:
    """The product's answer: the exact DP where it is cheap, else CP-SAT hinted by the DP.

    Idle GPUs or a free order over hosts: the host/idle DP, else (its size, or a
    host-memory limit its optimum breaks) the cut solve or CP-SAT. Every solver here stops at
    ``limits``' deadline with the best plan it has."""
    if arcs.subsets or dp_work(arcs) <= DP_FIRST_WORK:
        try:
            got = solve_dp(arcs, limits)
            if got.status != "unknown":
                return got
        except TooLarge:  # its size, or a host-memory limit that the DP's optimum breaks
            pass
    # (or the deadline stopped the DP before it had a plan: the cut solve stops at once with the
    # hint, if any, and a bound)
    return _pruned_or_cpsat(arcs, limits, dp_hint(arcs, limits) if len(arcs) else None)


def _pruned_or_cpsat(arcs: Arcs, limits: Limits, hint: Solution | None) -> Solution:
    """A free order beyond the DP: the exact answer on the arcs Lagrangian bounds keep, else (the
    throughput objective, idle GPUs) CP-SAT on the whole table."""
    if applies(arcs):
        got = solve_pruned(arcs, limits, hint, exact_on)
        if got is not None:
            return got
    return solve_cpsat(arcs, limits, hint=hint)


def exact_on(arcs: Arcs, limits: Limits, hint: Solution | None) -> Solution:
    """The whole lexicographic answer on a (cut) table: the DP where cheap, else CP-SAT."""
    if dp_work(arcs) <= DP_FIRST_WORK:
        try:
            return solve_dp(arcs, limits)
        except TooLarge:
            pass
    return solve_cpsat(arcs, limits, hint=hint)


def pick_oracle(arcs: Arcs, solution: Solution) -> str:
    """Exhaustive where it is cheap, else the DP; a free order over more class-count states than the
    DP takes is beyond it, so there it checks the cuts for the GPU order the solver chose. Idle GPUs
    or hosts in a free order: exhaustive where cheap, else the host/idle DP, else (hosts, every GPU
    used) the DP in the chosen GPU order."""
    if arcs.subsets:
        if count_placements(arcs) <= EXHAUSTIVE_CHECK_LIMIT:
            return "exhaustive"
        if solution.name == "dp":
            return "cp-sat"
        if subset_steps(arcs) <= MAX_STEPS or arcs.idle or not solution.found:
            return "dp"
        return "dp in the chosen GPU order"
    if count_placements(arcs) <= EXHAUSTIVE_CHECK_LIMIT:
        return "exhaustive"
    if solution.name == "dp":
        return "cp-sat"
    if dp_states(arcs) <= MAX_STATES_FREE_ORDER or not solution.found:
        return "dp"
    return "dp in the chosen GPU order"


def _dp_in_order(arcs: Arcs, gpus: tuple[int, ...], limits: Limits | None = None) -> Solution:
    """The DP with the order fixed to ``gpus``: GPUs renumbered by stage, answers mapped back."""
    stage_of = np.empty(arcs.n_gpus, dtype=np.int64)
    stage_of[list(gpus)] = np.arange(arcs.n_gpus)
    hosts = arcs.hosts[list(gpus)]  # stage s runs on GPU gpus[s], on its host
    got = solve_dp(
        dataclasses.replace(arcs, gpu=stage_of[arcs.gpu], order="as-given", twins=[], gpu_host=hosts), limits
    )
    return dataclasses.replace(got, gpus=tuple(gpus[s] for s in got.gpus))


def run_oracle(
    p: Problem, arcs: Arcs, solution: Solution, limits: Limits, orders: list[tuple[int, ...]] | None = None
) -> Oracle:
    """Solve again with an oracle and compare plans (an unproven plan need only be no better). With the
    engine's allowed ``orders``, enumeration in each of them."""
    small = orders is not None and count_placements(arcs) <= EXHAUSTIVE_CHECK_LIMIT
    if orders is not None:
        name = "exhaustive in the engine's orders" if small else "dp in the chosen GPU order"
    else:
        name = pick_oracle(arcs, solution)
    try:
        if small:
            got = solve_in_orders(arcs, orders, solve_exhaustive)
        elif name == "exhaustive":
            got = solve_exhaustive(arcs)
        elif name == "dp":
            got = solve_dp(arcs, limits)
        elif name == "cp-sat":  # proves every level itself; the DP's plan only guides its search
            got = solve_cpsat(arcs, limits, hint=dp_hint(arcs, limits))
        else:
            got = _dp_in_order(arcs, solution.gpus, limits)
    except TooLarge:
        return Oracle(name, "skipped", None, True, 0.0)
    if got.status == "unknown":  # the time limit stopped it before any plan: nothing to compare
        return Oracle(name, "stopped", None, True, got.info.get("wall_ms", 0.0))
    plan = evaluate(p, got.gpus, got.cuts) if got.found else None
    if (solution.status == "optimal" or not solution.found) and got.status != "feasible":
        agrees = (got.status, got.gpus, got.cuts) == (solution.status, solution.gpus, solution.cuts)
    else:  # one side stopped by the time limit: both must have a plan
        agrees = got.found and solution.found
    return Oracle(name, got.status, plan, agrees, got.info.get("wall_ms", 0.0))


def plan_rig(p: Problem, limits: Limits | None = None, check: bool = False) -> Result:
    """Plan one problem end to end."""
    t0 = time.perf_counter()
    limits = limits or Limits()
    if limits.started is None:  # the limit bounds the whole run: the tables count
        limits = dataclasses.replace(limits, started=t0)
    table = build_table(p)
    table_ms = (time.perf_counter() - t0) * 1e3
    arcs = build_arcs(p, table)
    rule = engine_of(p).orders(p)
    solution = solve_plan(arcs, limits) if rule is None else solve_in_orders(arcs, rule.gpus)
    plan = evaluate(p, solution.gpus, solution.cuts) if solution.found else None
    if plan is not None and not feasible(p, plan):
        raise AssertionError(f"the solver returned an infeasible plan: {plan.gpus} {plan.cuts}")
    base = solve_proportional(arcs)  # the contract's baseline, for every engine
    split = base.status == "heuristic" and bounds_ok(p, base.cuts)
    base_plan = evaluate(p, base.gpus, base.cuts) if split else None
    feasible_base = bool(base_plan and feasible(p, base_plan))
    baseline = Baseline(list(base.cuts), feasible_base, base_plan, reason=base.info.get("reason"))
    wall_ms = (time.perf_counter() - t0) * 1e3
    status = solution.status if solution.found or solution.status == "infeasible" else "unknown"
    result = Result(p, status, plan, baseline, solution, arcs, table_ms, wall_ms)
    result.default = engine_of(p).default_split(p)
    if status == "infeasible":
        ruled = rule is not None and rule.reason
        result.reason = rule.reason if ruled else explain(p, table, arcs, limits.left(t0))
    elif status == "unknown" and "reason" in solution.info:
        result.reason = solution.info["reason"]
    elif status == "unknown":
        result.reason = "the time limit ran out before any placement was found; allow more time"
    if plan is not None and len(plan.gpus) < p.n_gpus:
        result.idle_cost_ms = idle_report(arcs, plan, limits)
    if check:
        result.oracle = run_oracle(p, arcs, solution, limits, None if rule is None else rule.gpus)
    return result


def idle_costs(arcs: Arcs, plan: Placement, deadline: float | None = None) -> dict[int, float | None] | None:
    """Per idle GPU, how many ms more the best window of a plan that uses it is than the plan's
    (None: no plan can use it). The mass objective ranks the plans that use it by mass first; a
    ``host_memory`` limit is not applied to those plans (the figure is then a lower bound). None for
    the whole answer when ``deadline`` stops the DP."""
    idle = sorted(set(range(arcs.n_gpus)) - set(plan.gpus))
    forced = forced_times(arcs, idle, deadline)
    if forced is None:
        return None
    return {g: None if t is None else round(arcs.window_ms(t) - plan.window_ms, 6) for g, t in forced.items()}


def idle_report(arcs: Arcs, plan: Placement, limits: Limits) -> dict[int, float | None] | None:
    """``idle_costs`` where the host/idle DP takes the rig (the order as given, or a free order of up
    to about 9 GPUs), else by one CP-SAT chain per idle GPU; all within IDLE_COST_S seconds and what
    is left of the time limit. None: not computed (a solve cut short)."""
    now = time.perf_counter()
    end = min(limits.deadline(now) or np.inf, now + IDLE_COST_S)
    if end <= now:
        return None
    if subset_steps(arcs) <= MAX_STEPS:
        try:
            return idle_costs(arcs, plan, end)
        except TooLarge:  # a rig order that splits a host's GPUs: the DP declines it, CP-SAT prices it
            pass
    limits = dataclasses.replace(limits, started=now, time_limit=end - now)
    out: dict[int, float | None] = {}
    for g in sorted(set(range(arcs.n_gpus)) - set(plan.gpus)):
        proven, best = forced_time(arcs, g, limits)
        if not proven:
            return None
        out[g] = None if best is None else round(arcs.window_ms(best) - plan.window_ms, 6)
    return out
