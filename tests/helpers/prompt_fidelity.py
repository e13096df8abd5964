"""Predicted against measured prompt processing for every run in tests/fixtures/prompt.

Each machine becomes a llama.cpp rig of its GPUs from the card table (as tests/helpers/fidelity.py
builds it: ``solve rig new``), each run is scored as ``solve score`` reads its flags, and its prompt speed
predicted with the default constants: "before". "after" scales the machine's prompt time by the one
factor that makes its first run exact (one measured row per machine calibrates it); the other runs are
held out. Same-machine pairs compare the predicted ratio of two runs' speeds with the measured one,
before calibration (the ratio is what a choice of ``-ub`` rests on).

``python tests/helpers/prompt_fidelity.py`` prints the table docs/fidelity.md shows.
"""

from __future__ import annotations

import shlex
import statistics
import sys
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import yaml

from solver.engines import engine_named
from solver.engines.llamacpp.prompt import scored_prompt
from tests.helpers.fidelity import _rig, relative_error, rows_of

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "prompt"


@dataclass(frozen=True)
class Row:
    """One prompt run: measured and predicted tokens/s, before and after calibration."""

    machine: str
    flags: str
    depth: int
    measured: float
    before: float
    after: float
    fitted: bool
    model: str


def machine_rows(path: Path, folder: Path) -> list[Row]:
    """Every scored run of one machine file, calibrated on its first."""
    doc = yaml.safe_load(path.read_text())
    engine = engine_named("llama.cpp")
    doc.setdefault("host_bandwidth_nominal", "unknown")
    problems = {}
    runs = [r for r in doc["runs"] if "exclude" not in r]
    predicted = []
    for r in runs:
        model_file = (FOLDER / r.get("model_file", doc["model_file"])).resolve()
        if str(model_file) not in problems:
            problems[str(model_file)] = _rig(doc, model_file, folder)
        p = problems[str(model_file)]
        args = engine.read_command(shlex.split(r["flags"]))
        scored = engine.score(p, args)
        speed = scored_prompt(scored.problem, scored, args, depth=r["depth"])
        predicted.append(speed.tokens_per_s)
    scale = runs[0]["pp"] / predicted[0]
    return [
        Row(
            doc["machine"],
            r["flags"],
            r["depth"],
            float(r["pp"]),
            pred,
            pred * scale,
            i == 0,
            Path(r.get("model_file", doc["model_file"])).stem,
        )
        for i, (r, pred) in enumerate(zip(runs, predicted))
    ]


def table() -> list[Row]:
    """Every scored fixture run, machine by machine."""
    return rows_of(FOLDER, machine_rows)


@dataclass(frozen=True)
class Summary:
    """Median |error| of every run before; share of same-machine ratios within 20% before; share of
    held-out runs within 20% after calibration."""

    runs: int
    machines: int
    before_median: float
    ratio_within: float
    pairs: int
    after_within: float
    held_out: int


def summary(rows: list[Row]) -> Summary:
    before = [abs(relative_error(r.before, r.measured)) for r in rows]
    pairs = [(a, b) for a, b in combinations(rows, 2) if a.machine == b.machine]
    ratios = [abs((a.before / b.before) / (a.measured / b.measured) - 1.0) for a, b in pairs]
    held = [abs(relative_error(r.after, r.measured)) for r in rows if not r.fitted]
    return Summary(
        len(rows),
        len({r.machine for r in rows}),
        statistics.median(before),
        sum(e <= 0.2 for e in ratios) / len(ratios),
        len(pairs),
        sum(e <= 0.2 for e in held) / len(held),
        len(held),
    )


def markdown(rows: list[Row]) -> str:
    lines = [
        "| machine | model | flags | depth | measured pp t/s | before | after | |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.machine} | {r.model} | `{r.flags}` | {r.depth} | {r.measured:g} | "
            f"{r.before:.0f} ({relative_error(r.before, r.measured):+.0%}) | "
            f"{r.after:.0f} ({relative_error(r.after, r.measured):+.0%}) | "
            f"{'fitted' if r.fitted else 'held out'} |"
        )
    s = summary(rows)
    lines += [
        "",
        f"Before, all {s.runs} runs on {s.machines} machines: median error {s.before_median:.1%}; "
        f"same-machine speed ratios within 20%: {s.ratio_within:.0%} of {s.pairs} pairs.",
        f"After one row per machine, the {s.held_out} held-out runs within 20%: {s.after_within:.0%}.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown(table()) + "\n")
