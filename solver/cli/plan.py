"""``solve RIG`` (the hidden ``plan`` command): plan a rig, print or write the plan, and exit 0 with a
plan, 2 for bad input, 3 without a plan, 4 when ``--check``'s oracle disagrees."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console

from solver import interrupt
from solver.cli.badinput import fail, input_errors
from solver.cli.options import (
    MODEL,
    OBJECTIVES,
    PATH,
    PROFILE,
    SECONDS,
    default_workers,
    engine_option,
    json_option,
    workers_option,
)
from solver.engines import ENGINES, engine_named, plan_lines
from solver.engines.export import check_export_engine
from solver.engines.shells import DEFAULT_SHELL, SHELLS
from solver.errors import InputError
from solver.exitcodes import ExitCode
from solver.files.atomicfile import atomic_open, output_kind, refuse_inputs
from solver.files.config import shown_path
from solver.files.console import console as make_console
from solver.files.kvcache import KV_TYPES
from solver.planning.plausible import doubts
from solver.planning.resolve import Overrides, load_problem
from solver.solvers import Limits

if TYPE_CHECKING:
    from solver.planning.planner import Result

#: The statuses that come with a plan; any other (infeasible, unknown) exits ExitCode.NO_PLAN.
PLANNED = ("optimal", "feasible")


def _progress(enabled: bool) -> tuple[Callable[[str, float, float], None] | None, AbstractContextManager]:
    """A status line on stderr with the incumbent and the proven bound, for terminals only."""
    if not enabled:
        return None, nullcontext()
    status = Console(stderr=True).status("planning: building the range walk and the model")

    def report(what: str, incumbent: float, bound: float) -> None:
        status.update(f"solving: best {what} {incumbent:.6g}, proven bound {bound:.6g}")

    return report, status


@click.command("plan", hidden=True)
@click.argument("rig", type=PATH)
@MODEL
@PROFILE
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVES),
    help="Minimise window time, maximise held mass, or minimise the slowest stage (throughput).",
)
@click.option(
    "--order",
    type=click.Choice(["as-given", "auto"]),
    help="Keep the rig's GPU order, or choose it.",
)
@click.option("--idle-gpus", is_flag=True, help="Let the plan leave out GPUs that cost more than they give.")
@click.option("--context", type=click.IntRange(min=0), help="Tokens of KV cache per full-attention layer.")
@click.option(
    "--time-limit",
    type=SECONDS,
    help="Answer within SECONDS (the whole run; a proof cut short comes back feasible).",
)
@click.option("--check", is_flag=True, help="Also solve with an oracle (exhaustive or DP) and compare.")
@engine_option("Plan for this engine's memory and time model (default: the rig's, else strata).")
@click.option(
    "--export",
    type=click.Choice(ENGINES),
    help="Print the command that makes ENGINE (the plan's engine) run the plan.",
)
@click.option(
    "--shell",
    type=click.Choice(SHELLS),
    default=DEFAULT_SHELL,
    show_default=True,
    help="Quote the --export command for this shell (cmd: Windows cmd.exe).",
)
@click.option(
    "--kv-type",
    type=click.Choice(tuple(KV_TYPES)),
    help="KV cache type (llama.cpp's -ctk/-ctv), instead of the rig's or model's.",
)
@click.option(
    "--fit-off",
    is_flag=True,
    help="Add -fit off to the llama.cpp command: builds whose llama-server --help lists --fit.",
)
@click.option(
    "--contexts",
    metavar="LIST",
    callback=lambda _ctx, _param, value: _listed(value, "parse_contexts"),
    help="Plan at each context (8K,32K,128K: K is 1,024 tokens) and print one table of tokens/s.",
)
@click.option(
    "--kv-types",
    metavar="LIST",
    callback=lambda _ctx, _param, value: _listed(value, "parse_kv_types"),
    help="Plan with each KV cache type (f16,q8_0,q4_0), one table; with --contexts, every pair.",
)
@click.option(
    "--prompt",
    type=click.IntRange(min=1),
    help="Report llama.cpp's prompt processing for a prompt of N tokens, instead of the rig's prompt "
    "(2048 by default).",
    metavar="N",
)
@json_option()
@click.option(
    "--out",
    type=PATH,
    help="Also write the --json object to this file (atomically).",
)
@click.option(
    "--plot",
    type=PATH,
    help="Draw VRAM and time per GPU beside the engine's default (with --contexts: tokens/s against "
    "context) to FILE: .png, .svg or .pdf (needs moesplit[plot]).",
)
@workers_option(default=default_workers, show_default="cores, max 8")
@input_errors
def plan_cmd(
    rig: Path,
    model: Path | None,
    profile: Path | None,
    objective: str | None,
    order: str | None,
    idle_gpus: bool,
    context: int | None,
    time_limit: float | None,
    check: bool,
    engine: str | None,
    export: str | None,
    shell: str,
    kv_type: str | None,
    fit_off: bool,
    contexts: list[int] | None,
    kv_types: list[str] | None,
    prompt: int | None,
    as_json: bool,
    out: Path | None,
    plot: Path | None,
    workers: int,
) -> None:
    """Plan RIG: choose the cuts (and GPU order) that minimise the decode window."""
    started = (
        interrupt.take_start() or time.perf_counter()
    )  # --time-limit counts the imports and the files too
    from solver.planning.planner import plan_rig
    from solver.report.planview import print_report, to_json

    overrides = Overrides(
        model, profile, objective, order, context, engine, idle_gpus, kv_type=kv_type, prompt=prompt
    )
    if contexts is not None or kv_types is not None:
        alone = {"--context": context, "--kv-type": kv_type, "--export": export, "--check": check or None}
        clash = next((flag for flag, value in alone.items() if value is not None), None)
        if clash:
            raise click.UsageError(
                f"{clash} plans one context and KV type; --contexts/--kv-types plan several"
            )
        limits = Limits(time_limit=time_limit, workers=workers)
        _sweep(rig, overrides, contexts, kv_types, limits, as_json, out, plot)
        return
    if plot:
        from solver.report.plot import check_plot_file

        check_plot_file(plot, shown_path(plot))
    problem = load_problem(rig, overrides)
    refused = check_export_engine(export, problem.engine) if export else None
    if refused:
        raise InputError(shown_path(rig), f"--export {export}: {refused}")
    for path in (out, plot):
        if path:
            output_kind(path, shown_path(path))
            refuse_inputs(path, shown_path(path), [Path(f) for f in problem.files.values()])
    if out and plot:
        refuse_inputs(plot, shown_path(plot), [out], "the --out file")
    warnings = doubts(problem)
    progress, display = _progress(enabled=not as_json and sys.stderr.isatty())
    with display:
        result = plan_rig(
            problem,
            Limits(time_limit=time_limit, workers=workers, progress=progress, started=started),
            check=check,
        )
    flags = _export_lines(export, result, shell, fit_off) if export and result.plan else []
    report = to_json(result)
    if export:
        report["export"] = {"engine": export, "shell": shell, "lines": flags}
    if out:
        write_json(out, report)
    if plot:
        from solver.report.plot import plot_result

        plot_result(result, plot, shown_path(plot))
        click.echo(f"wrote {shown_path(plot)}", err=True)
    for warning in warnings:  # after the files are written: a failed write stays one line
        click.echo(str(warning), err=True)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        console = make_console()
        print_report(result, console)
        if flags:
            what = engine_named(export).export_noun
            console.print(f"\n[bold]{export}[/bold] {what} ({shell}):")
            for line in flags:
                click.echo(line)
    if result.plan is None or result.status not in PLANNED:
        sys.exit(ExitCode.NO_PLAN)
    if result.oracle is not None and not result.oracle.agrees:
        sys.exit(ExitCode.DISAGREE)


def _listed(value: str | None, parser: str) -> list | None:
    """A --contexts or --kv-types list, parsed by solver.report.contexts (imported only when one is given)."""
    if value is None:
        return None
    from solver.report import contexts as sweep

    try:
        return getattr(sweep, parser)(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _sweep(
    rig: Path,
    overrides: Overrides,
    contexts: list[int] | None,
    kv_types: list[str] | None,
    limits: Limits,
    as_json: bool,
    out: Path | None,
    plot: Path | None,
) -> None:
    """``--contexts``/``--kv-types``: plan every (context, KV type), one table (or a JSON list, or a
    plot of tokens/s against context); exits 3 when no point has a plan (2 for bad input, through the
    plan command's ``input_errors``)."""
    from solver.report.contexts import beyond_warnings, print_sweep, sweep
    from solver.report.planview import to_json

    if plot:
        from solver.report.plot import check_plot_file

        check_plot_file(plot, shown_path(plot))
    first = load_problem(rig, overrides)
    for kv in kv_types or []:  # each type the engine runs, checked before any planning
        load_problem(rig, dataclasses.replace(overrides, kv_type=kv))
    for path in (out, plot):
        if path:
            output_kind(path, shown_path(path))
            refuse_inputs(path, shown_path(path), [Path(f) for f in first.files.values()])
    points = sweep(rig, overrides, contexts or [None], kv_types or [None], limits)
    report = [to_json(pt.result) for pt in points]
    if out:
        write_json(out, report)
    if plot:
        from solver.report.plot import plot_sweep

        plot_sweep(points, plot, shown_path(plot))
        click.echo(f"wrote {shown_path(plot)}", err=True)
    for warning in beyond_warnings(points):
        click.echo(warning, err=True)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        print_sweep(points, make_console())
    if all(pt.result.plan is None for pt in points):
        sys.exit(ExitCode.NO_PLAN)


def _export_lines(engine: str, result: Result, shell: str, fit_off: bool) -> list[str]:
    """The lines that make ``engine`` run the plan, for ``shell``; a plan the engine cannot express (or
    a word the shell cannot be given) exits 2."""
    try:
        return plan_lines(result.problem, result.plan, shell, fit_off)
    except ValueError as exc:
        fail(f"--export {engine}: {exc}")


def write_json(out: Path, report: object) -> None:
    """Write ``report`` as indented JSON to ``out``, atomically (a failed write leaves no half file)."""
    with atomic_open(out, shown_path(out)) as f:
        json.dump(report, f, indent=2)
        f.write("\n")
