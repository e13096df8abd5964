"""Fidelity against the measured public runs (tests/fixtures/measured) must not get worse.

tests/helpers/fidelity.py predicts every run before calibration (defaults, host_bandwidth half the nominal
RAM rate) and after fitting each machine's constants to its first run or two (solve calibrate's fit).
BASELINE is what it gave when recorded. A change to the time model, the defaults or the fit that
makes any of these worse fails here; one that improves them should lower (or raise) the baseline to
the new figures, and docs/fidelity.md shows the table (``python tests/helpers/fidelity.py``).
"""

from __future__ import annotations

import pytest

from tests.helpers import fidelity

#: Recorded with ``python tests/helpers/fidelity.py``: 25 runs on 11 machines, 12 of them held out.
BASELINE = {
    "before_median": 0.2860,  # median |error| in tokens/s, every run, defaults
    "before_close": 8 / 25,  # share within 15%, every run, defaults
    "after_median": 0.0063,  # median |error|, held-out runs, after calibration
    "after_close": 9 / 12,  # share within 15%, held-out runs
    "ratio_close": 19 / 23,  # same-machine speed ratios within 15%, after
}
#: Largest |error| of the defaults on each run with every layer and expert on the GPU, by machine (as
#: recorded: the bytes model has no per-token cost yet, docs/fidelity-sources.md, "Per-token cost").
ALL_GPU = {"rtx3090ti-qwen3-30b-allgpu": 0.35, "rtx5090-qwen35-allgpu": 0.54, "rx7900xt-ryzen5900x": 1.06}
#: Flags that put expert tensors on the CPU.
CPU_EXPERTS = ("cpu-moe", "cmoe", "ncmoe", "exps=CPU")
#: Rounding of the recorded medians.
SLACK = 5e-5


@pytest.fixture(scope="module")
def rows() -> list[fidelity.Row]:
    return fidelity.table()


def test_fidelity_is_no_worse_than_recorded(rows: list[fidelity.Row]) -> None:
    s = fidelity.summary(rows)
    assert s.held_out == 12 and s.pairs == 23
    assert s.before_median <= BASELINE["before_median"] + SLACK
    assert s.after_median <= BASELINE["after_median"] + SLACK
    for key in ("before_close", "after_close", "ratio_close"):
        assert getattr(s, key) >= BASELINE[key] - 1e-12, key


def test_all_gpu_runs_are_no_worse_than_recorded(rows: list[fidelity.Row]) -> None:
    """Small-active models wholly in VRAM: the defaults' prediction of each, no worse than recorded."""
    all_gpu = {r.machine: r for r in rows if not any(f in r.flags for f in CPU_EXPERTS)}
    assert set(all_gpu) == set(ALL_GPU)
    for machine, row in all_gpu.items():
        assert abs(row.before / row.measured - 1.0) <= ALL_GPU[machine], machine


def test_every_fixture_run_is_in_the_table(rows: list[fidelity.Row]) -> None:
    assert len(rows) == 25 and len({r.machine for r in rows}) == 11
    assert all(r.measured > 0 and r.before > 0 and r.after > 0 for r in rows)
