"""``solve bench``: time every piece of the planner on rigs (default: ``rigs/*.yaml``) and, with
``--sweep``, on synthetic rigs of growing size (solver.bench)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click

from solver.bench.sweeprigs import CARDS, DEFAULT_HOSTS, DEFAULT_KINDS, DEFAULT_NETWORK_MS
from solver.cli.badinput import input_errors
from solver.cli.options import (
    OBJECTIVES,
    PATH,
    SECONDS,
    Finite,
    defaulted,
    engine_option,
    json_option,
    stacked,
    workers_option,
)

#: Where bench looks for rigs when none is given: ``rigs/`` in the working directory (a clone of
#: moesplit, where an installed ``solve`` runs from), then the checkout this module was imported from.
RIG_DIRS = (Path("rigs"), Path(__file__).resolve().parents[2] / "rigs")
#: Placements above which the exhaustive oracle is skipped (the planner's own --check limit).
DEFAULT_EXHAUSTIVE_LIMIT = 200_000
#: The GPU orders a sweep may plan.
ORDERS = ("as-given", "auto")


def _int_list(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    """A comma list of positive whole numbers (--gpus, --layers)."""
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated whole numbers, got {value!r}") from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"expected positive whole numbers, got {value!r}")
    return out


def _orders(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    """A comma list of ORDERS, each once (--orders)."""
    out = [v.strip() for v in value.split(",") if v.strip()]
    if not out or set(out) - set(ORDERS):
        raise click.BadParameter(f"expected some of {', '.join(ORDERS)}, comma-separated; got {value!r}")
    return list(dict.fromkeys(out))


def default_rigs() -> list[Path]:
    """The ``*.yaml`` of the first of RIG_DIRS that has any; a UsageError saying where it looked if none."""
    for folder in RIG_DIRS:
        found = sorted(folder.glob("*.yaml"))
        if found:
            return found
    looked = " or ".join(str(d.resolve()) for d in RIG_DIRS)
    raise click.UsageError(
        f"no rigs given and no rigs/*.yaml under {looked}; give rig files: solve bench RIG..."
    )


#: What every piece's measurement repeats, and which rigs.
_RIG_OPTIONS = stacked(
    click.argument("rig_args", metavar="[RIG]...", nargs=-1, type=PATH),
    click.option(
        "--rig",
        "rigs",
        multiple=True,
        type=PATH,
        help="Rig file (repeatable; rig files may also follow as arguments: --rig rigs/*.yaml).",
    ),
    defaulted("--repeat", type=click.IntRange(min=1), default=5, help="Runs per piece."),
    defaulted(
        "--budget",
        type=Finite(min=0),
        default=2.0,
        help="Stop repeating a piece once its runs took SECONDS (it runs at least once).",
    ),
)
#: The synthetic rigs of ``--sweep`` and how they are planned.
_SWEEP_OPTIONS = stacked(
    click.option("--sweep", is_flag=True, help="Also time synthetic rigs of growing GPUs and layers."),
    defaulted("--gpus", default="4,8,16", callback=_int_list, help="Sweep: GPU counts."),
    defaulted("--layers", default="48,128", callback=_int_list, help="Sweep: layers."),
    defaulted("--experts", type=click.IntRange(min=1), default=128, help="Sweep: per layer."),
    defaulted(
        "--sweep-limit",
        type=SECONDS,
        default=5.0,
        help="Sweep: CP-SAT time limit per plan (status feasible when it stops the proof).",
    ),
    defaulted(
        "--kinds",
        type=click.IntRange(0, len(CARDS)),
        default=DEFAULT_KINDS,
        help=f"Sweep: card kinds of the {len(CARDS)} per rig (per host with --hosts); "
        "0: every GPU different.",
    ),
    defaulted(
        "--hosts",
        type=click.IntRange(min=1),
        default=DEFAULT_HOSTS,
        help="Sweep: hosts; the GPUs split into that many equal contiguous groups.",
    ),
    defaulted(
        "--network-ms",
        type=Finite(min=0),
        default=DEFAULT_NETWORK_MS,
        help="Sweep: ms a stage boundary between two hosts costs.",
    ),
    defaulted(
        "--orders",
        default="as-given,auto",
        callback=_orders,
        help="Sweep: GPU orders, comma-separated.",
    ),
    defaulted(
        "--objective",
        type=click.Choice(OBJECTIVES),
        default="time",
        help="Sweep: what the plans optimise.",
    ),
    click.option(
        "--idle-gpus",
        is_flag=True,
        help="Sweep: plans may leave GPUs out (then layers may be fewer than GPUs).",
    ),
)


@click.command("bench")
@_RIG_OPTIONS
@_SWEEP_OPTIONS
@click.option("--process", is_flag=True, help="Also time `solve RIG --json` in a fresh interpreter.")
@defaulted(
    "--exhaustive-limit",
    type=click.IntRange(min=0),
    default=DEFAULT_EXHAUSTIVE_LIMIT,
    help="Skip exhaustive enumeration above this many placements.",
)
@workers_option("CP-SAT workers (default: as solve).")
@engine_option("Plan every rig for this engine (default: each rig's own).")
@json_option()
@input_errors
def bench(
    rig_args: tuple[Path, ...],
    rigs: tuple[Path, ...],
    repeat: int,
    budget: float,
    sweep: bool,
    gpus: list[int],
    layers: list[int],
    experts: int,
    sweep_limit: float,
    kinds: int,
    hosts: int,
    network_ms: float,
    orders: list[str],
    objective: str,
    idle_gpus: bool,
    process: bool,
    exhaustive_limit: int,
    workers: int | None,
    engine: str | None,
    as_json: bool,
) -> None:
    """Time table build, arcs, CP-SAT, DP, exhaustive and end to end on rigs (default: rigs/*.yaml here)."""
    from rich.console import Console

    from solver.bench.fresh import fresh_point, import_time, process_time
    from solver.bench.measure import RigBench, measure
    from solver.bench.render import report, to_json
    from solver.bench.sweeprigs import SweepPoint, SweepShape
    from solver.bench.timing import Settings
    from solver.cli.options import default_workers
    from solver.planning.resolve import Overrides, load_problem

    def load(path: Path) -> Any:
        problem = load_problem(path, Overrides(engine=engine))
        return dataclasses.replace(problem, rig=f"{problem.rig} ({engine})") if engine else problem

    shape = SweepShape(kinds, hosts, network_ms)
    if sweep:
        for k in gpus:
            why = shape.check(k)
            if why:
                raise click.BadParameter(why, param_hint="--gpus")
    paths = list(dict.fromkeys([*rigs, *rig_args])) or default_rigs()
    problems = [load(path) for path in paths]
    settings = Settings(repeat, budget, workers or default_workers(), exhaustive_limit)
    err = Console(stderr=True)
    show = err.is_terminal and not as_json
    imports = import_time(repeat)
    rows: list[RigBench] = []
    for path, problem in zip(paths, problems):
        if show:
            err.print(f"[dim]bench: {path} ...[/dim]")
        row = measure(problem, settings, reload=lambda path=path: load(path))
        if process:
            row.pieces["solve process"] = process_time(path, settings, engine)
        rows.append(row)
    sweep_rows: list[RigBench] | None = None
    if sweep:
        sweep_settings = Settings(repeat, budget, settings.workers, exhaustive_limit, sweep_limit)
        sweep_rows = []
        for order, k, n in ((o, k, n) for o in orders for k in gpus for n in layers):
            if n < (2 if idle_gpus else k + 1):  # every GPU runs a layer, the first two (idle: one GPU)
                continue
            if show:
                err.print(f"[dim]bench: sweep {k} GPUs x {n} layers, {order} ...[/dim]")
            point = SweepPoint(
                k * 1000 + n, k, n, experts, order, kinds, hosts, network_ms, objective, idle_gpus
            )
            row = measure(point.problem(), sweep_settings)
            row.fresh = fresh_point(point, sweep_settings)
            sweep_rows.append(row)
    if as_json:
        out = to_json(settings, imports, rows, sweep_rows, experts, sweep_limit)
        if sweep_rows is not None:
            out["sweep"].update(
                kinds=kinds,
                hosts=hosts,
                network_ms=network_ms,
                orders=orders,
                objective=objective,
                idle_gpus=idle_gpus,
            )
        click.echo(json.dumps(out, indent=2))
    else:
        kind_text = "every GPU a different card" if kinds == 0 else f"{kinds} card kinds"
        hosts_text = f" per host, {hosts} hosts {network_ms:g} ms apart" if hosts > 1 else ""
        plan_text = f"objective {objective}{', idle GPUs' if idle_gpus else ''}, time limit {sweep_limit:g} s"
        report(
            settings,
            imports,
            rows,
            sweep_rows,
            f"{experts} experts per layer, {kind_text}{hosts_text}, {plan_text}",
        )
