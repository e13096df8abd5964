"""``solve calibrate RIG --llama-bench FILE``: run the fit (solver.calibrate.llamafit), print it (tables or
one JSON object), and write the fitted keys and the compute buffers a log shows into the rig
(solver.calibrate.rigedit)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from solver.calibrate.llamafit import HINTS, Outcome, Setup, calibrate, constants_of, load
from solver.calibrate.promptfit import HINTS as PROMPT_HINTS
from solver.calibrate.promptfit import PROMPT_CONSTANTS
from solver.calibrate.rigedit import Edit, write_rig
from solver.calibrate.speedfit import CONSTANTS
from solver.files.atomicfile import output_kind, refuse_inputs
from solver.files.config import shown_path
from solver.files.console import console as make_console
from solver.files.console import print_lines
from solver.units import format_rate

#: Units of the constants in the output.
UNIT = {
    "gpu_efficiency": "",
    "switch_ms": " ms",
    "layer_overhead_ms": " ms",
    "handoff_ms": " ms",
    "moe_layer_ms": " ms",
}


def value_text(key: str, value: float) -> str:
    """A constant as the rig file writes it: ``61.6 GB/s``, ``0.742``, ``0.0812``."""
    if key == "host_bandwidth":
        return format_rate(max(1, round(value / 10**8)) * 10**8)
    if key in ("gpu_efficiency", "matrix_efficiency", "pcie_efficiency"):
        return f"{value:.3f}"
    return f"{value:.4f}".rstrip("0").rstrip(".") or "0"


def shown_value(key: str, value: float) -> str:
    return value_text(key, value) + UNIT.get(key, "")


def edits_of(o: Outcome, setup: Setup, out: Path | None) -> list[Edit]:
    """The rig keys to set: the fitted constants, the buffers the logs show, and the model's path when
    the rig is written to another folder."""
    note = f"fitted by solve calibrate from {', '.join(o.sources)}"
    edits = []
    if o.fitted is not None:
        fitted = constants_of(o.fitted.x)
        edits = [Edit(k, value_text(k, fitted[k]), note) for k in o.fitted.identified]
    if o.prompt_fit is not None:
        fitted = o.prompt_fit.constants()
        edits += [Edit(k, value_text(k, fitted[k]), note) for k in o.prompt_fit.identified]
    for gpu in sorted(o.buffers):
        edits.append(Edit("buffer", o.buffers[gpu], "compute buffer, from its load log", gpu=gpu))
    if (
        edits
        and out is not None
        and setup.named_model is not None
        and not Path(setup.named_model).is_absolute()
    ):
        target = Path(os.path.relpath(setup.model_path.resolve(), out.resolve().parent))
        if target != Path(setup.named_model):
            edits.append(Edit("model", json.dumps(target.as_posix())))
    return edits


def yaml_lines(edits: list[Edit], gpu_names: list[str]) -> list[str]:
    """The edits as lines to add by hand."""
    out = []
    for e in edits:
        line = f"{e.key}: {e.value}" + (f"   # {e.note}" if e.note else "")
        out.append(line if e.gpu is None else f"gpus[{e.gpu}] ({gpu_names[e.gpu]}): {line}")
    return out


def run(
    rig: Path,
    model: Path | None,
    benches: tuple[Path, ...],
    logs: tuple[Path, ...],
    flags: tuple[str, ...],
    out: Path | None,
    as_json: bool,
    console: Console,
) -> Outcome:
    """The command: calibrate, print (tables or one JSON object) and write the rig when asked."""
    if out is not None:
        output_kind(out, shown_path(out))
    setup = load(rig, model)
    if out is not None:
        refuse_inputs(out, shown_path(out), [setup.model_path, *benches, *logs])
    outcome = calibrate(setup, benches, logs, flags)
    edits = edits_of(outcome, setup, out)
    outcome.yaml = yaml_lines(edits, outcome.gpu_names)
    if out is not None and any(e.key != "model" for e in edits):
        write_rig(setup.text, edits, out, shown_path(out))
        outcome.written = shown_path(out)
    elif out is not None:
        outcome.notes.append(f"{shown_path(out)}: not written: no constant identified and no buffer read")
    errors = make_console(stderr=True)
    for line in outcome.notes:
        errors.print(f"note: {line}", markup=False, highlight=False)
    if as_json:
        click.echo(json.dumps(to_json(outcome), indent=2))
    else:
        print_outcome(outcome, setup.shown, console)
    return outcome


def _err(predicted_ms: float, measured_tps: float) -> float:
    """Relative error of a predicted token time, in tokens/s."""
    return (1000.0 / predicted_ms - measured_tps) / measured_tps


def _cell(predicted_ms: float, measured_tps: float) -> str:
    return f"{1000.0 / predicted_ms:.2f} ({_err(predicted_ms, measured_tps):+.1%})"


def medians(o: Outcome) -> dict[str, float | None]:
    """Median absolute relative error in tokens/s: before, after, and leave-one-out."""
    tps = np.array([s.run.tokens_per_s for s in o.scorings])
    if not len(tps):
        return {"before": None, "after": None, "leave_one_out": None}

    def med(ms: np.ndarray) -> float:
        return float(np.median(np.abs((1000.0 / ms - tps) / tps)))

    before = np.array([s.before_ms for s in o.scorings])
    return {
        "before": med(before),
        "after": med(o.after_ms),
        "leave_one_out": med(o.loo_ms) if o.loo_ms is not None else None,
    }


def not_identified(o: Outcome) -> dict[str, str]:
    """Each constant the runs do not identify, with the run that would."""
    if o.fitted is None:
        return {}
    out = {}
    for key in CONSTANTS:
        if key in o.fitted.identified:
            continue
        unused, weak = HINTS[key]
        out[key] = unused if key in o.fitted.unused else weak
    return out


def prompt_not_identified(o: Outcome) -> dict[str, str]:
    """Each prompt constant the prompt runs do not identify, with the run that would."""
    if o.prompt_fit is None:
        return {}
    out = {}
    for key in PROMPT_CONSTANTS:
        if key not in o.prompt_fit.identified:
            unused, weak = PROMPT_HINTS[key]
            out[key] = unused if key in o.prompt_fit.unused else weak
    return out


def prompt_medians(o: Outcome) -> dict[str, float | None]:
    """Median absolute relative error of the prompt runs' tokens/s, before and after."""
    if o.prompt_fit is None:
        return {"before": None, "after": None}
    measured = np.array([s.measured_ms for s in o.prompt_scorings])
    before = np.array([s.before_ms for s in o.prompt_scorings])
    after = o.prompt_fit.predict(o.prompt_scorings)
    return {
        "before": float(np.median(np.abs(measured / before - 1.0))),
        "after": float(np.median(np.abs(measured / after - 1.0))),
    }


