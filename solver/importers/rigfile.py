"""The rig file ``solve rig new`` writes: cards by name, free memory and speed from the card table.

It writes only the keys the chosen engine reads, each with a one-line comment: Strata rigs give each
card's SMs and boost clock (its speed estimate) and the miss cost; llama.cpp rigs the host's bandwidth
and each card's memory bandwidth; vLLM and SGLang rigs, which keep every weight in VRAM, the cards only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from solver.engines import DEFAULT_ENGINE, REGISTRY, engine_named
from solver.files.cards import DRIVER_MIB, Card, CardError, card
from solver.importers.hostmem import HostRate
from solver.problem.problem import REFERENCE_GHZ, REFERENCE_LAYER_MS, REFERENCE_SMS
from solver.units import format_rate

MIB = 2**20
#: Column the comments start at (as ``solve probe`` writes them).
COMMENT_AT = 34


@dataclass(frozen=True)
class Placed:
    """One card of the rig, in pipeline order, and the machine it is in (None: the one machine)."""

    card: Card
    host: str | None = None


def place(names: list[str], engine: str = DEFAULT_ENGINE) -> list[Placed]:
    """The cards ``names`` mean; ``HOST:CARD`` puts the card on machine HOST. A name several cards share
    is taken where they agree on what ``engine`` reads of a card (memory, and its SMs and boost clock or
    its bandwidth). Raises CardError."""
    speed = ("sms", "boost_ghz") if "sms" in engine_named(engine).speed_keys else ("bandwidth",)
    out = []
    for raw in names:
        host, sep, name = raw.partition(":")
        if sep and not host.strip():
            raise CardError(f"{raw!r}: name the machine before the colon, e.g. 'box1:{name.strip()}'")
        if sep and not name.strip():
            raise CardError(f"{raw!r}: name the card after the colon, e.g. '{host.strip()}:RTX 3090'")
        try:
            found = card(name if sep else raw, reads=("vram_mib", *speed))
        except CardError as exc:
            raise type(exc)(f"{raw.strip()!r}: {exc}" if sep else str(exc)) from None
        out.append(Placed(found, host.strip() if sep else None))
    return out


def check_engine(cards: list[Placed], engine: str) -> None:
    """An engine that times cards by SMs and boost clock cannot plan a card without them."""
    if "sms" not in engine_named(engine).speed_keys:
        return
    for p in cards:
        if p.card.sms is None or p.card.boost_ghz is None:
            what = "SM count" if p.card.sms is None else "boost clock"
            raise CardError(
                f"{p.card.name!r} has no {what} in the card table, which engine {engine}'s speed estimate "
                f"needs: plan it with an engine timed by memory bandwidth ({_by_bandwidth()})"
            )


def _size(n: int) -> str:
    """A size as the rig writes it: whole GiB or MiB where it is one, else bytes."""
    for unit, scale in (("GiB", 2**30), ("MiB", MIB)):
        if n and n % scale == 0:
            return f"{n // scale} {unit}"
    return str(n)


def _key(key: str, value: str, comment: str, indent: int = 0) -> str:
    text = f"{' ' * indent}{key}: {value}"
    return f"{text:<{COMMENT_AT}} # {comment}"


def rig_yaml(
    cards: list[Placed],
    *,
    engine: str,
    name: str | None,
    model_ref: str | None,
    context: int,
    reserve: int,
    host_bandwidth: HostRate | None,
    host_memory: int | None,
    command: str,
    network_handoff_ms: float | None = None,
) -> str:
    """A rig of ``cards`` in pipeline order for ``engine``, with the keys that engine reads.

    A rig whose cards name no host stays on one machine; one over several machines gets
    ``network_handoff_ms`` (the cost of a hop between them), else a line saying to edit it in.
    """
    estimate = f"{REFERENCE_LAYER_MS}*({REFERENCE_SMS}*{REFERENCE_GHZ})/max(1, sms*clock_ghz)"
    head = [
        f"# Rig written by `{command}` from moesplit's card table (no NVML).",
        f"# free: the card's memory less {DRIVER_MIB} MiB that the driver and CUDA context take on a",
        "#   headless card; one that also drives a display has less: check nvidia-smi (rocm-smi), EDIT.",
        "# reserve: kept free beyond what the plan counts (weights, KV cache, the engine's compute buffer);",
        "#   llama.cpp's --fit keeps 1024 MiB free per device (common/common.h fit_params_target, -fitt).",
    ]
    rules = engine_named(engine)
    if "sms" in rules.speed_keys:
        head.append(f"# layer_ms is estimated from sms and clock_ghz (the boost clock): {estimate}.")
    else:
        head.append("# mem_bandwidth: the vendor's figure, which solver/cards.yaml cites per family.")
    if model_ref is None:
        head.append(
            "# model: EDIT: name your model file here (relative to this file), or plan with --model FILE"
        )
    body = [f"name: {json.dumps(name)}"] if name else []
    if model_ref is not None:
        body.append(f"model: {json.dumps(model_ref)}")
    if engine != DEFAULT_ENGINE:
        body.append(_key("engine", engine, rules.note))
    if network_handoff_ms is not None:
        body.append(_key("network_handoff_ms", f"{network_handoff_ms:g}", "ms of a hop between machines"))
    elif any(p.host for p in cards):
        body.append("# network_handoff_ms: EDIT the ms of a hop between these machines (default handoff_ms)")
    if host_bandwidth is not None:
        body.append(_key("host_bandwidth", format_rate(host_bandwidth.effective), host_bandwidth.comment))
    if host_memory is not None:
        body.append(_key("host_memory", _size(host_memory), "host RAM for the expert weights no GPU holds"))
    body.append(_key("context", str(context), "tokens of KV cache each full-attention layer holds"))
    if "miss_ms" in rules.rig_keys:
        body.append(_key("miss_ms", "190", "the engine's default cost of a cache miss"))
    if "first_stage_min_layers" in rules.rig_keys:
        body.append(
            _key("first_stage_min_layers", "2", "the engine keeps at least 2 layers on the first card")
        )
    body.append("gpus:")
    for p in cards:
        c = p.card
        body.append(f"  - name: {json.dumps(c.name)}")
        if p.host:
            body.append(_key("host", json.dumps(p.host), "the machine this GPU is in", 4))
        body.append(_key("free", f"{c.free_mib} MiB", f"{c.vram_mib} MiB - {DRIVER_MIB} MiB", 4))
        body.append(_key("reserve", _size(reserve), "a margin beyond what the engine counts", 4))
        if "sms" in rules.speed_keys:
            body.append(_key("sms", str(c.sms), "NVIDIA's published SM count", 4))
            body.append(_key("clock_ghz", str(c.boost_ghz), "NVIDIA's published boost clock", 4))
        else:
            body.append(
                _key("mem_bandwidth", format_rate(c.bandwidth), "the vendor's peak memory bandwidth", 4)
            )
    return "\n".join(head + body) + "\n"


def _by_bandwidth() -> str:
    return ", ".join(name for name, e in REGISTRY.items() if "mem_bandwidth" in e.speed_keys)
