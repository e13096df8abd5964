"""Public CUDA load logs (tests/fixtures/cuda-logs) against moesplit's figures for a CUDA build: the KV
cache and the compute buffer of each device and of the host, with the op offload a CUDA device does
(an op whose weight is in host memory runs on the first GPU, its weight copied into that GPU's compute
buffer). Each log's ``bound_mib`` holds today's agreement; a worse model fails."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from solver.engines.llamacpp import memory
from solver.engines.llamacpp.ggmlalloc import row_size
from solver.files.config import load_model
from tests.conftest import ROOT

LOGS = sorted((ROOT / "tests" / "fixtures" / "cuda-logs").glob("*.json"))
_LINE = re.compile(r"(CUDA\d+|CUDA_Host) (KV|compute) buffer size =\s+([\d.]+) MiB")


def _geometry(log: dict) -> memory.Geometry:
    if "model" in log:
        model, _ = load_model(ROOT / log["model"])
        return memory.geometry(model)
    b, n = log["geometry"], log["geometry"]["n_layer"]
    return memory.Geometry(
        arch=b["arch"], n_layer=n, n_embd=b["n_embd"], n_head=b["n_head"], head_kv=(b["head_kv"],) * n,
        head_k=b["head_k"], head_v=b["head_v"], n_rot=b["n_rot"], n_vocab=b["n_vocab"], n_expert=0,
        n_expert_used=0, n_ff_exp=0, n_ff_shexp=0, n_ff=(b["n_ff"],) * n, moe_layers=(False,) * n,
    )  # fmt: skip


def _weight_bytes(log: dict, g: memory.Geometry):
    """Each weight's stored bytes by name, from the types the log names."""
    types = log.get("weight_types", {"default": "f16", "f32_names": []})
    shapes = memory.weight_shapes(g)

    def size(name: str) -> int:
        kind = "f32" if any(s in name for s in types["f32_names"]) else types["default"]
        ne = shapes[name]
        return row_size(kind, ne[0]) * math.prod(ne[1:])

    return size


def figures(log: dict, offload_min_batch: int) -> dict[tuple[str, str], float]:
    """moesplit's MiB for each (buffer, kind) the log quotes, ``offload_min_batch`` as in compute_bytes."""
    g = _geometry(log)
    pl = log["placement"]
    p = memory.Placement(pl["n_devices"], pl["n_gpu_layers"], overrides=tuple(map(tuple, pl["overrides"])))
    f = memory.effective(memory.Flags(**log["flags"]))
    kv = memory.context_bytes(g, p, f)
    comp = memory.compute_bytes(g, p, f, offload_min_batch, _weight_bytes(log, g))
    out = {}
    for i in range(pl["n_devices"]):
        out[(f"CUDA{i}", "KV")] = kv.get(i, 0) / 2**20
        out[(f"CUDA{i}", "compute")] = comp[i] / 2**20
    out[("CUDA_Host", "compute")] = comp[-1] / 2**20
    return out


def quoted(log: dict) -> dict[tuple[str, str], float]:
    return {(m[1], m[2]): float(m[3]) for line in log["lines"] for m in [_LINE.search(line)] if m}


@pytest.mark.parametrize("path", LOGS, ids=[p.stem for p in LOGS])
def test_a_cuda_builds_figures_are_within_the_logs_bound(path: Path) -> None:
    log = json.loads(path.read_text())
    theirs = quoted(log)
    assert theirs, f"{path.name} quotes no buffer line"
    ours = figures(log, memory.CUDA_OFFLOAD_MIN_BATCH)
    for key, value in theirs.items():
        assert abs(ours[key] - value) <= log["bound_mib"], (path.stem, key, round(ours[key], 2), value)


def test_the_offload_upload_buffer_is_what_a_cuda_build_adds():
    """Qwen3-235B with layers 14-93's FFN on the CPU: the CPU-backed count misses CUDA0's buffer by
    the copy of one offloaded expert tensor (630 MiB of Q6_K) and puts the MoE intermediates on the
    host; counting the op offload closes both."""
    log = json.loads((LOGS[0].parent / "qwen3-235b-a22b-b5271-2x3090.json").read_text())
    theirs = quoted(log)
    cpu_backed = figures(log, 0)
    cuda = figures(log, memory.CUDA_OFFLOAD_MIN_BATCH)
    assert theirs[("CUDA0", "compute")] - cpu_backed[("CUDA0", "compute")] > 500
    assert cpu_backed[("CUDA_Host", "compute")] - theirs[("CUDA_Host", "compute")] > 100
    assert cpu_backed[("CUDA1", "compute")] == cuda[("CUDA1", "compute")]
