"""Output files written whole or not at all, and never over one of the run's inputs.

Every file a command writes goes to a temporary file in the target's directory, is flushed and
fsynced, then renamed over the target with ``os.replace`` (atomic on POSIX and Windows). A failure
at any point removes the temporary file and leaves the old target untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from solver.errors import InputError


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
    """Yield a file to write; on a clean exit it replaces ``path``, on any error it vanishes.

    OS errors become InputError naming ``shown`` (an unwritable output is bad usage, exit 2).
    """
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(shown, f"cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _new_file_mode(path))
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise InputError(shown, f"cannot write: {exc.strerror or exc}") from None
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable where the platform lets a directory be fsynced."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Path, shown: str, data: bytes | str) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically."""
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
