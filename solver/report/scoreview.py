"""A scored command beside the plan: the JSON object and the tables ``solve score`` prints."""

from __future__ import annotations

from collections.abc import Callable

from rich import box
from rich.console import Console
from rich.table import Table

from solver.files.console import fit_names, print_lines
from solver.planning.planner import Result
from solver.problem.placement import PromptSpeed
from solver.problem.scored import Card, Scored
from solver.report.planview import stage_json, to_json
from solver.units import format_size


def _card_json(c: Card, free: int | None) -> dict:
    return {
        "gpu": c.gpu,
        "name": c.name,
        "layers": list(c.layers) if c.layers else None,
        "output": c.output,
        "held": c.held,
        "offloaded": c.offloaded,
        "elsewhere": c.elsewhere,
        "guests": c.guests,
        "need_bytes": c.need_bytes,
        "free_bytes": free,
        "avail_bytes": c.avail_bytes,
        "fits": c.fits,
        "shortfall_bytes": c.shortfall,
    }


def score_json(s: Scored, words: list[str]) -> dict:
    """The keys of a plan's JSON for the command's placement, with its cards and what does not fit."""
    p, plan = s.problem, s.placement
    return {
        "rig": p.rig,
        "model": p.model,
        "engine": p.engine,
        "context": p.context,
        "command": words,
        "status": "feasible" if s.fits else "infeasible",
        "fits": s.fits,
        "window_ms": s.window_ms,
        "tokens_per_s": s.tokens_per_s,
        "held_mass": plan.held_mass,
        "held_pairs": plan.held_pairs,
        "cuts": plan.cuts,
        "gpus": plan.gpus,
        "stages": stage_json(plan, p),
        "bottleneck_ms": s.bottleneck_ms,
        "host_bytes": plan.host_bytes,
        "idle": sorted(set(range(p.n_gpus)) - {c.gpu for c in s.cards if c.gpu is not None}),
        "cpu_layers": {"start": s.cpu_layers[0], "end": s.cpu_layers[1], "ms": s.cpu_ms},
        "extra_ms": s.extra_ms,
        "cards": [_card_json(c, None if c.gpu is None else int(p.free[c.gpu])) for c in s.cards],
        "out_of_memory": [{"gpu": c.gpu, "name": c.name, "shortfall_bytes": c.shortfall} for c in s.short],
        "notes": s.notes,
        **({"refused": s.refused} if s.refused else {}),
        **(plan.prompt.json() if plan.prompt is not None else {}),
    }


def speedup(s: Scored, r: Result) -> float | None:
    """How many times faster the plan decodes than the command (None: no plan)."""
    return s.window_ms / r.plan.window_ms if r.plan is not None and r.plan.window_ms > 0 else None


def to_score_json(s: Scored, words: list[str], r: Result, export: list[str] | None) -> dict:
    """``{"score": ..., "plan": ..., "speedup": ...}``; the plan's export lines under ``plan.export``."""
    plan = to_json(r)
    if export is not None:
        plan["export"] = {"engine": r.problem.engine, "lines": export}
    return {"score": score_json(s, words), "plan": plan, "speedup": speedup(s, r)}


def _layers(c: Card) -> str:
    text = f"{c.layers[0]}-{c.layers[1] - 1}" if c.layers else "-"
    return f"{text}+out" if c.output else text


def _fits(c: Card) -> str:
    return "yes" if c.fits else "[red]no[/red]"  # the shortfall is in the lines below


def _prompt_text(speed: PromptSpeed | None) -> str:
    """``; prompt 2,048 tokens at 112.7 tokens/s, first token after 18,176 ms`` ('' where not modelled)."""
    if speed is None:
        return ""
    if speed.tokens_per_s is None or speed.ttft_ms is None:
        return f"; prompt {speed.prompt:,} tokens (speed unknown: a GPU's matrix TFLOPS is not known)"
    return (
        f"; prompt {speed.prompt:,} tokens (-ub {speed.n_ubatch:,}) at {speed.tokens_per_s:,.1f} tokens/s, "
        f"first token after {speed.ttft_ms:,.0f} ms"
    )


def print_score(s: Scored, r: Result, export: list[str] | None, console: Console) -> None:
    """Per card what the command puts there and whether it fits; its window; the plan beside it."""
    p = s.problem
    title = f"{p.rig}: {p.model}, {p.n_layers} layers, context {p.context:,}: the command as given"
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    moved = any(c.elsewhere for c in s.cards)  # expert tensors -ot sends to another GPU
    cells: list[tuple[str, Callable[[Card], str]]] = [
        ("device", lambda c: "CPU" if c.gpu is None else f"{c.gpu} {c.name}"),
        ("layers", _layers),
        ("held", lambda c: f"{c.held:,}"),
        ("CPU", lambda c: "-" if c.gpu is None else f"{c.offloaded:,}"),
        *([("moved", lambda c: f"{c.elsewhere:,}")] if moved else []),
        ("guests", lambda c: f"{c.guests:,}"),
        ("needs", lambda c: format_size(c.need_bytes)),
        ("has", lambda c: "no limit" if c.avail_bytes is None else format_size(c.avail_bytes)),
        ("fits", _fits),
    ]
    for col, _ in cells:
        t.add_column(col, justify="left" if col in ("device", "layers") else "right", no_wrap=True)
    for c in s.cards:
        t.add_row(*(cell(c) for _, cell in cells))
    fit_names(t, console)
    print_lines(console, t)
    parts = [f"GPU {sum(st.compute_ms for st in s.placement.stages):.3f} ms"]
    missed = sum(st.miss_ms for st in s.placement.stages)
    if missed:
        parts.append(f"CPU and switches {missed:.3f} ms")
    if s.cpu_layers[1]:
        parts.append(f"layers 0-{s.cpu_layers[1] - 1} on the CPU {s.cpu_ms:.3f} ms")
    if s.extra_ms:
        parts.append(f"other {s.extra_ms:.3f} ms")
    print_lines(
        console,
        f"command: {s.window_ms:.3f} ms a token, {s.tokens_per_s:.2f} tokens/s ({', '.join(parts)})"
        + _prompt_text(s.placement.prompt),
    )
    for c in s.short:
        where = "CPU memory" if c.gpu is None else f"GPU {c.gpu} {c.name}"
        print_lines(
            console,
            f"[red]does not fit[/red]: {where} needs {format_size(c.need_bytes)} of "
            f"{format_size(int(c.avail_bytes or 0))}, short by {format_size(c.shortfall)}",
        )
    if s.refused:
        print_lines(console, f"[red]llama.cpp will not start this command[/red]: {s.refused}")
    if r.plan is None:
        print_lines(console, f"plan: {r.status}: {r.reason}")
    else:
        proof = "optimal" if r.status == "optimal" else f"{r.status}, not proven"
        print_lines(
            console,
            f"plan ({r.solution.name}, {proof}): cuts {','.join(map(str, r.plan.cuts)) or '-'}, "
            f"{r.plan.window_ms:.3f} ms a token, {r.plan.tokens_per_s:.2f} tokens/s"
            + _prompt_text(r.plan.prompt)
            + ": "
            + (f"{speedup(s, r):.2f}x the command's speed" if s.fits else "the command would not load"),
        )
        for line in export or []:  # a command is pasted whole: never wrapped
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    for note in s.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
