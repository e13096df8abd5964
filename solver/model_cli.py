"""``solve model from-gguf|from-hf`` and ``solve rig new``: model and rig files from what people have.

The importers are imported inside the commands, so ``solve RIG`` never loads them.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click

from solver.atomicfile import refuse_inputs, write_atomic
from solver.config import host_problem, load_model, shown_path
from solver.engines import DEFAULT_ENGINE, ENGINES, engine_named
from solver.errors import InputError
from solver.exitcodes import ExitCode

KV_TYPES = ("f16", "q8_0", "q4_0")
DEFAULT_CONTEXT, DEFAULT_RESERVE = 32768, "700 MiB"


def _relative(target: Path, output: Path | None) -> str:
    """``target`` as a file written to ``output`` names it: relative to the output's folder."""
    base = (output.parent if output is not None else Path.cwd()).resolve()
    try:
        return os.path.relpath(target.resolve(), base)
    except ValueError:  # another drive on Windows
        return str(target.resolve())


def _emit(text: str, output: Path | None, inputs: list[Path]) -> None:
    """Write ``text`` to ``output`` (atomically, never over an input), or print it."""
    if output is None:
        click.echo(text, nl=False)
        return
    refuse_inputs(output, shown_path(output), inputs)
    write_atomic(output, shown_path(output), text)
    click.echo(f"wrote {shown_path(output)}", err=True)


def _command(words: list[object], options: dict[str, object]) -> str:
    """The command line as a user would type it again; options whose value is None are left out."""
    flags = [str(part) for flag, value in options.items() if value is not None for part in (flag, value)]
    return shlex.join(["solve", *(str(w) for w in words), *flags])


def _fail(message: str) -> None:
    click.echo(message, err=True)
    sys.exit(ExitCode.INPUT)


_OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the file here, not to stdout.",
)
_PROFILE = click.option(
    "--profile",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Routing profile the model file names (written relative to the output).",
)


@click.group("model")
def model_group() -> None:
    """Write a model file from a GGUF header or a Hugging Face config.json."""


_KV_TYPE = click.option(
    "--kv-type",
    type=click.Choice(KV_TYPES),
    default="f16",
    show_default=True,
    help="KV cache type, as llama.cpp's -ctk/-ctv (q8_0: 34 bytes per 32 values, q4_0: 18 per 32).",
)


@model_group.command("from-gguf")
@click.argument("gguf_file", type=click.Path(path_type=Path))
@_OUTPUT
@_KV_TYPE
@_PROFILE
def from_gguf_cmd(gguf_file: Path, output: Path | None, kv_type: str, profile: Path | None) -> None:
    """Exact bytes from a GGUF file's header (the tensor data is never read)."""
    from solver.importers.gguf import first_shard, read_gguf
    from solver.importers.modelfile import model_yaml

    try:
        m = read_gguf(gguf_file, kv_type)
        m.gguf = _relative(first_shard(gguf_file), output)
        kv = kv_type if kv_type != "f16" else None
        m.command = _command(
            ["model", "from-gguf", gguf_file], {"--kv-type": kv, "--profile": profile, "-o": output}
        )
        text = model_yaml(m, _relative(profile, output) if profile else None)
        _emit(text, output, [gguf_file, *([profile] if profile else [])])
    except InputError as exc:
        _fail(str(exc))


@model_group.command("from-hf")
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option(
    "--weights",
    required=True,
    help="Weight scheme the bytes are estimated for: a GGUF quant (Q2_K..Q8_0, IQ1_S..IQ4_XS, IQ4_NL,"
    " the _S/_M/_L mixes, MXFP4_MOE: llama-quantize's recipe) or a checkpoint (BF16, FP8, MXFP4); Q4_K"
    " is one uniform type. docs/models.md lists them.",
)
@click.option("--name", help="Model name (default: the config's folder or file name).")
@click.option(
    "--hf-model",
    help="What vllm serve / SGLang load: a Hugging Face id or checkpoint folder (default: the id of a"
    " config in Hugging Face's cache, or the config's folder when it holds *.safetensors).",
)
@_OUTPUT
@_KV_TYPE
@_PROFILE
def from_hf_cmd(
    config_file: Path,
    weights: str,
    name: str | None,
    hf_model: str | None,
    output: Path | None,
    kv_type: str,
    profile: Path | None,
) -> None:
    """Estimated bytes from a Hugging Face config.json and a weight scheme."""
    from solver.importers.hf import checkpoint_of, read_hf
    from solver.importers.modelfile import model_yaml

    try:
        m = read_hf(config_file, weights, name, kv_type)
        found = checkpoint_of(config_file) if hf_model is None else hf_model
        m.hf_model = _relative(found, output) if isinstance(found, Path) else found
        options = {
            "--weights": weights.upper(),
            "--name": name,
            "--hf-model": hf_model,
            "--kv-type": kv_type if kv_type != "f16" else None,
            "--profile": profile,
            "-o": output,
        }
        m.command = _command(["model", "from-hf", config_file], options)
        text = model_yaml(m, _relative(profile, output) if profile else None)
        _emit(text, output, [config_file, *([profile] if profile else [])])
    except InputError as exc:
        _fail(str(exc))


