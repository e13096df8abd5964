"""Results -> the JSON object of SPEC section 5, and the human table."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from solver.baselines import Baseline
from solver.engines import engine_of
from solver.engines.base import PlanCell, StageCell
from solver.plan import Placement
from solver.planner import Result
from solver.problem import Problem
from solver.units import format_size


def stage_json(plan: Placement, p: Problem) -> list[dict]:
    """Each stage of a placement as the JSON report gives it, the engine's keys included."""
    engine = engine_of(p)
    return [
        {
            "gpu": s.gpu,
            "name": s.name,
            "start": s.start,
            "end": s.end,
            "layers": s.end - s.start,
            "room_bytes": s.room_bytes,
            "cache_bytes": s.cache_bytes,
            "held_pairs": s.held_pairs,
            "visible_pairs": s.visible_pairs,
            "held_mass": s.held_mass,
            "compute_ms": s.compute_ms,
            "gpu_ms": s.compute_ms,
            "stage_ms": s.stage_ms,
            "host_bytes": s.host_bytes,
            **engine.stage_json(s),
        }
        for s in plan.stages
    ]


def _baseline_json(b: Baseline) -> dict:
    """A default split evaluated like the plan: the proportional baseline, or an engine's own default."""
    plan = b.plan
    out = {
        "name": b.name,
        "cuts": b.cuts,
        "feasible": b.feasible,
        "window_ms": plan.window_ms if plan else None,
        "tokens_per_s": plan.tokens_per_s if plan else None,
        "held_mass": plan.held_mass if plan else None,
        "held_pairs": plan.held_pairs if plan else None,
        "bottleneck_ms": plan.bottleneck_ms if plan else None,
    }
    if b.note:
        out["note"] = b.note
    if b.reason:
        out["reason"] = b.reason
    return out


def _gap(value: float | None, bound: float | None) -> float | None:
    if value is None or bound is None:
        return None
    return abs(value - bound) / max(abs(value), 1e-12)


def _objective_value(plan: Placement, objective: str) -> float:
    """What the objective (and so ``solver.bound``) measures: window ms, held mass, or slowest stage ms."""
    return {"time": plan.window_ms, "mass": plan.held_mass}.get(objective, plan.bottleneck_ms)


def to_json(r: Result) -> dict:
    """The ``--json`` object: required keys of SPEC 5 plus order, context and a few counts."""
    p, plan = r.problem, r.plan
    sol = r.solution
    proven = r.status == "optimal"
    objective_value = None if plan is None else _objective_value(plan, p.objective)
    bound = objective_value if proven else sol.bound
    out: dict = {
        "rig": p.rig,
        "model": p.model,
        "objective": p.objective,
        "order": p.order,
        "context": p.context,
        "status": r.status,
        "window_ms": plan.window_ms if plan else None,
        "tokens_per_s": plan.tokens_per_s if plan else None,
        "held_mass": plan.held_mass if plan else None,
        "held_pairs": plan.held_pairs if plan else 0,
        "cuts": plan.cuts if plan else [],
        "gpus": plan.gpus if plan else [],
        "stages": stage_json(plan, p) if plan else [],
        "engine": p.engine,
        "bottleneck_ms": plan.bottleneck_ms if plan else None,
        "host_bytes": plan.host_bytes if plan else None,
        "idle": sorted(set(range(p.n_gpus)) - set(plan.gpus)) if plan else [],
    }
    if r.idle_cost_ms is not None:
        out["idle_cost_ms"] = {str(g): ms for g, ms in r.idle_cost_ms.items()}
    if plan and len(p.host_names) > 1:
        for stage in out["stages"]:
            stage["host"] = p.host_names[p.hosts[stage["gpu"]]]
    out |= engine_of(p).plan_json(plan)
    if r.reason:
        out["reason"] = r.reason
    out["baseline"] = _baseline_json(r.baseline)
    if r.default is not None:
        out["default"] = _baseline_json(r.default)
    out["solver"] = {
        "name": sol.name,
        "proven_optimal": proven,
        "wall_ms": r.wall_ms,
        "table_ms": r.table_ms,
        "bound": bound,
        "gap": 0.0 if proven else _gap(objective_value, bound),
        "arcs": len(r.arcs),
        "solves": sol.info.get("solves", 0),
    }
    if r.oracle is not None:
        o = r.oracle
        out["oracle"] = {
            "name": o.name,
            "status": o.status,
            "window_ms": o.plan.window_ms if o.plan else None,
            "held_mass": o.plan.held_mass if o.plan else None,
            "cuts": o.plan.cuts if o.plan else [],
            "gpus": o.plan.gpus if o.plan else [],
            "agrees": o.agrees,
            "wall_ms": o.wall_ms,
        }
    return out


