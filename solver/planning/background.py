"""A computation run beside the main line in a forked child process, its result read back when needed.

A plan's baseline (llama.cpp's ``--fit``: tens of dry runs of its memory count) does not depend on the
plan, so it can run while the tables are built and solved: with two cores free the plan then takes
about the longer of the two rather than their sum. The child inherits the problem as it is (nothing is
sent to it), computes, and sends its result back pickled through a pipe; it ignores Ctrl-C (the main
line handles it and ends the child by its pid) and leaves by ``os._exit``, running no exit handlers and
flushing none of the parent's buffers.

Nothing depends on the child succeeding: where it delivers no result (the function raised, the result
does not pickle, the child was killed), the function runs again inline, so the answer, and any error
with its own traceback, is the inline one. It runs inline from the start where no fork is available or
safe (only Linux forks here), the process may use one CPU only, or ``MOESPLIT_JOBS=1``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import signal
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Generic, TypeVar

from solver.interrupt import held

T = TypeVar("T")

#: The environment variable that, set to 1, keeps every computation on the main line.
JOBS_ENV = "MOESPLIT_JOBS"


def forks() -> bool:
    """Whether a computation may run in a child: Linux (fork is safe there with the libraries this
    process loads), two CPUs or more usable, and not ``MOESPLIT_JOBS=1``."""
    if not sys.platform.startswith("linux") or os.environ.get(JOBS_ENV, "").strip() == "1":
        return False
    return len(os.sched_getaffinity(0)) > 1


class Pending(Generic[T]):
    """``fn()`` computing in a child process (``background`` and ``forks``; else inline, when read);
    ``result`` waits for it. Use as a context manager: leaving the block ends a child whose result was
    not read."""

    def __init__(self, fn: Callable[[], T], background: bool = True) -> None:
        self.fn = fn
        self.pid: int | None = None
        self.fd: int | None = None
        if not (background and forks()):
            return
        try:
            with held():  # a Ctrl-C waits until the child is owned, then ends it
                self.pid, self.fd = _fork(fn)
        except BaseException:
            self.close()
            raise

    def result(self) -> T:
        """``fn()``'s value: the child's, or computed here where the child delivered none."""
        if self.pid is None:
            return self.fn()
        fd, self.fd = self.fd, None
        with os.fdopen(fd, "rb") as pipe:
            data = pipe.read()
        self._reap()
        if data:
            with contextlib.suppress(Exception):
                return pickle.loads(data)
        return self.fn()

    def close(self) -> None:
        """End the child if it still runs, and release its pipe."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._reap()

    def _reap(self) -> None:
        """Wait for the child's end, so that it leaves no zombie."""
        pid, self.pid = self.pid, None
        if pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def __enter__(self) -> Pending[T]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _fork(fn: Callable[[], T]) -> tuple[int, int]:
    """Start a child that writes ``fn()`` pickled to a pipe (nothing where it fails) and exits; its
    pid and the pipe's reading end. SIGINT is blocked across the fork, so that a Ctrl-C reaches the
    child only once it ignores it."""
    read, write = os.pipe()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(fn, read, write)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    os.close(write)
    return pid, read


def _child(fn: Callable[[], T], read: int, write: int) -> None:
    """The child's whole life: compute, send, leave."""
    try:
        gc.freeze()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        os.close(read)
        data = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(write, "wb") as pipe:
            pipe.write(data)
    finally:
        os._exit(0)
