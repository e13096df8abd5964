"""The prompt constants, ``matrix_efficiency`` and ``pcie_efficiency``, fitted to measured prompt runs.

A prompt run's time (solver.engines.llamacpp.prompt) is, per micro-batch and stage, FLOPs over the
GPU's matrix throughput times ``matrix_efficiency`` plus the experts copied from host memory over the
link's rate times ``pcie_efficiency`` (a GPU whose ``pcie_bandwidth`` the rig gives keeps it), plus
what the CPU computes below the offload threshold. So with ``x = (1 / matrix_efficiency, 1 /
pcie_efficiency)`` it is exactly ``t = base + slope . x`` (a pipelined run has no host copies and
scales with ``1 / matrix_efficiency`` alone), read by scoring the run three times. The fit minimises
the relative squared error, identifying ``matrix_efficiency`` first and ``pcie_efficiency`` with it
projected out, each only when its standard error would stay under a quarter of its value.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from solver.calibrate.measured import Run
from solver.engines.llamacpp.prompt import (
    MATRIX_EFFICIENCY,
    PCIE_EFFICIENCY,
    PromptModel,
    scored_prompt,
)

#: The prompt constants, in the order they are identified.
PROMPT_CONSTANTS = ("matrix_efficiency", "pcie_efficiency")
#: Physical bounds of each constant (a share of the card's matrix rate or of the link's rate).
BOUNDS = {"matrix_efficiency": (0.01, 1.0), "pcie_efficiency": (0.05, 1.0)}
#: The relative error a prompt time model cannot see even on a clean run.
FLOOR = 0.03
#: A constant is identified when its standard error stays under this share of its value.
MAX_SE = 0.25
#: Which llama-bench runs would identify a constant: when no run exercises it, and when the runs
#: cannot tell it from the one fitted before it.
HINTS = {
    "matrix_efficiency": (
        "no prompt run computes on a GPU",
        "add a prompt run with every expert on the GPUs (-ngl 99, no -ncmoe or -ot) at -ub 512 or more: "
        "its time is the GPUs' matrix throughput alone",
    ),
    "pcie_efficiency": (
        "no prompt run copies experts from host memory: add one with -ncmoe N (N > 0) at -ub 512 or more",
        "add a -ub sweep with experts on the CPU (-ub 256,1024,4096 -ncmoe N): the experts are copied once "
        "per micro-batch, so the copies' share of the time changes with -ub",
    ),
}


@dataclass(frozen=True)
class PromptScoring:
    """A prompt run scored on the rig: the time of its prompt of ``tokens`` tokens, ``base + slope . x``
    (ms), and at the rig's constants ``before_ms``."""

    run: Run
    tokens: int
    base: float
    slope: np.ndarray
    before_ms: float

    @property
    def measured_ms(self) -> float:
        """The prompt's measured time."""
        return 1000.0 * self.tokens / self.run.tokens_per_s


def start_x(matrix_efficiency: float | None, pcie_efficiency: float | None) -> np.ndarray:
    """The rig's prompt constants (its keys, else the defaults) as the linear variables."""
    eff = MATRIX_EFFICIENCY if matrix_efficiency is None else matrix_efficiency
    pcie = PCIE_EFFICIENCY if pcie_efficiency is None else pcie_efficiency
    return np.array([1.0 / eff, 1.0 / pcie])


def prompt_line(q, scored, args, depth: int, x0: np.ndarray) -> tuple[int, float, np.ndarray] | None:
    """(tokens, base, slope) of a scored command's prompt: its length and its time in ``x`` (the module
    docstring), read at the rig's constants ``x0`` and with each doubled; None without a prompt
    model."""
    from solver.engines.llamacpp.fields import LlamaFields

    pm: PromptModel | None = LlamaFields.of(q).prompt
    if pm is None or not pm.known:
        return None

    def ms(model: PromptModel) -> float:
        speed = scored_prompt(q, scored, args, depth=depth, pm=model)
        return float(speed.ttft_ms) if speed is not None and speed.ttft_ms is not None else 0.0

    first = scored_prompt(q, scored, args, depth=depth, pm=pm)
    if first is None or first.ttft_ms is None:
        return None
    t0 = float(first.ttft_ms)
    given = pm.pcie_given if pm.pcie_given is not None else np.zeros(len(pm.pcie), dtype=bool)
    t_matrix = ms(replace(pm, flops=pm.flops / 2.0))
    t_pcie = ms(replace(pm, pcie=np.where(given, pm.pcie, pm.pcie / 2.0)))
    slope = np.array([(t_matrix - t0) / x0[0], (t_pcie - t0) / x0[1]])
    return first.prompt, t0 - float(slope @ x0), slope


@dataclass(frozen=True)
class PromptFit:
    """The fitted constants ``x``, those identified, and those no run exercises."""

    x: np.ndarray
    identified: tuple[str, ...]
    unused: tuple[str, ...]

    def constants(self) -> dict[str, float]:
        """The rig keys and values of ``x``."""
        return {k: 1.0 / float(v) for k, v in zip(PROMPT_CONSTANTS, self.x)}

    def predict(self, scorings: list[PromptScoring]) -> np.ndarray:
        """Each run's time (ms) at the fitted constants."""
        return np.array([s.base + float(s.slope @ self.x) for s in scorings])


def _sigma(run: Run) -> float:
    rel = run.spread / run.tokens_per_s if run.tokens_per_s > 0 else 0.0
    return float(np.hypot(rel, FLOOR))


def fit_prompt(scorings: list[PromptScoring], x0: np.ndarray) -> PromptFit:
    """The prompt constants fitted to the runs (the module docstring); x0 where not identified."""
    if not scorings:
        return PromptFit(x0.copy(), (), PROMPT_CONSTANTS)
    measured = np.array([s.measured_ms for s in scorings])
    w = 1.0 / (measured * np.array([_sigma(s.run) for s in scorings]))
    base = np.array([s.base for s in scorings])
    slope = np.array([s.slope for s in scorings]).reshape(len(scorings), len(PROMPT_CONSTANTS))
    jac = slope * x0 * w[:, None]  # the weighted change per relative change of each constant
    unused = tuple(k for j, k in enumerate(PROMPT_CONSTANTS) if not np.any(np.abs(slope[:, j]) > 0))
    identified: list[int] = []
    for j, key in enumerate(PROMPT_CONSTANTS):
        if key in unused:
            continue
        col = jac[:, j].copy()
        if identified:
            basis, _ = np.linalg.qr(jac[:, identified])
            col -= basis @ (basis.T @ col)
        norm = float(np.linalg.norm(col))
        if norm > 0 and 1.0 / norm < MAX_SE:
            identified.append(j)
    x = x0.copy()
    free = list(identified)
    while free:
        fixed = [j for j in range(len(x0)) if j not in free]
        rhs = (measured - base - slope[:, fixed] @ x[fixed]) * w
        sol, *_ = np.linalg.lstsq(slope[:, free] * w[:, None], rhs, rcond=None)
        out = []
        for j, v in zip(free, sol):
            lo, hi = (1.0 / BOUNDS[PROMPT_CONSTANTS[j]][1], 1.0 / BOUNDS[PROMPT_CONSTANTS[j]][0])
            x[j] = min(max(float(v), lo), hi)
            if x[j] != v:
                out.append(j)
        if not out or len(free) == 1:
            break
        free = [j for j in free if j not in out[:1]]  # hold the first at its bound, refit the other
    return PromptFit(x, tuple(PROMPT_CONSTANTS[j] for j in identified), unused)