def _print_prompt(o: Outcome, console: Console) -> None:
    """The prompt runs table, the fitted and kept prompt constants and their errors."""
    if o.prompt_fit is None or o.prompt_x0 is None:
        return
    table = Table()
    table.add_column("prompt run", overflow="fold")
    table.add_column("placement", overflow="fold")
    for col in ("measured t/s", "before", "after"):
        table.add_column(col, justify="right", no_wrap=True)
    after = o.prompt_fit.predict(o.prompt_scorings)
    for s, a in zip(o.prompt_scorings, after):
        tps = s.run.tokens_per_s
        row = [s.run.source.rsplit("/", 1)[-1], s.run.placement, f"{tps:.2f}"]
        for ms in (s.before_ms, float(a)):
            speed = 1000.0 * s.tokens / ms
            row.append(f"{speed:.2f} ({(speed - tps) / tps:+.1%})")
        table.add_row(*row)
    print_lines(console, table)
    before = {k: 1.0 / float(v) for k, v in zip(PROMPT_CONSTANTS, o.prompt_x0)}
    now = o.prompt_fit.constants()
    parts = [f"{k} {value_text(k, now[k])} (was {value_text(k, before[k])})" for k in o.prompt_fit.identified]
    print_lines(console, f"prompt: fitted {', '.join(parts) if parts else 'nothing the runs identify'}")
    for key, hint in prompt_not_identified(o).items():
        print_lines(
            console, f"kept {key} {value_text(key, before[key])}: not identified: {hint}", highlight=False
        )
    m = prompt_medians(o)
    print_lines(
        console,
        f"prompt median error in tokens/s: before {m['before']:.1%}, after {m['after']:.1%}",
        highlight=False,
    )


