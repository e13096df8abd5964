"""``solve profile ...``: make, convert, count and inspect routing profiles (docs/profiles.md).

Every file these commands write is written atomically and never over one of their inputs; the
output format follows the extension: ``.strp`` is STRP v1 (which carries no counts), anything else
is the text format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import numpy as np

from solver.cli.badinput import input_errors
from solver.cli.options import PATH, Finite, grouped
from solver.errors import InputError
from solver.files.atomicfile import refuse_inputs, write_atomic
from solver.files.config import load_model, shown_path
from solver.profiles.format import Profile, check_against, read_profile, strp_bytes, write_text
from solver.profiles.stats import (
    SEED_LABEL,
    SEED_POINTS,
    TOP_FRACTIONS,
    is_seed_shape,
    layer_ranges,
    layer_skew,
    top_shares,
)
from solver.profiles.synth import SynthParams, synth_profile

OutPath = click.Path(path_type=Path, dir_okay=False)


def _note(text: str) -> None:
    click.echo(f"note: {text}", err=True)


def _console() -> Any:
    from solver.files.console import console

    return console()


def print_lines(console: Any, *renderables: object) -> None:
    """Print without trailing blanks (solver.files.console.print_lines)."""
    from solver.files.console import print_lines as stripped

    stripped(console, *renderables)


@click.group("profile")
def profile_group() -> None:
    """Make, convert, count and inspect routing profiles."""


def _model_experts(model: Path) -> np.ndarray:
    """Experts per layer of a model file."""
    config, _ = load_model(model)
    e = config.experts
    return np.array(e if isinstance(e, list) else [e] * config.layers, dtype=np.int64)


def _validate(profile: Profile, model: Path | None) -> tuple[tuple[int, int], str, np.ndarray | None]:
    """Check every pair (range, duplicates) and find the STRP shape ``(n_layers, n_expert)``.

    The shape comes from the model when given, else from an STRP header, else it is inferred from
    the pairs. Returns the shape, where it came from, and the model's experts per layer (or None).
    """
    if model is not None:
        experts = _model_experts(model)
        check_against(profile, experts)
        return (len(experts), int(experts.max(initial=0))), f"from {shown_path(model)}", experts
    if profile.shape is not None:
        shape, how = profile.shape, "from the STRP header"
    else:
        shape = (int(profile.layer.max(initial=-1)) + 1, int(profile.expert.max(initial=-1)) + 1)
        how = "inferred from the pairs (largest layer + 1, largest expert + 1); give --model to set it"
    if shape[0] == 0 and len(profile):
        raise InputError(profile.file, f"STRP header says 0 layers but ranks {len(profile)} pairs")
    check_against(profile, np.full(shape[0], shape[1], dtype=np.int64))
    return shape, how, None


def _save(out: Path, profile: Profile, header: str, shape: tuple[int, int], how: str) -> str:
    """Write ``profile`` in the format ``out``'s extension names; return a line saying what was written."""
    shown = shown_path(out)
    if out.suffix.lower() != ".strp":
        write_text(out, profile, header, shown)
        kind = "with counts" if profile.count is not None else "ranks only"
        return f"wrote {shown}: text, {len(profile):,} pairs, {kind}"
    if shape[0] == 0:
        raise InputError(shown, "no pairs to take the STRP shape from; give --model")
    try:
        data = strp_bytes(profile, *shape)
    except ValueError as exc:
        raise InputError(shown, str(exc)) from None
    if profile.count is not None:
        _note(f"STRP v1 carries no counts; the counts of {len(profile):,} pairs are not written to {shown}")
    if how.startswith("inferred"):
        _note(f"STRP shape {shape[0]} layers x {shape[1]} experts {how}")
    write_atomic(out, shown, data)
    return (
        f"wrote {shown}: STRP v1, {len(profile):,} pairs, {shape[0]} layers x {shape[1]} experts, "
        f"{len(data):,} bytes"
    )


def _curve_table(count: np.ndarray, seed_points: bool = False) -> Any:
    """A table of the share of routing held by the top fractions of pairs (ranked by count)."""
    from rich.table import Table

    t = Table(title="share of routing in the hottest pairs", title_justify="left")
    t.add_column("top of pairs", justify="right")
    t.add_column("pairs", justify="right")
    t.add_column("share of routing", justify="right")
    points = [(f, "") for f in TOP_FRACTIONS]
    if seed_points:
        points += list(SEED_POINTS)
        t.add_column(SEED_LABEL, justify="right")
    shares = top_shares(count, tuple(f for f, _ in points))
    for (f, note), share in zip(points, shares):
        row = [f"{f:.1%}", f"{round(f * len(count)):,}", f"{share:.1%}"]
        t.add_row(*row, *([note] if seed_points else []))
    return t


