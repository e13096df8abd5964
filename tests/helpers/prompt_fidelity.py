"""Predicted against measured prompt processing for every run in tests/fixtures/prompt.

Each machine becomes a llama.cpp rig of its GPUs from the card table (as tests/helpers/fidelity.py
builds it: ``solve rig new``), each run is scored as ``solve score`` reads its flags, and its prompt speed
predicted with the default constants: "before". "after" is the machine calibrated on its first run
alone, as ``solve calibrate`` fits the prompt constants (solver.calibrate.promptfit); the other runs are
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

from solver.calibrate.llamafit import prompt_start
from solver.calibrate.measured import Run
from solver.calibrate.promptfit import PromptScoring, fit_prompt, prompt_line
from solver.engines import engine_named
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
    """Every scored run of one machine file, calibrated on its first (``solve calibrate``'s fit)."""
    doc = yaml.safe_load(path.read_text())
    doc.setdefault("host_bandwidth_nominal", "unknown")
    problems = {}
    runs = [r for r in doc["runs"] if "exclude" not in r]
    x0 = None
    scorings = []
    for i, r in enumerate(runs):
        model_file = (FOLDER / r.get("model_file", doc["model_file"])).resolve()
        name = r.get("engine", doc.get("engine", "llama.cpp"))  # each run scored by the engine it ran
        key = f"{model_file}|{name}"
        if key not in problems:
            problems[key] = _rig(doc, model_file, folder, name)
        p = problems[key]
        x0 = prompt_start(p) if x0 is None else x0  # the machine's constants as its first run starts them
        engine = engine_named(name)
        args = engine.read_command(shlex.split(r["flags"]))
        scored = engine.score(p, args)
        tokens, base, slope = prompt_line(scored.problem, scored, args, r["depth"], x0)
        words = tuple(shlex.split(r["flags"]))
        run = Run(f"{path.name} run {i + 1}", words, r["depth"], float(r["pp"]), 0.0, r["flags"])
        scorings.append(PromptScoring(run, tokens, base, slope, base + float(slope @ x0)))
    fitted = fit_prompt(scorings[:1], x0).predict(scorings)
    return [
        Row(
            doc["machine"],
            r["flags"],
            r["depth"],
            float(r["pp"]),
            1000.0 * s.tokens / s.before_ms,
            1000.0 * s.tokens / after,
            i == 0,
            Path(r.get("model_file", doc["model_file"])).stem,
        )
        for i, (r, s, after) in enumerate(zip(runs, scorings, fitted))
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