def print_outcome(o: Outcome, shown: str, console: Console) -> None:
    """The runs table, the fitted and kept constants, the errors, and the YAML written or to add."""
    print_lines(
        console,
        f"[bold]calibrate {o.rig}[/bold] (model {o.model}): {len(o.scorings)} run(s)"
        + (f" and {len(o.prompt_scorings)} prompt run(s)" if o.prompt_scorings else "")
        + " from "
        + ", ".join(o.sources),
        highlight=False,
    )
    if o.scorings:
        table = Table()
        table.add_column("run", overflow="fold")
        table.add_column("placement", overflow="fold")
        for col in ("measured t/s", "before", "after", *(["leave-one-out"] if o.loo_ms is not None else [])):
            table.add_column(col, justify="right", no_wrap=True)
        for i, s in enumerate(o.scorings):
            tps = s.run.tokens_per_s
            measured = f"{tps:.2f}" + (f" ± {s.run.spread:.2f}" if s.run.spread else "")
            row = [
                s.run.source.rsplit("/", 1)[-1],
                s.run.placement,
                measured,
                _cell(s.before_ms, tps),
                _cell(o.after_ms[i], tps),
            ]
            if o.loo_ms is not None:
                row.append(_cell(o.loo_ms[i], tps))
            table.add_row(*row)
        print_lines(console, table)
    if o.fitted is not None:
        before, after = constants_of(o.x0), constants_of(o.fitted.x)
        parts = []
        for key in o.fitted.identified:
            was = "none" if key in o.start_keys else shown_value(key, before[key])
            parts.append(f"{key} {shown_value(key, after[key])} (was {was})")
        print_lines(
            console, f"fitted: {', '.join(parts) if parts else 'nothing the runs identify'}", highlight=False
        )
        for key, hint in not_identified(o).items():
            kept = "none" if key in o.start_keys else shown_value(key, before[key])
            print_lines(console, f"kept {key} {kept}: not identified: {hint}", highlight=False)
        m = medians(o)
        text = f"median error in tokens/s: before {m['before']:.1%}, after {m['after']:.1%}"
        if m["leave_one_out"] is not None:
            text += f", leave-one-out {m['leave_one_out']:.1%}"
        print_lines(console, text, highlight=False)
    _print_prompt(o, console)
    if o.written:
        print_lines(console, f"wrote {o.written}:", highlight=False)
    elif o.yaml:
        print_lines(console, f"add to {shown} (or give --write FILE):", highlight=False)
    for line in o.yaml:
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)


def to_json(o: Outcome) -> dict:
    """The outcome as one JSON object (README, "Calibrate from your own llama-bench runs")."""
    before = constants_of(o.x0)
    after = constants_of(o.fitted.x) if o.fitted is not None else before
    runs = []
    for i, s in enumerate(o.scorings):
        runs.append(
            {
                "source": s.run.source,
                "placement": s.run.placement,
                "flags": shlex.join(s.run.words),
                "depth": s.run.depth,
                "measured_tps": s.run.tokens_per_s,
                "spread_tps": s.run.spread,
                "before_tps": 1000.0 / s.before_ms,
                "after_tps": 1000.0 / float(o.after_ms[i]),
                "leave_one_out_tps": None if o.loo_ms is None else 1000.0 / float(o.loo_ms[i]),
                "fits": not s.short,
            }
        )
    identified = o.fitted.identified if o.fitted is not None else ()
    return {
        "rig": o.rig,
        "model": o.model,
        "sources": o.sources,
        "runs": runs,
        "constants": {
            k: {
                "before": None if k in o.start_keys else before[k],
                "after": after[k] if k in identified or k not in o.start_keys else None,
                "identified": k in identified,
            }
            for k in CONSTANTS
        },
        "not_identified": not_identified(o),
        "prompt": prompt_json(o),
        "median_error": medians(o),
        "buffers": {str(g): text for g, text in sorted(o.buffers.items())},
        "yaml": o.yaml,
        "written": o.written,
        "notes": o.notes,
    }


def prompt_json(o: Outcome) -> dict | None:
    """The prompt runs and constants as JSON (None without prompt runs)."""
    if o.prompt_fit is None or o.prompt_x0 is None:
        return None
    after = o.prompt_fit.predict(o.prompt_scorings)
    before = {k: 1.0 / float(v) for k, v in zip(PROMPT_CONSTANTS, o.prompt_x0)}
    now = o.prompt_fit.constants()
    return {
        "runs": [
            {
                "source": s.run.source,
                "placement": s.run.placement,
                "flags": shlex.join(s.run.words),
                "depth": s.run.depth,
                "prompt": s.tokens,
                "measured_tps": s.run.tokens_per_s,
                "before_tps": 1000.0 * s.tokens / s.before_ms,
                "after_tps": 1000.0 * s.tokens / float(a),
            }
            for s, a in zip(o.prompt_scorings, after)
        ],
        "constants": {
            k: {"before": before[k], "after": now[k], "identified": k in o.prompt_fit.identified}
            for k in PROMPT_CONSTANTS
        },
        "not_identified": prompt_not_identified(o),
        "median_error": prompt_medians(o),
    }