def _layers(a: int, b: int) -> str:
    return f"{a}-{b - 1}"


_FIRST: list[tuple[str, StageCell]] = [
    ("GPU", lambda s: f"{s.gpu} {s.name}"),
    ("layers", lambda s: _layers(s.start, s.end)),
    ("room", lambda s: format_size(s.room_bytes)),
]
_LAST: list[tuple[str, StageCell]] = [("compute", lambda s: f"{s.compute_ms:.2f} ms")]
#: Shown with the throughput objective: compute plus the misses of the stage's own layers.
_STAGE: tuple[str, StageCell] = ("stage", lambda s: f"{s.stage_ms:.2f} ms")
_WINDOW: list[tuple[str, PlanCell]] = [
    ("window", lambda q: f"{q.window_ms:.3f} ms"),
    ("slowest stage", lambda q: f"{q.bottleneck_ms:.3f} ms"),
]


def print_report(r: Result, console: Console) -> None:
    """Stages of the plan, the plan against the proportional baseline, and the solver's status."""
    p, plan = r.problem, r.plan
    title = f"{p.rig}: {p.model}, {p.n_layers} layers on {p.n_gpus} GPUs, context {p.context:,}"
    if plan is None:
        console.print(f"[bold]{title}[/bold]")
        console.print(f"[red]{r.status}[/red]: {r.reason}")
        if r.compared.reason:
            console.print(f"{r.compared.name}: {r.compared.reason}")
        return
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    engine = engine_of(p)
    columns = _FIRST + engine.columns + _LAST + ([_STAGE] if p.objective == "throughput" else [])
    for col, _ in columns:
        t.add_column(col, justify="left" if col in ("GPU", "layers") else "right", no_wrap=True)
    for s in plan.stages:
        t.add_row(*(cell(s) for _, cell in columns))
    console.print(t)
    shown = r.compared
    base = shown.plan
    c = Table(show_header=True, box=box.SIMPLE_HEAD, pad_edge=False)
    c.add_column("")
    c.add_column(f"plan ({r.solution.name})", justify="right")
    c.add_column(shown.name if not shown.note else f"{shown.name} ({shown.note})", justify="right")
    rows = [("cuts", ",".join(map(str, plan.cuts)), ",".join(map(str, shown.cuts)))]
    for label, cell in _WINDOW + engine.summary:
        rows.append((label, cell(plan), cell(base) if base else "-"))
    rows.append(("fits memory", "yes", "yes" if shown.feasible else "[red]no[/red]"))
    if plan.gpus != sorted(plan.gpus):
        rows.insert(1, ("GPU order", ",".join(map(str, plan.gpus)), ",".join(map(str, range(p.n_gpus)))))
    for row in rows:
        c.add_row(*row)
    console.print(c)
    for g in sorted(set(range(p.n_gpus)) - set(plan.gpus)):
        ms = (r.idle_cost_ms or {}).get(g)
        if r.idle_cost_ms is None:
            cost = "left out (its cost is not computed on a rig this large)"
        else:
            cost = "no plan can use it" if ms is None else f"using it costs {ms:+.3f} ms of window at best"
        console.print(f"idle: GPU {g} {p.gpu_names[g]}: {cost}")
    sol = r.solution
    proof = "optimal (proven)" if r.status == "optimal" else f"{r.status}, not proven"
    if r.status != "optimal" and sol.bound is not None:
        unit = "" if p.objective == "mass" else " ms"
        proof += f"; bound {sol.bound:.6g}{unit}"
    console.print(
        f"{sol.name}: {proof}, engine {p.engine}, objective {p.objective}, order {p.order}; "
        f"{r.wall_ms:.0f} ms "
        f"(table {r.table_ms:.1f} ms, {len(r.arcs):,} arcs, {sol.info.get('solves', 0)} solves)"
    )
    if r.oracle is not None:
        o = r.oracle
        verdict = "agrees" if o.agrees else "[red]DISAGREES[/red]"
        console.print(f"check: {o.name} {verdict} ({o.status}, {o.wall_ms:.0f} ms)")
