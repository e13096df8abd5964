"""What ``solve model`` and ``solve rig new`` write: the text to a file or stdout, paths relative to
the file, and the command line that made it."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from solver.errors import InputError, brief
from solver.files.atomicfile import refuse_inputs, write_atomic
from solver.files.config import shown_path

#: ``-o/--output``: the file to write, else stdout.
OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the file here, not to stdout.",
)


def relative(target: Path, output: Path | None) -> str:
    """``target`` as a file written to ``output`` names it: relative to the output's folder."""
    base = (output.parent if output is not None else Path.cwd()).resolve()
    try:
        return os.path.relpath(target.resolve(), base)
    except ValueError:  # another drive on Windows
        return str(target.resolve())


def emit(text: str, output: Path | None, inputs: list[Path], overwrite: bool = True) -> None:
    """Write ``text`` to ``output`` (atomically, never over an input, and over an existing regular file
    only with ``overwrite``), or print it."""
    if output is None:
        click.echo(text, nl=False)
        return
    refuse_inputs(output, shown_path(output), inputs)
    if not overwrite and output.is_file():  # a file's contents are lost; a pipe or device has none
        raise InputError(shown_path(output), "exists; give --force to write over it, or another -o")
    write_atomic(output, shown_path(output), text)
    click.echo(f"wrote {shown_path(output)}", err=True)


def command_line(words: list[object], options: dict[str, object]) -> str:
    """The command line as a user would type it again; options whose value is None are left out.

    It goes into the written file's first comment, so a word with a control character (a newline would
    end the comment and start a key of its own) is refused, naming the option that holds it.
    """
    for flag, value in [*((None, w) for w in words), *options.items()]:
        if value is not None and not all(ch.isprintable() for ch in str(value)):
            raise InputError(
                flag or "solve",
                f"{brief(str(value))} holds a control character, which no written file may hold",
            )
    flags = [str(part) for flag, value in options.items() if value is not None for part in (flag, value)]
    return shlex.join(["solve", *(str(w) for w in words), *flags])
