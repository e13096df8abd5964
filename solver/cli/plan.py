"""``solve RIG`` (the hidden ``plan`` command): plan a rig, print or write the plan, and exit 0 with a
plan, 2 for bad input, 3 without a plan, 4 when ``--check``'s oracle disagrees."""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource
from rich.console import Console

from solver import interrupt
from solver.cli.badinput import fail, input_errors
from solver.cli.options import (
    MODEL,
    OBJECTIVES,
    PATH,
    PROFILE,
    SECONDS,
    TOKENS,
    default_workers,
    engine_option,
    grouped,
    json_option,
    workers_option,
)
from solver.engines import ENGINES, engine_named, plan_lines
from solver.engines.export import check_export_engine
from solver.engines.shells import DEFAULT_SHELL, SHELLS
from solver.errors import InputError
from solver.exitcodes import ExitCode
from solver.files.atomicfile import check_outputs, refuse_inputs, write_json
from solver.files.config import shown_path
from solver.files.console import console as make_console
from solver.files.kvcache import KV_TYPES
from solver.planning.plausible import doubts
from solver.planning.resolve import Overrides, load_problem, load_problems
from solver.solvers import Limits

if TYPE_CHECKING:
    from solver.planning.planner import Result
    from solver.problem.problem import Problem
    from solver.report.contexts import Point

#: The statuses that come with a plan; any other (infeasible, unknown) exits ExitCode.NO_PLAN.
PLANNED = ("optimal", "feasible")
#: What a plan's --objective chooses among: the solvers' objectives and one request's time.
PLAN_OBJECTIVES = (*OBJECTIVES, "request")


class Ubatch(click.ParamType):
    """``--ubatch``: a micro-batch of at least one token, or ``auto``."""

    name = "N|auto"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == "auto":
            return value
        if str(value).isdigit() and int(value) >= 1:
            return int(value)
        self.fail(f"expected a whole number of tokens (1 or more) or auto, got {value!r}", param, ctx)


@dataclass(frozen=True)
class PlanOptions:
    """What is planned and how: the settings that replace the rig's own, and what the search may spend."""

    model: Path | None
    profile: Path | None
    objective: str | None
    order: str | None
    idle_gpus: bool
    context: int | None
    time_limit: float | None
    check: bool
    engine: str | None
    kv_type: str | None
    ubatch: int | str | None
    flash_attn: str | None
    prompt: int | None
    generate: int | None
    default: str | None
    workers: int
    cpu_layers: bool = False

    def overrides(self) -> Overrides:
        return Overrides(
            self.model,
            self.profile,
            self.objective,
            self.order,
            self.context,
            self.engine,
            self.idle_gpus,
            kv_type=self.kv_type,
            n_ubatch=self.ubatch,
            flash_attn=self.flash_attn,
            prompt=self.prompt,
            generate=self.generate,
            cpu_layers=self.cpu_layers,
        )

    def limits(
        self, progress: Callable[[str, float, float], None] | None = None, started: float | None = None
    ) -> Limits:
        return Limits(time_limit=self.time_limit, workers=self.workers, progress=progress, started=started)


@dataclass(frozen=True)
class OutputOptions:
    """What is made of the plan: the engine command, JSON or tables, the files written."""

    export: str | None
    shell: str
    fit_off: bool
    as_json: bool
    out: Path | None
    plot: Path | None


