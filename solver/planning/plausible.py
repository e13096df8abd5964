"""Valid but implausible input: values a user most likely mistyped, as one-line warnings.

The file format allows ``free: 24`` (24 bytes), ``host_bandwidth: 55`` (55 bytes per second),
``clock_ghz: 2520`` or an expert no card can hold, and the planner plans them; but each almost always
means a missing unit or a slip, and the plan that comes back (nothing cached, a GPU that runs every
layer) would mislead. Each check returns a Doubt naming the
file, YAML line and key, what is odd and what was probably meant; the CLI prints them on stderr and
plans anyway. The thresholds are documented in docs/reference.md ("Warnings").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import numpy as np

from solver.engines import REGISTRY
from solver.files.config import ModelConfig, RigConfig, load_model, load_rig
from solver.files.yamlfile import KeyPath, YamlDoc, key_name
from solver.problem.problem import Problem
from solver.profiles.stats import layer_ranges
from solver.units import UNITS, format_rate, format_size, parse_rate

#: Free VRAM below which a card is implausible: a CUDA card with a model to run has gigabytes.
MIN_FREE = 256 * 2**20
#: Clock above which ``clock_ghz`` is implausible: no GPU boosts past about 3.2 GHz.
MAX_CLOCK_GHZ = 5.0
#: Host RAM below which ``host_memory`` is implausible: a host that runs an MoE model has gigabytes.
MIN_HOST_MEMORY = 2**30
#: A bare ``expert_bytes`` below this is implausible: the smallest quantised experts take hundreds of KiB.
MIN_EXPERT = 64 * 2**10
#: The next smaller unit of each size unit, for "did you mean '1.95 MiB'?" when a size is too big.
SMALLER = {"TiB": "GiB", "GiB": "MiB", "MiB": "KiB", "TB": "GB", "GB": "MB", "MB": "KB"}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]+)\s*$")
_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]+)\s*/\s*[sS]\s*$")
#: Plausible range of each rate key, bytes per second, and what it measures. Host memory: 1 GB/s is
#: slower than one DDR3 channel or an NVMe drive, 2 TB/s beyond twelve channels of DDR5 on two sockets.
#: A GPU's memory: 10 GB/s is slower than any GPU's memory in the card table, 20 TB/s beyond its fastest.
RATE_RANGES: dict[str, tuple[int, int, str]] = {
    "host_bandwidth": (10**9, 2 * 10**12, "host memory"),
    "mem_bandwidth": (10**10, 2 * 10**13, "a GPU's memory"),
}
#: The unit a rate most likely meant when it came out too slow (``55 MB/s`` for ``55 GB/s``) or too fast.
BIGGER = {"B": "GB", "KB": "GB", "MB": "GB", "KiB": "GiB", "MiB": "GiB"}


@dataclass(frozen=True)
class Doubt:
    """One implausible value: ``file:line: key: message``, like an input error but not fatal."""

    file: str
    line: int | None
    key: str | None
    message: str

    @classmethod
    def at(cls, doc: YamlDoc, path: KeyPath, message: str) -> Doubt:
        return cls(doc.file, doc.line(path), key_name(path) or None, message)

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


def _raw(doc: YamlDoc, path: KeyPath) -> object:
    """The value at ``path`` as the file wrote it (before unit conversion)."""
    value: object = doc.data
    for part in path:
        value = value[part]  # type: ignore[index]
    return value


def host_memory_doubt(raw: object, value: int) -> str | None:
    """What is odd about a ``host_memory`` of ``value`` bytes written ``raw``, or None."""
    if value >= MIN_HOST_MEMORY:
        return None
    if isinstance(raw, int) or (isinstance(raw, str) and raw.strip().isdigit()):
        return f"{int(raw):,} bytes is implausibly small for host RAM; did you mean '{int(raw)} GiB'?"
    return f"{raw} ({format_size(value)}) is implausibly small for host RAM (under 1 GiB); check the unit"


def _host_doubts(rig: RigConfig, doc: YamlDoc) -> list[Doubt]:
    if rig.host_memory is None:
        return []
    what = host_memory_doubt(_raw(doc, ("host_memory",)), rig.host_memory)
    return [] if what is None else [Doubt.at(doc, ("host_memory",), what)]


def _gpu_doubts(rig: RigConfig, doc: YamlDoc) -> list[Doubt]:
    out = []
    for i, gpu in enumerate(rig.gpus):
        if gpu.free < MIN_FREE:
            raw = _raw(doc, ("gpus", i, "free"))
            if isinstance(raw, int):
                unit = "GiB" if raw < 1024 else "MiB"
                what = f"{raw:,} bytes is implausibly small for a GPU; did you mean '{raw} {unit}'?"
            else:
                what = (
                    f"{raw} ({format_size(gpu.free)}) is implausibly small for a GPU's free VRAM "
                    f"(under {format_size(MIN_FREE)}); check the unit"
                )
            out.append(Doubt.at(doc, ("gpus", i, "free"), what))
        if gpu.clock_ghz is not None and gpu.clock_ghz > MAX_CLOCK_GHZ:
            ghz = gpu.clock_ghz
            guess = f"; did you mean {ghz / 1000:g} (MHz given as GHz)?" if ghz >= 100 else ""
            out.append(
                Doubt.at(
                    doc,
                    ("gpus", i, "clock_ghz"),
                    f"{ghz:g} GHz is implausibly fast for a GPU (none runs above {MAX_CLOCK_GHZ:g}){guess}",
                )
            )
    return out


def _rate_paths(doc: YamlDoc) -> list[KeyPath]:
    """Where the rig gives a rate: ``host_bandwidth`` and each GPU's ``mem_bandwidth``."""
    data = doc.data if isinstance(doc.data, dict) else {}
    paths: list[KeyPath] = [("host_bandwidth",)] if "host_bandwidth" in data else []
    gpus = data.get("gpus")
    for i, gpu in enumerate(gpus if isinstance(gpus, list) else []):
        if isinstance(gpu, dict) and "mem_bandwidth" in gpu:
            paths.append(("gpus", i, "mem_bandwidth"))
    return paths


