"""The rig file ``solve probe`` writes: one GPU entry per probed card, with what NVML said in comments and
an EDIT line for every field the user must fill in."""

from __future__ import annotations

import json

from solver.probe.nvml import MIB, GpuInfo
from solver.problem.problem import REFERENCE_GHZ, REFERENCE_LAYER_MS, REFERENCE_SMS


def _line(key: str, value: str, comment: str = "", indent: int = 4) -> str:
    text = f"{' ' * indent}{key}: {value}"
    return f"{text:<34} # {comment}" if comment else text


def _gpu_lines(pos: int, gpu: GpuInfo, reserve_mib: int, host: str | None = None) -> list[str]:
    where = [f"NVML index {gpu.index}"]
    where.append(f"UUID {gpu.uuid}" if gpu.uuid else "UUID unknown")
    where.append(f"PCI {gpu.bus_id}" if gpu.bus_id else "PCI bus id unknown")
    if gpu.pcie_gen is not None and gpu.pcie_width is not None:
        peak = f"; max gen {gpu.pcie_max[0]} x{gpu.pcie_max[1]}" if gpu.pcie_max else ""
        where.append(f"PCIe gen {gpu.pcie_gen} x{gpu.pcie_width} (current link{peak})")
    else:
        where.append(f"PCIe link unknown ({gpu.notes.get('pcie', '')})")
    lines = [f"  # GPU {pos}: " + ", ".join(where)]
    lines.append(f"  - name: {json.dumps(gpu.rig_name)}")
    if gpu.card is not None and gpu.rig_name != gpu.short_name:
        total = "" if gpu.total is None else f", {gpu.total // MIB} MiB total"
        lines.append(f"    #   NVML name {gpu.name!r}{total}: the card table's {gpu.rig_name!r}")
    if host is not None:
        lines.append(_line("host", json.dumps(host), "the machine this GPU is in"))
    if gpu.free is not None:
        total = f"{gpu.total // MIB} MiB total, " if gpu.total is not None else ""
        note = f"free when probed ({total}NVML memory info {gpu.memory_api}); close other GPU programs first"
        lines.append(_line("free", f"{gpu.free // MIB} MiB", note))
    else:
        lines.append(f"    # free: ?  EDIT: NVML could not read the memory ({gpu.notes.get('free')})")
    lines.append(_line("reserve", f"{reserve_mib} MiB", "kept free on this card (the engine's default)"))
    estimate = f"{REFERENCE_LAYER_MS}*({REFERENCE_SMS}*{REFERENCE_GHZ})/max(1, sms*clock_ghz)"
    if gpu.layer_ms is not None:
        lines.append(_line("layer_ms", f"{gpu.layer_ms:.4f}", f"estimate {estimate}"))
        lines.append(f"    #   sms = {gpu.sms} ({gpu.sms_source})")
        lines.append(f"    #   clock_ghz = {gpu.clock_ghz:.3f} (NVML max SM clock)")
        return lines
    lines.append(f"    # EDIT: layer_ms needs sms and clock_ghz (estimate {estimate}), or set layer_ms")
    if gpu.sms is not None:
        lines.append(_line("sms", str(gpu.sms), str(gpu.sms_source)))
    else:
        lines.append(f"    # sms: ?  EDIT: {gpu.notes.get('sms')}")
    if gpu.clock_ghz is not None:
        lines.append(_line("clock_ghz", f"{gpu.clock_ghz:.3f}", "NVML max SM clock"))
    else:
        why = gpu.notes.get("clock_ghz")
        lines.append(f"    # clock_ghz: ?  EDIT: NVML could not read the max SM clock ({why})")
    return lines


def rig_yaml(
    gpus: list[GpuInfo],
    *,
    visible: str | None,
    model_ref: str | None,
    context: int,
    reserve_mib: int,
    driver: str | None = None,
    host: str | None = None,
    gpus_only: bool = False,
) -> str:
    """A rig file for ``gpus`` in pipeline order, with what NVML said in comments.

    ``host`` names the machine on every GPU; ``gpus_only`` gives just the ``gpus:`` list items, to append
    to a rig of another machine (whose last key is ``gpus:``) so one rig spans several hosts.
    """
    items = [line for pos, gpu in enumerate(gpus) for line in _gpu_lines(pos, gpu, reserve_mib, host)]
    if gpus_only:
        where = f" on host {host}" if host else ""
        return "\n".join([f"  # GPUs{where}, written by `solve probe --gpus-only`", *items]) + "\n"
    head = ["# Rig written by `solve probe` from NVML" + (f" (driver {driver})." if driver else ".")]
    if visible is None:
        head.append("# GPUs in NVML order (PCI bus order, as nvidia-smi numbers them).")
    else:
        head.append(f"# GPUs in CUDA_VISIBLE_DEVICES order ({visible}).")
    uuids = [g.uuid for g in gpus]
    if all(uuids):
        head += [
            "# CUDA numbers GPUs fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; to run the engine on",
            "# the GPUs in exactly this order, start it with:",
            f"#   CUDA_VISIBLE_DEVICES={','.join(str(u) for u in uuids)}",
        ]
    head.append("# Check every line marked EDIT before planning.")
    if model_ref is not None:
        model = [f"model: {json.dumps(model_ref)}"]
    else:
        model = [
            "# model: path/to/model.yaml     # EDIT: your model file, relative to this file",
            "#                                 (or give it to solve as --model FILE)",
        ]
    body = [
        _line("context", str(context), "EDIT: tokens of KV cache per full-attention layer", 0),
        _line("miss_ms", "190", "the engine's default cost of a cache miss", 0),
        _line("first_stage_min_layers", "2", "the engine keeps at least 2 layers on the first card", 0),
        "gpus:",
        *items,
    ]
    return "\n".join(head + model + body) + "\n"


def problems(gpus: list[GpuInfo]) -> list[str]:
    """One line per field the user must fill in before the rig can be planned."""
    out = []
    for pos, gpu in enumerate(gpus):
        if gpu.free is None:
            out.append(f"gpus[{pos}] ({gpu.rig_name}): free memory unknown: {gpu.notes.get('free')}")
        if gpu.sms is None:
            out.append(f"gpus[{pos}] ({gpu.rig_name}): SM count unknown: {gpu.notes.get('sms')}")
        if gpu.clock_mhz is None:
            out.append(f"gpus[{pos}] ({gpu.rig_name}): max SM clock unknown: {gpu.notes.get('clock_ghz')}")
    return out
