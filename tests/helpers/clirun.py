"""Run the real ``solve`` CLI in-process and check what every run must satisfy: its exit code and JSON.

A run either exits 2 with one line on stderr naming an input file, or exits 0 with a feasible plan,
or 3 with an infeasibility and its reason; it never raises (a traceback) and never hangs.
"""

from __future__ import annotations

import json
import math
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import yaml
from click.testing import CliRunner, Result

from solver.cli import cli
from solver.files.config import shown_path

#: A single run of a tiny rig takes milliseconds; this only catches a hang.
HANG_SECONDS = 30


@contextmanager
def no_hang(seconds: int = HANG_SECONDS) -> Iterator[None]:
    """Fail (instead of hanging the suite) if the block runs longer than ``seconds``."""

    def _raise(signum: int, frame: object) -> None:
        raise TimeoutError(f"the run took over {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def invoke(*args: str | Path) -> Result:
    """``solve ARGS --json`` on one worker; a Python exception escaping the CLI fails the test."""
    runner = CliRunner()
    with no_hang():
        result = runner.invoke(cli, [*map(str, args), "--json", "--workers", "1"])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(*result.exc_info))
        raise AssertionError(f"traceback for {args}:\n{tb}")
    return result


@dataclass(frozen=True)
class Message:
    """An exit-2 message split into its parts: ``file[:line]: [key: ]text``."""

    file: str
    line: int | None
    rest: str


def input_error(result: Result, files: list[Path]) -> Message:
    """The one-line stderr message of an exit-2 run, which must name one of ``files``.

    A directory in ``files`` stands for any file in it (a mutated path may name a file that is not there).
    """
    assert result.exit_code == 2, (result.exit_code, result.stdout[-2000:], result.stderr)
    assert result.stdout == "", "bad input must print nothing on stdout"
    text = result.stderr
    assert "Traceback" not in text
    assert text.endswith("\n") and text.count("\n") == 1, f"not one line: {text!r}"
    text = text.rstrip("\n")
    for path in files:
        shown = shown_path(path)
        if path.is_dir() and text.startswith(shown + "/"):
            shown = text.split(":", 1)[0]
        if text.startswith(shown + ":"):
            rest = text[len(shown) + 1 :]
            m = re.match(r"(\d+): (.*)", rest)
            if m:
                return Message(shown, int(m.group(1)), m.group(2))
            assert rest.startswith(" "), text
            return Message(shown, None, rest[1:])
    raise AssertionError(f"the message names none of {[shown_path(f) for f in files]}: {text!r}")


def check_plan(out: dict) -> None:
    """A plan's JSON has the fields of docs/reference.md's "The JSON object" and is a feasible placement."""
    for key in ("rig", "model", "objective", "status", "window_ms", "held_mass", "held_pairs", "cuts"):
        assert key in out, key
    for key in ("stages", "baseline", "solver"):
        assert key in out, key
    assert out["status"] in ("optimal", "feasible")
    stages = out["stages"]
    assert stages and stages[0]["start"] == 0
    for s, t in pairwise(stages):
        assert s["end"] == t["start"]
    assert out["cuts"] == [s["start"] for s in stages[1:]]
    assert sorted(s["gpu"] for s in stages) == list(range(len(stages)))
    for s in stages:
        assert s["start"] < s["end"]
        assert 0 <= s["cache_bytes"] <= s["room_bytes"]
        assert 0 <= s["held_pairs"] <= s["visible_pairs"]
        assert s["compute_ms"] >= 0
    assert out["held_pairs"] == sum(s["held_pairs"] for s in stages)
    assert math.isclose(out["held_mass"], sum(s["held_mass"] for s in stages), rel_tol=1e-9, abs_tol=1e-12)
    assert -1e-9 <= out["held_mass"] <= 1 + 1e-9
    assert math.isfinite(out["window_ms"]) and out["window_ms"] >= 0
    base = out["baseline"]
    assert base["name"] == "proportional"


def outcome(result: Result, files: list[Path]) -> str:
    """Check a run against the invariant; return "input", "plan" or "infeasible"."""
    if result.exit_code == 2:
        input_error(result, files)
        return "input"
    assert result.exit_code in (0, 3), (result.exit_code, result.stdout[-2000:], result.stderr)
    out = json.loads(result.stdout)
    if result.exit_code == 0:
        check_plan(out)
        return "plan"
    assert out["status"] == "infeasible"
    assert out["cuts"] == [] and out["stages"] == []
    reason = out["reason"]
    assert isinstance(reason, str) and reason and "\n" not in reason
    return "infeasible"


def key_line(text: str, path: tuple) -> int:
    """1-based line of the key (or list item) at ``path`` in YAML ``text``, found with PyYAML itself."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    line = node.start_mark.line + 1
    for part in path:
        if isinstance(part, int):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            key, node = next((k, v) for k, v in node.value if k.value == part)
            line = key.start_mark.line + 1
    return line
