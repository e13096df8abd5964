"""``solve verify RIG [-- ARGS...]``: llama.cpp's own estimate of the plan's command (or ARGS) on the rig.

Runs the user's ``llama-fit-params --fit-print on`` (from ``--llama-bin DIR``, PATH, or beside
``llama-server``) on the model's GGUF with no weights loaded and no device memory taken
(solver.engines.llamacpp.verify), and prints per card llama.cpp's model, context and compute figures
against the card's free memory and the plan's own count. ``--write OUT`` writes the rig with each GPU's
``buffer`` set from llama.cpp's compute figure. Exit 0 when every card fits, 1 when one does not, 2 when
the binary, its ``--fit-print`` or the GGUF cannot be found, or for bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from solver.cli.badinput import fail, input_errors
from solver.cli.options import MODEL, PATH, json_option
from solver.cli.score import command_words, plan_export
from solver.engines.llamacpp.fields import LlamaFields
from solver.errors import ArgsError

if TYPE_CHECKING:
    from solver.engines.llamacpp.verify import Verified


@click.command(
    "verify",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Example: solve verify rigs/mine.yaml --llama-bin ~/llama.cpp/build/bin",
)
@click.argument("rig", type=PATH)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- ARGS...]")
@MODEL
@click.option("--llama-bin", type=PATH, metavar="DIR", help="The folder of your llama.cpp binaries.")
@click.option("--gguf", type=PATH, metavar="FILE", help="The model's GGUF (default: the model file's).")
@click.option("--write", "out", type=PATH, metavar="OUT", help="Write the rig with each GPU's buffer set.")
@json_option("Print one JSON object: each card's figures.")
@input_errors
def verify(
    rig: Path,
    command: tuple[str, ...],
    model: Path | None,
    llama_bin: Path | None,
    gguf: Path | None,
    out: Path | None,
    as_json: bool,
) -> None:
    """Check the plan's llama.cpp command (or ARGS) with llama.cpp's own memory estimate.

    ARGS, after '--', are llama-server flags to check instead of the plan's command.
    """
    from solver.engines import engine_of
    from solver.engines.llamacpp.verify import NotVerifiable, find_fit_params
    from solver.engines.llamacpp.verify import verify as run_verify
    from solver.planning.planner import plan_rig
    from solver.planning.resolve import Overrides, load_problem

    problem = load_problem(rig, Overrides(model=model, engine="llama.cpp"))
    try:
        binary = find_fit_params(llama_bin)
        named = LlamaFields.of(problem).gguf
        model_file = gguf or (Path(named) if named else None)
        if model_file is None:
            fail("verify: the model file names no GGUF; give it with --gguf FILE (a split model's 1st shard)")
        if not model_file.is_file():
            fail(f"verify: no GGUF {model_file}; give it with --gguf FILE (a split model's first shard)")
        words = command_words(list(command))
        if not words:
            export = plan_export(plan_rig(problem))
            if export is None:
                fail("verify: the rig has no plan to check; give the command to check after --")
            words = command_words([line for line in export if not line.lstrip().startswith("#")])
        result = run_verify(problem, engine_of(problem), words, binary, model_file)
    except NotVerifiable as exc:
        fail(str(exc))
    except ArgsError as exc:
        fail(f"verify: {exc}")
    if out is not None:
        _write(rig, out, result)
    if as_json:
        click.echo(json.dumps(_to_json(result), indent=2))
    else:
        _print(result)
    sys.exit(0 if result.fits else 1)


def _to_json(v: Verified) -> dict:
    mib = 2**20
    return {
        "binary": str(v.binary),
        "build": v.build,
        "command": v.words,
        "fits": v.fits,
        "cards": [
            {
                "gpu": c.gpu,
                "name": c.name,
                "device": c.usage.name,
                "model_bytes": c.usage.model * mib,
                "context_bytes": c.usage.context * mib,
                "compute_bytes": c.usage.compute * mib,
                "total_bytes": c.usage.total * mib,
                "free_bytes": c.free_bytes,
                "plan_bytes": c.plan_bytes,
                "fits": c.fits,
            }
            for c in v.cards
        ],
        "host": {"model_bytes": v.host.model * mib, "compute_bytes": v.host.compute * mib},
    }


def _print(v: Verified) -> None:
    click.echo(f"llama.cpp's estimate ({v.binary}, build {v.build}), MiB:")
    click.echo(
        f"{'GPU':<24} {'device':<8} {'model':>8} {'context':>8} {'compute':>8} {'total':>8} "
        f"{'free':>8} {'plan':>8}  fits"
    )
    for c in v.cards:
        u = c.usage
        click.echo(
            f"{f'{c.gpu} {c.name}':<24} {u.name:<8} {u.model:>8} {u.context:>8} {u.compute:>8} {u.total:>8} "
            f"{c.free_bytes // 2**20:>8} {c.plan_bytes // 2**20:>8}  {'yes' if c.fits else 'NO'}"
        )
    click.echo(f"host: model {v.host.model} MiB, compute {v.host.compute} MiB")
    click.echo("the command fits every card" if v.fits else "the command does NOT fit every card")


def _write(rig: Path, out: Path, v: Verified) -> None:
    """The rig with each checked GPU's ``buffer`` set from llama.cpp's compute figure."""
    from solver.calibrate.rigedit import Edit, write_rig
    from solver.files.config import shown_path

    note = f"llama.cpp compute buffer, llama-fit-params --fit-print (build {v.build})"
    edits = [Edit("buffer", f"{c.usage.compute} MiB", note, c.gpu) for c in v.cards]
    write_rig(rig.read_text(), edits, out, shown_path(out))
    click.echo(f"wrote {shown_path(out)}", err=True)
