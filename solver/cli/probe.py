"""``solve probe``: a rig file from the local NVIDIA GPUs (NVML, imported only when it runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from solver.cli.badinput import fail
from solver.cli.options import PATH


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
def probe_cmd(
    output: Path | None,
    model: Path | None,
    context: int,
    reserve: str,
    force: bool,
    host: str | None,
    gpus_only: bool,
) -> None:
    """Read the local NVIDIA GPUs (NVML) and write a rig file to edit."""
    from solver.probe.run import ProbeError, run
    from solver.units import parse_size

    try:
        reserve_bytes = parse_size(reserve)
    except ValueError as exc:
        fail(f"--reserve: {exc}")
    if host is not None and not host.strip():
        fail("--host: is empty; name this machine, or leave --host out")
    try:
        text = run(output, model, context, reserve_bytes, force, host=host, gpus_only=gpus_only)
    except ProbeError as exc:
        click.echo(str(exc), err=True)
        sys.exit(exc.code)
    if output is None:
        click.echo(text, nl=False)
