"""A small rig, model and profile on disk, fast to plan, for tests that drive the CLI."""

from __future__ import annotations

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
