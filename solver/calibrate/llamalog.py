"""llama-server and llama-cli output as measured runs and per-card compute buffers.

Timing lines (llama.cpp's ``common_perf_print`` / ``llama_perf_context_print`` and llama-server's
per-request ``print_timings``)::

    prompt eval time =     143.21 ms /    35 tokens (    4.09 ms per token,   244.40 tokens per second)
           eval time =    4521.09 ms /   255 tokens (   17.73 ms per token,    56.40 tokens per second)
    llama_perf_context_print:        eval time =    2236.65 ms /   127 runs   (...)

Every ``eval time`` line is one decode measurement: N tokens (or runs) in X ms. Its depth is the
token count of the ``prompt eval time`` line just before it (the KV cache when decoding began), 0
when there is none. Load lines ``CUDA0 compute buffer size =   300.75 MiB`` give the compute buffer
each card allocates (the largest a log shows for the card, over several loads); ``CUDA_Host`` and
``CPU`` buffers are host memory and are left out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from solver.calibrate.measured import Run, rate_problem
from solver.errors import InputError
from solver.files.bounded import LOG_LIMIT, read_bounded

_MS = r"([0-9]*\.?[0-9]+)\s*ms\s*/\s*([0-9]+)\s*(?:tokens|runs)"
PROMPT_LINE = re.compile(rf"prompt eval time\s*=\s*{_MS}")
EVAL_LINE = re.compile(rf"\beval time\s*=\s*{_MS}")
BUFFER_LINE = re.compile(r"(?<![A-Za-z_])([A-Za-z]+)(\d+) compute buffer size\s*=\s*([0-9]*\.?[0-9]+)\s*MiB")


@dataclass(frozen=True)
class LogFile:
    """What one log gives: decode runs (placed by the flags it was run with) and, by GPU number, each
    card's compute buffer as the log prints it (``300.75 MiB``)."""

    runs: list[Run]
    buffers: dict[int, str]
    notes: list[str] = field(default_factory=list)


def read_log(path: Path, shown: str, words: tuple[str, ...], flags: str) -> LogFile:
    """The runs and buffers of a llama-server or llama-cli log run with ``words`` (``flags`` as typed)."""
    text = read_bounded(path, shown, "llama-server or llama-cli output", LOG_LIMIT).decode(
        "utf-8", errors="replace"
    )
    runs: list[Run] = []
    notes: list[str] = []
    largest: dict[int, float] = {}
    buffers: dict[int, str] = {}
    prompt = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if m := PROMPT_LINE.search(line):
            prompt = min(int(m.group(2)), 2**31 - 1) if len(m.group(2)) <= 20 else 2**31 - 1
        elif m := EVAL_LINE.search(line):
            ms, digits = float(m.group(1)), m.group(2)
            tokens = int(digits) if len(digits) <= 20 else 10**20  # past any count: a rate it refuses
            rate = 1000.0 * tokens / ms if tokens > 0 and 0 < ms < math.inf else None
            if rate is not None and rate_problem(rate) is not None:
                notes.append(f"{shown}:{lineno}: {rate:.4g} tokens/s: {rate_problem(rate)}: skipped")
            elif rate is not None:
                placement = f"{flags}, depth {prompt}" if prompt else flags
                runs.append(Run(f"{shown}:{lineno}", words, prompt, rate, 0.0, placement))
            prompt = 0
        for m in BUFFER_LINE.finditer(line):
            gpu, mib = int(m.group(2)), m.group(3)
            if float(mib) >= largest.get(gpu, -1.0):
                largest[gpu], buffers[gpu] = float(mib), f"{mib} MiB"
    if not runs and not buffers and notes:
        raise InputError(shown, f"no run to calibrate from: {notes[0]}")
    if not runs and not buffers:
        raise InputError(
            shown,
            "no 'eval time = X ms / N tokens' and no 'CUDA0 compute buffer size' lines: "
            "is this llama-server's or llama-cli's output?",
        )
    return LogFile(runs, buffers, notes)
