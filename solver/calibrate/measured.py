"""Measured llama.cpp decode runs: one placement (as llama.cpp flags), its depth and its tokens/s.

``solve calibrate`` reads them from llama-bench's JSON (solver.calibrate.llamabench) and from llama-server or
llama-cli output (solver.calibrate.llamalog),
scores each placement and fits the rig's speed constants to them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: A GPU device or buffer name as llama.cpp prints it: the backend, then the device's number
#: (``CUDA0``, ``ROCm1``, ``Vulkan0``). Its number is the rig's GPU index.
#: Fastest decode a measurement may claim, tokens per second: no single stream of an MoE model decodes
#: near this fast, so a rate above it is a garbled or made-up line, not a run.
MAX_RATE = 100_000.0


def rate_problem(rate: object) -> str | None:
    """What is wrong with a measured ``rate`` (tokens per second), or None for a plausible one."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        return "expected tokens per second above 0"
    try:
        value = float(rate)
    except OverflowError:  # an integer of hundreds of digits
        value = math.inf
    if not math.isfinite(value) or value <= 0:
        return "expected tokens per second above 0"
    if value > MAX_RATE:
        return f"over {MAX_RATE:,.0f} tokens per second, faster than any decode"
    return None


GPU_NAME = re.compile(r"^([A-Za-z]+)(\d+)$")


@dataclass(frozen=True)
class Run:
    """One measured decode run.

    source: where it was read (``runs.json row 3``, ``server.log:120``); words: the llama.cpp flags
    that place the model as the run did; depth: tokens in the KV cache when decoding started;
    tokens_per_s: the measured decode rate; spread: its standard deviation in tokens/s (0 when the
    source gives none); placement: the run in one short line.
    """

    source: str
    words: tuple[str, ...]
    depth: int
    tokens_per_s: float
    spread: float
    placement: str


def buffer_name(name: str) -> str:
    """A llama.cpp buffer type as the scorer reads it: a device's own buffer (``ROCm1``) as ``CUDA1``,
    host buffers (``CPU``, ``CUDA_Host``, ``CPU_REPACK``) as ``CPU``; anything else as given."""
    if m := GPU_NAME.match(name):
        return f"CUDA{int(m.group(2))}"
    if name.startswith("CPU") or name.endswith("_Host"):
        return "CPU"
    return name
