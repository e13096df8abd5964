"""Engines: what fills a stage's room and what a miss costs (SPEC 6). Everything after the table is shared.

Each engine turns a Problem into a ``Table`` over every (GPU g, layers [a, b)):

- ``need`` (L+1, L+1): bytes a stage running [a, b) must hold whatever its GPU (weights, session,
  buffers, and for the resident engines every expert of its layers); ``room`` (k, L+1, L+1) is
  ``free - reserve - need``, -1 where the range does not fit;
- ``weigh(g, a, b, scale, mass)``: integer weights of those ranges (``Weights``), read by
  solver.arcs;
- ``miss_units(scale)``: the miss time of a plan that holds nothing, in the same units.

and ``stage_fill(p, g, a, b)`` gives one stage's fill straight from the definition (``StageFill``),
which the plan's report uses and the tests hold the table to.

strata: a per-expert cache walked in profile order (solver.rangewalk). llama.cpp: whole expert tensors
kept largest first, the rest run by the CPU (solver.engines.llamacpp). vllm/sglang: every weight
resident, spare KV reported (solver.engines.resident).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from solver.problem import Problem

ENGINES = ("strata", "llama.cpp", "vllm", "sglang")


@dataclass(frozen=True)
class Weights:
    """Integer weights of n ranges, shape (n,) each.

    saved: time units the held experts save against holding none; missed: time units of the stage's
    own layers' misses (SPEC 7's miss(s)); mass: held mass in units of 1e-12; host: bytes of the
    stage's experts left in host memory; spare: spare KV tokens (SPARE_UNLIMITED when none limit).
    """

    saved: np.ndarray
    missed: np.ndarray
    mass: np.ndarray
    host: np.ndarray
    spare: np.ndarray


@dataclass(frozen=True)
class StageFill:
    """What one stage holds, straight from the definition, in exact ints and float ms.

    held/visible count the cached items (strata: profile pairs; llama.cpp: expert tensors;
    resident: experts). ``offload`` lists the (layer, tensor names) llama.cpp leaves on the CPU.
    ``fits``: the stage's range and what it must hold fit the GPU (room >= 0, and for the resident
    engines every expert too).
    """

    room: int
    cache_bytes: int
    held: int
    visible: int
    held_mass: float
    miss_ms: float
    host_bytes: int
    spare_tokens: int | None = None
    offload: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    fits: bool = True


class Table(Protocol):
    """The engine's table over every (GPU, range): rooms, then weights and fills on demand."""

    need: np.ndarray
    room: np.ndarray

    def weigh(self, g: np.ndarray, a: np.ndarray, b: np.ndarray, scale: int, mass: bool) -> Weights: ...

    def miss_units(self, scale: int) -> int: ...


def room_of(p: Problem, need: np.ndarray) -> np.ndarray:
    """``free - reserve - need`` for every (g, a, b), shape (k, L+1, L+1); -1 where b <= a or it does not fit.

    Exact where >= 0 (sizes stay below 2^62, see problem.BYTE_LIMIT).
    """
    n = p.n_layers
    avail = np.maximum(p.free - p.reserve, -1)
    room = avail[:, None, None] - need[None, :, :]
    room[:, ~np.triu(np.ones((n + 1, n + 1), dtype=bool), 1)] = -1
    return np.maximum(room, -1)


def expert_prefix(p: Problem) -> np.ndarray:
    """Bytes of every routed expert of layers < x, shape (L+1,): all of a range's experts is two lookups."""
    return np.concatenate([[0], np.cumsum(p.experts_per_layer * p.expert_bytes)])


def build_table(p: Problem) -> Table:
    """The table of the problem's engine."""
    if p.engine == "strata":
        from solver.engines.strata import StrataTable

        return StrataTable.build(p)
    if p.engine == "llama.cpp":
        from solver.engines.llamacpp import LlamaTable

        return LlamaTable.build(p)
    from solver.engines.resident import ResidentTable

    return ResidentTable.build(p)


def stage_fill(p: Problem, g: int, a: int, b: int) -> StageFill:
    """One stage's fill under the problem's engine, from the definition."""
    if p.engine == "strata":
        from solver.engines.strata import stage_fill as fill
    elif p.engine == "llama.cpp":
        from solver.engines.llamacpp import stage_fill as fill
    else:
        from solver.engines.resident import stage_fill as fill
    return fill(p, g, a, b)
