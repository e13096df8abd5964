"""Fitting a rig's effective speed constants to measured runs: bounded, weighted least squares.

Under the speed-from-bytes model (docs/reference.md, "Speed from bytes") a placement's token time is
linear in six variables, one per rig-wide constant:

    t = base + slope . x,   x = (1e9 / host_bandwidth, 1 / gpu_efficiency, switch_ms,
                                 layer_overhead_ms, handoff_ms, moe_layer_ms)

(CPU time is bytes over ``host_bandwidth``, GPU time bytes over ``mem_bandwidth * gpu_efficiency``
plus the overhead per layer, and switches and hand-offs are counts times their cost); ``base`` is
what no constant scales (a GPU's own ``layer_ms``). So ``base`` and ``slope`` of each run come from
scoring its placement seven times, and the fit is exact linear algebra:

- **Weights.** A run's error is relative to its measured token time ``T``; its weight is
  ``1 / sigma^2`` with ``sigma^2 = (stddev_ts / avg_ts)^2 + MODEL_NOISE^2`` (MODEL_NOISE: the share of a
  clean run's time that no bytes model sees, so a run reported without spread is not taken as exact).
- **Identification.** In the order of CONSTANTS (the ones that vary most between machines first),
  a constant is identified when its column of the weighted Jacobian (``slope * scale / (T sigma)``,
  per relative change of the constant) keeps, after projection on the columns identified before it,
  enough length that its standard error is under SE_MAX of its scale. Others keep their values and
  the output says which run would identify them. ``moe_layer_ms`` (the fixed GPU time of a MoE layer
  whose experts a GPU runs) comes last: each expert tensor held adds its share of it beside its bytes,
  so it moves with ``switch_ms`` and the CPU's expert bytes unless tensors of two sizes are moved
  apart; fitted last, it weakens no constant before it, and runs that do not identify it keep its
  default.
- **The fit** minimises ``sum w (t - T)^2 / T^2`` over the identified variables within BOUNDS: the
  unconstrained least squares when it lies within them, else the best of every pattern of variables
  held at a bound with the rest solved freely (3^6 patterns at most; the problem is convex, so the
  optimum is one of them). Deterministic, numpy only.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

#: The constants in the order they are identified, as rig keys.
CONSTANTS = (
    "host_bandwidth",
    "gpu_efficiency",
    "switch_ms",
    "layer_overhead_ms",
    "handoff_ms",
    "moe_layer_ms",
)
#: Share of a run's time the bytes model cannot see even on a clean run (threads, kernels, build).
MODEL_NOISE = 0.03
#: A constant is identified when its standard error is below this share of its scale.
SE_MAX = 0.25
#: Physical bounds of each constant's value: host_bandwidth in bytes/s, gpu_efficiency as a share, ms.
BOUNDS = {
    "host_bandwidth": (1e9, 4e12),
    "gpu_efficiency": (0.05, 1.0),
    "switch_ms": (0.0, 5.0),
    "layer_overhead_ms": (0.0, 2.0),
    "handoff_ms": (0.0, 50.0),
    "moe_layer_ms": (0.0, 2.0),
}
#: The least scale of a constant measured in ms, for the identification test (a hand-off, 0 by
#: default, costs 0.3 ms between AMD cards and over 10 ms between cards without peer access:
#: docs/fidelity-sources.md).
MS_SCALE = {"switch_ms": 0.08, "layer_overhead_ms": 0.05, "handoff_ms": 1.0, "moe_layer_ms": 0.04}
#: A column shorter than this (in units of 1/sigma) means the runs do not exercise the constant.
UNUSED = 1e-9


def to_x(key: str, value: float) -> float:
    """The linear variable of a constant: ``1e9 / host_bandwidth``, ``1 / gpu_efficiency``, or the ms."""
    if key == "host_bandwidth":
        return 1e9 / value
    if key == "gpu_efficiency":
        return 1.0 / value
    return value


def from_x(key: str, x: float) -> float:
    """The constant of a linear variable (the inverse of ``to_x``)."""
    return to_x(key, x) if key in ("host_bandwidth", "gpu_efficiency") else x


def x_bounds() -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the linear variables, in CONSTANTS order."""
    pairs = [sorted((to_x(k, BOUNDS[k][0]), to_x(k, BOUNDS[k][1]))) for k in CONSTANTS]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def x_scale(x0: np.ndarray) -> np.ndarray:
    """How much of each variable a relative change of its constant is: the value, at least MS_SCALE."""
    return np.array([max(abs(v), MS_SCALE.get(k, 0.0)) for k, v in zip(CONSTANTS, x0)])