def _parse_experts(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        experts = [int(v) for v in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected an integer or a comma list of integers, got {value!r}") from None
    if any(e < 0 for e in experts):
        raise click.BadParameter("expert counts cannot be negative")
    return experts


def _synth_command(layers: int, experts: list[int], p: SynthParams) -> str:
    """The full command that reproduces a synthetic profile, every parameter spelled out."""
    e = str(experts[0]) if len(set(experts)) == 1 else ",".join(map(str, experts))
    return (
        f"solve profile synth --layers {layers} --experts {e} --skew {p.skew!r} --spread {p.spread!r} "
        f"--cutoff {p.cutoff!r} --tokens {p.tokens} --top-k {p.top_k} --seed {p.seed}"
    )


_D = SynthParams()


@profile_group.command("synth")
@click.option("--layers", type=click.IntRange(min=1), required=True, help="Number of layers.")
@click.option(
    "--experts",
    required=True,
    callback=_parse_experts,
    help="Experts per layer: one integer, or a comma list with one per layer (0 = a dense layer).",
)
@click.option(
    "--skew",
    type=Finite(),
    default=_D.skew,
    show_default=True,
    help="Mean Zipf exponent of expert popularity within a layer.",
)
@click.option(
    "--spread",
    type=Finite(min=0),
    default=_D.spread,
    show_default=True,
    help="Each layer's exponent is drawn uniformly from skew +- spread.",
)
@click.option(
    "--cutoff",
    type=Finite(min=0, min_open=True),
    default=_D.cutoff,
    show_default=True,
    help="Exponential cutoff as a fraction of a layer's experts; smaller thins the tail.",
)
@click.option(
    "--tokens", type=click.IntRange(min=1), default=_D.tokens, show_default=True, help="Tokens routed."
)
@click.option(
    "--top-k",
    type=click.IntRange(min=1),
    default=_D.top_k,
    show_default=True,
    help="Experts each token picks per layer.",
)
@click.option("--seed", type=click.IntRange(min=0), default=_D.seed, show_default=True, help="Random seed.")
@click.option("-o", "--output", "out", type=OutPath, help="Write it here (.strp: STRP v1, else text).")
@input_errors
@grouped(params=SynthParams)
def synth_cmd(layers: int, experts: list[int], params: SynthParams, out: Path | None) -> None:
    """Generate a SYNTHETIC profile with counts (Zipf with a cutoff per layer) and print its counts curve.

    Without -o only the curve is printed, to tune the parameters.
    """
    synth(layers, _per_layer(experts, layers), params, out)


def _per_layer(experts: list[int], layers: int) -> list[int]:
    """``--experts`` as one count per layer: one integer for every layer, or a list of ``layers``."""
    if len(experts) == 1:
        experts = experts * layers
    elif len(experts) != layers:
        raise click.BadParameter(
            f"has {len(experts)} entries; expected one per layer ({layers})", param_hint="'--experts'"
        )
    if not any(experts):
        raise click.BadParameter(
            "every layer is dense (0 experts): nothing to rank", param_hint="'--experts'"
        )
    return experts


def synth(layers: int, experts: list[int], params: SynthParams, out: Path | None) -> None:
    """Make the profile, print its curve (beside the box's measured points when its shape is the box's
    model's) and write it to ``out`` when given, with a header that says how it was made."""
    command = _synth_command(layers, experts, params)
    profile = synth_profile(experts, params, file=command)
    console = _console()
    print_lines(
        console,
        f"SYNTHETIC profile: {layers} layers, {len(profile):,} pairs, "
        f"{int(profile.count.sum()):,} routing events ({params.tokens:,} tokens x top-{params.top_k} per "
        "layer)",
    )
    # the box's measured hit rates only mean something for a profile of the model they were measured on
    comparable = is_seed_shape(layers, experts)
    print_lines(console, _curve_table(profile.count, seed_points=comparable))
    if out is None:
        return
    a, b, c = top_shares(profile.count)
    compared = ""
    if comparable:
        (f1, m1), (f2, m2) = SEED_POINTS
        s1, s2 = top_shares(profile.count, (f1, f2))
        compared = (
            f"; the top {f1:.1%} hold {s1:.1%} and the top {f2:.1%} hold {s2:.1%} "
            f"({SEED_LABEL}: {m1} and {m2})"
        )
    header = (
        "SYNTHETIC routing profile: NOT measured routing.\n"
        f"Made by: {command}\n"
        f"{layers} layers, {len(profile):,} pairs. The top 10/25/50% of pairs hold {a:.1%}/{b:.1%}/{c:.1%} "
        f"of the counts{compared}.\n"
        "layer expert count, hottest first"
    )
    shape = (layers, max(experts))
    click.echo(_save(out, profile, header, shape, "from --layers and --experts"))


@profile_group.command("convert")
@click.argument("src", metavar="IN", type=PATH)
@click.argument("out", metavar="OUT", type=OutPath)
@click.option("--model", type=PATH, help="Model file: checks the pairs, sets STRP's shape.")
@input_errors
def convert_cmd(src: Path, out: Path, model: Path | None) -> None:
    """Convert a profile between text and STRP v1, by OUT's extension (.strp: STRP v1, else text).

    STRP needs the model's layers and experts: from --model, from an STRP input's header, or
    inferred from the pairs (largest layer + 1, largest expert + 1). STRP holds no counts.
    """
    refuse_inputs(out, shown_path(out), [src, *([model] if model else [])])
    profile = read_profile(src, shown_path(src))
    shape, how, _ = _validate(profile, model)
    fmt = f"STRP v1, {shape[0]} layers x {shape[1]} experts" if profile.shape else "text"
    columns = "layer expert count" if profile.count is not None else "layer expert"
    header = f"converted from {profile.file} ({fmt}) by solve profile convert\n{columns}, hottest first"
    click.echo(_save(out, profile, header, shape, how))


@profile_group.command("from-traces")
@click.argument("traces", metavar="TRACE...", nargs=-1, required=True, type=PATH)
@click.option("-o", "--output", "out", type=OutPath, required=True, help="Profile to write (.strp or text).")
@click.option("--model", type=PATH, help="Model file: checks the pairs, sets STRP's shape.")
@input_errors
def from_traces_cmd(traces: tuple[Path, ...], out: Path, model: Path | None) -> None:
    """Count routing events in routing dumps and write the pairs ranked by count, with counts.

    A dump is records of little-endian int32 layer, int32 k, k int32 expert ids, k float32 gate
    weights. A count is one routing event (one expert picked at one layer for one token); the gate
    weights are checked but not used. Ties in count rank by layer, then expert.
    """
    from solver.profiles.traces import read_traces

    refuse_inputs(out, shown_path(out), [*traces, *([model] if model else [])])
    experts = _model_experts(model) if model is not None else None
    routing = read_traces([(t, shown_path(t)) for t in traces], experts)
    if routing.records == 0:
        raise InputError(shown_path(traces[0]), f"no routing records in {len(traces)} trace file(s)")
    profile = routing.ranked(shown_path(out))
    shape, how, _ = _validate(profile, model)
    header = (
        f"routing counts from {routing.files:,} trace file(s): {routing.records:,} records, "
        f"{routing.events:,} routing events; made by solve profile from-traces\n"
        "a count is a routing event (one expert picked at one layer for one token); "
        "gate weights are not used\n"
        "layer expert count, hottest first"
    )
    console = _console()
    print_lines(
        console,
        f"{routing.records:,} records, {routing.events:,} routing events, {len(profile):,} pairs routed "
        f"in {len(np.unique(profile.layer))} layers",
    )
    print_lines(console, _curve_table(profile.count))
    click.echo(_save(out, profile, header, shape, how))


@profile_group.command("show")
@click.argument("file", type=PATH)
@click.option("--model", type=PATH, help="Model file: checks the pairs against it.")
@input_errors
def show_cmd(file: Path, model: Path | None) -> None:
    """Summarise a profile: pairs, layers covered, and with counts how skewed the routing is."""
    from rich.table import Table

    profile = read_profile(file, shown_path(file))
    shape, _, experts = _validate(profile, model)
    layers, per_layer = np.unique(profile.layer, return_counts=True)
    t = Table(title=profile.file, title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    if profile.shape is not None:
        t.add_row("format", f"STRP v1, header {shape[0]} layers x {shape[1]} experts (no counts)")
    else:
        t.add_row("format", "text, " + ("with counts" if profile.count is not None else "ranks only"))
    pairs = f"{len(profile):,}"
    if experts is not None:
        total = int(experts.sum())
        pairs += f" of the model's {total:,} ({len(profile) / max(total, 1):.1%})"
    t.add_row("pairs", pairs)
    covered = f"{len(layers)} ({layer_ranges(layers)})"
    if experts is not None:
        covered = f"{len(layers)} of {int((experts > 0).sum())} with experts ({layer_ranges(layers)})"
    t.add_row("layers covered", covered)
    if len(layers):
        median = float(np.median(per_layer))
        mid = f"{median:,.0f}" if median.is_integer() else f"{median:,.1f}"
        t.add_row(
            "pairs per layer",
            f"min {per_layer.min():,}, median {mid}, max {per_layer.max():,}",
        )
    if profile.count is not None:
        t.add_row("routing events", f"{int(profile.count.sum()):,} (the counts' total)")
    else:
        t.add_row(
            "counts", "none: a cover or power curve gives the mass (from-traces and synth write counts)"
        )
    console = _console()
    print_lines(console, t)
    if profile.count is None or int(profile.count.sum()) == 0:
        return
    print_lines(console, _curve_table(profile.count))
    skew = layer_skew(profile, experts)
    s = Table(title=f"per-layer skew over {len(skew.layer)} layers", title_justify="left")
    s.add_column("")
    s.add_column("layer", justify="right")
    s.add_column(f"top {skew.fraction:.0%} of its experts hold", justify="right")
    for q in ("min", "median", "max"):
        layer, share = skew.at(q)
        s.add_row(q, str(layer), f"{share:.1%} of its routing")
    print_lines(console, s)
