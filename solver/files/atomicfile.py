"""Output files written whole or not at all, and never over one of the run's inputs.

A regular file (or a name not yet taken) is written to a temporary file in the target's directory,
flushed and fsynced, then renamed over the target with ``os.replace`` (atomic on POSIX and Windows);
a failure at any point removes the temporary file and leaves the old target untouched. A symlink is
followed: its target is what gets written (and a dangling link creates its target), the link itself
stays. A character or block device or a FIFO (``/dev/null``, a named pipe, ``/dev/stdout`` on a
terminal or pipe) is written through, in place, since replacing it would put a regular file where the
device was. Anything else (a directory, a socket) is refused with one line.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from solver.errors import InputError

#: What a path names, by ``os.stat`` (links followed): a file to replace, or one to write in place.
REPLACE, THROUGH = "replace", "through"


def output_kind(path: Path, shown: str) -> str:
    """REPLACE for a regular file or a free name, THROUGH for a device or FIFO; else an InputError
    (a command checks its outputs with it before the work that fills them)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return REPLACE  # a new file, or a dangling symlink's target
    except OSError as exc:
        raise InputError(shown, f"cannot write: {exc.strerror or exc}") from None
    if stat.S_ISREG(mode):
        return REPLACE
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode):
        return THROUGH
    what = "a directory" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
    raise InputError(shown, f"cannot write: is {what}")


def _new_file_mode(path: Path) -> int:
    """The mode the target would get from a plain ``open``: its own if it exists, else 0o666 & ~umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_open(path: Path, shown: str, binary: bool = False) -> Iterator[IO]:
    """Yield a file to write: a regular target is replaced on a clean exit and untouched on an error,
    a device or FIFO is written through (the module's docstring has the rules).

    OS errors become InputError naming ``shown`` (an unwritable output is bad usage, exit 2).
    """
    if output_kind(path, shown) == THROUGH:
        with _through(path, shown, binary) as f:
            yield f
        return
    target = Path(os.path.realpath(path))  # a symlink's target is replaced, the link kept
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(shown, f"cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _new_file_mode(target))
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise InputError(shown, f"cannot write: {exc.strerror or exc}") from None
        raise
    _fsync_dir(target.parent)


@contextlib.contextmanager
def _through(path: Path, shown: str, binary: bool) -> Iterator[IO]:
    """``path`` (a device or FIFO) opened for writing in place; a FIFO waits for its reader."""
    try:
        with open(path, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            yield f
    except OSError as exc:
        raise InputError(shown, f"cannot write: {exc.strerror or exc}") from None


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable where the platform lets a directory be fsynced."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Path, shown: str, data: bytes | str) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` by ``atomic_open``'s rules."""
    with atomic_open(path, shown, binary=isinstance(data, bytes)) as f:
        f.write(data)


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def refuse_inputs(out: Path, shown: str, inputs: Iterable[Path], what: str = "an input file") -> None:
    """Refuse to write ``out`` over any of ``inputs`` (same file, by inode or by resolved path)."""
    for src in inputs:
        if _same(out, src):
            raise InputError(shown, f"refusing to overwrite {what} ({src}); choose another output")


def check_outputs(outputs: Iterable[Path | None], inputs: Iterable[Path]) -> None:
    """Refuse, before any work, each output given (None: not asked for) that cannot be written as a
    file (output_kind) or would overwrite one of ``inputs``."""
    from solver.files.config import shown_path  # pydantic, for the commands that read a rig

    inputs = list(inputs)
    for out in outputs:
        if out:
            output_kind(out, shown_path(out))
            refuse_inputs(out, shown_path(out), inputs)


def write_json(out: Path, report: object) -> None:
    """Write ``report`` as indented JSON to ``out``, atomically (a failed write leaves no half file)."""
    import json

    from solver.files.config import shown_path

    with atomic_open(out, shown_path(out)) as f:
        json.dump(report, f, indent=2)
        f.write("\n")
