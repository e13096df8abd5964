"""A computation beside the main line (solver.planning.background): the child's value is the inline
one, a child that delivers nothing is computed again inline, a child is ended when its result is not
read, and the plan's default, computed so, is the one computed inline."""

from __future__ import annotations

import os
import signal
import time

import pytest

from solver.planning import background
from solver.planning.background import JOBS_ENV, Pending
from solver.planning.planner import plan_rig
from solver.planning.resolve import load_problem
from tests.conftest import ROOT

#: Seconds leaving a block may take with its child ended: only catches a wait for the child's end.
HANG_S = 20

needs_fork = pytest.mark.skipif(not background.forks(), reason="no fork here (one CPU or not Linux)")


def _pid_and(value: int) -> tuple[int, int]:
    return os.getpid(), value


@needs_fork
def test_the_value_comes_from_a_child_and_equals_the_inline_one():
    with Pending(lambda: _pid_and(sum(range(10_000)))) as pending:
        pid, value = pending.result()
    assert pid != os.getpid()
    assert value == sum(range(10_000))


def test_inline_where_asked_or_where_jobs_is_one(monkeypatch):
    with Pending(lambda: _pid_and(1), background=False) as pending:
        assert pending.pid is None
        assert pending.result() == (os.getpid(), 1)
    monkeypatch.setenv(JOBS_ENV, "1")
    assert not background.forks()
    with Pending(lambda: _pid_and(2)) as pending:
        assert pending.pid is None
        assert pending.result() == (os.getpid(), 2)


class _Unpicklable:
    def __reduce__(self):
        raise TypeError("not sent")


@needs_fork
def test_a_child_that_delivers_nothing_is_computed_again_inline():
    calls = []

    def fn():
        calls.append(os.getpid())
        return _Unpicklable() if os.getpid() != main else "inline"

    main = os.getpid()
    with Pending(fn) as pending:
        assert pending.result() == "inline"
    assert calls == [main]  # the child's own call is in its own memory


@needs_fork
def test_an_error_is_raised_inline_with_its_own_traceback():
    def fn():
        raise ValueError("the default's own error")

    with Pending(fn) as pending, pytest.raises(ValueError, match="the default's own error"):
        pending.result()


@needs_fork
def test_a_child_whose_result_is_not_read_is_ended_by_its_pid():
    started = time.monotonic()
    with Pending(lambda: time.sleep(10 * HANG_S)) as pending:
        pid = pending.pid
        assert pid is not None
    assert time.monotonic() - started < HANG_S  # ended, not waited for
    assert pending.pid is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: no zombie left


@needs_fork
def test_the_child_ignores_ctrl_c():
    with Pending(lambda: _pid_and(time.sleep(0.5) or 3)) as pending:
        child = pending.pid
        os.kill(child, signal.SIGINT)
        assert pending.result() == (child, 3)  # the child's own answer, not one computed again here


def test_a_plans_default_is_the_one_computed_inline(monkeypatch):
    """The llama.cpp rig's --fit default, from the child and inline, is the same: cuts, plan, note and
    command."""
    p = load_problem(ROOT / "rigs" / "llama-mix.yaml")
    beside = plan_rig(p)
    monkeypatch.setenv(JOBS_ENV, "1")
    inline = plan_rig(p)
    assert beside.default is not None and beside.default.command
    assert beside.default == inline.default
    assert plan_rig(p, with_default=False).default is None
