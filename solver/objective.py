"""What a plan optimises first, and what that means for a solver: its key, its sense, its units.

Every objective is followed by the same tie chain (the window in whole 1e-6 ms where it is not the
first level, then spare KV, bottleneck, cuts, GPU order); only the first level differs:

- time: the least window (summed arc time, ``Arcs.time``);
- mass: the most held mass (``Arcs.mass``), then the least window;
- throughput: the least slowest stage (``stage_key``, a min-max level), then the least window.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from solver.scales import MASS_SCALE

if TYPE_CHECKING:
    from solver.arcs import Arcs


class Objective(str, Enum):
    """The objective of a table (a ``str``, so it compares equal to the name a rig gives)."""

    TIME = "time"
    MASS = "mass"
    THROUGHPUT = "throughput"

    @property
    def maximises(self) -> bool:
        """Whether its first level is a largest sum (held mass); the others are least values."""
        return self is Objective.MASS

    @property
    def minmax(self) -> bool:
        """Whether its first level is a least largest stage rather than a sum (throughput)."""
        return self is Objective.THROUGHPUT

    @property
    def better(self) -> np.ufunc:
        """The ufunc that keeps the better of two first-level values."""
        return np.maximum if self.maximises else np.minimum

    @property
    def worst(self) -> int:
        """A first-level value every plan beats: unreachable in the passes."""
        return int(np.iinfo(np.int64).min if self.maximises else np.iinfo(np.int64).max)

    def weight(self, arcs: Arcs) -> np.ndarray:
        """Each arc's first-level weight in table units: its time, held mass or stage key."""
        if self is Objective.MASS:
            return arcs.mass
        return stage_key(arcs) if self.minmax else arcs.time

    def combine(self, so_far: np.ndarray | int, weight: np.ndarray) -> np.ndarray:
        """A path's first-level value after one more arc: the sum, or (min-max) the larger."""
        return np.maximum(so_far, weight) if self.minmax else so_far + weight

    def in_units(self, arcs: Arcs, value: int) -> float:
        """A first-level value in the objective's own units: the window ms (from summed arc time),
        the held mass, or the slowest stage's ms (from a stage key in whole 1e-6 ms)."""
        if self is Objective.MASS:
            return value / MASS_SCALE
        if self.minmax:
            return value / 10**6
        return arcs.window_ms(value)

    def tighter(self, a: float | None, b: float | None) -> float | None:
        """The tighter of two valid bounds on the objective (either may be None)."""
        if a is None or b is None:
            return b if a is None else a
        return min(a, b) if self.maximises else max(a, b)


def stage_key(arcs: Arcs) -> np.ndarray:
    """Each arc's ``stage`` time in whole units of 1e-6 ms, halves up: the throughput objective's key."""
    return (arcs.stage + arcs.coarse // 2) // arcs.coarse
