"""``solve score RIG -- COMMAND...``: what a command the user runs today does on the rig, beside the plan.

The words after ``--`` are the engine's own: llama-server, llama-cli or llama-bench flags for
llama.cpp, the partition variable and pipeline size for vLLM and SGLang, ``--layer-split`` for Strata.
The engine reads them as it would (solver.engines), places the model, and scores the placement with
the plan's arithmetic; the planner then plans the same rig (the command's context and cache types
included) and both are printed. Exit 0 once the command is scored, whether or not it fits memory
(the output names every card that would run out, with its shortfall); 2 for bad input or a command
the engine would refuse.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from solver import interrupt
from solver.cli.badinput import fail, input_errors
from solver.cli.options import (
    MODEL,
    PATH,
    PROFILE,
    SECONDS,
    TOKENS,
    default_workers,
    engine_option,
    grouped,
    json_option,
    workers_option,
)
from solver.engines import engine_of, plan_lines
from solver.errors import ArgsError, InputError
from solver.planning.planner import Result

if TYPE_CHECKING:
    from solver.planning.resolve import Overrides
    from solver.problem.problem import Problem
    from solver.solvers import Limits

#: An argument that is a whole line of an export: a comment, flags, a variable, or an engine's command.
EXPORT_LINE = re.compile(r"\s*(#|-|export\s|[A-Za-z_]\w*=|(llama-server|rpc-server|vllm|python3?)\s)")


def command_words(words: list[str]) -> list[str]:
    """The command's words; an argument holding a whole line (an export's line pasted as one argument,
    with spaces) is split as a shell would, ``export`` and comments dropped, and a line that starts an
    ``rpc-server`` (it runs on another host) left out."""
    out: list[str] = []
    for word in words:
        if not any(ch.isspace() for ch in word) or not re.match(EXPORT_LINE, word):
            out.append(word)
            continue
        for line in word.splitlines():
            try:
                parts = [w for w in shlex.split(line, comments=True) if w != "export"]
            except ValueError as exc:  # an unbalanced quote
                raise ArgsError(f"{line.strip()!r}: {exc}, as a shell would not run it") from None
            if "rpc-server" not in parts:
                out += parts
    return out


def plan_export(r: Result) -> list[str] | None:
    """The lines that make the engine run the plan (None: no plan, or one its flags cannot say)."""
    plan, p = r.plan, r.problem
    if plan is None:
        return None
    try:
        return plan_lines(p, plan)
    except ValueError:
        return None


@dataclass(frozen=True)
class ScoreOptions:
    """What the command is read and the plan made with: the files and settings that replace the rig's,
    and what the plan's search may spend."""

    model: Path | None
    profile: Path | None
    engine: str | None
    context: int | None
    prompt: int | None
    time_limit: float | None
    workers: int | None

    def overrides(self) -> Overrides:
        from solver.planning.resolve import Overrides

        return Overrides(
            model=self.model,
            profile=self.profile,
            engine=self.engine,
            context=self.context,
            prompt=self.prompt,
        )

    def limits(self, started: float) -> Limits:
        from solver.solvers import Limits

        return Limits(time_limit=self.time_limit, workers=self.workers or default_workers(), started=started)


@click.command(
    "score",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Example: solve score rigs/llama-mix.yaml -- llama-server -m MODEL.gguf -ngl 99 --n-cpu-moe 60",
)
@click.argument("rig", type=PATH)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND...")
@MODEL
@PROFILE
@engine_option("The engine the command runs (default: the rig's, else strata).")
@click.option(
    "--context",
    type=TOKENS,
    help="Tokens of KV cache (32768, 32K), instead of the rig's; a command's own (-c) still wins.",
)
@json_option("Print one JSON object: the score and the plan.")
@click.option("--time-limit", type=SECONDS, help="Plan within SECONDS.")
@click.option(
    "--prompt",
    type=click.IntRange(min=1),
    metavar="N",
    help="llama.cpp: report prompt processing for N tokens, instead of the rig's prompt (a llama-bench "
    "-p in the command wins).",
)
@workers_option()
@input_errors
@grouped(options=ScoreOptions)
def score(rig: Path, command: tuple[str, ...], options: ScoreOptions, as_json: bool) -> None:
    """Score the command you run today on RIG, and show the plan beside it.

    COMMAND is what follows '--': the flags of llama-server, llama-cli or llama-bench (-ngl -sm -ts -mg
    -dev -ot -ncmoe -cmoe -c -ctk -ctv, with CUDA_VISIBLE_DEVICES=... before them), or for vLLM and
    SGLang the partition variable and pipeline size. Prints per card what it holds and whether it fits,
    the predicted tokens/s, and the plan's.
    """
    started = interrupt.take_start() or time.perf_counter()  # --time-limit counts the imports too
    score_command(rig, list(command), options, as_json, started)


def score_command(
    rig: Path, command: list[str], options: ScoreOptions, as_json: bool, started: float
) -> None:
    """Read the command as the rig's engine would, score it, plan the rig as scored, print both."""
    from solver.files.console import console as make_console
    from solver.planning.planner import plan_rig
    from solver.planning.resolve import load_problem
    from solver.report.scoreview import print_score, to_score_json

    try:
        words = command_words(command)
    except ArgsError as exc:
        fail(f"score: {exc}")
    if not words:
        fail("score: give the command after --, e.g. solve score RIG -- -ngl 99 -ts 3,1")
    problem = load_problem(rig, options.overrides())
    runner = engine_of(problem)
    try:
        args = runner.read_command(words)
        scored = runner.score(problem, args)
    except ArgsError as exc:
        fail(f"score: {exc}")
    overrides = options.overrides()

    def reload(**changes: object) -> Problem:
        return load_problem(rig, dataclasses.replace(overrides, **changes))

    try:
        planned = runner.plan_problem(scored, args, reload)
    except InputError as exc:  # the command's settings are none the rig's files can plan at
        fail(f"score: the plan at the command's settings: {exc}")
    result = plan_rig(planned, options.limits(started))
    export = plan_export(result)
    if as_json:
        click.echo(json.dumps(to_score_json(scored, words, result, export), indent=2))
    else:
        print_score(scored, result, export, make_console())
