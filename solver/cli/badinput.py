"""Bad input ends a command with one line on stderr and exit code 2, never a traceback.

Running out of memory is bad input too: only an input too large for the machine gets there (every file
reader is bounded, solver.files.bounded), so it is one line and exit 2 rather than a traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from solver.errors import InputError
from solver.exitcodes import ExitCode

F = TypeVar("F", bound=Callable[..., Any])

#: The line for a MemoryError: an input (a file or an option) needs more memory than the machine has.
OUT_OF_MEMORY = "out of memory: an input asks for more than this machine holds"


def fail(message: str) -> NoReturn:
    """End the command: ``message`` on stderr, exit code 2."""
    click.echo(message, err=True)
    sys.exit(ExitCode.INPUT)


def input_errors(fn: F) -> F:
    """A command whose InputError (a file, a key, an option it names) ends it through ``fail``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            fail(str(exc))
        except MemoryError:
            fail(OUT_OF_MEMORY)

    return wrapper  # type: ignore[return-value]
