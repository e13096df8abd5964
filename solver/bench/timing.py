"""Wall times of a piece, repeated up to a count or a time budget, and the settings every measurement
shares."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timing:
    """Wall times of one piece in ms, or why it was skipped."""

    runs: list[float] = field(default_factory=list)
    skipped: str | None = None

    @property
    def median(self) -> float | None:
        import statistics

        return statistics.median(self.runs) if self.runs else None

    def as_json(self) -> dict[str, Any]:
        if not self.runs:
            return {"skipped": self.skipped}
        return {
            "median_ms": self.median,
            "min_ms": min(self.runs),
            "max_ms": max(self.runs),
            "runs": len(self.runs),
        }


def repeat_timed(fn: Callable[[], Any], repeat: int, budget_s: float) -> tuple[Timing, Any]:
    """Run ``fn`` up to ``repeat`` times, stopping early once the runs have taken ``budget_s``."""
    timing, out = Timing(), None
    while len(timing.runs) < repeat and (not timing.runs or sum(timing.runs) < budget_s * 1e3):
        t0 = time.perf_counter()
        out = fn()
        timing.runs.append((time.perf_counter() - t0) * 1e3)
    return timing, out


@dataclass(frozen=True)
class Settings:
    """What every measurement shares."""

    repeat: int
    budget_s: float
    workers: int
    exhaustive_limit: int
    time_limit: float | None = None
