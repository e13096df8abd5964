"""``solve calibrate``: fit the planner's constants to measurements (llama.cpp runs, or Strata's
expert-cache hit rates); the fitting lives in solver.calibrate.llamafit and solver.calibrate.cover."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from solver.cli.badinput import input_errors
from solver.cli.options import MODEL, PATH, grouped, json_option
from solver.errors import InputError
from solver.files.console import console as make_console


@dataclass(frozen=True)
class LlamaRuns:
    """llama.cpp's measurements on the rig: llama-bench outputs, server or cli logs with the flags each
    ran with, or ``--suggest`` for the llama-bench command that measures them."""

    benches: tuple[Path, ...]
    logs: tuple[Path, ...]
    flags: tuple[str, ...]
    suggest: bool

    @property
    def given(self) -> bool:
        return bool(self.benches or self.logs or self.flags or self.suggest)


@dataclass(frozen=True)
class StrataPoints:
    """Strata's expert-cache hit rates: points given on the command line and engine logs that hold them."""

    points: tuple[str, ...]
    engine_logs: tuple[Path, ...]

    @property
    def given(self) -> bool:
        return bool(self.points or self.engine_logs)


@click.command("calibrate")
@click.argument("rig", required=False, type=PATH)
@click.option(
    "--llama-bench",
    "benches",
    multiple=True,
    type=PATH,
    help="llama-bench -o json (or jsonl) output measured on RIG; repeatable.",
)
@click.option(
    "--llama-log",
    "logs",
    multiple=True,
    type=PATH,
    help="llama-server or llama-cli output measured on RIG; repeatable.",
)
@click.option(
    "--args", "flags", multiple=True, help='The flags each --llama-log ran with, e.g. "-ngl 99 -ncmoe 20".'
)
@click.option(
    "--suggest", is_flag=True, help="Print the llama-bench command that measures what the fit needs."
)
@MODEL
@json_option()
@click.option(
    "--point", "points", multiple=True, help="Strata: HELD/TOTAL=HIT% or FRACTION=HIT%, repeatable."
)
@click.option("--log", "engine_logs", multiple=True, type=PATH, help="Strata engine log.")
@click.option(
    "--write",
    type=PATH,
    help="With RIG: write the rig with the fitted keys here (RIG itself or a new file); else the model "
    "file to store the curve in.",
)
@input_errors
@grouped(llama=LlamaRuns, strata=StrataPoints)
def calibrate_cmd(
    rig: Path | None,
    llama: LlamaRuns,
    strata: StrataPoints,
    model: Path | None,
    as_json: bool,
    write: Path | None,
) -> None:
    """Fit the planner's constants to your own measurements.

    \b
    llama.cpp: solve calibrate RIG --llama-bench runs.json [--write OUT]
      fits the rig's host_bandwidth, gpu_efficiency, switch_ms, layer_overhead_ms,
      handoff_ms and moe_layer_ms to llama-bench decode runs (-o json), or to
      llama-server/llama-cli output with --llama-log FILE --args "FLAGS", and its
      matrix_efficiency and pcie_efficiency to llama-bench prompt runs (-p N -n 0);
      solve calibrate RIG --suggest prints the llama-bench command to run first.
    Strata: solve calibrate --point HELD/TOTAL=HIT% ... [--log FILE] [--write MODEL]
      fits the cover curve's exponent b to measured expert-cache hit rates.
    """
    refused = _refused(rig, llama, strata, model, as_json, write)
    if refused:
        raise InputError("solve calibrate", refused)
    if rig is None:
        from solver.calibrate.cover import run

        run(strata.points, strata.engine_logs, write, make_console())
    elif llama.suggest:
        from solver.calibrate.suggest import run as suggest_run

        suggest_run(rig, model, as_json, make_console())
    else:
        from solver.calibrate.llamafit_report import run as llama_run

        llama_run(rig, model, llama.benches, llama.logs, llama.flags, write, as_json, make_console())


def _refused(
    rig: Path | None,
    llama: LlamaRuns,
    strata: StrataPoints,
    model: Path | None,
    as_json: bool,
    write: Path | None,
) -> str | None:
    """Why the options given fit neither calibration (the first reason), or None."""
    if rig is None and (llama.given or model or as_json):
        return "--llama-bench, --llama-log, --suggest, --model and --json need RIG"
    if rig is not None and strata.given:
        return "--point and --log fit the Strata curve and take no RIG; give one or the other"
    if rig is not None and not llama.given:
        return "give --llama-bench FILE, --llama-log FILE --args FLAGS, or --suggest"
    if rig is not None and llama.suggest and (llama.benches or llama.logs or llama.flags or write):
        return "--suggest prints a command to run; it reads and writes no runs"
    return None
