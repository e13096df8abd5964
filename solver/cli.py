"""The ``solve`` command: ``solve RIG`` plans a rig; subcommands add tools around it."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import click
from rich.console import Console

from solver import interrupt
from solver.atomicfile import atomic_open, output_kind, refuse_inputs
from solver.config import shown_path
from solver.console import console as make_console
from solver.engines import ENGINES, engine_named, plan_lines
from solver.errors import InputError
from solver.exitcodes import ExitCode
from solver.export import check_export_engine
from solver.kvcache import KV_TYPES
from solver.model_cli import model_group, rig_group
from solver.options import SECONDS
from solver.plausible import doubts
from solver.problem import Overrides, load_problem
from solver.profile_cli import profile_group
from solver.shells import DEFAULT_SHELL, SHELLS
from solver.solvers import Limits

if TYPE_CHECKING:
    from solver.planner import Result

#: The statuses that come with a plan; any other (infeasible, unknown) exits ExitCode.NO_PLAN.
PLANNED = ("optimal", "feasible")


class _UsageLine(click.ClickException):
    """Bad usage as one line, ``Error: ...``, exit 2."""

    exit_code = ExitCode.INPUT


class _DefaultToPlan(click.Group):
    """A group whose default command is ``plan``: ``solve RIG`` means ``solve plan RIG``.

    Subcommands in ``LAZY`` are imported only when named, so ``solve RIG`` never loads them.
    """

    LAZY: ClassVar[dict[str, str]] = {"bench": "solver.bench:bench", "score": "solver.score_cli:score"}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        known = (*self.commands, *self.LAZY, "--help", "-h", "--version")
        if args and args[0] not in known:
            # solve RIG --help: the plan's help is the group's own (format_help below)
            args = ["--help"] if {"--help", "-h"} & set(args) else ["plan", *args]
        return super().parse_args(ctx, args)

    #: (command, what it does) for ``solve --help``.
    EXAMPLES: ClassVar[tuple[tuple[str, str], ...]] = (
        ("solve rigs/box.yaml", "plan the shipped four-GPU box; tables on stdout"),
        ("solve rigs/box.yaml --order auto --check", "also choose the GPU order; verify with an oracle"),
        ("solve rigs/duo.yaml --json --out plan.json", "the plan as one JSON object, also saved to a file"),
        ("solve rigs/box.yaml --context 65536 --export strata", "plan a 64K context; print the engine flags"),
        ("solve rigs/llama-mix.yaml --contexts 8K,32K,128K --kv-types f16,q8_0", "tokens/s at each context"),
        ("solve rigs/box.yaml --plot plan.svg", "draw VRAM and compute per GPU (.png, .svg or .pdf)"),
        (
            "solve rigs/llama-mix.yaml --export llama.cpp",
            "plan for llama.cpp; print the llama-server command",
        ),
        (
            "solve rigs/llama-mix.yaml --export llama.cpp --shell powershell",
            "the same, quoted for PowerShell",
        ),
        ("solve rigs/vllm-mix.yaml --objective throughput", "plan vLLM stages for batched serving"),
        ("solve score rigs/llama-mix.yaml -- -ngl 99 -ncmoe 80", "what your llama.cpp command does, per GPU"),
        ("solve probe -o rigs/mine.yaml", "write a rig from this machine's GPUs, to edit and plan"),
        ('solve rig new "RTX 4090" "RTX 3090" -o rigs/mine.yaml', "or from card names, without NVML"),
    )

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """``solve --help``: the plan's usage, options and examples, then the other commands."""
        plan = self.commands["plan"]
        formatter.write_usage(ctx.command_path, "RIG [OPTIONS]")
        formatter.write_usage(ctx.command_path, "COMMAND [ARGS]...", prefix="   or: ")
        self.format_help_text(ctx, formatter)
        plan_ctx = click.Context(plan, info_name=ctx.info_name)
        own_help = plan.get_help_option(plan_ctx)
        records = [
            p.get_help_record(plan_ctx)
            for p in plan.get_params(plan_ctx)
            if isinstance(p, click.Option) and p is not own_help
        ]
        records += [p.get_help_record(ctx) for p in self.get_params(ctx)]
        with formatter.section("Options"):
            formatter.write_dl([r for r in records if r])
        with formatter.section("Examples"):
            for command, what in self.EXAMPLES:
                formatter.write(f"{'':>{formatter.current_indent}}{command}\n")
                with formatter.indentation():
                    formatter.write_text(what)
        self.format_commands(ctx, formatter)
        formatter.write_paragraph()
        formatter.write_text("Run 'solve COMMAND --help' for a command's options.")

    def invoke(self, ctx: click.Context) -> object:
        """Run the command; a usage error is one line (click's own adds the usage and a hint), except
        a group called bare, which shows its help."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):
                raise
            raise _UsageLine(exc.format_message()) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.LAZY:
            module, attr = self.LAZY[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=_DefaultToPlan, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="moesplit")
def cli() -> None:
    """Plan the layer split of an MoE model over mismatched GPUs.

    RIG is a YAML file listing the GPUs in pipeline order (free VRAM, speed) and naming the model (and,
    for the Strata engine, its routing profile). The plan chooses the cut points (and, with --order
    auto, the GPU order) that minimise the predicted decode window under every card's memory for the
    engine that will run it (strata, llama.cpp, vllm, sglang), proves it optimal with an exact DP or
    CP-SAT, and shows it beside what the engine does by default. File formats and the arithmetic:
    docs/reference.md; the engines: docs/engines.md.
    """


cli.add_command(profile_group)
cli.add_command(model_group)
cli.add_command(rig_group)


def default_workers() -> int:
    """CP-SAT workers: the machine's cores, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


