"""Measurements no run could give (huge integers, rates past any decode) are skipped with a note, a file
given twice is read once, and repeated placements are scored once: never a traceback or a warning."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from solver.calibrate import llamafit
from tests.calibrate.test_calibrate_llama import bench_row, cli_run, design_rows, make_rig, write_json


def rows_with(**changes: object) -> list[dict]:
    return [*design_rows(), {**bench_row(), **changes}]


def test_integers_past_any_count_are_skipped(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    for changes in ({"n_gen": 10**18}, {"avg_ts": 10**400}, {"n_cpu_moe": 2**31}):
        path = tmp_path / "runs.json"
        path.write_text(json.dumps(rows_with(**changes)))
        result = cli_run(rig, "--llama-bench", path)
        assert result.exit_code == 0, result.output
        assert "skipped" in result.output


def test_a_rate_faster_than_any_decode_is_skipped(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = cli_run(rig, "--llama-bench", write_json(tmp_path, rows_with(avg_ts=1e308)))
    assert result.exit_code == 0, result.output
    assert "faster than any decode" in result.output
    log = tmp_path / "server.log"
    log.write_text("       eval time =  0.000000001 ms / 1000000 tokens\n")
    result = cli_run(rig, "--llama-log", log, "--args", "-ngl 99")
    assert result.exit_code == 2 and "faster than any decode" in result.stderr, result.output


def test_a_file_given_twice_is_read_once(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    runs = write_json(tmp_path, design_rows())
    once = cli_run(rig, "--llama-bench", runs, "--json")
    twice = cli_run(rig, "--llama-bench", runs, "--llama-bench", tmp_path / "." / "runs.json", "--json")
    assert once.exit_code == twice.exit_code == 0, twice.output
    assert "given twice to --llama-bench" in twice.stderr
    assert json.loads(once.stdout)["constants"] == json.loads(twice.stdout)["constants"]


def test_runs_of_one_placement_are_scored_once(tmp_path: Path, monkeypatch) -> None:
    rig = make_rig(tmp_path)
    scored = []
    real = llamafit.score_run
    monkeypatch.setattr(llamafit, "score_run", lambda *a: scored.append(1) or real(*a))
    result = cli_run(rig, "--llama-bench", write_json(tmp_path, design_rows() * 50))
    assert result.exit_code == 0, result.output
    assert len(scored) == len(design_rows())
