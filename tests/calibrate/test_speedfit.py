"""solver.calibrate.speedfit: the bounded least squares, the identification test, and leave-one-out."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.calibrate.speedfit import (
    CONSTANTS,
    Design,
    bounded_lstsq,
    fit,
    from_x,
    identify,
    leave_one_out,
    to_x,
)
from tests.helpers.tiers import examples

X0 = np.array([to_x("host_bandwidth", 40e9), 1 / 0.8, 0.08, 0.05, 0.0, 0.04])


@settings(max_examples=examples(60), deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3))
def test_bounded_lstsq_is_the_box_optimum(seed: int, k: int) -> None:
    """Against a fine grid over the box: no point of it does better."""
    rng = np.random.default_rng(seed)
    m = rng.normal(size=(6, k))
    b = rng.normal(size=6) * 3
    lo, hi = -np.ones(k), np.ones(k)
    x = bounded_lstsq(m, b, lo, hi)
    assert np.all(x >= lo - 1e-12) and np.all(x <= hi + 1e-12)
    cost = float(np.sum((m @ x - b) ** 2))
    points = np.array(list(itertools.product(np.linspace(-1, 1, 41), repeat=k)))
    best = float((((points @ m.T) - b) ** 2).sum(axis=1).min())
    assert cost <= best + 1e-9


def design(slope: np.ndarray, truth: np.ndarray, noise: float = 0.0, seed: int = 0) -> Design:
    rng = np.random.default_rng(seed)
    t = slope @ truth * (1 + noise * rng.normal(size=len(slope)))
    return Design(np.zeros(len(slope)), slope, t, np.full(len(slope), 0.03))


def columns(n: int, seed: int = 1) -> np.ndarray:
    """Runs that vary CPU bytes, GPU bytes and CPU layers independently, at 48 GPU layers, one GPU."""
    rng = np.random.default_rng(seed)
    return np.column_stack(
        [
            rng.uniform(200, 800, n),
            rng.uniform(2, 8, n),
            rng.integers(0, 48, n) * 2.0,
            np.full(n, 48.0),
            np.zeros(n),
            np.zeros(n),
        ]
    )


def test_exact_runs_give_the_true_constants() -> None:
    truth = np.array([to_x("host_bandwidth", 61e9), 1 / 0.7, 0.11, 0.05, 0.0, 0.04])
    f = fit(design(columns(12), truth), X0)
    assert f.identified == ("host_bandwidth", "gpu_efficiency", "switch_ms")
    assert f.unused == ("handoff_ms", "moe_layer_ms")
    assert f.x[:3] == pytest.approx(truth[:3], rel=1e-9)
    assert f.x[3:] == pytest.approx(X0[3:])  # not identified: kept


def test_a_constant_is_identified_only_with_enough_runs() -> None:
    truth = np.array([to_x("host_bandwidth", 61e9), 1 / 0.7, 0.11, 0.05, 0.0, 0.04])
    one = fit(design(columns(1), truth), X0)
    assert one.identified == ("host_bandwidth",)
    # the one run is explained exactly by the constant it identifies
    d = design(columns(1), truth)
    assert d.predict(one.x) == pytest.approx(d.measured)


def test_collinear_constants_are_not_identified() -> None:
    """Every run with the same CPU bytes per CPU layer: switch_ms moves with host_bandwidth."""
    slope = columns(8)
    slope[:, 2] = slope[:, 0] / 100.0
    ids, unused = identify(design(slope, X0), X0)
    assert CONSTANTS.index("switch_ms") not in ids and not set(ids) & set(unused)


def test_bounds_hold_a_fit_the_runs_push_past_them() -> None:
    slope = columns(6)
    truth = np.array([to_x("host_bandwidth", 61e9), 1 / 0.7, 0.11, 0.05, 0.0, 0.04])
    d = design(slope, truth)
    d = Design(d.base, d.slope, d.measured * 0.3, d.sigma)  # faster than any constant allows
    f = fit(d, X0)
    assert from_x("gpu_efficiency", f.x[1]) <= 1.0 + 1e-12
    assert f.x[2] >= 0.0 and from_x("host_bandwidth", f.x[0]) <= 4e12 * (1 + 1e-12)


def test_leave_one_out_refits_without_the_run() -> None:
    truth = np.array([to_x("host_bandwidth", 61e9), 1 / 0.7, 0.11, 0.05, 0.0, 0.04])
    d = design(columns(7), truth, noise=0.02, seed=3)
    loo = leave_one_out(d, X0)
    for i in range(7):
        assert loo[i] == pytest.approx(d.predict(fit(d.without(i), X0).x)[i])
    assert not np.allclose(loo, d.predict(fit(d, X0).x))


def moe_columns(n: int, down: float, seed: int = 2) -> np.ndarray:
    """Runs of one GPU on 48 MoE layers of three expert tensors (gate and up of 2 bytes, down of
    ``down``): some layers with every tensor on the CPU (-ncmoe), some with only down, some with only
    gate (two -ot rules), at two depths. Each tensor on the CPU moves its bytes there, makes its layer
    switch, and takes a third of the layer's MoE cost off the GPU."""
    rng = np.random.default_rng(seed)
    every, only_down, only_gate = (rng.integers(0, 16, n).astype(float) for _ in range(3))
    cpu_bytes = every * (4.0 + down) + only_down * down + only_gate * 2.0
    kv = rng.choice([0.0, 40.0], n)
    return np.column_stack(
        [
            cpu_bytes * 10.0,
            (48 * (4.0 + down) - cpu_bytes + kv) / 100.0,
            (every + only_down + only_gate) * 2.0,
            np.full(n, 48.0),
            np.zeros(n),
            48.0 - every - (only_down + only_gate) / 3.0,
        ]
    )


def test_moe_layer_ms_is_fitted_only_when_the_runs_tell_it_apart() -> None:
    """Fitted last: down and gate tensors of one size leave its column in the span of the switch and
    CPU-byte columns, so it keeps its default however precise the runs; of two sizes they identify it
    and the fit finds the truth (runs given a spread of 0.01%, so collinearity alone decides)."""
    truth = np.array([to_x("host_bandwidth", 61e9), 1 / 0.7, 0.11, 0.05, 0.0, 0.07])

    def precise(down: float) -> Design:
        d = design(moe_columns(16, down), truth)
        return Design(d.base, d.slope, d.measured, np.full(len(d.base), 1e-4))

    same = fit(precise(2.0), X0)
    assert "moe_layer_ms" not in same.identified and "moe_layer_ms" not in same.unused
    assert same.x[5] == X0[5]
    differ = fit(precise(3.0), X0)
    assert "moe_layer_ms" in differ.identified
    assert differ.x == pytest.approx(truth, rel=1e-6)
