"""Plan in each way the engine may run a plan and keep the best: every plan counted as it runs.

An engine may take different memory for a plan by how it runs it (llama.cpp: pipeline parallelism on
when every expert tensor is held, off with the op offload when some stay in host memory), which no
one table can carry: a stage's room would depend on the other stages. ``Engine.plan_classes`` gives a
problem for each way; each is solved to the end and the best plan kept:

* a ``held_only`` problem's plans hold every unit (ranges that leave one in host memory are no arcs);
* another problem's plan that holds every unit runs as the held way, so it stands only if it fits a
  held problem too; where it does not, that problem's best is no plan this way can run, and the
  engine's own problem (which counts the larger figure of every way, so each of its plans runs) is
  solved in its place;
* the plans compare by the objective's own levels (held mass, the slowest stage, the window or the
  request, in whole 1e-6 ms), then a held plan first (nothing in host memory), then the planner's own
  tie rule within the problem.

A problem whose engine gives no classes is solved as it is.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from solver.engines import Table, build_table, engine_of, evaluate
from solver.planning.build import build_arcs
from solver.problem.placement import Placement, feasible
from solver.problem.problem import Problem
from solver.solvers import Limits, Solution
from solver.solvers.arcs import Arcs
from solver.solvers.exhaustive import plan_key, settle
from solver.solvers.route import POLICY, Policy, Route, route, solve


@dataclass(frozen=True, eq=False)
class Solved:
    """One problem solved: its table, arcs, the route's first solver and the answer."""

    problem: Problem
    table: Table
    arcs: Arcs
    route: Route
    solution: Solution
    table_ms: float = 0.0

    @functools.cached_property
    def plan(self) -> Placement | None:
        """The answer evaluated (None where there is none), once: the choice among classes and the
        planner both read it."""
        s = self.solution
        return evaluate(self.problem, s.gpus, s.cuts) if s.found else None

    def key(self) -> tuple:
        """How the plan ranks against another problem's (lower is better; module docstring)."""
        s = self.solution
        own = plan_key(self.arcs, tuple(s.gpus), tuple(s.cuts))
        return (*own[:3], not self.problem.held_only, *own[3:])


def solve_plan(arcs: Arcs, limits: Limits, policy: Policy = POLICY, chosen: Route | None = None) -> Solution:
    """The product's answer: ``chosen`` (by default ``route(arcs, policy)``) run to the end, and on a
    request table set against the plans that pipeline the prompt (``settle``). Every solver on it
    stops at ``limits``' deadline with the best plan it has."""
    return settled(arcs, solve(chosen or route(arcs, policy), arcs, limits, policy), limits, policy)


def settled(arcs: Arcs, got: Solution, limits: Limits, policy: Policy) -> Solution:
    """``got``, unless it is enumeration's (which scores the pipelined prompt itself): ``settle``'s."""
    return got if got.name == "exhaustive" else settle(arcs, got, limits, policy)


def solve_one(
    p: Problem, limits: Limits, policy: Policy, allowed: list | None, table: Table | None = None
) -> Solved:
    """``p``'s table (``table`` where it is built), arcs and the route's answer run to the end."""
    t0 = time.perf_counter()
    table = build_table(p) if table is None else table
    table_ms = (time.perf_counter() - t0) * 1e3
    arcs = build_arcs(p, table)
    chosen = route(arcs, policy, allowed)
    return Solved(p, table, arcs, chosen, solve_plan(arcs, limits, policy, chosen), table_ms)


def _holds_all(s: Solved) -> bool:
    """The problem's plan leaves no unit in host memory."""
    return s.plan is not None and s.plan.host_bytes == 0


def _runs_held(held: list[Problem], gpus: tuple[int, ...], cuts: tuple[int, ...]) -> bool:
    """A placement that holds every unit fits one of the ``held`` problems too (as it will run)."""
    for q in held:
        plan = evaluate(q, gpus, cuts)
        if feasible(q, plan) and plan.host_bytes == 0:
            return True
    return False


def placed_in(
    solved: list[Solved], gpus: tuple[int, ...], cuts: tuple[int, ...]
) -> tuple[Problem, Placement] | None:
    """A placement (a baseline's) evaluated as it runs: in the first problem solved where it is
    feasible and runs that way (a held problem's plan holds every unit; another's that does must fit
    a held one too); None where it fits none."""
    held = [s.problem for s in solved if s.problem.held_only]
    for s in solved:
        q = s.problem
        plan = evaluate(q, gpus, cuts)
        if not feasible(q, plan):
            continue
        if q.held_only or plan.host_bytes > 0 or not held or _runs_held(held, gpus, cuts):
            return q, plan
    return None


@dataclass(frozen=True, eq=False)
class Built:
    """A problem's classes (``Engine.plan_classes``) and their tables, built ahead of the solve
    (``table``: the problem's own, where it has no classes)."""

    classes: tuple[Problem, ...]
    tables: tuple[Table, ...]
    table: Table | None
    built_ms: float


def build_classes(ps: Sequence[Problem]) -> list[Built]:
    """Every problem's classes and tables, built in one call of the engine's ``tables`` so an engine
    can share their work (llama.cpp's fill DP answers every problem whose units are valued alike: the
    classes of one problem, and the contexts of one sweep)."""
    if not ps:
        return []
    engine = engine_of(ps[0])
    classes = [engine.plan_classes(p) for p in ps]
    wanted = [q for p, cs in zip(ps, classes, strict=True) for q in (cs or (p,))]
    t0 = time.perf_counter()
    tables = iter(engine.tables(wanted))
    each_ms = (time.perf_counter() - t0) * 1e3 / len(ps)
    out = []
    for cs in classes:
        mine = tuple(next(tables) for _ in (cs or (None,)))
        out.append(Built(cs, mine if cs else (), None if cs else mine[0], each_ms))
    return out


def solve_classes(
    p: Problem,
    limits: Limits | None = None,
    policy: Policy = POLICY,
    allowed: list | None = None,
    built: Built | None = None,
) -> tuple[Solved, list[Solved]]:
    """The best of ``p``'s classes (``p`` itself where there are none), from ``built`` where given,
    and every problem solved, the chosen one among them."""
    limits = limits or Limits()
    built = built or build_classes([p])[0]
    classes, tables, table, built_ms = built.classes, built.tables, built.table, built.built_ms
    if not classes:
        one = replace(solve_one(p, limits, policy, allowed, table), table_ms=built_ms)
        return one, [one]
    held = [q for q in classes if q.held_only]
    solved: list[Solved] = []
    fallback = False
    for i, (q, t) in enumerate(zip(classes, tables)):
        s = solve_one(q, limits, policy, allowed, t)
        if i == 0:
            s = replace(s, table_ms=s.table_ms + built_ms)
        solved.append(s)
        found = s.solution.found and not q.held_only and _holds_all(s)
        if found and not _runs_held(held, s.solution.gpus, s.solution.cuts):
            fallback = True
    if fallback:
        solved.append(solve_one(p, limits, policy, allowed))
    usable = [
        s
        for s in solved
        if s.solution.found and not (fallback and not s.problem.held_only and s.problem is not p)
    ]
    if not usable:
        return _unsolved(solved), solved
    best = min(usable, key=Solved.key)
    return best, solved


def _unsolved(solved: list[Solved]) -> Solved:
    """No class has a plan: one cut short by the time limit, where one is, says so; else the class
    that may leave units in host memory (the most any plan may use) says why nothing fits."""
    stopped = [s for s in solved if s.solution.status != "infeasible"]
    loose = [s for s in solved if not s.problem.held_only]
    return (stopped or loose or solved)[0]