@dataclass(frozen=True)
class SweepOptions:
    """``--contexts``/``--kv-types``: the points that plan several (None: the one the rig says)."""

    contexts: list[int] | None
    kv_types: list[str] | None

    @property
    def given(self) -> bool:
        return self.contexts is not None or self.kv_types is not None

    @staticmethod
    def clash(plan: PlanOptions, output: OutputOptions) -> str | None:
        """The first option given that plans one point only, which a sweep refuses."""
        alone = {
            "--context": plan.context,
            "--kv-type": plan.kv_type,
            "--export": output.export,
            "--check": plan.check or None,
        }
        return next((flag for flag, value in alone.items() if value is not None), None)


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
    type=click.Choice(PLAN_OBJECTIVES),
    help="Minimise window time, maximise held mass, minimise the slowest stage (throughput), or "
    "minimise one request's time, its prompt and --generate tokens (llama.cpp).",
)
@click.option(
    "--order",
    type=click.Choice(["as-given", "auto"]),
    help="Keep the rig's GPU order, or choose it.",
)
@click.option("--idle-gpus", is_flag=True, help="Let the plan leave out GPUs that cost more than they give.")
@click.option("--context", type=TOKENS, help="Tokens of KV cache per full-attention layer (32768, 32K).")
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
    "--ubatch",
    type=Ubatch(),
    help="llama.cpp's micro-batch (-ub, 512 by default), instead of the rig's n_ubatch; auto: choose "
    "it with the placement (256-8192).",
)
@click.option(
    "--flash-attn",
    type=click.Choice(("on", "off")),
    help="llama.cpp's flash attention (-fa), instead of the rig's flash_attn (on by default).",
)
@click.option(
    "--cpu-layers",
    is_flag=True,
    help="llama.cpp: let the first GPU leave its first layers wholly on the CPU (-ngl) where that is "
    "faster or the only way to fit, as the rig's cpu_layers: true does.",
)
@click.option(
    "--fit-off",
    is_flag=True,
    help="Add -fit off to the llama.cpp command: builds whose llama-server --help lists --fit.",
)
@click.option(
    "--default",
    "default",
    type=click.Choice(["fit", "free-memory"]),
    help="llama.cpp: set the plan beside what --fit chooses (the default, builds since late 2025) or "
    "the older free-memory split with the least --n-cpu-moe that fits.",
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
@click.option(
    "--generate",
    type=click.IntRange(min=1),
    help="Tokens one request generates after its prompt (--objective request), instead of the rig's "
    "generate.",
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
@grouped(plan=PlanOptions, output=OutputOptions, sweep=SweepOptions)
def plan_cmd(rig: Path, plan: PlanOptions, output: OutputOptions, sweep: SweepOptions) -> None:
    """Plan RIG: choose the cuts (and GPU order) that minimise the decode window."""
    started = (
        interrupt.take_start() or time.perf_counter()
    )  # --time-limit counts the imports and the files too
    from solver.planning.planner import plan_rig
    from solver.report.planview import to_json

    if output.export is None:  # options that shape the --export command mean nothing without it
        source = click.get_current_context().get_parameter_source("shell")
        alone = (
            "--fit-off" if output.fit_off else "--shell" if source is ParameterSource.COMMANDLINE else None
        )
        if alone:
            raise click.UsageError(f"{alone} shapes the --export command; give --export ENGINE with it")
    if sweep.given:
        clash = sweep.clash(plan, output)
        if clash:
            raise click.UsageError(
                f"{clash} plans one context and KV type; --contexts/--kv-types plan several"
            )
        _sweep(rig, plan, sweep, output)
        return
    problem, candidates = _load(rig, plan, output)
    warnings = doubts(problem)
    progress, display = _progress(enabled=not output.as_json and sys.stderr.isatty())
    with display:
        limits = plan.limits(progress, started)
        reload = lambda **changes: load_problem(rig, dataclasses.replace(plan.overrides(), **changes))  # noqa: E731
        if candidates is not None:
            from solver.planning.ubatch import plan_auto

            result = plan_auto(candidates, limits, check=plan.check, default=plan.default, reload=reload)
        else:
            result = plan_rig(problem, limits, check=plan.check, default=plan.default, reload=reload)
    flags = _export_lines(output, result)
    report = to_json(result)
    if output.export:
        report["export"] = {"engine": output.export, "shell": output.shell, "lines": flags}
    _write(output, report, result)
    for warning in warnings:  # after the files are written: a failed write stays one line
        click.echo(str(warning), err=True)
    _show(output, report, result, flags)
    code = _exit_code(result)
    if code:
        sys.exit(code)


def _load(rig: Path, plan: PlanOptions, output: OutputOptions) -> tuple[Problem, Iterator[Problem] | None]:
    """The rig's problem, once every file the command writes is known good: a plot format, a default
    the engine has, an engine the export can drive, no output over an input or over the other output;
    with ``n_ubatch: auto``, the first candidate's and every candidate's, resolved as they are taken."""
    _check_plot(output.plot)
    auto, problems = load_problems(rig, plan.overrides())
    problem = next(problems)
    _check_default(plan.default, problem.engine)
    refused = check_export_engine(output.export, problem.engine) if output.export else None
    if refused:
        raise InputError(shown_path(rig), f"--export {output.export}: {refused}")
    check_outputs((output.out, output.plot), [Path(f) for f in problem.files.values()])
    if output.out and output.plot:
        refuse_inputs(output.plot, shown_path(output.plot), [output.out], "the --out file")
    return problem, itertools.chain([problem], problems) if auto else None


def _check_plot(plot: Path | None) -> None:
    """Refuse a --plot file whose format cannot be drawn (or without matplotlib), before any planning."""
    if plot:
        from solver.report.plot import check_plot_file

        check_plot_file(plot, shown_path(plot))


def _write(output: OutputOptions, report: object, drawn: Result | list[Point]) -> None:
    """Write the --out JSON, then draw ``drawn`` (the plan, or a sweep's points) to the --plot file."""
    if output.out:
        write_json(output.out, report)
    if output.plot:
        from solver.report.plot import plot_result, plot_sweep

        shown = shown_path(output.plot)
        if isinstance(drawn, list):
            plot_sweep(drawn, output.plot, shown)
        else:
            plot_result(drawn, output.plot, shown)
        click.echo(f"wrote {shown}", err=True)


def _show(output: OutputOptions, report: dict, result: Result, flags: list[str]) -> None:
    """The plan on stdout: the JSON object, or the tables and the export's lines."""
    from solver.report.planview import print_report

    if output.as_json:
        click.echo(json.dumps(report, indent=2))
        return
    console = make_console()
    print_report(result, console)
    if flags:
        what = engine_named(output.export).export_noun
        console.print(f"\n[bold]{output.export}[/bold] {what} ({output.shell}):")
        for line in flags:
            click.echo(line)


def _exit_code(result: Result) -> ExitCode | None:
    """NO_PLAN without a plan, DISAGREE when --check's oracle disagrees, else None (exit 0)."""
    if result.plan is None or result.status not in PLANNED:
        return ExitCode.NO_PLAN
    if result.oracle is not None and not result.oracle.agrees:
        return ExitCode.DISAGREE
    return None


def _check_default(default: str | None, engine: str) -> None:
    """``--default`` names one of the engine's defaults (llama.cpp's alone has several)."""
    known = engine_named(engine).defaults
    if default is not None and default not in known:
        raise click.UsageError(f"--default {default}: the {engine} engine has one default, no choice")


def _listed(value: str | None, parser: str) -> list | None:
    """A --contexts or --kv-types list, parsed by solver.report.contexts (imported only when one is given)."""
    if value is None:
        return None
    from solver.report import contexts as sweep

    try:
        return getattr(sweep, parser)(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _sweep(rig: Path, plan: PlanOptions, sweep: SweepOptions, output: OutputOptions) -> None:
    """``--contexts``/``--kv-types``: plan every (context, KV type), one table (or a JSON list, or a
    plot of tokens/s against context); exits 3 when no point has a plan (2 for bad input, through the
    plan command's ``input_errors``)."""
    from solver.report.contexts import beyond_warnings, print_sweep
    from solver.report.contexts import sweep as plan_points
    from solver.report.planview import to_json

    _check_plot(output.plot)
    overrides = plan.overrides()
    auto, problems = load_problems(rig, overrides)
    if auto:
        raise click.UsageError("--contexts/--kv-types plan one micro-batch: give --ubatch N, not auto")
    first = next(problems)
    _check_default(plan.default, first.engine)
    for kv in sweep.kv_types or []:  # each type the engine runs, checked before any planning
        load_problem(rig, dataclasses.replace(overrides, kv_type=kv))
    check_outputs((output.out, output.plot), [Path(f) for f in first.files.values()])
    points = plan_points(
        rig, overrides, sweep.contexts or [None], sweep.kv_types or [None], plan.limits(), plan.default
    )
    report = [to_json(pt.result) for pt in points]
    _write(output, report, points)
    for warning in beyond_warnings(points):
        click.echo(warning, err=True)
    if output.as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        print_sweep(points, make_console())
    if all(pt.result.plan is None for pt in points):
        sys.exit(ExitCode.NO_PLAN)


def _export_lines(output: OutputOptions, result: Result) -> list[str]:
    """The lines that make the --export engine run the plan, for --shell (none without a plan or an
    --export); a plan the engine cannot express (or a word the shell cannot be given) exits 2."""
    if not output.export or not result.plan:
        return []
    try:
        return plan_lines(result.problem, result.plan, output.shell, output.fit_off)
    except ValueError as exc:
        fail(f"--export {output.export}: {exc}")
