"""The mass of each profile rank (docs/reference.md, "The arithmetic"): cover, power and counts curves."""

from __future__ import annotations

import numpy as np

from solver.files.config import CountsCurve, CoverCurve, PowerCurve


def cover_mass(n: int, b: float) -> np.ndarray:
    """``mass[r] = (1 - r/N)^b - (1 - (r+1)/N)^b``, shape (N,); the top n hold ``1 - (1 - n/N)^b``."""
    r = np.arange(n, dtype=np.float64)
    return (1.0 - r / n) ** b - (1.0 - (r + 1.0) / n) ** b


def power_mass(n: int, exponent: float) -> np.ndarray:
    """``mass[r] = (r+1)^-exponent / sum_j (j+1)^-exponent``, shape (N,)."""
    w = (np.arange(n, dtype=np.float64) + 1.0) ** -exponent
    return w / w.sum()


def counts_mass(count: np.ndarray) -> np.ndarray:
    """``mass[r] = count[r] / sum(count)``, shape (N,); the sum is exact (int64 counts can overflow it)."""
    return count.astype(np.float64) / float(sum(count.tolist()))


def pair_mass(curve: CoverCurve | PowerCurve | CountsCurve, n: int, count: np.ndarray | None) -> np.ndarray:
    """The mass of every rank under ``curve``; counts must be given for the counts curve."""
    if n == 0:
        return np.zeros(0)
    if isinstance(curve, CoverCurve):
        return cover_mass(n, curve.b)
    if isinstance(curve, PowerCurve):
        return power_mass(n, curve.exponent)
    assert count is not None
    return counts_mass(count)
