"""``solve calibrate RIG --llama-bench FILE``: the rig's speed constants fitted to its own llama.cpp runs.

Each measured run (solver.calibrate.llamabench, solver.calibrate.llamalog) is scored on the rig by
the engine's scorer (the placement its flags make, ``solve score``), seven times: at the rig's
constants and with each of ``host_bandwidth``, ``gpu_efficiency``, ``switch_ms``, ``layer_overhead_ms``,
``handoff_ms`` and ``moe_layer_ms`` moved, which gives the run's token time as a linear function of the six
(solver.calibrate.speedfit). The fit, the constants it could not identify (and the run that would),
each run measured, before and after, and the leave-one-out error are what the command reports
(solver.calibrate.llamafit_report).
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from solver.calibrate.llamabench import Expect, read_bench, weight_bytes
from solver.calibrate.llamalog import read_log
from solver.calibrate.measured import Run
from solver.calibrate.promptfit import PromptFit, PromptScoring, fit_prompt, prompt_line, start_x
from solver.calibrate.speedfit import CONSTANTS, Design, Fitted, fit, from_x, leave_one_out, sigma_of, to_x
from solver.engines import REGISTRY, Engine, engine_named, engine_of
from solver.engines.bandwidth import speed_of, with_constants
from solver.engines.llamacpp.fields import LlamaFields, LlamaKeys
from solver.errors import ArgsError, InputError
from solver.files.bounded import YAML_LIMIT, read_bounded
from solver.files.config import ModelConfig, load_model, load_rig, relative_to, shown_path
from solver.planning.resolve import Overrides, load_problem
from solver.problem.problem import Problem
from solver.units import format_size

#: The rate a rig without ``host_bandwidth`` starts from: about half the nominal rate of a
#: two-channel DDR5 desktop (docs/fidelity-sources.md); the fit replaces it once a run has experts
#: on the CPU.
START_HOST_BANDWIDTH = 40 * 10**9
#: How far each variable moves to read a run's slope (host_bandwidth and gpu_efficiency: a factor; the
#: ms constants: this many ms). The time is linear in the variables, so any step reads it exactly.
FACTORS = ("host_bandwidth", "gpu_efficiency")
STEP = {
    "host_bandwidth": 0.5,
    "gpu_efficiency": 0.8,
    "switch_ms": 0.1,
    "layer_overhead_ms": 0.1,
    "handoff_ms": 1.0,
    "moe_layer_ms": 0.1,
}

#: Which extra llama-bench run would identify a constant: when no run exercises it, and when the runs
#: exercise it only together with constants fitted before it.
HINTS = {
    "host_bandwidth": (
        "no run has expert tensors on the CPU: add one with -ncmoe N (N > 0)",
        "add runs with more or fewer expert bytes on the CPU (another -ncmoe value)",
    ),
    "gpu_efficiency": (
        "no GPU's time comes from its bytes (each gives layer_ms)",
        "add runs that differ in the bytes the GPUs read: another depth (-d 0,32768), or another -ts over "
        "GPUs of different bandwidth (--suggest)",
    ),
    "switch_ms": (
        "no run has expert tensors on the CPU: add one with -ncmoe N (N > 0)",
        "add runs that differ in how many layers have experts on the CPU at about the same CPU bytes: an "
        "-ot rule sending only ffn_gate_exps of some layers to the CPU beside -ncmoe (--suggest), or another "
        "quant",
    ),
    "layer_overhead_ms": (
        "no GPU's time comes from its bytes (each gives layer_ms)",
        "add runs that differ in GPU bytes at the same layers (-d 0,32768) or in the layers on the GPUs "
        "(-ngl)",
    ),
    "handoff_ms": (
        "every run uses one GPU (no hand-offs)",
        "add runs on a different number of GPUs (-dev CUDA0 beside -dev CUDA0/CUDA1, or a -ts with a 0)",
    ),
    "moe_layer_ms": (
        "no GPU runs expert tensors by its bytes (each gives layer_ms, or every expert is on the CPU)",
        "each expert tensor a GPU holds adds its share of it beside its bytes, so the runs move it with "
        "switch_ms and the CPU's expert bytes; add two -ot tests beside -ncmoe, one sending only "
        "ffn_down_exps of some layers to the CPU and one only ffn_gate_exps, in a quant where the two "
        "differ in size (a _M quant)",
    ),
}


@dataclass(frozen=True)
class Scoring:
    """A run scored on the rig: its token time ``base + slope . x`` (ms), at the rig's constants
    ``before_ms``, and the cards that would run out of memory (one line each)."""

    run: Run
    base: float
    slope: np.ndarray
    before_ms: float
    short: list[str]


@dataclass
class Outcome:
    """Everything the command prints or writes."""

    rig: str
    model: str
    sources: list[str]
    x0: np.ndarray
    start_keys: list[str]
    scorings: list[Scoring]
    fitted: Fitted | None
    after_ms: np.ndarray
    loo_ms: np.ndarray | None
    buffers: dict[int, str]
    gpu_names: list[str]
    notes: list[str] = field(default_factory=list)
    written: str | None = None
    yaml: list[str] = field(default_factory=list)
    prompt_x0: np.ndarray | None = None
    prompt_scorings: list[PromptScoring] = field(default_factory=list)
    prompt_fit: PromptFit | None = None


def weights_of(p: Problem) -> np.ndarray:
    """The constants of ``p`` as the linear variables of solver.calibrate.speedfit, in CONSTANTS order."""
    sp = speed_of(p)
    values = {
        "host_bandwidth": float(LlamaFields.of(p).host_bandwidth or START_HOST_BANDWIDTH),
        "gpu_efficiency": sp.efficiency,
        "switch_ms": sp.switch_ms,
        "layer_overhead_ms": sp.overhead_ms,
        "handoff_ms": p.handoff_ms,
        "moe_layer_ms": sp.moe_layer_ms,
    }
    return np.array([to_x(k, values[k]) for k in CONSTANTS])


def constants_of(x: np.ndarray) -> dict[str, float]:
    """The rig keys of the linear variables ``x``."""
    return {k: from_x(k, float(v)) for k, v in zip(CONSTANTS, x)}


def at(p: Problem, x: np.ndarray) -> Problem:
    """``p`` under the constants ``x``."""
    return with_constants(p, **constants_of(x))


def _engine(name: str, rig_file: str) -> Engine:
    """The engine ``name``; InputError for one that llama.cpp runs do not measure."""
    engine = engine_named(name)
    if not engine.reads_llama_bench:
        raise InputError(
            rig_file,
            f"engine {engine.name}: llama-bench and llama.cpp runs calibrate the llama.cpp time model; "
            "set engine: llama.cpp in the rig",
            key="engine",
        )
    return engine


def score_run(p: Problem, run: Run, engine: Engine) -> Scoring:
    """The run's linear time model from its placement scored at ``p``'s constants and at each moved."""
    args = engine.read_command(list(run.words))
    score = engine.score
    x0 = weights_of(p)
    base_p = with_constants(p, depth=run.depth)
    first = score(at(base_p, x0), args)
    t0 = first.window_ms
    slope = np.zeros(len(CONSTANTS))
    for j, key in enumerate(CONSTANTS):
        value = from_x(key, float(x0[j]))
        moved = value * STEP[key] if key in FACTORS else value + STEP[key]
        x1 = x0.copy()
        x1[j] = to_x(key, moved)
        slope[j] = (score(at(base_p, x1), args).window_ms - t0) / (x1[j] - x0[j])
    short = [f"{c.name} short by {format_size(c.shortfall)}" for c in first.short]
    return Scoring(run, t0 - float(slope @ x0), slope, t0, short)


@dataclass(frozen=True)
class Setup:
    """The rig as loaded for calibration: its problem (host_bandwidth filled in when it has none), its
    text and file as shown, the model's file and config, the model path the rig names, and the
    constants the rig does not give (``host_bandwidth`` or none)."""

    p: Problem
    text: str
    shown: str
    model_path: Path
    model: ModelConfig
    named_model: str | None
    start_keys: list[str]


def load(rig_path: Path, model_path: Path | None) -> Setup:
    """Read the rig and its model for calibration."""
    rig, doc = load_rig(rig_path, REGISTRY)
    _engine(rig.engine, doc.file)
    if model_path is None and rig.model is None:
        raise doc.error(("model",), "missing (required, or give --model)")
    path = model_path if model_path is not None else relative_to(rig_path, rig.model or "")
    model, _ = load_model(path)
    p = load_problem(rig_path, Overrides(model=model_path, host_bandwidth=START_HOST_BANDWIDTH))
    start = [] if rig.keys(LlamaKeys).host_bandwidth is not None else ["host_bandwidth"]
    text = read_bounded(rig_path, doc.file, "a YAML file", YAML_LIMIT).decode("utf-8")
    return Setup(p, text, doc.file, path, model, rig.model, start)


def _once(paths: tuple[Path, ...], option: str, notes: list[str]) -> list[Path]:
    """``paths`` with a file given again (the same file, however named) left out, and said: its runs
    counted twice would weigh double in the fit."""
    seen: dict[Path, Path] = {}
    for path in paths:
        key = path.resolve()
        if key in seen:
            notes.append(
                f"{shown_path(path)}: given twice to {option} (as {shown_path(seen[key])}): read once"
            )
        else:
            seen[key] = path
    return list(seen.values())


def gather_prompt(setup: Setup, benches: tuple[Path, ...]) -> tuple[list[Run], list[str]]:
    """Every llama-bench prompt row of the files (``n_prompt`` > 0, ``n_gen`` 0), and notes."""
    p = setup.p
    expect = Expect(weight_bytes(setup.model), p.n_gpus)
    runs: list[Run] = []
    notes: list[str] = []
    for path in _once(benches, "--llama-bench", []):
        found, skipped = read_bench(path, shown_path(path), expect, engine_of(p).bench_row, kind="prompt")
        runs += found
        notes += skipped
    return runs, notes


def score_prompts(p: Problem, runs: list[Run], rig_file: str, notes: list[str]) -> list[PromptScoring]:
    """Every prompt run's time as a line in the prompt constants; a run the scorer cannot read, or
    without a prompt model (a GPU of unknown matrix throughput), is noted and left out."""
    engine = _engine(p.engine, rig_file)
    x0 = prompt_start(p)
    out = []
    for run in runs:
        try:
            args = engine.read_command(list(run.words))
            scored = engine.score(with_constants(p, depth=run.depth), args)
        except (ArgsError, InputError) as exc:
            notes.append(f"{run.source}: {exc}: skipped")
            continue
        line = prompt_line(scored.problem, scored, args, run.depth, x0)
        if line is None:
            notes.append(
                f"{run.source}: no prompt time: a GPU's matrix throughput is unknown (matrix_tflops): skipped"
            )
            continue
        tokens, base, slope = line
        out.append(PromptScoring(run, tokens, base, slope, base + float(slope @ x0)))
    return out


def prompt_start(p: Problem) -> np.ndarray:
    """The problem's prompt constants (the rig's keys, else the defaults) as the fit's variables."""
    pm = LlamaFields.of(p).prompt
    return start_x(None, None) if pm is None else start_x(pm.efficiency, pm.pcie_efficiency)