def _rate_doubt(raw: object, key: str) -> str | None:
    """What is odd about the rate ``raw`` given for ``key``, or None."""
    low, high, what = RATE_RANGES[key]
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        return None
    try:
        rate = parse_rate(raw)
    except ValueError:
        return None  # validation says what is wrong with it
    if isinstance(raw, int):
        if rate >= low:
            return None
        return (
            f"{raw:,} bytes per second is implausibly slow for {what} (a bare number is bytes per "
            f"second); did you mean '{raw} GB/s'?"
        )
    if low <= rate <= high:
        return None
    slow = rate < low
    bound = f"under {format_rate(low)}" if slow else f"over {format_rate(high)}"
    what_odd = f"{raw} is implausibly {'slow' if slow else 'fast'} for {what} ({bound}); check the unit"
    m = _RATE.match(raw)
    unit = {u.lower(): u for u in UNITS}.get(m.group(2).lower(), "") if m else ""
    guess = BIGGER.get(unit) if slow else SMALLER.get(unit)
    if m and guess:
        meant = Decimal(m.group(1)) * UNITS[guess]
        if low <= meant <= high:
            what_odd += f"; did you mean '{m.group(1)} {guess}/s'?"
    return what_odd


def rate_doubts(doc: YamlDoc) -> list[Doubt]:
    """Rates a rig most likely mistyped: a bare number (bytes per second) or a unit off by 1000s.

    Reads the YAML as written, so it needs no validated rig: a rate that makes every window too long to
    plan is named by it before planning gives up.
    """
    out = []
    for path in _rate_paths(doc):
        what = _rate_doubt(_raw(doc, path), str(path[-1]))
        if what is not None:
            out.append(Doubt.at(doc, path, what))
    return out


