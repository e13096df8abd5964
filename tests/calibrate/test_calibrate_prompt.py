"""``solve calibrate`` on llama-bench prompt rows: the prompt constants found again, written, and the
runs that would identify the ones a set of rows leaves open.

The rows' rates are what the prompt model itself predicts on a rig whose ``matrix_efficiency`` and
``pcie_efficiency`` are known ("true"), so the fit must recover them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from solver.calibrate.llamafit import gather_prompt, load, score_prompts
from solver.calibrate.promptfit import HINTS
from tests.calibrate.test_calibrate_llama import bench_row, cli_run, make_rig

TRUTH = {"matrix_efficiency": 0.23, "pcie_efficiency": 0.61}


def prompt_row(ncmoe: int = 0, ubatch: int = 512, n_prompt: int = 4096, depth: int = 0) -> dict:
    """A llama-bench -o json prompt row (``-p N -n 0``)."""
    row = bench_row(ncmoe=ncmoe, n_prompt=n_prompt, n_gen=0, depth=depth, tps=1000.0)
    return {**row, "n_ubatch": ubatch, "n_batch": max(ubatch, 2048), "flash_attn": 1}


def sweep() -> list[dict]:
    """All experts on the GPU once, then a -ub sweep with experts on the CPU: both constants."""
    return [
        prompt_row(0, 512),
        prompt_row(20, 512),
        prompt_row(20, 2048),
        prompt_row(20, 4096, depth=8192),
    ]


def true_rows(folder: Path, rows: list[dict], truth: dict[str, float]) -> list[dict]:
    """The rows with ``avg_ts`` as the prompt model predicts it on the rig under ``truth``."""
    rig = make_rig(folder, name="truth.yaml")
    rig.write_text(rig.read_text().replace("context: 4096\n", "context: 4096\n" + yaml.safe_dump(truth)))
    path = folder / "truth.json"
    path.write_text(json.dumps(rows))
    setup = load(rig, None)
    runs, _ = gather_prompt(setup, (path,))
    scorings = score_prompts(setup.p, runs, "truth.yaml", [])
    assert len(scorings) == len(rows)
    return [{**row, "avg_ts": 1000.0 * s.tokens / s.before_ms} for row, s in zip(rows, scorings)]


def test_a_ub_sweep_and_a_run_on_the_gpu_recover_both_constants_and_write_them(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    runs = tmp_path / "pp.json"
    runs.write_text(json.dumps(true_rows(tmp_path, sweep(), TRUTH)))
    out = tmp_path / "fitted.yaml"
    result = cli_run(rig, "--llama-bench", runs, "--json", "--write", out)
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)["prompt"]
    for key, value in TRUTH.items():
        assert got["constants"][key]["identified"]
        assert got["constants"][key]["after"] == pytest.approx(value, rel=1e-6)
        assert got["constants"][key]["before"] != pytest.approx(value, rel=0.05)
    assert got["median_error"]["after"] == pytest.approx(0.0, abs=1e-9)
    assert got["median_error"]["before"] > 0.1
    written = yaml.safe_load(out.read_text())
    assert written["matrix_efficiency"] == pytest.approx(TRUTH["matrix_efficiency"], abs=6e-4)
    assert written["pcie_efficiency"] == pytest.approx(TRUTH["pcie_efficiency"], abs=6e-4)
    again = cli_run(out, "--llama-bench", runs, "--json")  # the written rig predicts the runs
    assert json.loads(again.stdout)["prompt"]["median_error"]["before"] < 1e-3


def test_runs_on_the_gpu_alone_fit_matrix_efficiency_and_name_the_run_for_pcie(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    runs = tmp_path / "pp.json"
    rows = [prompt_row(0, 512), prompt_row(0, 2048)]
    runs.write_text(json.dumps(true_rows(tmp_path, rows, TRUTH)))
    got = json.loads(cli_run(rig, "--llama-bench", runs, "--json").stdout)["prompt"]
    assert got["constants"]["matrix_efficiency"]["after"] == pytest.approx(0.23, rel=1e-6)
    assert not got["constants"]["pcie_efficiency"]["identified"]
    assert got["constants"]["pcie_efficiency"]["after"] == pytest.approx(0.8)  # kept
    assert got["not_identified"] == {"pcie_efficiency": HINTS["pcie_efficiency"][0]}
    text = cli_run(rig, "--llama-bench", runs).stdout
    assert "prompt: fitted matrix_efficiency 0.230 (was 0.400)" in text
    assert "kept pcie_efficiency 0.800: not identified: no prompt run copies experts" in " ".join(
        text.split()
    )


def test_one_ub_with_experts_on_the_cpu_leaves_one_constant_and_says_the_sweep(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    runs = tmp_path / "pp.json"
    runs.write_text(json.dumps(true_rows(tmp_path, [prompt_row(20, 2048)], TRUTH)))
    result = cli_run(rig, "--llama-bench", runs, "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)["prompt"]
    identified = [k for k, c in got["constants"].items() if c["identified"]]
    assert len(identified) == 1
    left = next(k for k in TRUTH if k not in identified)
    assert got["not_identified"] == {left: HINTS[left][1]}
    assert got["median_error"]["after"] == pytest.approx(0.0, abs=1e-9)  # one run, one constant: exact