@dataclass(frozen=True)
class Design:
    """The runs as the linear model sees them: token time ``base + slope @ x`` ms against ``measured``.

    base (n,), slope (n, 6) in CONSTANTS order, measured (n,) ms per token, sigma (n,) relative spread.
    """

    base: np.ndarray
    slope: np.ndarray
    measured: np.ndarray
    sigma: np.ndarray

    def without(self, i: int) -> Design:
        keep = np.arange(len(self.base)) != i
        return Design(self.base[keep], self.slope[keep], self.measured[keep], self.sigma[keep])

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.base + self.slope @ x


@dataclass(frozen=True)
class Fitted:
    """The fitted variables (CONSTANTS order; those not identified at their start), which were
    identified, and for each constant not identified whether the runs exercise it at all."""

    x: np.ndarray
    identified: tuple[str, ...]
    unused: tuple[str, ...]


def sigma_of(tokens_per_s: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """Each run's relative spread, MODEL_NOISE included."""
    return np.sqrt((spread / tokens_per_s) ** 2 + MODEL_NOISE**2)


def identify(d: Design, x0: np.ndarray) -> tuple[list[int], list[int]]:
    """(identified, unused): indices into CONSTANTS (see the module docstring)."""
    jac = d.slope * x_scale(x0)[None, :] / (d.measured * d.sigma)[:, None]
    basis = np.zeros((len(d.base), 0))
    chosen: list[int] = []
    unused: list[int] = []
    for j in range(len(CONSTANTS)):
        col = jac[:, j]
        if np.linalg.norm(col) < UNUSED:
            unused.append(j)
            continue
        rest = col - basis @ (basis.T @ col)
        length = float(np.linalg.norm(rest))
        if length > 0 and 1.0 / length < SE_MAX:
            chosen.append(j)
            basis = np.column_stack([basis, rest / length])
    return chosen, unused


def bounded_lstsq(m: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``argmin |m x - b|^2`` subject to ``lo <= x <= hi``, for full-rank ``m`` of a few columns."""
    k = m.shape[1]
    if k == 0:
        return np.zeros(0)
    free, *_ = np.linalg.lstsq(m, b, rcond=None)
    if np.all(free >= lo) and np.all(free <= hi):
        return free
    best, best_cost = np.clip(free, lo, hi), np.inf
    for pattern in itertools.product((0, 1, 2), repeat=k):
        held = np.array(pattern) > 0
        x = np.where(np.array(pattern) == 1, lo, hi)
        if (~held).any():
            rest = b - m[:, held] @ x[held]
            sol, *_ = np.linalg.lstsq(m[:, ~held], rest, rcond=None)
            if np.any(sol < lo[~held]) or np.any(sol > hi[~held]):
                continue
            x[~held] = sol
        cost = float(np.sum((m @ x - b) ** 2))
        if cost < best_cost:
            best, best_cost = x, cost
    return best


def fit(d: Design, x0: np.ndarray) -> Fitted:
    """The identified constants fitted by bounded weighted least squares, the rest kept at ``x0``."""
    chosen, unused = identify(d, x0)
    x = x0.astype(np.float64).copy()
    if chosen:
        fixed = [j for j in range(len(CONSTANTS)) if j not in chosen]
        scale = x_scale(x0)[chosen]
        row = 1.0 / (d.measured * d.sigma)
        m = d.slope[:, chosen] * scale[None, :] * row[:, None]
        b = (d.measured - d.base - d.slope[:, fixed] @ x0[fixed]) * row
        lo, hi = x_bounds()
        x[chosen] = bounded_lstsq(m, b, lo[chosen] / scale, hi[chosen] / scale) * scale
    return Fitted(x, tuple(CONSTANTS[j] for j in chosen), tuple(CONSTANTS[j] for j in unused))


def leave_one_out(d: Design, x0: np.ndarray) -> np.ndarray:
    """Each run's token time (ms) predicted by the fit to all the other runs.

    Runs alike in every column (a placement measured again with the same result, as llama-bench's
    repetitions and a re-run give) have the same fit without them, so each kind is fitted once: a fit
    per distinct run, not per run, which keeps thousands of repeated rows from taking minutes.
    """
    rows = np.column_stack([d.base, d.slope, d.measured, d.sigma])
    _, first, kind = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    predicted = np.array([d.predict(fit(d.without(int(i)), x0).x)[int(i)] for i in first])
    return predicted[kind.ravel()]