def gather(
    setup: Setup, benches: tuple[Path, ...], logs: tuple[Path, ...], flags: tuple[str, ...]
) -> tuple[list[Run], dict[int, str], list[str]]:
    """Every run of the files, the compute buffers the logs show (by rig GPU), and notes."""
    if logs and len(flags) not in (1, len(logs)):
        raise InputError(
            "--args",
            f"give one --args for every --llama-log, or one for all; got {len(flags)} for {len(logs)}",
        )
    if flags and not logs:
        raise InputError("--args", "gives the flags a --llama-log was run with; no --llama-log given")
    p = setup.p
    expect = Expect(weight_bytes(setup.model), p.n_gpus)
    runs: list[Run] = []
    notes: list[str] = []
    buffers: dict[int, str] = {}
    for path in _once(benches, "--llama-bench", notes):
        found, skipped = read_bench(path, shown_path(path), expect, engine_of(p).bench_row)
        runs += found
        notes += skipped
    read: dict[tuple[Path, str], Path] = {}
    for i, path in enumerate(logs):
        text = flags[i] if len(flags) == len(logs) else flags[0]
        if (path.resolve(), text) in read:
            first = shown_path(read[(path.resolve(), text)])
            notes.append(f"{shown_path(path)}: given twice to --llama-log (as {first}): read once")
            continue
        read[(path.resolve(), text)] = path
        try:
            words = tuple(shlex.split(text))
        except ValueError as exc:
            raise InputError("--args", f"{text!r}: {exc}") from None
        log = read_log(path, shown_path(path), words, text)
        runs += log.runs
        notes += log.notes
        for gpu, size in log.buffers.items():
            if gpu >= p.n_gpus:
                notes.append(
                    f"{shown_path(path)}: CUDA{gpu} compute buffer: the rig has {p.n_gpus} GPU(s): skipped"
                )
            else:
                buffers[gpu] = size
    return runs, buffers, notes


