"""Results -> the JSON object (docs/reference.md, "The JSON object") and the human table."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from solver.engines import engine_of
from solver.engines.base import PlanCell, StageCell, ms
from solver.files.console import fit_names, print_lines
from solver.files.kvcache import DEFAULT_KV_TYPE
from solver.planning.planner import Result
from solver.problem.baselines import Baseline
from solver.problem.placement import Placement, PromptSpeed
from solver.problem.problem import Problem
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
    if plan is not None and plan.prompt is not None:  # engines that model prompt processing
        out |= plan.prompt.json()
    if b.note:
        out["note"] = b.note
    if b.reason:
        out["reason"] = b.reason
    return out


def speedup(r: Result) -> float | None:
    """The plan's tokens/s over the engine's default's (None: either has no placement that fits)."""
    base = r.default
    if r.plan is None or base is None or base.plan is None or not base.feasible:
        return None
    return r.plan.tokens_per_s / base.plan.tokens_per_s


def _gap(value: float | None, bound: float | None) -> float | None:
    if value is None or bound is None:
        return None
    return abs(value - bound) / max(abs(value), 1e-12)


def _objective_value(plan: Placement, p: Problem) -> float | None:
    """What the objective (and so ``solver.bound``) measures: window ms, held mass, slowest stage ms,
    or one request's ms."""
    if p.objective == "request":
        return plan.request_ms(p.generate)
    return {"time": plan.window_ms, "mass": plan.held_mass}.get(p.objective, plan.bottleneck_ms)


