"""A small rig, model and profile on disk, fast to plan, for tests that drive the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import yaml

DEFAULT_GPUS = [
    {"name": "small", "free": 1500, "reserve": 50, "layer_ms": 1.0},
    {"name": "big", "free": 3000, "reserve": 50, "layer_ms": 0.5},
]


def tiny_rig(
    tmp_path: Path,
    gpus: list[dict] | None = None,
    layers: int = 8,
    experts: int = 6,
    rig_extra: dict | None = None,
    model_extra: dict | None = None,
    engine_buffers: bool = False,
) -> Path:
    """Write rig.yaml, model.yaml and profile.txt (with counts) under tmp_path; return the rig's path.

    Sizes are bytes, so unless ``engine_buffers`` the GPUs keep no engine buffers (``buffer: 0``): the
    engines' defaults (hundreds of MiB) would fill them."""
    rng = np.random.default_rng(7)
    pairs = [(layer, e) for layer in range(layers) for e in range(experts)]
    order = rng.permutation(len(pairs))
    counts = np.sort(rng.integers(1, 1000, len(pairs)))[::-1]
    lines = [f"{pairs[i][0]} {pairs[i][1]} {c}" for i, c in zip(order, counts)]
    (tmp_path / "profile.txt").write_text("# layer expert count\n" + "\n".join(lines) + "\n")
    model = {
        "name": "tiny-moe",
        "layers": layers,
        "experts": experts,
        "expert_bytes": 40,
        "dense_bytes": 100,
        "stage_bytes": 200,
        "profile": "profile.txt",
        "curve": {"kind": "counts"},
        **(model_extra or {}),
    }
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(model, sort_keys=False))
    listed = gpus or DEFAULT_GPUS
    listed = listed if engine_buffers else [{**g, "buffer": g.get("buffer", 0)} for g in listed]
    rig = {"name": "tiny", "model": "model.yaml", "gpus": listed, **(rig_extra or {})}
    path = tmp_path / "rig.yaml"
    path.write_text(yaml.safe_dump(rig, sort_keys=False))
    return path


def rig_model_path(text: str) -> str:
    """The ``model:`` value of a rig file's text."""
    line = next(ln for ln in text.splitlines() if ln.startswith("model:"))
    return line.split(":", 1)[1].split("#")[0].strip().strip("\"'")


def as_llama_rig(rig: Path, folder: Path) -> Path:
    """The rig itself when it plans for llama.cpp, else a copy in ``folder`` that does: the engine named,
    its model by absolute path, and a host bandwidth (the CPU's rate moves no placement's memory)."""
    text = rig.read_text()
    if re.search(r"^engine: *\"?llama\.cpp", text, re.M):
        return rig
    model = (rig.parent / rig_model_path(text)).resolve()
    text = re.sub(r"^model:.*$", f'model: "{model}"', text, count=1, flags=re.M)
    text = re.sub(r"^engine:.*$", "", text, flags=re.M)
    out = folder / rig.name
    out.write_text(f"{text}\nengine: llama.cpp\nhost_bandwidth: 60 GB/s\n")
    return out


def on_rpc(rig: Path, folder: Path) -> Path:
    """A copy of the llama.cpp rig ``rig`` in ``folder`` on CPU-backed ``--rpc`` devices (``backend:
    rpc``: no op offload), what the engine tier runs llama.cpp on, its model by absolute path."""
    text = rig.read_text()
    model = (rig.parent / rig_model_path(text)).resolve()
    text = re.sub(r"^model:.*$", f'model: "{model}"', text, count=1, flags=re.M)
    text = re.sub(r"^backend:.*$", "", text, flags=re.M)
    out = folder / f"rpc-{rig.name}"
    out.write_text(f"{text}\nbackend: rpc\n")
    return out
