"""The default splits a plan is set beside, evaluated by the same arithmetic as the plan.

The proportional split (cuts in proportion to speed) is the contract's baseline for every engine; an
engine's own default (solver.engines: llama.cpp's free-memory split, vLLM's and SGLang's even
partitions) is reported beside the plan as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from solver.problem.placement import Placement


@dataclass
class Baseline:
    """A default split, evaluated; ``plan`` is None when there is no split (``reason`` says why).

    ``note`` says what the default is in a few words for the report; ``command`` the words of the
    command it amounts to, where the engine prints one (llama.cpp's ``--fit``).
    """

    cuts: list[int]
    feasible: bool
    plan: Placement | None
    name: str = "proportional"
    note: str = ""
    reason: str | None = None
    command: list[str] | None = None


def cuts_of(counts: list[int]) -> list[int]:
    """The cut points of layers-per-stage counts."""
    return list(accumulate(counts))[:-1]
