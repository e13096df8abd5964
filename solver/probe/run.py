"""``solve probe``: read the local NVIDIA GPUs through NVML and write a rig file the user can edit.

NVML comes from the optional package ``nvidia-ml-py`` (imported as ``pynvml``, extra ``moesplit[gpu]``).
``solver.probe.nvml`` reads the GPUs from that module, given as an argument so tests drive a fake one;
``solver.probe.probedrig`` writes the rig. Only ``load_nvml`` imports the real package, and only when ``solve
probe`` runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from solver.errors import InputError
from solver.exitcodes import ExitCode
from solver.files.atomicfile import output_kind, write_atomic
from solver.files.config import load_model, shown_path
from solver.probe.nvml import MIB, ProbeError, probe
from solver.probe.probedrig import problems, rig_yaml


def load_nvml() -> ModuleType:
    """Import pynvml, or say in one line how to get it."""
    try:
        import pynvml
    except ImportError:
        raise ProbeError(
            "solve probe needs NVML bindings: pip install 'moesplit[gpu]' (the nvidia-ml-py package)"
        ) from None
    return pynvml


def visible_devices(env: dict[str, str] | None = None) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` when it is set (an empty value counts: it hides every GPU)."""
    return (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")


# ---- the command ----------------------------------------------------------------------------------


def _model_ref(model: Path, output: Path | None) -> str:
    """The model's path as the rig names it: relative to the rig's folder (paths in a rig are)."""
    base = (output.parent if output is not None else Path.cwd()).resolve()
    try:
        return os.path.relpath(model.resolve(), base)
    except ValueError:  # another drive on Windows
        return str(model.resolve())


def run(
    output: Path | None,
    model: Path | None,
    context: int,
    reserve: int,
    force: bool,
    nvml: Any | None = None,
    env: dict[str, str] | None = None,
    host: str | None = None,
    gpus_only: bool = False,
) -> str:
    """Probe, write the rig to ``output`` (or return it for stdout); report to stderr. Raises ProbeError."""
    if output is not None and output.exists() and not force:
        raise ProbeError(f"{shown_path(output)}: already exists (give --force to overwrite)", ExitCode.INPUT)
    if output is not None:
        try:
            output_kind(output, shown_path(output))
        except InputError as exc:
            raise ProbeError(str(exc), ExitCode.INPUT) from None
    if reserve % MIB:
        raise ProbeError(f"--reserve: give whole MiB, got {reserve} bytes", ExitCode.INPUT)
    model_ref = None
    if model is not None:
        try:
            load_model(model)
        except InputError as exc:
            raise ProbeError(str(exc), ExitCode.INPUT) from None
        model_ref = _model_ref(model, output)
    visible = visible_devices(env)
    gpus, driver = probe(nvml if nvml is not None else load_nvml(), visible)
    text = rig_yaml(
        gpus,
        visible=visible,
        model_ref=model_ref,
        context=context,
        reserve_mib=reserve // MIB,
        driver=driver,
        host=host,
        gpus_only=gpus_only,
    )
    where = "CUDA_VISIBLE_DEVICES" if visible is not None else "NVML"
    click.echo(f"probed {len(gpus)} GPU(s) in {where} order:", err=True)
    for pos, gpu in enumerate(gpus):
        free = "free ?" if gpu.free is None else f"{gpu.free // MIB} MiB free"
        speed = "layer_ms ?" if gpu.layer_ms is None else f"{gpu.layer_ms:.4f} ms/layer (estimate)"
        click.echo(f"  gpus[{pos}] {gpu.rig_name}: {free}, {speed}", err=True)
    for line in problems(gpus):
        click.echo(f"EDIT {line}", err=True)
    if model_ref is None:
        click.echo("EDIT model: name your model file in the rig, or plan with --model FILE", err=True)
    if output is not None:
        try:
            write_atomic(output, shown_path(output), text)
        except InputError as exc:
            raise ProbeError(str(exc), ExitCode.INPUT) from None
        click.echo(f"wrote {shown_path(output)}", err=True)
    return text