@click.group("rig")
def rig_group() -> None:
    """Write a rig file from card names."""


@rig_group.command("new")
@click.argument("cards", nargs=-1)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default=DEFAULT_ENGINE,
    show_default=True,
    help="Engine the rig plans for; the rig gets only the keys it reads.",
)
@click.option(
    "--host-bandwidth",
    help="llama.cpp: the host's memory rate ('80 GB/s') or memory ('DDR5-5600x2', '8ch DDR4-3200').",
)
@click.option("--host-memory", help="Host RAM for the experts no GPU holds ('128 GiB'; strata, llama.cpp).")
@click.option("--model", type=click.Path(path_type=Path, dir_okay=False), help="Model file the rig names.")
@click.option("--name", help="Rig name (default: the output file's stem).")
@click.option(
    "--context", type=click.IntRange(min=0), default=DEFAULT_CONTEXT, show_default=True, help="KV tokens."
)
@click.option("--reserve", default=DEFAULT_RESERVE, show_default=True, help="VRAM kept free on every card.")
@click.option("--list", "show", is_flag=True, help="List the cards the table knows.")
@_OUTPUT
def rig_new_cmd(
    cards: tuple[str, ...],
    engine: str,
    host_bandwidth: str | None,
    host_memory: str | None,
    model: Path | None,
    name: str | None,
    context: int,
    reserve: str,
    show: bool,
    output: Path | None,
) -> None:
    """A rig of CARDS in pipeline order ("RTX 4090" "RTX 3090" ..., or HOST:CARD for a card on machine
    HOST), from the card table (no NVML)."""
    from solver.cards import CardError
    from solver.importers.hostmem import parse_host_bandwidth
    from solver.importers.rigfile import check_engine, place, rig_yaml
    from solver.units import parse_size

    if show:
        _list_cards()
        return
    if not cards:
        _fail('solve rig new: name at least one card, e.g. solve rig new "RTX 4090" "RTX 3090"')
    try:
        reserve_bytes = parse_size(reserve)
    except ValueError as exc:
        _fail(f"--reserve: {exc}")
    rules = engine_named(engine)
    needs_rate = any(r.key == "host_bandwidth" for r in rules.required)
    if needs_rate and host_bandwidth is None:
        _fail(
            f"--engine {engine} needs --host-bandwidth: your RAM's rate, e.g. --host-bandwidth DDR5-5600x2 "
            "(two channels of DDR5-5600) or --host-bandwidth '60 GB/s'"
        )
    for option, key, given in (
        ("--host-bandwidth", "host_bandwidth", host_bandwidth),
        ("--host-memory", "host_memory", host_memory),
    ):
        if given is not None and key not in rules.rig_keys:
            _fail(f"{option}: engine {engine} ({rules.note}) reads no {key}")
    bad = host_problem([c.split(":", 1)[0].strip() if ":" in c else None for c in cards])
    if bad is not None:
        _fail(f"solve rig new: {cards[bad[0]]!r}: host {bad[1]}")
    try:
        rate = parse_host_bandwidth(host_bandwidth) if host_bandwidth is not None else None
    except ValueError as exc:
        _fail(f"--host-bandwidth: {exc}")
    try:
        host_bytes = parse_size(host_memory) if host_memory is not None else None
    except ValueError as exc:
        _fail(f"--host-memory: {exc}")
    try:
        placed = place(list(cards))
        check_engine(placed, engine)
        if model is not None:
            load_model(model)
        options = {
            "--engine": engine if engine != DEFAULT_ENGINE else None,
            "--host-bandwidth": host_bandwidth,
            "--host-memory": host_memory,
            "--model": model,
            "--name": name,
            "--context": context if context != DEFAULT_CONTEXT else None,
            "--reserve": reserve if reserve != DEFAULT_RESERVE else None,
            "-o": output,
        }
        command = _command(["rig", "new", *cards], options)
        text = rig_yaml(
            placed,
            engine=engine,
            name=name or (output.stem if output else None),
            model_ref=_relative(model, output) if model else None,
            context=context,
            reserve=reserve_bytes,
            host_bandwidth=rate,
            host_memory=host_bytes,
            command=command,
        )
        _emit(text, output, [model] if model else [])
    except (CardError, InputError) as exc:
        _fail(str(exc))


def _list_cards() -> None:
    """The card table, one card a line, in 80 columns."""
    from solver.cards import CARDS

    click.echo(f"{'card':<36} {'memory':>9} {'bandwidth':>11} {'SMs':>4} {'boost':>9}")
    for card in CARDS.values():
        sms = "-" if card.sms is None else str(card.sms)
        ghz = "-" if card.boost_ghz is None else f"{card.boost_ghz:.3f} GHz"
        bandwidth = f"{card.bandwidth / 1e9:g} GB/s"
        click.echo(f"{card.name:<36} {card.memory:>9} {bandwidth:>11} {sms:>4} {ghz:>9}")
