"""Prompt-processing fidelity against the measured public runs (tests/fixtures/prompt) must not get worse.

tests/helpers/prompt_fidelity.py predicts every run with the default constants (before) and after
``solve calibrate``'s prompt fit on each machine's first run alone (after; the other runs held out).
BASELINE is what it gave when recorded (``python tests/helpers/prompt_fidelity.py``); a change that
improves it should move the baseline. HELD_OUT_FLOOR is the share of held-out runs within 20% the
calibrated model must reach whatever the baseline. The prompt model's one fitted constant,
EXPERT_EFFICIENCY, is refitted here from the public rows it was fitted to (not scored runs), so it
cannot drift to the scored runs unnoticed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from solver.engines.llamacpp import prompt
from tests.helpers import prompt_fidelity

#: Recorded: 32 scored runs on 11 machines (one more run is kept but excluded), 41 same-machine pairs,
#: 21 held out.
BASELINE = {"before_median": 0.1748, "ratio_within": 33 / 41, "after_within": 16 / 21}
#: The public rows EXPERT_EFFICIENCY is fitted to, outside the scored fixtures.
FIT_ROWS = prompt_fidelity.FOLDER / "fit" / "rtx3090-gptoss20b-pr20586.yaml"
#: How far the median may move (rounding of the recorded figure).
SLACK = 1e-4
#: Held-out runs within 20% after calibrating on one run per machine: the floor.
HELD_OUT_FLOOR = 0.70


@pytest.fixture(scope="module")
def rows() -> list[prompt_fidelity.Row]:
    return prompt_fidelity.table()


def test_prompt_fidelity_is_no_worse_than_recorded(rows: list[prompt_fidelity.Row]) -> None:
    s = prompt_fidelity.summary(rows)
    assert (s.runs, s.machines, s.pairs, s.held_out) == (32, 11, 41, 21)
    assert s.before_median <= BASELINE["before_median"] + SLACK
    assert s.ratio_within >= BASELINE["ratio_within"] - 1e-12
    assert s.after_within >= BASELINE["after_within"] - 1e-12


def test_one_run_per_machine_calibrates_the_rest_within_20_percent(rows: list[prompt_fidelity.Row]) -> None:
    s = prompt_fidelity.summary(rows)
    assert s.after_within >= HELD_OUT_FLOOR


def test_every_prompt_run_is_predicted(rows: list[prompt_fidelity.Row]) -> None:
    assert all(r.measured > 0 and r.before > 0 and r.after > 0 for r in rows)


def _predicted(monkeypatch: pytest.MonkeyPatch, k: float) -> np.ndarray:
    """The fit rows' predicted tokens/s with EXPERT_EFFICIENCY at ``k``."""
    monkeypatch.setattr(prompt, "EXPERT_EFFICIENCY", k)
    with tempfile.TemporaryDirectory() as tmp:
        rows = prompt_fidelity.machine_rows(FIT_ROWS, Path(tmp))
    return np.array([[r.before, r.measured] for r in rows])


def test_expert_efficiency_is_the_fit_of_its_public_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = prompt.EXPERT_EFFICIENCY
    # nothing in host memory: each row's time is a + b / k, read at two values of k
    one, half = _predicted(monkeypatch, 1.0), _predicted(monkeypatch, 0.5)
    t1, th, measured = 1.0 / one[:, 0], 1.0 / half[:, 0], 1.0 / one[:, 1]
    b = th - t1
    a = t1 - b
    grid = np.arange(0.10, 1.0001, 0.01)
    loss = [float(np.sum(np.log((a + b / k) / measured) ** 2)) for k in grid]
    assert recorded == pytest.approx(float(grid[int(np.argmin(loss))]), abs=0.005)
