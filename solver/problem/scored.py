"""A command's placement scored like a plan: its stages, each card's memory, the window and its notes.

Every engine's ``score(p, args)`` returns a ``Scored``; the placement's ``stages`` are those of a plan
(solver.problem.placement), so the report and the JSON of a plan apply to it unchanged, and ``cards``
add what a plan never has: a card over its memory, a card that holds only the output or tensors of other
layers, layers left on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from solver.problem.placement import Placement
    from solver.problem.problem import Problem


@dataclass(frozen=True)
class Card:
    """One device's share of a placement: a rig GPU (``gpu``), or the CPU (``gpu`` None).

    layers: [start, end) it runs (None: none). output: it holds the output layer. held: the items of
    its layers it holds (expert tensors, experts or profile pairs, by engine); offloaded: those of its
    layers on the CPU; elsewhere: those on another GPU; guests: other layers' items it holds.
    need_bytes: what it must hold; avail_bytes: what it has (free less reserve; None: no limit).
    """

    gpu: int | None
    name: str
    layers: tuple[int, int] | None
    output: bool
    held: int
    offloaded: int
    elsewhere: int
    guests: int
    need_bytes: int
    avail_bytes: int | None

    @property
    def fits(self) -> bool:
        return self.avail_bytes is None or self.need_bytes <= self.avail_bytes

    @property
    def shortfall(self) -> int:
        """Bytes it lacks (0 when it fits)."""
        return 0 if self.fits else self.need_bytes - int(self.avail_bytes or 0)


@dataclass(frozen=True)
class Scored:
    """A command's placement on a rig, predicted.

    problem: the rig as the command runs it (its context, KV types, depth). placement: the GPU stages
    in pipeline order, with the whole window (``cpu_ms`` and ``extra_ms`` included) and held mass.
    cpu_layers: layers [start, end) the command leaves on the CPU; cpu_ms: their time; extra_ms: GPU
    time and switches no stage carries (tensors held on a card that runs no layers, or sent from a CPU
    layer), with hand-offs to an output-only card. notes: what the reading assumed, one line each.
    refused: why the engine would not start the command at all (None: it would).
    """

    problem: Problem
    placement: Placement
    cards: list[Card]
    cpu_layers: tuple[int, int] = (0, 0)
    cpu_ms: float = 0.0
    extra_ms: float = 0.0
    notes: list[str] = field(default_factory=list)
    refused: str | None = None

    @property
    def window_ms(self) -> float:
        return self.placement.window_ms

    @property
    def tokens_per_s(self) -> float:
        return self.placement.tokens_per_s

    @property
    def fits(self) -> bool:
        """The engine starts the command and every card holds what the placement puts on it."""
        return self.refused is None and all(c.fits for c in self.cards)

    @property
    def short(self) -> list[Card]:
        """The cards that would run out of memory."""
        return [c for c in self.cards if not c.fits]

    @property
    def bottleneck_ms(self) -> float:
        """The slowest stage, the CPU's layers counted as one."""
        return max([s.stage_ms for s in self.placement.stages] + [self.cpu_ms])
