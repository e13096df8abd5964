"""``solve score`` sets the rig's plan beside the command: that plan is counted as plans are (each GPU's
compute buffer for the plan's own placement, at the command's ``-c``/``-ub``/``-fa``/KV type), so its own
export, scored, fits every card and counts what the plan counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.cli.score import command_words
from tests.engines.test_llama_run_class import _rigs


def _score(rig: Path, words: list[str]) -> dict:
    got = CliRunner().invoke(cli, ["score", str(rig), "--json", "--", *words])
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)


@pytest.mark.parametrize(
    "seed", [*(7, 9, 12), *(pytest.param(s, marks=pytest.mark.slow) for s in (14, 17, 20, 24, 26, 27, 29))]
)
@pytest.mark.parametrize("command", [["-c", "16384"], ["-c", "16384", "-ngl", "99", "-ot", "exps=CPU"]])
def test_the_plan_beside_a_command_fits_as_its_export_runs(
    seed: int, command: list[str], tmp_path: Path
) -> None:
    """Random llama.cpp rigs (CUDA or RPC), scored with ``--fit``'s command and with every expert on the
    CPU: the plan beside each, exported and scored, fits every card. Counted with the scored command's
    buffers, whose roles' figures fall on other GPUs than the plan's, 13 of these 20 did not."""
    rig = _rigs(range(seed, seed + 1), tmp_path)[0]
    first = _score(rig, command)
    plan = first["plan"]
    if plan["status"] == "infeasible":
        return
    lines = [ln for ln in plan["export"]["lines"] if not ln.lstrip().startswith("#")]
    again = _score(rig, command_words(lines))
    assert again["score"]["status"] == "feasible", (seed, command, again["score"])
    assert again["score"]["window_ms"] == pytest.approx(plan["window_ms"], rel=1e-9)