def _progress(enabled: bool) -> tuple[Callable[[str, float, float], None] | None, AbstractContextManager]:
    """A status line on stderr with the incumbent and the proven bound, for terminals only."""
    if not enabled:
        return None, nullcontext()
    status = Console(stderr=True).status("planning: building the range walk and the model")

    def report(what: str, incumbent: float, bound: float) -> None:
        status.update(f"solving: best {what} {incumbent:.6g}, proven bound {bound:.6g}")

    return report, status


@cli.command("plan", hidden=True)
@click.argument("rig", type=click.Path(path_type=Path))
@click.option("--model", type=click.Path(path_type=Path), help="Model file, instead of the rig's.")
@click.option("--profile", type=click.Path(path_type=Path), help="Routing profile, instead of the model's.")
@click.option(
    "--objective",
    type=click.Choice(["time", "mass", "throughput"]),
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
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    help="Plan for this engine's memory and time model (default: the rig's, else strata).",
)
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
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Also write the --json object to this file (atomically).",
)
@click.option(
    "--plot",
    type=click.Path(path_type=Path),
    help="Draw VRAM and time per GPU beside the engine's default (with --contexts: tokens/s against "
    "context) to FILE: .png, .svg or .pdf (needs moesplit[plot]).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=default_workers,
    show_default="cores, max 8",
    help="CP-SAT worker threads.",
)
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
    as_json: bool,
    out: Path | None,
    plot: Path | None,
    workers: int,
) -> None:
    """Plan RIG: choose the cuts (and GPU order) that minimise the decode window."""
    started = (
        interrupt.take_start() or time.perf_counter()
    )  # --time-limit counts the imports and the files too
    from solver.planner import plan_rig
    from solver.report import print_report, to_json

    overrides = Overrides(model, profile, objective, order, context, engine, idle_gpus, kv_type=kv_type)
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
    try:
        if plot:
            from solver.plotting import check_plot_file

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
    except InputError as exc:
        click.echo(str(exc), err=True)
        sys.exit(ExitCode.INPUT)
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
    try:
        if out:
            with atomic_open(out, shown_path(out)) as f:
                json.dump(report, f, indent=2)
                f.write("\n")
        if plot:
            from solver.plotting import plot_result

            plot_result(result, plot, shown_path(plot))
            click.echo(f"wrote {shown_path(plot)}", err=True)
    except InputError as exc:
        click.echo(str(exc), err=True)
        sys.exit(ExitCode.INPUT)
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
    """A --contexts or --kv-types list, parsed by solver.sweep (imported only when one is given)."""
    if value is None:
        return None
    from solver import sweep

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
    plot of tokens/s against context); exits 3 when no point has a plan."""
    from solver.report import to_json
    from solver.sweep import print_sweep, sweep

    try:
        if plot:
            from solver.plotting import check_plot_file

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
            with atomic_open(out, shown_path(out)) as f:
                json.dump(report, f, indent=2)
                f.write("\n")
        if plot:
            from solver.plotting import plot_sweep

            plot_sweep(points, plot, shown_path(plot))
            click.echo(f"wrote {shown_path(plot)}", err=True)
    except InputError as exc:
        click.echo(str(exc), err=True)
        sys.exit(ExitCode.INPUT)
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
        click.echo(f"--export {engine}: {exc}", err=True)
        sys.exit(ExitCode.INPUT)


@cli.command("probe")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write the rig here, not to stdout.")
@click.option("--model", type=click.Path(path_type=Path), help="Model file the rig names.")
@click.option(
    "--context",
    type=click.IntRange(min=0),
    default=32768,
    show_default=True,
    help="KV tokens per full-attention layer.",
)
@click.option("--reserve", default="700 MiB", show_default=True, help="VRAM kept free on every card.")
@click.option("--force", is_flag=True, help="Overwrite the output file.")
@click.option("--host", help="Name this machine on every GPU (rigs that span machines).")
@click.option(
    "--gpus-only", is_flag=True, help="Print only the gpus: items, to append to another host's rig."
)
def probe_cmd(
    output: Path | None,
    model: Path | None,
    context: int,
    reserve: str,
    force: bool,
    host: str | None,
    gpus_only: bool,
) -> None:
    """Read the local NVIDIA GPUs (NVML) and write a rig file to edit."""
    from solver.probe import ProbeError, run
    from solver.units import parse_size

    try:
        reserve_bytes = parse_size(reserve)
    except ValueError as exc:
        click.echo(f"--reserve: {exc}", err=True)
        sys.exit(ExitCode.INPUT)
    if host is not None and not host.strip():
        click.echo("--host: is empty; name this machine, or leave --host out", err=True)
        sys.exit(ExitCode.INPUT)
    try:
        text = run(output, model, context, reserve_bytes, force, host=host, gpus_only=gpus_only)
    except ProbeError as exc:
        click.echo(str(exc), err=True)
        sys.exit(exc.code)
    if output is None:
        click.echo(text, nl=False)


@cli.command("calibrate")
@click.argument("rig", required=False, type=click.Path(path_type=Path))
@click.option(
    "--llama-bench",
    "benches",
    multiple=True,
    type=click.Path(path_type=Path),
    help="llama-bench -o json (or jsonl) output measured on RIG; repeatable.",
)
@click.option(
    "--llama-log",
    "logs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="llama-server or llama-cli output measured on RIG; repeatable.",
)
@click.option(
    "--args", "flags", multiple=True, help='The flags each --llama-log ran with, e.g. "-ngl 99 -ncmoe 20".'
)
@click.option(
    "--suggest", is_flag=True, help="Print the llama-bench command that measures what the fit needs."
)
@click.option("--model", type=click.Path(path_type=Path), help="Model file, instead of the rig's.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option(
    "--point", "points", multiple=True, help="Strata: HELD/TOTAL=HIT% or FRACTION=HIT%, repeatable."
)
@click.option(
    "--log", "engine_logs", multiple=True, type=click.Path(path_type=Path), help="Strata engine log."
)
@click.option(
    "--write",
    type=click.Path(path_type=Path),
    help="With RIG: write the rig with the fitted keys here (RIG itself or a new file); else the model "
    "file to store the curve in.",
)
def calibrate_cmd(
    rig: Path | None,
    benches: tuple[Path, ...],
    logs: tuple[Path, ...],
    flags: tuple[str, ...],
    suggest: bool,
    model: Path | None,
    as_json: bool,
    points: tuple[str, ...],
    engine_logs: tuple[Path, ...],
    write: Path | None,
) -> None:
    """Fit the planner's constants to your own measurements.

    \b
    llama.cpp: solve calibrate RIG --llama-bench runs.json [--write OUT]
      fits the rig's host_bandwidth, gpu_efficiency, switch_ms, layer_overhead_ms
      and handoff_ms to llama-bench decode runs (llama-bench ... -o json), or to
      llama-server/llama-cli output with --llama-log FILE --args "FLAGS";
      solve calibrate RIG --suggest prints the llama-bench command to run first.
    Strata: solve calibrate --point HELD/TOTAL=HIT% ... [--log FILE] [--write MODEL]
      fits the cover curve's exponent b to measured expert-cache hit rates.
    """
    llama = bool(benches or logs or flags or suggest)
    try:
        if rig is None and (llama or model or as_json):
            raise InputError(
                "solve calibrate", "--llama-bench, --llama-log, --suggest, --model and --json need RIG"
            )
        if rig is not None and (points or engine_logs):
            raise InputError(
                "solve calibrate",
                "--point and --log fit the Strata curve and take no RIG; give one or the other",
            )
        if rig is not None and not llama:
            raise InputError(
                "solve calibrate", "give --llama-bench FILE, --llama-log FILE --args FLAGS, or --suggest"
            )
        if rig is None:
            from solver.calibrate import run

            run(points, engine_logs, write, make_console())
        elif suggest:
            if benches or logs or flags or write:
                raise InputError(
                    "solve calibrate", "--suggest prints a command to run; it reads and writes no runs"
                )
            from solver.suggest import run as suggest_run

            suggest_run(rig, model, as_json, make_console())
        else:
            from solver.calibrate_llama import run as llama_run

            llama_run(rig, model, benches, logs, flags, write, as_json, make_console())
    except InputError as exc:
        click.echo(str(exc), err=True)
        sys.exit(ExitCode.INPUT)


def main() -> None:
    """``python -m solver.cli``: the CLI with Ctrl-C as one line and exit 130 (the ``solve`` script is
    ``solver.__main__.main``, which catches it from before these imports)."""
    interrupt.run(cli)


if __name__ == "__main__":
    main()
