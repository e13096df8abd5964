"""The rig file ``solve rig new`` writes: cards by name, free VRAM and speed from the card table."""

from __future__ import annotations

import json

from solver.importers.cards import DRIVER_MIB, card
from solver.problem import REFERENCE_GHZ, REFERENCE_LAYER_MS, REFERENCE_SMS

MIB = 2**20


def rig_yaml(
    names: list[str],
    *,
    name: str | None,
    model_ref: str | None,
    context: int,
    reserve: int,
    command: str,
) -> str:
    """A rig (SPEC 2.1) of the cards ``names`` in pipeline order. Raises UnknownCard for a name not known.

    A name ``HOST:CARD`` puts the card on machine HOST (SPEC 8); a rig without any stays on one machine.
    """
    hosts = [n.split(":", 1)[0].strip() if ":" in n else None for n in names]
    cards = [card(n.split(":", 1)[1] if ":" in n else n) for n in names]
    estimate = f"{REFERENCE_LAYER_MS}*({REFERENCE_SMS}*{REFERENCE_GHZ})/max(1, sms*clock_ghz)"
    head = [
        f"# Rig written by `{command}` from moesplit's card table (no NVML).",
        f"# free: the card's VRAM less {DRIVER_MIB} MiB that the driver and CUDA context take on a headless",
        "#   card; a card that also drives a display has less: check nvidia-smi and EDIT.",
        f"# layer_ms is estimated from sms and clock_ghz (the boost clock): {estimate}.",
    ]
    if model_ref is None:
        head.append(
            "# model: EDIT: name your model file here (relative to this file), or plan with --model FILE"
        )
    body = [f"name: {json.dumps(name)}"] if name else []
    if model_ref is not None:
        body.append(f"model: {json.dumps(model_ref)}")
    if any(hosts):
        body.append("# network_handoff_ms: EDIT the ms of a hop between these machines (default handoff_ms)")
    body += [
        f"context: {context}",
        "miss_ms: 190",
        "first_stage_min_layers: 2",
        "gpus:",
    ]
    for c, host in zip(cards, hosts):
        body += [
            f"  - name: {json.dumps(c.name)}",
            *([f"    host: {json.dumps(host)}"] if host else []),
            f"    free: {c.free_mib} MiB".ljust(34) + f"# {c.vram_mib} MiB - {DRIVER_MIB} MiB",
            f"    reserve: {reserve // MIB} MiB" if reserve % MIB == 0 else f"    reserve: {reserve}",
            f"    sms: {c.sms}",
            f"    clock_ghz: {c.boost_ghz}",
        ]
    return "\n".join(head + body) + "\n"
