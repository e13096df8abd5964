"""Every piece of the planner timed on one problem: the table, the arcs, the DP and exhaustive oracles,
CP-SAT, reading the files, and end to end."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from solver.bench.timing import Settings, Timing, repeat_timed

if TYPE_CHECKING:
    from solver.bench.fresh import FreshRun
    from solver.solvers.policy import Policy


@dataclass
class RigBench:
    """The measurements of one rig (a file, or a synthetic sweep point)."""

    name: str
    order: str
    gpus: int
    layers: int
    pairs: int
    arcs: int
    placements: int
    status: str
    gap: float | None
    agrees: bool | None
    pieces: dict[str, Timing]
    hosts: int = 1
    kinds: int = 1
    fresh: FreshRun | None = None

    def ratio(self, top: str, bottom: str | float | None) -> float | None:
        """median(top) / median(bottom) (or / a number), None when either is missing."""
        num = self.pieces[top].median if top in self.pieces else None
        den = self.pieces[bottom].median if isinstance(bottom, str) and bottom in self.pieces else bottom
        if num is None or not isinstance(den, float) or den <= 0:
            return None
        return num / den

    def as_json(self, import_ms: float | None) -> dict[str, Any]:
        return {
            "rig": self.name,
            "order": self.order,
            "gpus": self.gpus,
            "layers": self.layers,
            "hosts": self.hosts,
            "kinds": self.kinds,
            "pairs": self.pairs,
            "arcs": self.arcs,
            "placements": self.placements,
            "status": self.status,
            "gap": self.gap,
            "cpsat_equals_dp": self.agrees,
            "pieces": {k: t.as_json() for k, t in self.pieces.items()},
            "ratios": {
                "cpsat_over_dp": self.ratio("cp-sat", "dp"),
                "end_to_end_over_import": self.ratio("end-to-end", import_ms),
            },
            **({"process": self.fresh.as_json()} if self.fresh else {}),
        }


def measure(
    problem: Any, settings: Settings, reload: Callable[[], Any] | None = None, policy: Policy | None = None
) -> RigBench:
    """Time every piece on one problem; ``reload`` re-reads its files (``read``, part of end to end);
    ``policy``: the solver route's thresholds (None: the command line's)."""
    from solver.engines import build_table
    from solver.planning.build import build_arcs
    from solver.planning.planner import plan_rig
    from solver.report.planview import to_json as plan_json
    from solver.solvers import Limits, TooLarge
    from solver.solvers.exhaustive import count_placements, solve_exhaustive
    from solver.solvers.route import POLICY, exact_dp

    s = settings
    policy = policy or POLICY
    pieces: dict[str, Timing] = {}
    pieces["table"], walk = repeat_timed(lambda: build_table(problem), s.repeat, s.budget_s)
    pieces["arcs"], arcs = repeat_timed(lambda: build_arcs(problem, walk), s.repeat, s.budget_s)
    dp = None
    try:
        pieces["dp"], dp = repeat_timed(lambda: exact_dp(arcs, policy=policy), s.repeat, s.budget_s)
    except TooLarge as exc:
        pieces["dp"] = Timing(skipped=str(exc))
    placements = count_placements(arcs)
    if placements <= s.exhaustive_limit:
        pieces["exhaustive"], _ = repeat_timed(lambda: solve_exhaustive(arcs), s.repeat, s.budget_s)
    else:
        pieces["exhaustive"] = Timing(skipped=f"over the {s.exhaustive_limit:,}-placement limit")
    limits = Limits(time_limit=s.time_limit, workers=s.workers)
    read, cpsat = Timing(), Timing()

    def end_to_end() -> Any:
        t0 = time.perf_counter()
        p = reload() if reload else problem
        read.runs.append((time.perf_counter() - t0) * 1e3)
        result = plan_rig(p, limits, policy=policy)
        cpsat.runs.append(result.solution.wall_ms)
        return result

    pieces["end-to-end"], result = repeat_timed(end_to_end, s.repeat, s.budget_s)
    if reload:
        pieces["read"] = read
    pieces["cp-sat"] = cpsat
    sol = result.solution
    # same plan as the exact DP (an unproven plan can still be the optimum, found by the hint)
    agrees = None if dp is None or not sol.found else (dp.gpus, dp.cuts) == (sol.gpus, sol.cuts)
    return RigBench(
        name=problem.rig,
        order=problem.order,
        gpus=problem.n_gpus,
        layers=problem.n_layers,
        pairs=len(problem.pair_layer),
        arcs=len(arcs),
        placements=placements,
        status=result.status,
        gap=plan_json(result)["solver"]["gap"],
        agrees=agrees,
        pieces=pieces,
        hosts=len(set(problem.hosts.tolist())),
        kinds=len(set(problem.gpu_names)),
    )
