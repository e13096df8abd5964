"""``solve rig new``: a rig file from card names, from the card table (no NVML)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import click

from solver.cli.badinput import fail, input_errors
from solver.cli.options import TOKENS, grouped
from solver.cli.written import OUTPUT, command_line, emit, relative
from solver.engines import DEFAULT_ENGINE, ENGINES, engine_named
from solver.files.config import host_problem, load_model

DEFAULT_CONTEXT, DEFAULT_RESERVE = 32768, "700 MiB"


@dataclass(frozen=True)
class RigKeys:
    """What the rig file says beside its cards, as given: the engine it plans for, the host's memory
    rate and size, the cost of a hop between machines, the model it names, its name, context and the
    VRAM kept free on every card."""

    engine: str
    host_bandwidth: str | None
    host_memory: str | None
    network_handoff_ms: float | None
    model: Path | None
    name: str | None
    context: int
    reserve: str

    def flags(self, output: Path | None) -> dict[str, object]:
        """The options that remake the rig (None for those left at their defaults), for command_line."""
        handoff = self.network_handoff_ms
        return {
            "--engine": self.engine if self.engine != DEFAULT_ENGINE else None,
            "--host-bandwidth": self.host_bandwidth,
            "--host-memory": self.host_memory,
            "--network-handoff-ms": None if handoff is None else f"{handoff:g}",
            "--model": self.model,
            "--name": self.name,
            "--context": self.context if self.context != DEFAULT_CONTEXT else None,
            "--reserve": self.reserve if self.reserve != DEFAULT_RESERVE else None,
            "-o": output,
        }


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
@click.option(
    "--network-handoff-ms",
    type=float,
    help="ms a hop between two machines costs (a rig whose cards name hosts, HOST:CARD).",
)
@click.option("--model", type=click.Path(path_type=Path, dir_okay=False), help="Model file the rig names.")
@click.option("--name", help="Rig name (default: the output file's stem).")
@click.option(
    "--context", type=TOKENS, default=DEFAULT_CONTEXT, show_default=True, help="KV tokens (32768, 32K)."
)
@click.option("--reserve", default=DEFAULT_RESERVE, show_default=True, help="VRAM kept free on every card.")
@click.option("--list", "show", is_flag=True, help="List the cards the table knows.")
@OUTPUT
@click.option("--force", is_flag=True, help="Write over an existing -o file.")
@input_errors
@grouped(keys=RigKeys)
def rig_new_cmd(cards: tuple[str, ...], keys: RigKeys, show: bool, output: Path | None, force: bool) -> None:
    """A rig of CARDS in pipeline order ("RTX 4090" "RTX 3090" ..., or HOST:CARD for a card on machine
    HOST), from the card table (no NVML)."""
    if show:
        _list_cards()
        return
    new_rig(cards, keys, output, force)


def new_rig(cards: tuple[str, ...], keys: RigKeys, output: Path | None, force: bool) -> None:
    """Check the cards and keys, then write the rig file to ``output`` (or print it); bad input exits 2."""
    from solver.files.cards import CardError
    from solver.importers.hostmem import parse_host_bandwidth
    from solver.importers.rigfile import check_engine, place, rig_yaml
    from solver.planning.plausible import host_memory_doubt
    from solver.units import parse_size

    if not cards:
        fail('solve rig new: name at least one card, e.g. solve rig new "RTX 4090" "RTX 3090"')
    try:
        reserve_bytes = parse_size(keys.reserve)
    except ValueError as exc:
        fail(f"--reserve: {exc}")
    engine, host_bandwidth, host_memory = keys.engine, keys.host_bandwidth, keys.host_memory
    network_handoff_ms = keys.network_handoff_ms
    rules = engine_named(engine)
    needs_rate = any(r.key == "host_bandwidth" for r in rules.required)
    if needs_rate and host_bandwidth is None:
        fail(
            f"--engine {engine} needs --host-bandwidth: your RAM's rate, e.g. --host-bandwidth DDR5-5600x2 "
            "(two channels of DDR5-5600) or --host-bandwidth '60 GB/s'"
        )
    for option, key, given in (
        ("--host-bandwidth", "host_bandwidth", host_bandwidth),
        ("--host-memory", "host_memory", host_memory),
    ):
        if given is not None and key not in rules.rig_keys:
            fail(f"{option}: engine {engine} ({rules.note}) reads no {key}")
    if network_handoff_ms is not None:
        if not (math.isfinite(network_handoff_ms) and network_handoff_ms >= 0):
            fail(f"--network-handoff-ms: expected milliseconds of 0 or more, got {network_handoff_ms:g}")
        if not any(":" in c for c in cards):
            fail("--network-handoff-ms: the cards name no machine (HOST:CARD), so no hop crosses a network")
    bad = host_problem([c.split(":", 1)[0].strip() if ":" in c else None for c in cards])
    if bad is not None:
        fail(f"solve rig new: {cards[bad[0]]!r}: host {bad[1]}")
    try:
        rate = parse_host_bandwidth(host_bandwidth) if host_bandwidth is not None else None
    except ValueError as exc:
        fail(f"--host-bandwidth: {exc}")
    try:
        host_bytes = parse_size(host_memory) if host_memory is not None else None
    except ValueError as exc:
        fail(f"--host-memory: {exc}")
    doubt = host_memory_doubt(host_memory, host_bytes) if host_bytes is not None else None
    if doubt is not None:
        click.echo(f"--host-memory: {doubt}", err=True)
    model = keys.model
    try:
        placed = place(list(cards), engine)
        hosts = list(dict.fromkeys(c.host for c in placed))
        together = sorted(placed, key=lambda c: hosts.index(c.host))  # a rig lists a host's GPUs together
        if together != placed:
            placed = together
            listed = " ".join(f"{c.host}:{c.card.name}" if c.host else c.card.name for c in placed)
            click.echo(
                f"solve rig new: each machine's GPUs listed together, in this order: {listed}", err=True
            )
        check_engine(placed, engine)
        if model is not None:
            load_model(model)
        command = command_line(["rig", "new", *cards], keys.flags(output))
        text = rig_yaml(
            placed,
            engine=engine,
            name=keys.name or (output.stem if output else None),
            model_ref=relative(model, output) if model else None,
            context=keys.context,
            reserve=reserve_bytes,
            host_bandwidth=rate,
            host_memory=host_bytes,
            command=command,
            network_handoff_ms=network_handoff_ms,
        )
        emit(text, output, [model] if model else [], overwrite=force)
    except CardError as exc:
        fail(str(exc))


def _list_cards() -> None:
    """The card table, one card a line, in 80 columns."""
    from solver.files.cards import cards

    click.echo(f"{'card':<36} {'memory':>9} {'bandwidth':>11} {'SMs':>4} {'boost':>9}")
    for card in cards().values():
        sms = "-" if card.sms is None else str(card.sms)
        ghz = "-" if card.boost_ghz is None else f"{card.boost_ghz:.3f} GHz"
        bandwidth = f"{card.bandwidth / 1e9:g} GB/s"
        click.echo(f"{card.name:<36} {card.memory:>9} {bandwidth:>11} {sms:>4} {ghz:>9}")
