"""``n_ubatch: auto``: plan with each candidate micro-batch and keep the best, by the objective.

A larger micro-batch speeds the prompt (llama.cpp copies each expert tensor in host memory to the GPU
once per micro-batch) and grows the compute buffer, so fewer experts fit and decode may slow. Every
candidate is its own problem (its compute buffers), planned to the end; the candidates compare by:

* ``time``: the least decode window (in whole 1e-6 ms, the planner's tie rule), then the fastest
  prompt, then the smaller micro-batch (less memory for the same speeds);
* ``request``: the least request time (the planner's own objective), then the smaller micro-batch;
* ``mass`` and ``throughput``: their own first level, then as ``time``.

A larger micro-batch only grows the compute buffers, so no plan of it decodes faster than the best
of a smaller one: under ``time`` the scan stops at the first candidate that decodes slower, and
never reads the larger ones (each costs a compute-graph allocation). It checks that the buffers did
grow and scans on where they did not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from solver.engines import engine_of, evaluate
from solver.planning.classes import solve_classes
from solver.planning.hints import Reload
from solver.planning.planner import Result, plan_rig
from solver.problem.placement import Placement
from solver.problem.problem import Problem
from solver.solvers import Limits
from solver.solvers.arcs import Arcs
from solver.solvers.exhaustive import plan_key
from solver.solvers.orders import AnyOrder
from solver.solvers.route import POLICY, Policy


@dataclass(frozen=True)
class Candidate:
    """One micro-batch's plan, as ``n_ubatch: auto`` compared it (figures None without a plan)."""

    n_ubatch: int
    status: str
    window_ms: float | None
    pp_tokens_per_s: float | None
    ttft_ms: float | None
    request_ms: float | None
    host_bytes: int | None
    key: tuple | None

    def json(self) -> dict:
        return {
            "n_ubatch": self.n_ubatch,
            "status": self.status,
            "window_ms": self.window_ms,
            "tokens_per_s": None if not self.window_ms else 1000.0 / self.window_ms,
            "pp_tokens_per_s": self.pp_tokens_per_s,
            "ttft_ms": self.ttft_ms,
            "request_ms": self.request_ms,
            "host_bytes": self.host_bytes,
        }


def _first_level(arcs: Arcs, plan: Placement) -> tuple[int, ...]:
    """The objective's own levels, as the planner ranks them (lower is better): less held mass
    negated, the slowest stage (throughput), the window's (request: the request's) whole 1e-6 ms."""
    return plan_key(arcs, tuple(plan.gpus), tuple(plan.cuts))[:3]


def candidate(p: Problem, limits: Limits, policy: Policy = POLICY) -> Candidate:
    """Plan one micro-batch's problem: in each way the engine may run it (solver.planning.classes),
    its table, arcs and the route's solver (no default, no oracle)."""
    engine = engine_of(p)
    rule = engine.orders(p)
    allowed = None if rule is None else [*rule.gpus, *(AnyOrder(gpus) for gpus in rule.free)]
    best, _ = solve_classes(p, limits, policy, allowed)
    q, arcs, solution = best.problem, best.arcs, best.solution
    n = p.engine_fields.n_ubatch
    if not solution.found:
        return Candidate(n, solution.status, None, None, None, None, None, None)
    plan = evaluate(q, solution.gpus, solution.cuts)
    speed = plan.prompt
    pp = speed.tokens_per_s if speed is not None else None
    key = (*_first_level(arcs, plan), -(pp or 0.0), n)
    if p.objective == "request":
        key = (*_first_level(arcs, plan), n)
    ttft = speed.ttft_ms if speed is not None else None
    request = plan.request_ms(p.generate)
    return Candidate(n, solution.status, plan.window_ms, pp, ttft, request, plan.host_bytes, key)


def _grew(before: Problem, after: Problem) -> bool:
    """Every GPU's room for any range is no larger under ``after`` (its buffers no smaller)."""
    return bool(
        np.all(after.reserve >= before.reserve)
        and after.first_stage_bytes >= before.first_stage_bytes
        and after.last_stage_bytes >= before.last_stage_bytes
    )


def plan_auto(
    problems: Iterable[Problem],
    limits: Limits | None = None,
    check: bool = False,
    policy: Policy = POLICY,
    default: str | None = None,
    reload: Reload | None = None,
) -> Result:
    """Plan each candidate (``problems``, the micro-batches ascending), then the chosen one end to end
    (``plan_rig``: its baseline, default and oracle, and the hints, each planned again at the chosen
    micro-batch), with the candidates compared in ``candidates``."""
    seen: list[tuple[Problem, Candidate]] = []
    best: tuple[Problem, Candidate] | None = None
    for p in problems:
        c = candidate(p, limits or Limits(), policy)
        monotone = not seen or _grew(seen[-1][0], p)
        seen.append((p, c))
        if c.key is not None and (best is None or c.key < best[1].key):
            best = (p, c)
        slower = best is not None and (c.key is None or c.key[:3] > best[1].key[:3])
        if p.objective == "time" and monotone and slower:
            break
    chosen = best[0] if best is not None else seen[0][0]
    again = None
    if reload is not None:
        ub = chosen.engine_fields.n_ubatch

        def again(**changes: object) -> Problem:
            return reload(**{"n_ubatch": ub, **changes})

    result = plan_rig(chosen, limits, check=check, policy=policy, default=default, reload=again)
    result.candidates = [c for _, c in seen]
    return result
