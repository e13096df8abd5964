"""What a first run shows: whole lines when piped, and a `solve --help` that documents planning."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli

BOX = str(Path(__file__).resolve().parents[2] / "rigs" / "box.yaml")


def test_piped_output_keeps_whole_lines():
    """Not a terminal and no COLUMNS: nothing wraps at 80 columns mid-phrase."""
    res = CliRunner(env={"COLUMNS": None}).invoke(cli, [BOX, "--workers", "1"])
    assert res.exit_code == 0, res.output
    [status] = [line for line in res.stdout.splitlines() if line.startswith(("dp: ", "cp-sat: "))]
    assert status.endswith(" solves)") and len(status) > 80


def test_columns_still_sets_the_width():
    res = CliRunner(env={"COLUMNS": "60"}).invoke(cli, [BOX, "--workers", "1"])
    assert max(len(line) for line in res.stdout.splitlines()) <= 60


@pytest.mark.parametrize("args", [["--help"], ["-h"], [BOX, "--help"], ["rigs/mine.yaml", "--json", "-h"]])
def test_help_shows_the_plan_usage_options_and_examples(args):
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0
    text = res.stdout
    assert "RIG [OPTIONS]" in text.splitlines()[0]
    for option in (
        "--model",
        "--objective",
        "--order",
        "--engine",
        "--context",
        "--time-limit",
        "--check",
        "--export",
    ):
        assert f"  {option} " in text, option
    for option in ("--json", "--out", "--plot", "--workers", "--version", "--help"):
        assert option in text, option
    assert "Examples:" in text and "  solve rigs/box.yaml\n" in text
    commands = text.split("Commands:")[1]
    names = [line.split()[0] for line in commands.splitlines() if line.startswith("  ")]
    assert names == [
        "bench",
        "calibrate",
        "model",
        "probe",
        "profile",
        "rig",
        "score",
        "verify",
    ]  # plan is the default, not listed


def test_plan_stays_callable_by_name():
    res = CliRunner().invoke(cli, ["plan", BOX, "--json", "--workers", "1"])
    assert res.exit_code == 0 and '"status": "optimal"' in res.stdout
