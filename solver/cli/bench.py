"""``solve bench``: time every piece of the planner on rigs (default: ``rigs/*.yaml``) and, with
``--sweep``, on synthetic rigs of growing size (solver.bench)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click

from solver.bench.sweeprigs import CARDS, DEFAULT_HOSTS, DEFAULT_KINDS, DEFAULT_NETWORK_MS, SweepGrid
from solver.bench.timing import Settings
from solver.cli.badinput import input_errors
from solver.cli.options import (
    OBJECTIVES,
    PATH,
    SECONDS,
    Finite,
    default_workers,
    defaulted,
    engine_option,
    grouped,
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


@dataclass(frozen=True)
class RigOptions:
    """Which rig files are timed and how: repeats, budget, the fresh process, the oracle's limit,
    CP-SAT's workers and the engine planned for."""

    rig_args: tuple[Path, ...]
    rigs: tuple[Path, ...]
    repeat: int
    budget: float
    process: bool
    exhaustive_limit: int
    workers: int | None
    engine: str | None

    def paths(self) -> list[Path]:
        """The --rig files and the arguments, each once, in order; else default_rigs()."""
        return list(dict.fromkeys([*self.rigs, *self.rig_args])) or default_rigs()

    def settings(self) -> Settings:
        return Settings(self.repeat, self.budget, self.workers or default_workers(), self.exhaustive_limit)


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
@grouped(rig_options=RigOptions, grid=SweepGrid)
def bench(rig_options: RigOptions, sweep: bool, grid: SweepGrid, as_json: bool) -> None:
    """Time table build, arcs, CP-SAT, DP, exhaustive and end to end on rigs (default: rigs/*.yaml here)."""
    from rich.console import Console

    from solver.bench.fresh import import_time
    from solver.bench.render import report, to_json
    from solver.bench.suite import bench_rigs, bench_sweep, load_rig

    why = grid.refused() if sweep else None
    if why:
        raise click.BadParameter(why, param_hint="--gpus")
    paths = rig_options.paths()
    problems = {path: load_rig(path, rig_options.engine) for path in paths}
    settings = rig_options.settings()
    err = Console(stderr=True)
    note = err.print if err.is_terminal and not as_json else None
    imports = import_time(rig_options.repeat)
    rows = bench_rigs(problems, settings, rig_options.engine, rig_options.process, note)
    sweep_rows = bench_sweep(grid, settings, note) if sweep else None
    if as_json:
        out = to_json(settings, imports, rows, sweep_rows, grid)
        click.echo(json.dumps(out, indent=2))
    else:
        report(settings, imports, rows, sweep_rows, grid.title())
