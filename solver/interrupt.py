"""Ctrl-C at any phase of any command: one line ``interrupted`` on stderr, exit 130, no traceback, and
a CP-SAT search that stops rather than runs on.

Python runs a signal handler in the main thread only, between bytecodes, so while the main thread
sits in CP-SAT's C++ ``solve`` nothing can stop it (and CP-SAT's own SIGINT catching ends only that
one solve, as if its time ran out, and then leaves SIGINT to the default action). ``solve`` therefore
runs each search on a helper thread: the main thread waits where a signal reaches it, asks the search
to stop, waits for it to end and lets the interrupt go on. Files being written are removed on the way
(``solver.files.atomicfile``).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from solver.exitcodes import ExitCode

if TYPE_CHECKING:  # imported before the CLI, so without CP-SAT's own import time
    from ortools.sat.python import cp_model

#: How often the main thread asks a search to stop until it has (seconds): a search started just as the
#: signal came may not have taken the first request.
STOP_EVERY_S = 0.05
#: How often the main thread wakes while a search runs (seconds): where the signal went to another
#: thread (macOS delivers it to any), the main thread runs the handler only once awake.
WAKE_EVERY_S = 0.1


class Interrupted(BaseException):
    """Ctrl-C: a BaseException, so no ``except Exception`` takes it for an error of its own."""


class _Held:
    """How deep the main thread is in ``held`` blocks, and whether a Ctrl-C waits at their end."""

    depth = 0
    pending = False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    """Raise Interrupted once (at the end of a ``held`` block, inside one); later Ctrl-Cs are ignored
    while the run stops and cleans up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _Held.depth:
        _Held.pending = True
        return
    raise Interrupted


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold a Ctrl-C back until the block ends, for a step that must not be cut in half (starting a
    child process that the run ends if interrupted: cut in half, the child runs on unowned)."""
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
    if _Held.depth == 0 and _Held.pending:
        _Held.pending = False
        raise Interrupted


def run(command: Callable[[], object]) -> None:
    """Call ``command`` (a console script's body) with Ctrl-C as one line and exit 130.

    A process started with SIGINT ignored (a background job of a script, ``nohup``) keeps ignoring it.
    """
    in_main = threading.current_thread() is threading.main_thread()
    if in_main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        command()
    except (Interrupted, KeyboardInterrupt):
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
        sys.exit(ExitCode.INTERRUPTED)
    except MemoryError:  # an input too large for the machine, outside any command's own handling
        sys.stderr.write("out of memory: an input asks for more than this machine holds\n")
        sys.stderr.flush()
        sys.exit(ExitCode.INPUT)


#: When the ``solve`` console script started (None: not run as the script, or already taken), so that
#: ``--time-limit`` counts the imports too.
_started: float | None = None


def start_clock() -> None:
    """Note the script's start time, for the first command's ``take_start``."""
    global _started
    _started = time.perf_counter()


def take_start() -> float | None:
    """The script's start time, once: a later command in the same process starts its own clock."""
    global _started
    started, _started = _started, None
    return started


def solve(
    solver: cp_model.CpSolver,
    model: cp_model.CpModel,
    callback: cp_model.CpSolverSolutionCallback | None = None,
) -> cp_model.CpSolverStatus:
    """``solver.solve(model, callback)`` for a CP-SAT ``solver``, stopped by Ctrl-C.

    Off the main thread (where no signal arrives) it is the plain call. CP-SAT's own SIGINT catching is
    turned off, so the signal reaches Python, the one place that handles it.
    """
    solver.parameters.catch_sigint_signal = False
    if threading.current_thread() is not threading.main_thread():
        return solver.solve(model, callback)
    done = threading.Event()
    answer: list[Any] = []

    def search() -> None:
        try:
            answer.append(solver.solve(model, callback))
        except BaseException as exc:  # handed to the main thread, which raises it
            answer.append(exc)
        finally:
            done.set()

    helper = threading.Thread(target=search, name="cp-sat", daemon=True)
    helper.start()
    try:
        while not done.wait(WAKE_EVERY_S):
            pass
    except BaseException:
        solver.stop_search()
        while not done.wait(STOP_EVERY_S):
            solver.stop_search()
        raise
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0]
