"""What would help, each checked by planning again: a card left idle, more VRAM on one card, llama.cpp.

- **Idle GPUs.** A rig planned with every GPU is solved again over the same table with idle GPUs
  allowed (that table gives every range at least the room the idle rig's does, which counts
  llama.cpp's single-device buffer on the last card, so no faster idle plan is missed). When that
  plan is at least MIN_GAIN faster, the rig is loaded as ``--idle-gpus`` loads it: where its problem
  is the same (strata, vLLM, SGLang, most llama.cpp rigs) the screen's plan is the one ``--idle-gpus``
  prints, else the rig is planned again and that plan is the hint.
- **More VRAM.** For each GPU, the least extra room with which some split fits (a binary search over
  the ranges' needs with the layer limits and the order kept); the GPUs are tried from the least up,
  the rig loaded with that much more free memory (less what the engine keeps of it) and planned
  again, and the first that plans is the hint.
- **Layers on the CPU.** A llama.cpp rig planned with every layer on a GPU is planned again with
  ``--cpu-layers`` (the first GPU's first layers wholly on the CPU, as ``-ngl`` leaves them).
- **llama.cpp.** A vLLM or SGLang rig is planned again for llama.cpp, which keeps the experts no GPU
  holds in host RAM; the hint says what that plan leaves in host memory and its speed at the rig's
  host bandwidth, else HOST_BANDWIDTH.

All hints share HINT_S seconds (and what is left of the time limit).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from solver.engines import Table, engine_of, evaluate
from solver.errors import InputError
from solver.planning.build import build_arcs, kept_arcs
from solver.planning.infeasible import allowed
from solver.problem.placement import Placement
from solver.problem.problem import Problem
from solver.solvers import Limits
from solver.solvers.orders import AnyOrder
from solver.solvers.route import POLICY, Policy, route, solve
from solver.units import format_rate, format_size

#: Seconds every hint of one plan may take together.
HINT_S = 5.0
#: A plan with idle GPUs must be at least this share faster than the plan for its hint.
MIN_GAIN = 0.001
#: GPUs planned again with more VRAM at most, from the one that needs the least.
VRAM_TRIES = 3
#: The host rate a llama.cpp hint assumes where the rig gives none: a two-channel DDR5 desktop's
#: effective rate (docs/fidelity-sources.md); whether a plan fits does not depend on it.
HOST_BANDWIDTH = 40 * 10**9
MIB = 2**20

#: The problem of the same files with other command-line settings (``solver.planning.resolve``).
Reload = Callable[..., Problem]
#: A problem planned end to end within the limits (the planner's ``plan_rig``, without hints).
Replan = Callable[[Problem, Limits], "Planned"]


class Planned(Protocol):
    """What the hints read of a planning run."""

    problem: Problem
    status: str
    plan: Placement | None


@dataclass(frozen=True)
class Hint:
    """One thing that would help: its kind (``idle-gpus``, ``cpu-layers``, ``vram``, ``engine``), one
    line saying it, and the figures behind it, for ``--json``."""

    kind: str
    text: str
    data: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"kind": self.kind, "text": self.text, **self.data}


def _gpu(p: Problem, g: int) -> str:
    return f"GPU {g} ({p.gpu_names[g]})"


def _deadline(limits: Limits) -> float:
    now = time.perf_counter()
    return min(limits.deadline(now) or math.inf, now + HINT_S)


def _within(limits: Limits, end: float) -> Limits:
    """``limits`` with a time limit that ends at ``end``."""
    now = time.perf_counter()
    return Limits(time_limit=max(end - now, 0.0), workers=limits.workers, started=now)


def _pace(p: Problem, plan: Placement) -> float:
    """What the objective makes faster: the slowest stage under throughput, else the window."""
    return plan.bottleneck_ms if p.objective == "throughput" else plan.window_ms


def hints_of(
    result: Planned, table: Table, reload: Reload, replan: Replan, limits: Limits, policy: Policy = POLICY
) -> list[Hint]:
    """The hints for one planning run (``table``: its engine table; ``reload(**overrides)``: the same
    files with other settings; ``replan``: how a problem is planned again)."""
    end = _deadline(limits)
    p = result.problem
    if result.plan is not None:
        hint = idle_hint(result, table, reload, replan, limits, end, policy)
        return [hint] if hint else []
    if result.status != "infeasible":
        return []
    found = [
        cpu_layers_hint(p, reload, replan, limits, end),
        vram_hint(p, table, reload, replan, limits, end),
        engine_hint(p, reload, replan, limits, end),
    ]
    return [h for h in found if h is not None]


def idle_hint(
    result: Planned, table: Table, reload: Reload, replan: Replan, limits: Limits, end: float, policy: Policy
) -> Hint | None:
    """Leaving GPUs idle, when ``--idle-gpus`` plans faster (time and throughput objectives)."""
    p, plan = result.problem, result.plan
    if p.idle_gpus or p.n_gpus < 2 or p.objective == "mass" or time.perf_counter() >= end:
        return None
    idle = dataclasses.replace(p, idle_gpus=True)
    arcs = build_arcs(idle, table)
    rule = engine_of(idle).orders(idle)
    orders = None if rule is None else [*rule.gpus, *(AnyOrder(gpus) for gpus in rule.free)]
    if orders is not None and not orders:
        return None
    screen = solve(route(arcs, policy, orders), arcs, _within(limits, end), policy)
    if not screen.found or len(screen.gpus) == p.n_gpus:
        return None
    if _pace(p, evaluate(idle, screen.gpus, screen.cuts)) > _pace(p, plan) * (1 - MIN_GAIN):
        return None
    try:
        q = reload(idle_gpus=True)
    except InputError:
        return None
    if _same(dataclasses.replace(q, idle_gpus=False), p):  # the same table: the screen is the plan
        found = evaluate(q, screen.gpus, screen.cuts)
    else:
        found = replan(q, _within(limits, end)).plan
    if found is None or _pace(p, found) > _pace(p, plan) * (1 - MIN_GAIN):
        return None
    left = sorted(set(range(p.n_gpus)) - set(found.gpus))
    before, after = _pace(p, plan), _pace(p, found)
    what = "slowest stage" if p.objective == "throughput" else "window"
    names = ", ".join(_gpu(p, g) for g in left)
    text = (
        f"leaving {names} idle is faster: --idle-gpus plans a {what} of {after:.3f} ms "
        f"({found.tokens_per_s:.2f} tokens/s), {before - after:.3f} ms "
        f"({(before - after) / before:.1%}) less than this plan's {before:.3f} ms"
    )
    data = {
        "idle": left,
        "gpus": found.gpus,
        "cuts": found.cuts,
        "window_ms": found.window_ms,
        "bottleneck_ms": found.bottleneck_ms,
        "tokens_per_s": found.tokens_per_s,
        "saves_ms": before - after,
    }
    return Hint("idle-gpus", text, data)


def _same(x: object, y: object) -> bool:
    """Equal all the way down: dataclasses field by field, arrays element by element."""
    if type(x) is not type(y):
        return False
    if isinstance(x, np.ndarray):
        return x.shape == y.shape and bool(np.array_equal(x, y))
    if dataclasses.is_dataclass(x):
        return all(_same(getattr(x, f.name), getattr(y, f.name)) for f in dataclasses.fields(x))
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    return bool(x == y)


def least_room(p: Problem, table: Table, g: int) -> int | None:
    """The least extra room on GPU ``g`` with which some split's every range fits (its layer limits
    and order kept; a free order's search may count a GPU twice, so the amount is a lower bound
    there); None: no amount makes one fit."""
    avail = int(p.free[g]) - int(p.reserve[g])
    n = p.n_layers
    upper = np.triu(np.ones((n + 1, n + 1), dtype=bool), 1)
    steps = np.unique(table.need[allowed(p)[g]].astype(np.int64) - avail)
    steps = steps[steps > 0]

    def fits(extra: int) -> bool:
        room = table.room.copy()
        room[g] = np.where(upper, avail + extra - table.need, -1)
        return len(kept_arcs(p, room)[0]) > 0

    if not len(steps) or not fits(int(steps[-1])):
        return None
    lo, hi = 0, len(steps) - 1  # fits(steps[hi]); find the first step that fits
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(int(steps[mid])) else (mid + 1, hi)
    return int(steps[lo])


def vram_hint(
    p: Problem, table: Table, reload: Reload, replan: Replan, limits: Limits, end: float
) -> Hint | None:
    """The GPU whose extra VRAM makes the rig plan with the least of it, planned again to be sure.

    The engine may keep a share of a card's memory (vLLM's ``gpu_memory_utilization``), so the room
    a GiB more free gives is read from the rig loaded with it, and the free memory that gives the
    room is rounded up to whole MiB.
    """
    least = [(x, g) for g in range(p.n_gpus) if (x := least_room(p, table, g)) is not None]
    for room, g in sorted(least)[:VRAM_TRIES]:
        if time.perf_counter() >= end:
            return None
        try:
            probe = reload(free={g: int(p.free[g]) + 2**30})
            per_byte = ((probe.free[g] - probe.reserve[g]) - (p.free[g] - p.reserve[g])) / 2**30
            if per_byte <= 0:
                continue
            extra = -(-math.ceil(room / per_byte) // MIB) * MIB
            free = int(p.free[g]) + extra
            again = replan(reload(free={g: free}), _within(limits, end))
        except InputError:
            continue
        if again.plan is None:
            continue
        text = (
            f"{_gpu(p, g)} with {format_size(extra)} more free VRAM ({format_size(free)} instead "
            f"of {format_size(int(p.free[g]))}) would fit: planned so, {again.plan.tokens_per_s:.2f} tokens/s"
        )
        data = {"gpu": g, "more_bytes": extra, "free_bytes": free, "tokens_per_s": again.plan.tokens_per_s}
        return Hint("vram", text, data)
    return None


def cpu_layers_hint(p: Problem, reload: Reload, replan: Replan, limits: Limits, end: float) -> Hint | None:
    """The rig planned again with whole layers on the CPU, for an engine that plans them and a rig
    that did not ask for them."""
    if not engine_of(p).plans_cpu_layers or getattr(p.engine_fields, "cpu_layers", None) is not None:
        return None
    if time.perf_counter() >= end:
        return None
    try:
        again = replan(reload(cpu_layers=True), _within(limits, end))
    except InputError:
        return None
    if again.plan is None:
        return None
    n = again.plan.stages[0].cpu_layers
    layers = "layer" if n == 1 else f"{n} layers"
    text = (
        f"with its first {layers} wholly on the CPU (-ngl), llama.cpp runs this rig: "
        f"{again.plan.tokens_per_s:.2f} tokens/s (solve {p.files.get('rig', 'RIG')} --cpu-layers, or "
        f"cpu_layers: true in the rig)"
    )
    return Hint("cpu-layers", text, {"cpu_layers": n, "tokens_per_s": again.plan.tokens_per_s})


def engine_hint(p: Problem, reload: Reload, replan: Replan, limits: Limits, end: float) -> Hint | None:
    """The engine's ``host_fallback`` (llama.cpp) with host RAM, for a rig whose engine keeps every
    weight in VRAM."""
    alt = engine_of(p).host_fallback
    if alt is None or time.perf_counter() >= end:
        return None
    try:
        q = reload(engine=alt, host_bandwidth=HOST_BANDWIDTH)
    except InputError:  # the model lacks what llama.cpp's tables read
        return None
    again = replan(q, _within(limits, end))
    if again.plan is None:
        return None
    rate = int(q.engine_fields.host_bandwidth or HOST_BANDWIDTH)
    text = (
        f"{alt}, which keeps the experts no GPU holds in host RAM, plans this rig: "
        f"{format_size(again.plan.host_bytes)} of experts in host memory, "
        f"{again.plan.tokens_per_s:.2f} tokens/s at host_bandwidth {format_rate(rate)} "
        f"(solve {p.files.get('rig', 'RIG')} --engine {alt}; the rig needs host_bandwidth)"
    )
    data = {
        "engine": alt,
        "host_bytes": again.plan.host_bytes,
        "tokens_per_s": again.plan.tokens_per_s,
        "host_bandwidth": rate,
    }
    return Hint("engine", text, data)
