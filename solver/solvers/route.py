"""Which solver answers a table, and why: the one place that picks (the plan, and ``--check``'s oracle).

The plan (``route``), first match:

1. An engine that runs only some GPU orders: the DP in each of them, the best by the tie chain.
2. Plans that differ in the GPUs they use (idle GPUs, or a free order over hosts): the host/idle
   DP (``subsetdp``), unless its ``refusal`` says why not (a free order past
   ``Policy.max_subset_steps``, or a rig order that splits a host's GPUs).
3. Every GPU used: the class-count DP (``dp``) while its states x (L+1)^2 stay within
   ``Policy.dp_first_work`` and its ``refusal`` allows (states, dense cells).
4. Beyond a DP: a free order using every GPU is cut by bounds and solved exactly on what is left
   (``pruned``, whose cut tables go by ``route_cut``); anything else is CP-SAT on the whole table.
   Both start from the DP's best plan in rig order (``dp_hint``).

A DP can also find out only while it runs that it cannot answer: a host-memory limit its optimum
breaks (TooLarge), or the deadline before it had any plan ("unknown"); the pruned path cannot when
its bounds are out of reach (None). Each step's ``then`` is what answers next.

Also here: ``--check``'s oracle (``oracle``), the CP-SAT bisection the pruned path falls back on for
the slowest stage under a host-memory limit, and who prices idle GPUs (``forced_times``).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass

import numpy as np

from solver.solvers import Limits, Solution, TooLarge, dp, dpgraph, subsetdp
from solver.solvers.arcs import Arcs
from solver.solvers.exhaustive import count_placements, solve_exhaustive
from solver.solvers.orders import in_order, solve_in_orders
from solver.solvers.policy import POLICY, Policy
from solver.solvers.pruned import applies, solve_pruned

__all__ = [
    "POLICY",
    "Policy",
    "Route",
    "dp_hint",
    "exact_dp",
    "exact_on",
    "forced_times",
    "oracle",
    "route",
    "route_cut",
    "solve",
]


@dataclass(frozen=True)
class Route:
    """A solver to run on a table and why; ``then``: the route when it cannot answer.

    ``solver`` is one of "dp", "host/idle dp", "pruned", "cp-sat", "dp in the engine's orders",
    and for ``--check`` also "exhaustive", "exhaustive in the engine's orders", "dp in the chosen
    GPU order" (the names the JSON's oracle shows). ``hinted``: it starts from ``dp_hint``.
    ``on_unknown``: a stop before any plan hands over to ``then`` too. ``gpus``: the GPU orders
    the "in ... order(s)" solvers take."""

    solver: str
    reason: str
    then: Route | None = None
    hinted: bool = False
    on_unknown: bool = False
    gpus: tuple[tuple[int, ...], ...] = ()

    def __str__(self) -> str:
        return f"{self.solver}: {self.reason}" + ("" if self.then is None else f"; else {self.then}")


def dp_work(arcs: Arcs) -> int:
    """The class-count DP's cost per pass, roughly: its states per boundary times (L+1)^2."""
    return dpgraph.dp_states(arcs) * (arcs.n_layers + 1) ** 2


def _beyond_dp(arcs: Arcs, why: str) -> Route:
    """Step 4: the pruned path (then CP-SAT) for a free order using every GPU, else CP-SAT."""
    whole = Route("cp-sat", "CP-SAT on the whole table", hinted=True)
    if applies(arcs):
        return Route("pruned", f"{why}: a free order cut by bounds, solved exactly", then=whole, hinted=True)
    return dataclasses.replace(whole, reason=f"{why}: CP-SAT on the whole table")


def route(arcs: Arcs, policy: Policy = POLICY, orders: list[tuple[int, ...]] | None = None) -> Route:
    """The product's route for ``arcs`` (``orders``: the only GPU orders the engine runs)."""
    if orders is not None:
        return Route(
            "dp in the engine's orders", f"the engine runs {len(orders)} GPU order(s)", gpus=tuple(orders)
        )
    if arcs.subsets:
        why = subsetdp.refusal(arcs, policy)
        if why is not None:
            return _beyond_dp(arcs, why)
        kind = "idle GPUs allowed" if arcs.idle else f"a free order over {arcs.n_hosts} hosts"
        return Route("host/idle dp", kind, then=_beyond_dp(arcs, "the DP could not answer"), on_unknown=True)
    states = dpgraph.dp_states(arcs)
    work = states * (arcs.n_layers + 1) ** 2
    if work > policy.dp_first_work:
        return _beyond_dp(arcs, f"the DP's work {work:,} is over {policy.dp_first_work:,}")
    why = dpgraph.refusal(arcs, policy)
    if why is not None:
        return _beyond_dp(arcs, why)
    kind = "the order as given" if arcs.order == "as-given" else f"{states:,} class-count states"
    return Route("dp", kind, then=_beyond_dp(arcs, "the DP could not answer"), on_unknown=True)


def route_cut(arcs: Arcs, policy: Policy = POLICY) -> Route:
    """The route on a table the pruned path cut: the DP where cheap, else (or when it cannot) CP-SAT."""
    whole = Route("cp-sat", "CP-SAT on the cut table")
    work = dp_work(arcs)
    if work > policy.dp_first_work:
        return dataclasses.replace(whole, reason=f"the DP's work {work:,} is over {policy.dp_first_work:,}")
    name = "host/idle dp" if arcs.subsets else "dp"
    return Route(name, "the cut table is within the DP's work", then=whole)


