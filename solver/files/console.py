"""Rich consoles that wrap only on a terminal: piped or redirected output keeps every line whole."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

#: Width of a console that writes to a pipe or a file (unless COLUMNS says otherwise): wide enough that
#: no line of moesplit's output wraps, so `solve RIG | less` or `> plan.txt` reads like the terminal.
PIPE_WIDTH = 1000


def console(stderr: bool = False) -> Console:
    """A Console on stdout (or stderr) without highlighting, at full line length when not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and not os.environ.get("COLUMNS")
    return Console(stderr=stderr, highlight=False, width=PIPE_WIDTH if wide else None)


def print_lines(console: Console, *renderables: object, **options: Any) -> None:
    """Print through ``console`` (``options`` as ``Console.print`` takes them) with each line's trailing
    spaces taken off (rich pads tables and titles to their width; a line read by a user, a diff or a
    test should end at its last character)."""
    with console.capture() as captured:
        console.print(*renderables, **options)
    text = captured.get()
    console.file.write("".join(line.rstrip() + "\n" for line in text.splitlines()))


#: The narrowest a wrapped name column gets before a table gives up fitting the screen.
NARROWEST_NAME = 6


def fit_names(table: Table, console: Console, column_index: int = 0) -> None:
    """Let one column of words that may wrap (by default the first: names) narrow until the table fits
    the console, so rich never shortens a number or a layer range to ``...``. Tables that fit are left
    alone."""
    column = table.columns[column_index]
    unbounded = console.options.update_width(10**6)
    natural = console.measure(table, options=unbounded).maximum
    if natural <= console.width:
        return
    cells = [c for c in [column.header, *column.cells] if isinstance(c, str)]
    widest = max(console.measure(c, options=unbounded).maximum for c in cells)
    column.no_wrap, column.overflow = False, "fold"
    column.max_width = max(NARROWEST_NAME, widest - (natural - console.width))


def split_to_fit(table: Table, console: Console) -> list[Table]:
    """The table as it is when it fits the console, else as several tables side by side in turn: each
    repeats the first column (what the rows are) and takes as many of the others as fit, so a wide table
    in a narrow terminal reads in parts instead of with every cell cut to ``...``."""
    unbounded = console.options.update_width(10**6)
    if console.measure(table, options=unbounded).maximum <= console.width or len(table.columns) < 3:
        return [table]
    parts: list[Table] = []
    group: list[int] = []
    for i in range(1, len(table.columns)):
        trial = _part(table, [*group, i], first=not parts)
        if group and console.measure(trial, options=unbounded).maximum > console.width:
            parts.append(_part(table, group, first=not parts))
            group = [i]
        else:
            group.append(i)
    parts.append(_part(table, group, first=not parts))
    return parts


def _part(table: Table, columns: list[int], first: bool) -> Table:
    """A table of the first column and ``columns`` of ``table``, its rows and look (the title once)."""
    part = Table(
        title=table.title if first else None,
        title_justify=table.title_justify,
        box=table.box,
        show_header=table.show_header,
        pad_edge=table.pad_edge,
        collapse_padding=table.collapse_padding,
        padding=table.padding,
        show_lines=table.show_lines,
    )
    for j, i in enumerate([0, *columns]):
        part.columns.append(
            dataclasses.replace(table.columns[i], _index=j, _cells=list(table.columns[i].cells))
        )
    part.rows = list(table.rows)
    return part
