"""``solve calibrate RIG --suggest``: the llama-bench command whose runs identify every speed constant.

llama-bench runs every combination of the values it is given, so the command is chosen as a small
product whose every test fits the rig (each scored like ``solve score``):

- ``-ncmoe N0,N1``: N0 the fewest layers whose experts must go to the CPU for every test to fit,
  N1 a quarter of the layers more. More expert bytes on the CPU at more CPU layers: host_bandwidth.
- ``-ot ',RULE'``: no rule, and a rule sending only the smallest expert tensor (``ffn_gate_exps``) of
  every layer after N1 to the CPU. More CPU layers at a third of the bytes each: switch_ms apart
  from host_bandwidth.
- ``-d 0,D`` (when the model has a KV cache): the same layers reading D tokens of KV more: GPU bytes
  at the same layer count, gpu_efficiency apart from layer_overhead_ms.
- ``-ts`` (two or more GPUs): each card in turn filled with the layers its memory holds at N0, front
  to back and back to front (GPU bytes over other bandwidths: gpu_efficiency), and, when it fits,
  without the last card (one hand-off fewer: handoff_ms).

The runs are then checked by the same identification the fit uses (solver.calibrate.speedfit), and the output
says which constants they identify and why any other stays out of reach.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from itertools import product
from pathlib import Path

import click
import numpy as np
from rich.console import Console

from solver.calibrate.llamafit import HINTS, _engine, load, score_run, weights_of
from solver.calibrate.measured import Run
from solver.calibrate.speedfit import CONSTANTS, MODEL_NOISE, Design, identify
from solver.engines.base import Engine
from solver.engines.llamacpp.fields import LlamaFields
from solver.errors import ArgsError, InputError
from solver.problem.problem import Problem

#: Tokens each test generates, and how often llama-bench repeats it.
N_GEN, REPS = 64, 3
#: Why a constant the tests exercise stays unidentified.
TOO_SMALL = (
    f"its share of these tests' time is too small to measure against the {MODEL_NOISE:.0%} a run's time "
    "varies by; the rig keeps its value"
)
#: Depths tried for the ``-d`` test, largest first.
DEPTHS = (32768, 16384, 8192, 4096)


@dataclass(frozen=True)
class Suggestion:
    """The command, its tests (one run each, as llama-bench's flags), and what they identify."""

    command: str
    runs: list[Run]
    identifies: list[str]
    not_identified: dict[str, str]
    then: str


def _words(ncmoe: int, rule: str, ts: str, depth: int) -> tuple[str, ...]:
    words = ["llama-bench", "-ngl", "999", "-ncmoe", str(ncmoe), "-n", str(N_GEN), "-d", str(depth)]
    if rule:
        words += ["-ot", rule]
    if ts:
        words += ["-ts", ts]
    return tuple(words)


def _fits(p: Problem, engine: Engine, words: tuple[str, ...]) -> bool:
    try:
        return engine.score(p, engine.read_command(list(words))).fits
    except ArgsError:
        return False


def memory_split(p: Problem, ncmoe: int, depth: int, cards: int, backwards: bool = False) -> str:
    """``-ts`` layer counts over the first ``cards`` GPUs that fit when the experts of layers < ``ncmoe``
    are on the CPU: each card in turn takes as many layers as its memory holds (front to back, or back
    to front), the last the rest. The later cards get 0 (a ``-ts`` with a 0 leaves a card out)."""
    n = p.n_layers
    kv = p.kv_per_layer if p.kv_per_layer is not None else np.zeros(n, dtype=np.int64)
    units = LlamaFields.of(p)
    experts = np.zeros(n, dtype=np.int64)
    np.add.at(experts, units.unit_layer, units.unit_bytes)
    need = p.layer_bytes - kv * p.context + kv * (N_GEN + depth) + np.where(np.arange(n) >= ncmoe, experts, 0)
    counts = [0] * p.n_gpus
    order = list(range(cards))[::-1] if backwards else list(range(cards))
    layers = list(range(n))[::-1] if backwards else list(range(n))
    at = 0
    for i, g in enumerate(order):
        room = int(p.free[g]) - int(p.reserve[g]) - p.stage_bytes
        if g == cards - 1:
            room -= p.last_stage_bytes
        taken = 0
        while at < n and (i == len(order) - 1 or taken == 0 or room >= need[layers[at]]):
            room -= int(need[layers[at]])
            taken += 1
            at += 1
            if i < len(order) - 1 and n - at <= len(order) - 1 - i:
                break
        counts[g] = taken
    counts[cards - 1] += 1  # the output layer's slot
    return "/".join(map(str, counts))


def least_ncmoe(p: Problem, engine: Engine, depth: int, cards: int) -> int | None:
    """The fewest layers whose experts go to the CPU for the model to fit the first ``cards`` GPUs at
    ``depth`` under ``memory_split`` (None: it never fits)."""

    def fits(m: int) -> bool:
        return _fits(p, engine, _words(m, "", memory_split(p, m, depth, cards), depth))

    n = p.n_layers
    if not fits(n):
        return None
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


def smallest_tensor(p: Problem, layers: list[int]) -> str | None:
    """The expert tensor with the fewest bytes over ``layers`` (a unit standing for several tensors
    offers its first), None when those layers hold no experts."""
    units = LlamaFields.of(p)
    mine = np.isin(units.unit_layer, layers)
    if not mine.any():
        return None
    totals: dict[str, int] = {}
    for name, size in zip([units.unit_names[i][0] for i in np.flatnonzero(mine)], units.unit_bytes[mine]):
        totals[name] = totals.get(name, 0) + int(size)
    return min(totals, key=lambda k: (totals[k], k))


def suggest(p: Problem, engine: Engine, rig_shown: str) -> Suggestion:
    """The llama-bench command for the rig (see the module docstring)."""
    n, k = p.n_layers, p.n_gpus
    base = least_ncmoe(p, engine, 0, k)
    if base is None:
        raise InputError(rig_shown, "the model does not fit the rig even with every expert on the CPU")
    depth, n0 = 0, base
    has_kv = p.kv_per_layer is not None and bool(p.kv_per_layer.any())
    for d in DEPTHS if has_kv else ():
        m = least_ncmoe(p, engine, d, k)
        if m is not None and m <= base + max(1, n // 16):
            depth, n0 = d, m
            break
    ts_used = [""]
    if k > 1:
        ts_used = [memory_split(p, n0, depth, k)]
        back = memory_split(p, n0, depth, k, backwards=True)
        if back not in ts_used and _fits(p, engine, _words(n0, "", back, depth)):
            ts_used.append(back)
    n1 = min(n, n0 + min(max(2, n // 4), max(1, (n - n0) // 2)))
    ncmoe = sorted({n0, n1})
    tail = list(range(n1, n))
    tensor = smallest_tensor(p, tail)
    rule = f"blk\\.({'|'.join(map(str, tail))})\\.{tensor}=CPU" if tensor else ""
    rules = ["", rule] if rule else [""]
    if k > 1:
        drop = memory_split(p, n1, depth, k - 1)
        if all(_fits(p, engine, _words(m, "", drop, depth)) for m in ncmoe):
            ts_used.append(drop)
    depths = [0, depth] if depth else [0]
    runs = [
        Run("suggested", _words(m, r, t, d), d, 1.0, 0.0, "")
        for m, r, t, d in product(ncmoe, rules, ts_used, depths)
    ]
    scorings = [score_run(p, run, engine) for run in runs]
    x0 = weights_of(p)
    ms = np.array([s.before_ms for s in scorings])
    design = Design(
        np.array([s.base for s in scorings]),
        np.array([s.slope for s in scorings]),
        ms,
        np.full(len(ms), MODEL_NOISE),
    )
    ids, unused = identify(design, x0)
    identifies = [CONSTANTS[j] for j in ids]
    missing = {
        CONSTANTS[j]: HINTS[CONSTANTS[j]][0] if j in unused else TOO_SMALL
        for j in range(len(CONSTANTS))
        if j not in ids
    }
    words = ["llama-bench", "-m", "MODEL.gguf", "-p", "0", "-n", str(N_GEN), "-r", str(REPS), "-ngl", "999"]
    words += ["-ncmoe", ",".join(map(str, ncmoe))]
    if rule:
        words += ["-ot", "," + rule]
    if ts_used != [""]:
        words += ["-ts", ",".join(ts_used)]
    if depth:
        words += ["-d", f"0,{depth}"]
    words += ["-o", "json"]
    command = shlex.join(words) + " > runs.json"
    then = (
        f"solve calibrate {shlex.quote(rig_shown)} --llama-bench runs.json --write {shlex.quote(rig_shown)}"
    )
    return Suggestion(command, runs, identifies, missing, then)


def run(rig: Path, model: Path | None, as_json: bool, console: Console) -> Suggestion:
    """The command: print the llama-bench line, what its runs identify, and the calibrate line after."""
    setup = load(rig, model)
    s = suggest(setup.p, _engine(setup.p.engine, setup.shown), setup.shown)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "command": s.command,
                    "tests": len(s.runs),
                    "model": setup.p.model,
                    "identifies": s.identifies,
                    "not_identified": s.not_identified,
                    "then": s.then,
                },
                indent=2,
            )
        )
        return s
    console.print(
        f"# {len(s.runs)} decode tests; MODEL.gguf: the GGUF file of {setup.p.model} "
        "(the model file's source)",
        markup=False,
        highlight=False,
    )
    click.echo(s.command)
    console.print(
        f"# they identify {', '.join(s.identifies) or 'no constant'}", markup=False, highlight=False
    )
    for key, why in s.not_identified.items():
        console.print(f"# not {key}: {why}", markup=False, highlight=False)
    console.print("# then:", markup=False, highlight=False)
    click.echo(s.then)
    return s
