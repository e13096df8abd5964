"""The bench's runs: each rig file measured (and, if asked, ``solve RIG --json`` in a fresh interpreter),
then each sweep point measured and planned once more in a fresh interpreter."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from solver.bench.fresh import fresh_point, process_time
from solver.bench.measure import RigBench, measure
from solver.bench.sweeprigs import SweepGrid
from solver.bench.timing import Settings

#: Where a run says what it measures next (None: it says nothing).
Note = Callable[[str], None] | None


def load_rig(path: Path, engine: str | None) -> Any:
    """The rig's problem, planned for ``engine`` (None: the rig's own), whose name then says it."""
    from solver.planning.resolve import Overrides, load_problem

    problem = load_problem(path, Overrides(engine=engine))
    return dataclasses.replace(problem, rig=f"{problem.rig} ({engine})") if engine else problem


def bench_rigs(
    problems: dict[Path, Any], settings: Settings, engine: str | None, process: bool, note: Note = None
) -> list[RigBench]:
    """Every piece timed on each rig file's problem (load_rig), end to end re-reading the files;
    ``process``: ``solve RIG --json`` in a fresh interpreter too."""
    rows: list[RigBench] = []
    for path, problem in problems.items():
        if note:
            note(f"[dim]bench: {path} ...[/dim]")
        row = measure(problem, settings, reload=lambda path=path: load_rig(path, engine))
        if process:
            row.pieces["solve process"] = process_time(path, settings, engine)
        rows.append(row)
    return rows


def bench_sweep(grid: SweepGrid, settings: Settings, note: Note = None) -> list[RigBench]:
    """Every piece timed on each point of ``grid`` under its time limit, and the point planned once more
    in a fresh interpreter (its process time and peak memory)."""
    settings = dataclasses.replace(settings, time_limit=grid.sweep_limit)
    rows: list[RigBench] = []
    for point in grid.points():
        if note:
            note(f"[dim]bench: sweep {point.gpus} GPUs x {point.layers} layers, {point.order} ...[/dim]")
        row = measure(point.problem(), settings)
        row.fresh = fresh_point(point, settings)
        rows.append(row)
    return rows