def oracle(
    arcs: Arcs, solution: Solution, policy: Policy = POLICY, orders: list[tuple[int, ...]] | None = None
) -> Route:
    """``--check``'s oracle: enumeration where cheap, else CP-SAT for a DP plan, else the DP; a free
    order beyond the DP checks the cuts in the GPU order the product chose."""
    small = count_placements(arcs) <= policy.exhaustive_check_limit
    chosen = Route("dp in the chosen GPU order", "beyond the DP: the cuts in the plan's GPU order")
    chosen = dataclasses.replace(chosen, gpus=(solution.gpus,))
    if orders is not None:
        if small:
            return Route("exhaustive in the engine's orders", "few placements", gpus=tuple(orders))
        return chosen
    if small:
        return Route("exhaustive", f"at most {policy.exhaustive_check_limit:,} placements")
    if solution.name == "dp":
        return Route("cp-sat", "the plan is the DP's", hinted=True)
    if arcs.subsets:
        takes = subsetdp.subset_steps(arcs) <= policy.max_subset_steps or arcs.idle
    else:
        takes = dpgraph.dp_states(arcs) <= policy.max_states_free_order
    return Route("dp", "within the DP") if takes or not solution.found else chosen


def exact_dp(arcs: Arcs, limits: Limits | None = None, policy: Policy = POLICY) -> Solution:
    """The exact DP that takes this table: the host/idle DP where plans differ in the GPUs they use,
    else the class-count DP (TooLarge where it cannot)."""
    if arcs.subsets:
        return subsetdp.solve_subsets(arcs, limits, policy)
    return dp.solve_dp(arcs, limits, policy)


def dp_in_order(
    arcs: Arcs, gpus: tuple[int, ...], limits: Limits | None = None, policy: Policy = POLICY
) -> Solution:
    """The DP with stage s on GPU ``gpus[s]``."""
    return in_order(arcs, gpus, lambda a: exact_dp(a, limits, policy))


def dp_hint(arcs: Arcs, limits: Limits | None = None, policy: Policy = POLICY) -> Solution | None:
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
            sol = dp_in_order(arcs, order, limits, policy)
        else:
            fixed = (
                arcs if arcs.order == "as-given" else dataclasses.replace(arcs, order="as-given", twins=[])
            )
            sol = exact_dp(fixed, limits, policy)
    except TooLarge:
        return None
    return sol if sol.found else None


def solve(
    r: Route, arcs: Arcs, limits: Limits, policy: Policy = POLICY, hint: Solution | None = None
) -> Solution:
    """Run ``r`` on ``arcs``, and its ``then`` where it cannot answer. ``hint``: a start for the
    solvers that take one (a hinted step without it asks ``dp_hint``, once)."""
    asked = hint is not None
    while True:
        if r.hinted and not asked:
            hint, asked = (dp_hint(arcs, limits, policy) if len(arcs) else None), True
        try:
            got = _run(r, arcs, limits, policy, hint)
        except TooLarge:
            if r.then is None:
                raise
            got = None
        if r.then is None or (got is not None and not (r.on_unknown and got.status == "unknown")):
            if got is None:
                raise TooLarge(f"{r.solver} cannot answer and nothing follows it")
            return got
        r = r.then


def _run(r: Route, arcs: Arcs, limits: Limits, policy: Policy, hint: Solution | None) -> Solution | None:
    """One solver of a route; None: it cannot answer (the pruned path without its bounds)."""
    if r.solver in ("dp", "host/idle dp"):
        return exact_dp(arcs, limits, policy)
    if r.solver == "cp-sat":
        from solver.solvers.cpsat import solve_cpsat  # CP-SAT's import is long; a DP route skips it

        return solve_cpsat(arcs, limits, hint=hint, policy=policy)
    if r.solver == "pruned":
        from solver.solvers.cpsat import least_top_stage

        exact = functools.partial(exact_on, policy=policy)
        return solve_pruned(
            arcs, limits, hint, exact, policy, functools.partial(least_top_stage, policy=policy)
        )
    if r.solver == "exhaustive":
        return solve_exhaustive(arcs, policy=policy)
    if r.solver == "dp in the engine's orders":
        return solve_in_orders(arcs, list(r.gpus), lambda a: exact_dp(a, None, policy), "dp")
    if r.solver == "exhaustive in the engine's orders":
        return solve_in_orders(arcs, list(r.gpus), lambda a: solve_exhaustive(a, policy=policy), "exhaustive")
    if r.solver == "dp in the chosen GPU order":
        return dp_in_order(arcs, r.gpus[0], limits, policy)
    raise ValueError(f"no solver {r.solver!r}")


def exact_on(arcs: Arcs, limits: Limits, hint: Solution | None, policy: Policy = POLICY) -> Solution:
    """The exact answer on a table the pruned path cut, by ``route_cut``'s route."""
    return solve(route_cut(arcs, policy), arcs, limits, policy, hint)


def forced_times(
    arcs: Arcs, gpus: list[int], end: float, limits: Limits, policy: Policy = POLICY
) -> dict[int, int | None] | None:
    """Per GPU in ``gpus``, the summed time (entries included) of the best plan that uses it, plans
    ranked by (mass, time) as the objective's first level ranks them (None: no plan can use it):
    by the host/idle DP where it takes the rig, else by one CP-SAT chain per GPU. None for the whole
    answer when ``end`` (a ``time.perf_counter()``) stops it."""
    now = time.perf_counter()
    if subsetdp.subset_steps(arcs) <= policy.max_subset_steps:
        try:
            return subsetdp.forced_times(arcs, gpus, end, policy)
        except TooLarge:  # a rig order that splits a host's GPUs: the DP declines it, CP-SAT prices it
            pass
    from solver.solvers.cpsat import forced_time

    limits = dataclasses.replace(limits, started=now, time_limit=end - now)
    out: dict[int, int | None] = {}
    for g in gpus:
        proven, best = forced_time(arcs, g, limits, policy)
        if not proven:
            return None
        out[g] = best
    return out