def to_json(r: Result) -> dict:
    """The ``--json`` object: the required keys plus order, context and a few counts."""
    p, plan = r.problem, r.plan
    sol = r.solution
    proven = r.status == "optimal"
    objective_value = None if plan is None else _objective_value(plan, p)
    bound = objective_value if proven else sol.bound
    out: dict = {
        "rig": p.rig,
        "model": p.model,
        "objective": p.objective,
        "order": p.order,
        "context": p.context,
        "kv_type": p.kv_type,
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
    if p.objective == "request":
        out["generate"] = p.generate
        out["request_ms"] = plan.request_ms(p.generate) if plan else None
    if r.candidates is not None:
        out["ubatch_candidates"] = [c.json() for c in r.candidates]
    if r.reason:
        out["reason"] = r.reason
    if r.refilled is not None:  # the solver's plan, before it was filled again as its command runs
        out["refilled_from"] = {"window_ms": r.refilled.window_ms, "held_pairs": r.refilled.held_pairs}
    out["hints"] = [h.to_json() for h in r.hints]
    out["baseline"] = _baseline_json(r.baseline)
    if r.default is not None:
        out["default"] = _baseline_json(r.default)
        if r.default.command is not None:
            out["default"]["command"] = r.default.command
        gain = speedup(r)
        if gain is not None:
            out["default"]["speedup"] = gain
    out["solver"] = {
        "name": sol.name,
        "proven_optimal": proven,
        "wall_ms": r.wall_ms,
        "table_ms": r.table_ms,
        "bound": bound,
        "gap": 0.0 if proven else _gap(objective_value, bound),
        "arcs": len(r.arcs),
        "solves": sol.work.solves,
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
    ("layers", lambda s: _layers(s.start, s.end) + (f" ({s.cpu_layers} CPU)" if s.cpu_layers else "")),
    ("room", lambda s: format_size(s.room_bytes)),
]
#: Shown with the throughput objective: the stage's time with the misses of its own layers.
_STAGE: tuple[str, StageCell] = ("stage\nms", lambda s: ms(s.stage_ms))
_WINDOW: list[tuple[str, PlanCell]] = [
    ("window", lambda q: f"{q.window_ms:.3f} ms"),
    ("tokens/s", lambda q: f"{q.tokens_per_s:.2f}"),
    ("slowest stage", lambda q: f"{q.bottleneck_ms:.3f} ms"),
]
#: Left-aligned columns of the stage table: the rest are numbers.
_LEFT = ("GPU", "layers")


def stage_table(r: Result) -> Table:
    """The plan's stages: GPU, layers, room, then the engine's columns (and the stage time with the
    throughput objective). Only the GPU column may wrap (console.fit_names), so no number is ever cut
    short."""
    p, plan = r.problem, r.plan
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    columns = _FIRST + engine_of(p).columns + ([_STAGE] if p.objective == "throughput" else [])
    for col, _ in columns:
        t.add_column(col, justify="left" if col in _LEFT else "right", no_wrap=True)
    for s in plan.stages:
        t.add_row(*(cell(s) for _, cell in columns))
    return t


def listed(values: list[int], width: int) -> str:
    """``8,16,33``, broken after a comma into lines of at most ``width`` characters (a long list of
    cuts or GPUs in a narrow terminal wraps whole numbers, never inside one)."""
    lines = [""]
    for i, v in enumerate(values):
        piece = f"{v}," if i < len(values) - 1 else str(v)
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(lines)


def compare_table(r: Result, width: int) -> Table:
    """The plan beside what the engine does unasked (or the proportional split), row by row, within
    ``width`` columns."""
    p, plan, shown = r.problem, r.plan, r.compared
    base = shown.plan
    c = Table(show_header=True, box=box.SIMPLE_HEAD, pad_edge=False)
    c.add_column("", no_wrap=True)
    c.add_column(f"plan ({r.solution.name})", justify="right", no_wrap=True)
    c.add_column(shown.name, justify="right", no_wrap=True)
    room = max(8, (width - len("experts in host RAM") - 6) // 2)  # the longest label, three gaps
    rows = [("cuts", listed(plan.cuts, room), listed(shown.cuts, room))]
    for label, cell in _WINDOW + engine_of(p).summary:
        rows.append((label, cell(plan), cell(base) if base else "-"))
    rows.append(("fits memory", "yes", "yes" if shown.feasible else "[red]no[/red]"))
    if plan.gpus != sorted(plan.gpus):
        rows.insert(1, ("GPU order", listed(plan.gpus, room), listed(list(range(p.n_gpus)), room)))
    for row in rows:
        c.add_row(*row)
    return c


def refill_note(solved: Placement, plan: Placement) -> str:
    """What filling the solver's plan again under its own command's buffers (which the solver counted
    by a bound) changed."""
    held = sum(s.cache_bytes for s in plan.stages)
    before = sum(s.cache_bytes for s in solved.stages)
    return (
        f"as run: the solver counts a bound on the compute buffers beside host expert tensors; filled again "
        f"under its own command's, the plan holds {format_size(held)} on the GPUs (was "
        f"{format_size(before)}): window {solved.window_ms:.3f} -> {plan.window_ms:.3f} ms"
    )


def prompt_note(speed: PromptSpeed) -> str:
    """What the prompt rows are of: the prompt's length, its micro-batch, flash attention, pipelining."""
    overlap = "overlapped across stages" if speed.pipeline else "stage after stage (no pipeline)"
    fa = "on" if speed.flash_attn else "off"
    text = f"prompt: {speed.prompt:,} tokens in micro-batches of {speed.n_ubatch:,}, {overlap}"
    text += f", flash attention {fa}"
    if speed.tokens_per_s is None:
        text += "; its speed is unknown (a GPU's matrix TFLOPS is not known: set matrix_tflops)"
    return text


def _s(ms_: float | None) -> str:
    return "-" if ms_ is None else f"{ms_ / 1000:,.2f}"


def ubatch_table(r: Result) -> Table:
    """``--ubatch auto``: each micro-batch's plan, decode against prompt speed (the chosen one starred)."""
    chosen = r.problem.engine_fields.n_ubatch
    request = r.problem.objective == "request"
    c = Table(show_header=True, box=box.SIMPLE_HEAD, pad_edge=False)
    heads = [
        "-ub",
        "decode t/s",
        "prompt t/s",
        "TTFT s",
        *(["request s"] if request else []),
        "experts on CPU",
    ]
    for i, head in enumerate(heads):
        c.add_column(head, justify="left" if i == 0 else "right", no_wrap=True)
    for cand in r.candidates or []:
        mark = f"{cand.n_ubatch:,}" + (" *" if cand.n_ubatch == chosen else "")
        if cand.window_ms is None:
            c.add_row(mark, cand.status, *["-"] * (len(heads) - 2))
            continue
        pp = "-" if cand.pp_tokens_per_s is None else f"{cand.pp_tokens_per_s:,.1f}"
        row = [mark, f"{1000 / cand.window_ms:.2f}", pp, _s(cand.ttft_ms)]
        c.add_row(*row, *([_s(cand.request_ms)] if request else []), format_size(cand.host_bytes or 0))
    return c


def print_report(r: Result, console: Console) -> None:
    """Stages of the plan, the plan against the engine's default, and the solver's status."""
    p, plan = r.problem, r.plan
    title = f"{p.rig}: {p.model}, {p.n_layers} layers on {p.n_gpus} GPUs, context {p.context:,}"
    if p.kv_type != DEFAULT_KV_TYPE:
        title += f" ({p.kv_type} KV cache)"
    if plan is None:
        console.print(f"[bold]{title}[/bold]")
        console.print(f"[red]{r.status}[/red]: {r.reason}")
        if r.compared.reason:
            console.print(f"{r.compared.name}: {r.compared.reason}")
        for hint in r.hints:
            console.print(f"hint: {hint.text}")
        return
    stages = stage_table(r)
    fit_names(stages, console)
    print_lines(console, f"[bold]{title}[/bold]", stages)
    shown = r.compared
    print_lines(console, compare_table(r, console.width))
    notes = [f"{shown.name}: {shown.note}"] if shown.note else []
    gain = speedup(r)
    if gain is not None:
        notes.append(
            f"plan vs {shown.name}: {plan.tokens_per_s:.2f} vs {shown.plan.tokens_per_s:.2f} tokens/s, "
            f"{100 * (gain - 1):+.1f}%"
        )
    if plan.prompt is not None:
        notes.append(prompt_note(plan.prompt))
    request = plan.request_ms(p.generate) if p.objective == "request" else None
    if request is not None:
        notes.append(
            f"request: {plan.prompt.prompt:,} prompt tokens in {_s(plan.prompt.ttft_ms)} s, then "
            f"{p.generate:,} x {plan.window_ms:.2f} ms: {_s(request)} s"
        )
    if r.candidates is not None:
        rule = "least request time" if p.objective == "request" else f"{p.objective}, then prompt speed"
        print_lines(console, f"--ubatch auto ({rule}; * chosen):", ubatch_table(r))
    for g in sorted(set(range(p.n_gpus)) - set(plan.gpus)):
        ms_ = (r.idle_cost_ms or {}).get(g)
        if r.idle_cost_ms is None:
            cost = "left out (its cost is not computed on a rig this large)"
        else:
            cost = "no plan can use it" if ms_ is None else f"using it costs {ms_:+.3f} ms of window at best"
        notes.append(f"idle: GPU {g} {p.gpu_names[g]}: {cost}")
    notes += [f"hint: {hint.text}" for hint in r.hints]
    if r.refilled is not None:
        notes.append(refill_note(r.refilled, plan))
    sol = r.solution
    proof = "optimal (proven)" if r.status == "optimal" else f"{r.status}, not proven"
    if r.status != "optimal" and sol.bound is not None:
        unit = "" if p.objective == "mass" else " ms"
        proof += f"; bound {sol.bound:.6g}{unit}"
    notes.append(
        f"{sol.name}: {proof}, engine {p.engine}, objective {p.objective}, order {p.order}; "
        f"{r.wall_ms:.0f} ms "
        f"(table {r.table_ms:.1f} ms, {len(r.arcs):,} arcs, {sol.work.solves} solves)"
    )
    if r.oracle is not None:
        o = r.oracle
        verdict = "agrees" if o.agrees else "[red]DISAGREES[/red]"
        notes.append(f"check: {o.name} {verdict} ({o.status}, {o.wall_ms:.0f} ms)")
    print_lines(console, "\n".join(notes))