def score_all(p: Problem, runs: list[Run], rig_file: str, notes: list[str]) -> list[Scoring]:
    """Every run scored; a run whose flags the scorer cannot read is noted and left out."""
    engine = _engine(p.engine, rig_file)
    out = []
    placed: dict[tuple, Scoring | Exception] = {}  # runs of one placement score alike: once each
    for run in runs:
        key = (run.words, run.depth)
        if key not in placed:
            try:
                placed[key] = score_run(p, run, engine)
            except (ArgsError, InputError) as exc:
                placed[key] = exc
        got = placed[key]
        if isinstance(got, Exception):
            notes.append(f"{run.source}: {got}: skipped")
            continue
        scored = dataclasses.replace(got, run=run)
        if scored.short:
            notes.append(
                f"{run.source}: would not fit under the rig and model ({'; '.join(scored.short)}): "
                "check free, reserve and the model's bytes; its time is used"
            )
        out.append(scored)
    return out


def design_of(scorings: list[Scoring]) -> Design:
    """The scored runs as solver.calibrate.speedfit's linear design."""
    tps = np.array([s.run.tokens_per_s for s in scorings])
    spread = np.array([s.run.spread for s in scorings])
    return Design(
        np.array([s.base for s in scorings]),
        np.array([s.slope for s in scorings]).reshape(len(scorings), len(CONSTANTS)),
        1000.0 / tps,
        sigma_of(tps, spread),
    )


