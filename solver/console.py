"""Rich consoles that wrap only on a terminal: piped or redirected output keeps every line whole."""

from __future__ import annotations

import os
import sys

from rich.console import Console

#: Width of a console that writes to a pipe or a file (unless COLUMNS says otherwise): wide enough that
#: no line of moesplit's output wraps, so `solve RIG | less` or `> plan.txt` reads like the terminal.
PIPE_WIDTH = 1000


def console(stderr: bool = False) -> Console:
    """A Console on stdout (or stderr) without highlighting, at full line length when not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and not os.environ.get("COLUMNS")
    return Console(stderr=stderr, highlight=False, width=PIPE_WIDTH if wide else None)
