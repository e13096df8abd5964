"""Predicted against measured for every run in tests/fixtures/measured, before and after calibration.

Each machine becomes a rig of its GPUs for the engine its runs ran (``engine``: llama.cpp unless the
fixture or the run says ik_llama.cpp) from the card table (``solve rig new``), with
``host_bandwidth`` half its nominal RAM rate (START_HOST_BANDWIDTH where the page gives none) and the
default GPU constants: that is "before". Then the constants are fitted (solver.calibrate.speedfit, exactly as
``solve calibrate`` fits them) to the machine's first run, or its first two when it has four or
more, and every run is predicted again: "after"; the runs not fitted are held out. Each run keeps
its own model file and depth.

``python tests/helpers/fidelity.py`` prints the table docs/fidelity.md shows;
tests/calibrate/test_fidelity.py holds its summary to a recorded baseline.
"""

from __future__ import annotations

import shlex
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import TypeVar

import numpy as np
import yaml

from solver.calibrate.llamafit import START_HOST_BANDWIDTH, at, design_of, score_run, weights_of
from solver.calibrate.measured import Run
from solver.calibrate.speedfit import fit
from solver.engines import engine_named
from solver.engines.bandwidth import with_constants
from solver.importers.hostmem import HostRate
from solver.importers.rigfile import place, rig_yaml
from solver.planning.resolve import Overrides, load_problem
from solver.problem.problem import Problem
from solver.units import parse_rate

#: A row of a fidelity table (this module's or the prompt's).
R = TypeVar("R")

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "measured"
#: A prediction within this share of the measured tokens/s counts as close.
CLOSE = 0.15


@dataclass(frozen=True)
class Row:
    """One fixture run: measured, predicted before and after calibration, and whether it was fitted."""

    machine: str
    flags: str
    depth: int
    measured: float
    before: float
    after: float
    fitted: bool
    model: str


def _rig(doc: dict, model_file: Path, folder: Path, engine: str = "llama.cpp") -> Problem:
    """The machine as a rig of its cards for ``engine`` (llama.cpp or ik_llama.cpp), for ``model_file``."""
    nominal = doc["host_bandwidth_nominal"]
    rate = parse_rate(nominal.split("#")[0].strip()) // 2 if nominal != "unknown" else START_HOST_BANDWIDTH
    text = rig_yaml(
        place(doc["gpus"]),
        engine=engine,
        name=doc["machine"],
        model_ref=str(model_file),
        context=0,
        reserve=0,
        host_bandwidth=HostRate(rate),
        host_memory=None,
        command="tests/helpers/fidelity.py",
    )
    path = folder / f"{doc['machine']}-{model_file.stem}-{engine}.yaml"
    path.write_text(text)
    return load_problem(path, Overrides())


def machine_rows(path: Path, folder: Path) -> list[Row]:
    """Every run of one machine file, fitted on its first run (first two when it has four or more)."""
    doc = yaml.safe_load(path.read_text())
    runs = doc["runs"]
    fitted_n = 2 if len(runs) >= 4 else 1
    problems: dict[str, Problem] = {}
    cases = []
    for i, r in enumerate(runs):
        model_file = (FOLDER / r.get("model_file", doc["model_file"])).resolve()
        name = r.get("engine", doc.get("engine", "llama.cpp"))  # each run scored by the engine it ran
        key = f"{model_file}|{name}"
        if key not in problems:
            problems[key] = _rig(doc, model_file, folder, name)
        p = problems[key]
        engine = engine_named(name)
        run = Run(
            f"{doc['machine']} run {i + 1}",
            tuple(shlex.split(r["flags"])),
            r["depth"],
            float(r["tg"]),
            0.0,
            "",
        )
        cases.append((p, run, score_run(p, run, engine), engine))
    x0 = weights_of(next(iter(problems.values())))
    x = fit(design_of([s for _, _, s, _ in cases[:fitted_n]]), x0).x
    rows = []
    for i, (p, run, s, engine) in enumerate(cases):
        args = engine.read_command(list(run.words))
        after = engine.score(with_constants(at(p, x), depth=run.depth), args).window_ms
        rows.append(
            Row(
                doc["machine"],
                runs[i]["flags"],
                run.depth,
                run.tokens_per_s,
                1000.0 / s.before_ms,
                1000.0 / after,
                i < fitted_n,
                Path(runs[i].get("model_file", doc["model_file"])).stem,
            )
        )
    return rows


def rows_of(folder: Path, rows: Callable[[Path, Path], list[R]]) -> list[R]:
    """``rows(machine file, scratch folder)`` of every machine file in ``folder``, machine by machine."""
    with tempfile.TemporaryDirectory() as tmp:
        return [row for path in sorted(folder.glob("*.yaml")) for row in rows(path, Path(tmp))]


def table() -> list[Row]:
    """Every fixture run, machine by machine."""
    return rows_of(FOLDER, machine_rows)


def relative_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


@dataclass(frozen=True)
class Summary:
    """Median absolute error and share within CLOSE: every run before; held-out runs after; and the
    share of same-machine pairs (at least one held out) whose speed ratio is within CLOSE after."""

    before_median: float
    before_close: float
    after_median: float
    after_close: float
    ratio_close: float
    held_out: int
    pairs: int


def summary(rows: list[Row]) -> Summary:
    before = [abs(relative_error(r.before, r.measured)) for r in rows]
    held = [r for r in rows if not r.fitted]
    after = [abs(relative_error(r.after, r.measured)) for r in held]
    pairs = [
        (a, b) for a, b in combinations(rows, 2) if a.machine == b.machine and not (a.fitted and b.fitted)
    ]
    ratios = [abs((a.after / b.after) / (a.measured / b.measured) - 1.0) for a, b in pairs]
    return Summary(
        statistics.median(before),
        float(np.mean([e <= CLOSE for e in before])),
        statistics.median(after),
        float(np.mean([e <= CLOSE for e in after])),
        float(np.mean([e <= CLOSE for e in ratios])),
        len(held),
        len(pairs),
    )


def markdown(rows: list[Row]) -> str:
    """The table docs/fidelity.md shows, and its summary."""
    lines = [
        "| machine | model | flags | depth | measured t/s | before | after | |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.machine} | {r.model} | `{r.flags}` | {r.depth} | {r.measured:g} | "
            f"{r.before:.1f} ({relative_error(r.before, r.measured):+.0%}) | "
            f"{r.after:.1f} ({relative_error(r.after, r.measured):+.0%}) | "
            f"{'fitted' if r.fitted else 'held out'} |"
        )
    s = summary(rows)
    lines += [
        "",
        f"Before, all {len(rows)} runs: median error {s.before_median:.1%}, {s.before_close:.0%} within 15%.",
        f"After, the {s.held_out} held-out runs: median error {s.after_median:.1%}, "
        f"{s.after_close:.0%} within 15%; same-machine speed ratios within 15%: {s.ratio_close:.0%} of "
        f"{s.pairs} pairs.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown(table()) + "\n")
