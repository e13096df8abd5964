"""Valid tiny rig, model and profile files for the reader tests, and helpers to mutate them."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import yaml

MODEL = {
    "name": "tiny-moe",
    "layers": 6,
    "experts": 4,
    "expert_bytes": "1 MiB",
    "dense_bytes": "10 MiB",
    "kinds": ["linear", "full"],
    "state_bytes": {"linear": "1 KiB", "full": 0},
    "kv_bytes_per_token": {"linear": 0, "full": 64},
    "stage_bytes": "5 MiB",
    "first_stage_bytes": "2 MiB",
    "last_stage_bytes": "3 MiB",
    "profile": "tiny.txt",
    "curve": {"kind": "cover", "b": 3},
}


RIG = {
    "name": "tiny-box",
    "model": "model.yaml",
    "context": 1024,
    "miss_ms": 190,
    "handoff_ms": 0.1,
    "first_stage_min_layers": 2,
    "order": "as-given",
    "objective": "time",
    "gpus": [
        {
            "name": "A",
            "free": "60 MiB",
            "reserve": "1 MiB",
            "layer_ms": 0.9,
            "min_layers": 1,
            "max_layers": 4,
        },
        {"name": "B", "free": "50 MiB", "reserve": "1 MiB", "sms": 36, "clock_ghz": 2.5},
        {"name": "C", "free": "70 MiB", "layer_ms": 0.5},
    ],
}


PAIRS = [(layer, e) for layer in range(6) for e in range(4)]


def profile_text(pairs: list[tuple[int, int]], counts: list[int] | None = None) -> str:
    rows = [f"{a} {b}" + (f" {counts[i]}" if counts else "") for i, (a, b) in enumerate(pairs)]
    return "# layer expert [count]\n" + "\n".join(rows) + "\n"


def write_base(d: Path) -> Path:
    """Write a valid tiny rig, model and profile into ``d`` (mutated copies go next to them)."""
    order = PAIRS[:]
    random.Random(0).shuffle(order)
    (d / "tiny.txt").write_text(profile_text(order, [100 - i for i in range(len(order))]))
    (d / "model.yaml").write_text(yaml.safe_dump(MODEL, sort_keys=False))
    (d / "rig.yaml").write_text(yaml.safe_dump(RIG, sort_keys=False))
    return d


def dump(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def paths(data: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a nest of dicts and lists."""
    out = []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    for k, v in items:
        out.append((*prefix, k))
        out += paths(v, (*prefix, k))
    return out


def at(data: object, path: tuple) -> object:
    for p in path:
        data = data[p]
    return data


def key_name(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def files(base: Path, *extra: Path) -> list[Path]:
    return [base / "rig.yaml", base / "model.yaml", base / "tiny.txt", *extra]


def strp(
    n_layers: int, n_expert: int, pairs: list[tuple[int, int]], slots: int | None = None, version: int = 1
) -> bytes:
    head = struct.pack(
        "<4s5I", b"STRP", version, n_layers, n_expert, len(pairs) if slots is None else slots, len(pairs)
    )
    return head + b"".join(struct.pack("<2H", a, b) for a, b in pairs)