def calibrate(
    setup: Setup,
    benches: tuple[Path, ...],
    logs: tuple[Path, ...],
    flags: tuple[str, ...],
) -> Outcome:
    """Read, score and fit: what the command reports."""
    p = setup.p
    runs, buffers, notes = gather(setup, benches, logs, flags)
    prompt_runs, prompt_notes = gather_prompt(setup, benches)
    notes += prompt_notes
    if not runs and not buffers and not prompt_runs:
        why = "; ".join(notes) if notes else "the files hold no decode or prompt runs"
        raise InputError(setup.shown, f"no run to calibrate from: {why}")
    scorings = score_all(p, runs, setup.shown, notes) if runs else []
    prompt_scorings = score_prompts(p, prompt_runs, setup.shown, notes) if prompt_runs else []
    if (runs or prompt_runs) and not scorings and not prompt_scorings:
        raise InputError(setup.shown, "no run to calibrate from: " + "; ".join(notes))
    x0 = weights_of(p)
    fitted = loo = None
    after = np.zeros(0)
    if scorings:
        design = design_of(scorings)
        fitted = fit(design, x0)
        exercised = len(CONSTANTS) - len(fitted.unused)
        if len(scorings) < exercised:
            notes.append(
                f"{len(scorings)} run{'s' if len(scorings) != 1 else ''} can fit at most {len(scorings)} of "
                f"the {exercised} constants they exercise; the others keep their values (below)"
            )
        if "host_bandwidth" in setup.start_keys and "host_bandwidth" not in fitted.identified:
            notes.append(
                f"the rig has no host_bandwidth and these runs do not identify it; planning for "
                f"{engine_of(p).name} needs it (runs with expert tensors on the CPU give it)"
            )
        after = design.predict(fitted.x)  # the scorer's window at the fitted constants: t is linear in x
        loo = leave_one_out(design, x0) if len(scorings) >= 3 else None
    prompt_x0 = prompt_start(p)
    prompt_fitted = fit_prompt(prompt_scorings, prompt_x0) if prompt_scorings else None
    sources = [shown_path(f) for f in (*benches, *logs)]
    return Outcome(
        p.rig,
        p.model,
        sources,
        x0,
        setup.start_keys,
        scorings,
        fitted,
        after,
        loo,
        buffers,
        p.gpu_names,
        notes,
        prompt_x0=prompt_x0,
        prompt_scorings=prompt_scorings,
        prompt_fit=prompt_fitted,
    )
