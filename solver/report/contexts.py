"""``solve RIG --contexts 8K,32K,... [--kv-types f16,q8_0]``: context against speed, one plan each.

A longer context takes VRAM the experts (or, for vLLM and SGLang, the spare KV) would have had, so it
costs speed; a quantised KV cache gives some back. Each (context, KV type) is planned as its own
problem, exactly as ``solve RIG --context N --kv-type T`` would plan it, and the plans are set side by
side: tokens per second, the engine's default beside it, and what moved to the CPU or is left over.

A context beyond the model's ``max_context`` is planned as given, as ``--context`` plans it, with a
warning and a mark in the table and the plot. Every speed is at the rig's decode ``depth`` (the tokens
already in the KV cache, 0 unless the rig says), not with the context full, and the table and the plot
say so: a context costs VRAM here, not time per token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from solver.engines import engine_of
from solver.engines.bandwidth import speed_of
from solver.files.config import load_model
from solver.files.console import fit_names, print_lines
from solver.files.kvcache import KV_TYPES
from solver.planning.classes import build_classes
from solver.planning.planner import Result, plan_rig
from solver.planning.resolve import Overrides, load_problem
from solver.solvers import Limits
from solver.units import parse_tokens


def parse_contexts(text: str) -> list[int]:
    """``8K,32K,65536`` -> [8192, 32768, 65536], in the order given, each once; ValueError otherwise."""
    contexts: list[int] = []
    for part in text.split(","):
        tokens = parse_tokens(part)
        if tokens not in contexts:
            contexts.append(tokens)
    return contexts


def parse_kv_types(text: str) -> list[str]:
    """``f16,q8_0`` -> the KV cache types, each once; ValueError naming the known ones otherwise."""
    types: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if part not in KV_TYPES:
            raise ValueError(f"unknown KV cache type {part!r}; choose among {', '.join(KV_TYPES)}")
        if part not in types:
            types.append(part)
    return types


def short_context(tokens: int) -> str:
    """8192 -> ``8K``, 131072 -> ``128K``; other counts as they are."""
    return f"{tokens // 1024}K" if tokens and tokens % 1024 == 0 else f"{tokens:,}"


@dataclass
class Point:
    """One (context, KV type) and its planning run."""

    context: int
    kv_type: str
    result: Result


def sweep(
    rig: Path,
    overrides: Overrides,
    contexts: list[int | None],
    kv_types: list[str | None],
    limits: Limits,
    default: str | None = None,
) -> list[Point]:
    """Plan the rig at every (KV type, context), KV types outermost; None keeps the rig's own
    (``default``: which of the engine's defaults each plan is set beside)."""
    problems = [
        load_problem(rig, dataclasses.replace(overrides, context=context, kv_type=kv))
        for kv in kv_types
        for context in contexts
    ]
    points = []
    for p, built in zip(problems, build_classes(problems), strict=True):
        r = plan_rig(p, limits, default=default, built=built)
        points.append(Point(r.problem.context, r.problem.kv_type, r))
    return points


@dataclass(frozen=True)
class ModelLimit:
    """The model's ``max_context`` and where its file says it (None: the file gives none)."""

    tokens: int | None
    where: str


def model_limit(points: list[Point]) -> ModelLimit:
    """The longest context the sweep's model supports, read from its file."""
    path = Path(points[0].result.problem.files["model"])
    model, doc = load_model(path)
    line = doc.line(("max_context",)) if model.max_context is not None else None
    return ModelLimit(model.max_context, f"{doc.file}:{line}" if line else doc.file)


def beyond(limit: ModelLimit, context: int) -> bool:
    """Whether ``context`` is longer than the model supports."""
    return limit.tokens is not None and context > limit.tokens


def beyond_warnings(points: list[Point]) -> list[str]:
    """One warning per context beyond the model's ``max_context`` (each once, whatever its KV types)."""
    limit = model_limit(points)
    contexts = dict.fromkeys(pt.context for pt in points if beyond(limit, pt.context))
    return [
        f"--contexts: {c:,} tokens ({short_context(c)}) is beyond the {limit.tokens:,} tokens the model "
        f"supports ({limit.where}); planned as given"
        for c in contexts
    ]


def depth_of(points: list[Point]) -> int:
    """The tokens in the KV cache every point's speed is predicted at: the rig's ``depth``."""
    return speed_of(points[0].result.problem).depth


def depth_note(points: list[Point]) -> str:
    """What the speeds assume about the KV cache, said once under the table and on the plot."""
    depth = depth_of(points)
    at = "an empty KV cache" if depth == 0 else f"{depth:,} tokens in the KV cache"
    return f"tokens/s at {at} (the rig's depth), not with the context full"


def _tokens(r: Result) -> str:
    return f"{r.plan.tokens_per_s:.2f}" if r.plan else "-"


def _default(r: Result) -> str:
    base = r.compared
    if base.plan is None or not base.feasible:
        return "no fit"
    return f"{base.plan.tokens_per_s:.2f}"


def sweep_table(points: list[Point]) -> Table:
    """One row per point: context, KV type, tokens/s of the plan and of the engine's default, window,
    the engine's own columns (what moved to the CPU, spare KV, held mass) and the cuts."""
    engine = engine_of(points[0].result.problem)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    default = points[0].result.compared.name
    headers = ["context", "KV", "tokens/s", f"{default}\ntokens/s", "window\nms"]
    headers += [name for name, _ in engine.sweep]
    for h in headers:
        t.add_column(h, justify="left" if h in ("context", "KV") else "right", no_wrap=True)
    t.add_column("cuts", no_wrap=False)
    limit = model_limit(points)
    for pt in points:
        r = pt.result
        plan = r.plan
        mark = "*" if beyond(limit, pt.context) else ""
        row = [short_context(pt.context) + mark, pt.kv_type, _tokens(r), _default(r)]
        row.append(f"{plan.window_ms:.2f}" if plan else "-")
        row += [cell(plan) if plan else "-" for _, cell in engine.sweep]
        row.append(", ".join(map(str, plan.cuts)) if plan else f"no plan: {r.status}")
        t.add_row(*row)
    return t


def print_sweep(points: list[Point], console: Console) -> None:
    """The title, the table, and why each point without a plan has none."""
    p = points[0].result.problem
    default = points[0].result.compared.name
    title = f"{p.rig}: {p.model}, {p.n_layers} layers on {p.n_gpus} GPUs, engine {p.engine}"
    notes = [f"{default} tokens/s: what `solve RIG` sets the plan beside ('no fit': it does not fit)"]
    notes.append(depth_note(points))
    speed = next((pt.result.plan.prompt for pt in points if pt.result.plan is not None), None)
    if speed is not None:
        notes.append(
            f"prompt t/s, TTFT s: a {speed.prompt:,}-token prompt in micro-batches of {speed.n_ubatch:,} "
            f"(TTFT: time to its first token)"
        )
    limit = model_limit(points)
    if any(beyond(limit, pt.context) for pt in points):
        notes.append(f"*: beyond the {limit.tokens:,} tokens the model supports; planned as given")
    for pt in points:
        if pt.result.plan is None:
            notes.append(f"{short_context(pt.context)} {pt.kv_type}: {pt.result.reason}")
    table = sweep_table(points)
    fit_names(table, console, column_index=-1)
    print_lines(console, f"[bold]{title}[/bold]", table, "\n".join(notes))
