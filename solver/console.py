"""Rich consoles that wrap only on a terminal: piped or redirected output keeps every line whole."""

from __future__ import annotations

import os
import sys

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


def print_lines(console: Console, *renderables: object) -> None:
    """Print through ``console`` with each line's trailing spaces taken off (rich pads tables and titles
    to their width; a line read by a user, a diff or a test should end at its last character)."""
    with console.capture() as captured:
        console.print(*renderables)
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
