"""``solve probe``: a rig file from the local NVIDIA GPUs (NVML, imported only when it runs)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import click

from solver.cli.badinput import fail
from solver.cli.options import PATH, grouped


@dataclass(frozen=True)
class ProbeOptions:
    """The rig file to write: where, the model it names, its context and the VRAM kept free (as given),
    whether it may write over a file, the machine's name, and whether only its ``gpus:`` items."""

    output: Path | None
    model: Path | None
    context: int
    reserve: str
    force: bool
    host: str | None
    gpus_only: bool

    def reserve_bytes(self) -> int:
        """``--reserve`` in bytes; bad text ends the command (exit 2)."""
        from solver.units import parse_size

        try:
            return parse_size(self.reserve)
        except ValueError as exc:
            fail(f"--reserve: {exc}")


@click.command("probe")
@click.option("-o", "--output", type=PATH, help="Write the rig here, not to stdout.")
@click.option("--model", type=PATH, help="Model file the rig names.")
@click.option(
    "--context",
    type=click.IntRange(min=0),
    default=32768,
    show_default=True,
    help="KV tokens per full-attention layer.",
)
@click.option("--reserve", default="700 MiB", show_default=True, help="VRAM kept free on every card.")
@click.option("--force", is_flag=True, help="Overwrite the output file.")
@click.option("--host", help="Name this machine on every GPU (rigs that span machines).")
@click.option(
    "--gpus-only", is_flag=True, help="Print only the gpus: items, to append to another host's rig."
)
@grouped(options=ProbeOptions)
def probe_cmd(options: ProbeOptions) -> None:
    """Read the local NVIDIA GPUs (NVML) and write a rig file to edit."""
    probe_rig(options)


def probe_rig(o: ProbeOptions) -> None:
    """Probe, then write the rig (or print it); a ProbeError ends the command with its code."""
    from solver.probe.run import ProbeError, run

    reserve = o.reserve_bytes()
    if o.host is not None and not o.host.strip():
        fail("--host: is empty; name this machine, or leave --host out")
    try:
        text = run(o.output, o.model, o.context, reserve, o.force, host=o.host, gpus_only=o.gpus_only)
    except ProbeError as exc:
        click.echo(str(exc), err=True)
        sys.exit(exc.code)
    if o.output is None:
        click.echo(text, nl=False)