def _smaller_unit(raw: object, fits: int) -> str:
    """``; did you mean '1.95 MiB'?`` when ``raw`` in the next smaller unit is at most ``fits`` bytes."""
    m = _SIZE.match(raw) if isinstance(raw, str) else None
    if not m or m.group(2) not in SMALLER:
        return ""
    smaller = SMALLER[m.group(2)]
    return f"; did you mean '{m.group(1)} {smaller}'?" if Decimal(m.group(1)) * UNITS[smaller] <= fits else ""


def _expert_doubts(problem: Problem, model: ModelConfig, doc: YamlDoc) -> list[Doubt]:
    """Experts no card can cache (bigger than any card's room for their layer), and bare tiny sizes."""
    p = problem
    if isinstance(model.expert_bytes, int) and 0 < model.expert_bytes < MIN_EXPERT:
        raw = _raw(doc, ("expert_bytes",))
        if isinstance(raw, int):
            what = f"{raw:,} bytes is implausibly small for one expert; did you mean '{raw} MiB'?"
            return [Doubt.at(doc, ("expert_bytes",), what)]
    if p.n_gpus == 0 or len(p.pair_layer) == 0:
        return []
    best = int(np.argmax(p.free - p.reserve))
    # the most room any card can have for a layer's experts: that card running that layer alone
    room = np.array([p.room(best, layer, layer + 1) for layer in range(p.n_layers)], dtype=np.int64)
    ranked = np.unique(p.pair_layer)
    never = ranked[(room[ranked] >= 0) & (p.expert_bytes[ranked] > room[ranked])]
    if len(never) == 0:
        return []
    first = int(never[0])
    path: KeyPath = ("expert_bytes", first) if isinstance(model.expert_bytes, list) else ("expert_bytes",)
    layers = "any layer" if len(never) == len(ranked) else f"layers {layer_ranges(never)}"
    what = (
        f"one expert ({format_size(int(p.expert_bytes[first]))}) is bigger than any GPU's room for it "
        f"(at most {format_size(int(room[first]))}, on GPU {best} ({p.gpu_names[best]})), so no expert of "
        f"{layers} can be cached{_smaller_unit(_raw(doc, path), int(room[first]))}"
    )
    return [Doubt.at(doc, path, what)]


def _context_doubts(
    problem: Problem, rig: RigConfig, rig_doc: YamlDoc, model: ModelConfig, model_doc: YamlDoc
) -> list[Doubt]:
    most = model.max_context
    if most is None or problem.context <= most:
        return []
    limit = f"the {most:,} tokens the model supports ({model_doc.file}:{model_doc.line(('max_context',))})"
    if problem.context != rig.context:  # the command line's --context
        return [
            Doubt(
                "--context",
                None,
                None,
                f"{problem.context:,} tokens is beyond {limit}; did you mean --context {most}?",
            )
        ]
    what = f"{problem.context:,} tokens is beyond {limit}; did you mean 'context: {most}'?"
    return [Doubt.at(rig_doc, ("context",), what)]


def find_doubts(
    problem: Problem, rig: RigConfig, rig_doc: YamlDoc, model: ModelConfig, model_doc: YamlDoc
) -> list[Doubt]:
    """Every implausible value of these validated files, in file order (rig, then model)."""
    in_rig = [*rate_doubts(rig_doc), *_host_doubts(rig, rig_doc), *_gpu_doubts(rig, rig_doc)]
    in_rig.sort(key=lambda d: d.line or 0)
    return [
        *in_rig,
        *_context_doubts(problem, rig, rig_doc, model, model_doc),
        *_expert_doubts(problem, model, model_doc),
    ]


def doubts(problem: Problem) -> list[Doubt]:
    """The doubts of the files ``problem`` was read from (re-read: a few ms of YAML for two small files)."""
    rig, rig_doc = load_rig(Path(problem.files["rig"]), REGISTRY)
    model, model_doc = load_model(Path(problem.files["model"]))
    return find_doubts(problem, rig, rig_doc, model, model_doc)
