"""The bench's output: one table per rig list (medians, min-max, runs, ratios), the import line, and
the ``--json`` object."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from solver.bench.fresh import IMPORT_CODE, FreshRun
from solver.bench.measure import RigBench
from solver.bench.timing import Settings, Timing

if TYPE_CHECKING:
    from rich.console import Console

    from solver.bench.sweeprigs import SweepGrid


def _ms(t: Timing) -> str:
    """A table cell: the median and the number of runs, then min-max in the median's unit."""
    if not t.runs:
        return f"[dim]skipped: {t.skipped}[/dim]" if t.skipped else "[dim]-[/dim]"
    med = t.median or 0.0
    return f"{_fmt(med)} x{len(t.runs)}\n[dim]{_span(min(t.runs), max(t.runs), med)}[/dim]"


def _line(t: Timing) -> str:
    """The same on one line: ``median xruns (min-max)``."""
    cell = _ms(t).split("\n")
    return f"{cell[0]} ({cell[1]})" if len(cell) == 2 else cell[0]


def _fmt(ms: float) -> str:
    return f"{ms / 1e3:.2f} s" if ms >= 1e3 else f"{ms:.3g} ms" if ms >= 1 else f"{ms:.2f} ms"


def _span(lo: float, hi: float, like: float) -> str:
    """``lo-hi`` in the unit ``_fmt`` gives ``like``."""
    scale = 1e3 if like >= 1e3 else 1.0
    return f"{_num(lo / scale)}-{_num(hi / scale)}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{_num(x)}x"


def _num(x: float) -> str:
    """Three significant digits, but never an exponent below a million."""
    return f"{x:.0f}" if 100 <= x < 1e6 else f"{x:.3g}"


PIECES = ("read", "table", "arcs", "dp", "exhaustive", "cp-sat", "end-to-end")


def render(title: str, rows: list[RigBench], import_ms: float | None, console: Console) -> None:
    """One rich table: size, medians (min-max, runs) of every piece, and the ratios.

    Skip reasons become numbered notes under the table, so the cells stay narrow.
    """
    from rich.table import Table

    from solver.files.console import print_lines, split_to_fit

    notes: list[str] = []

    def cell(t: Timing) -> str:
        if t.runs or not t.skipped:
            return _ms(t)
        if t.skipped not in notes:
            notes.append(t.skipped)
        return f"[dim]skipped [{notes.index(t.skipped) + 1}][/dim]"

    table = Table(title=title, title_justify="left")
    table.add_column("rig")
    table.add_column("GPUs x\nlayers", justify="right")
    table.add_column("pairs\narcs", justify="right")
    table.add_column("status")
    for col in PIECES:
        table.add_column(col, justify="right")
    table.add_column("cp-sat\n/ dp", justify="right")
    table.add_column("e2e /\nimport", justify="right")
    fresh = any(r.fresh for r in rows)
    if fresh:
        table.add_column("fresh\nprocess", justify="right")
    for r in rows:
        status = _status(r.status, r.gap)
        if r.agrees is not None:
            # an unproven plan may be an equally good one that the tie-breaks did not get to
            differs = "\n[red]!= dp[/red]" if r.status == "optimal" else "\n[dim]not dp's plan[/dim]"
            status += "\n= dp" if r.agrees else differs
        table.add_row(
            f"{r.name}\n[dim]{r.order}\n{_shape(r)}[/dim]",
            f"{r.gpus} x {r.layers}",
            f"{r.pairs:,}\n{r.arcs:,}",
            status,
            *(cell(r.pieces.get(p, Timing())) for p in PIECES),
            _ratio(r.ratio("cp-sat", "dp")),
            _ratio(r.ratio("end-to-end", import_ms)),
            *([_fresh(r.fresh)] if fresh else []),
        )
    print_lines(console, *split_to_fit(table, console))
    for i, note in enumerate(notes, 1):
        print_lines(console, f"[dim][{i}] skipped: {note}[/dim]")


def _status(status: str, gap: float | None) -> str:
    """A status, and the gap of an unproven (``feasible``) plan on the next line."""
    return f"{status}\ngap {gap:.2%}" if status == "feasible" and gap is not None else status


def _shape(r: RigBench) -> str:
    """``N kinds`` of cards, and ``on H hosts`` when there are several."""
    kinds = f"{r.kinds} kind{'s' if r.kinds != 1 else ''}"
    return f"{kinds}, {r.hosts} hosts" if r.hosts > 1 else kinds


def _fresh(run: FreshRun | None) -> str:
    """The fresh-process cell: whole process, plan_rig alone, peak RSS, and its own status."""
    if run is None:
        return "[dim]-[/dim]"
    took = f"{_fmt(run.process_s * 1e3)}\n[dim]plan {_fmt(run.plan_s * 1e3)}[/dim]"
    return f"{took}\n{run.peak_mib:,.0f} MiB\n{_status(run.status, run.gap)}\n[dim]{run.solver}[/dim]"


def to_json(
    settings: Settings,
    imports: Timing,
    rows: list[RigBench],
    sweep_rows: list[RigBench] | None,
    grid: SweepGrid | None,
) -> dict[str, Any]:
    """The ``--json`` object: settings, import time, one entry per rig and, with --sweep, per point."""
    out: dict[str, Any] = {
        "settings": {
            "repeat": settings.repeat,
            "budget_s": settings.budget_s,
            "workers": settings.workers,
            "exhaustive_limit": settings.exhaustive_limit,
        },
        "import": {"code": IMPORT_CODE, **imports.as_json()},
        "rigs": [r.as_json(imports.median) for r in rows],
    }
    if sweep_rows is not None and grid is not None:
        out["sweep"] = grid.as_json([r.as_json(imports.median) for r in sweep_rows])
    return out


def report(
    settings: Settings,
    imports: Timing,
    rows: list[RigBench],
    sweep_rows: list[RigBench] | None,
    sweep_title: str,
) -> None:
    """The human output: the rigs' table, process times, the sweep's table and the import line."""
    from solver.files.console import console as make_console
    from solver.files.console import print_lines

    console = make_console()
    render("rigs", rows, imports.median, console)
    for r in rows:
        if "solve process" in r.pieces:
            ratio = _ratio(r.ratio("solve process", imports.median))
            took = _line(r.pieces["solve process"])
            print_lines(console, f"solve {r.name} --json, fresh interpreter: {took}, {ratio} import")
    if sweep_rows is not None:
        render(f"sweep ({sweep_title})", sweep_rows, imports.median, console)
    print_lines(
        console,
        f"import ({IMPORT_CODE!r}, fresh interpreter): {_line(imports)}; {settings.workers} CP-SAT workers; "
        f"medians of up to {settings.repeat} runs per piece, fewer once a piece took {settings.budget_s:g} s",
    )
