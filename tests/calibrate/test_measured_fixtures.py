"""The measured-run fixtures are well formed: every run says where its numbers come from, quotes them as
printed, and points at a model file the planner loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from solver.files.config import load_model

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "measured"
MACHINES = sorted(FOLDER.glob("*.yaml"))
MACHINE_KEYS = {
    "machine",
    "source",
    "build",
    "cpu",
    "memory",
    "host_bandwidth_nominal",
    "gpus",
    "model",
    "runs",
}
RUN_KEYS = {"flags", "depth", "tg", "url", "quote"}


def _number_text(value: float) -> str:
    """The value as a report prints it: no trailing zeros beyond the ones written in the YAML."""
    return repr(value) if isinstance(value, float) else str(value)


def test_there_are_enough_runs():
    runs = [run for path in MACHINES for run in yaml.safe_load(path.read_text())["runs"]]
    assert len(MACHINES) >= 5 and len(runs) >= 12


@pytest.mark.parametrize("path", MACHINES, ids=lambda p: p.stem)
def test_machine_file(path: Path):
    doc = yaml.safe_load(path.read_text())
    assert doc.keys() >= MACHINE_KEYS, MACHINE_KEYS - doc.keys()
    assert doc["machine"] == path.stem
    assert doc["gpus"] and all(isinstance(g, str) for g in doc["gpus"])
    assert doc["source"].startswith("https://")
    for run in doc["runs"]:
        assert run.keys() >= RUN_KEYS, RUN_KEYS - run.keys()
        assert run["url"].startswith(("https://", "http://"))
        assert isinstance(run["depth"], int) and run["depth"] >= 0
        assert isinstance(run["tg"], (int, float)) and run["tg"] > 0
        assert _number_text(run["tg"]) in run["quote"], (run["tg"], run["quote"])
        model_file = run.get("model_file", doc.get("model_file"))
        assert model_file, f"{path.name}: a run without a model file"
        model, _ = load_model((FOLDER / model_file).resolve())
        assert model.active_experts, model_file


@pytest.mark.parametrize("path", sorted((FOLDER / "models").glob("*.yaml")), ids=lambda p: p.stem)
def test_model_files_load(path: Path):
    model, _ = load_model(path)
    assert model.layers > 0 and model.active_experts
