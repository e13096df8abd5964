"""Public CUDA load logs (tests/fixtures/cuda-logs) against moesplit's figures for a CUDA build: each
device's model buffer, KV cache and compute buffer, and the host's, with the op offload a CUDA device
does (an op whose weight is in host memory runs on the first GPU, its weight copied into that GPU's
compute buffer). Each log holds today's agreement as bounds (``bound_mib``, per term ``bounds_mib``)
and names the terms it cannot compare (``not_compared``), so a worse model fails."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from solver.engines.llamacpp import memory
from solver.engines.llamacpp.flags import moe_rules
from solver.engines.llamacpp.ggmlalloc import row_size
from solver.files.config import ModelConfig, load_model
from solver.units import per_layer
from tests.conftest import ROOT

LOGS = sorted((ROOT / "tests" / "fixtures" / "cuda-logs").glob("*.json"))
_LINE = re.compile(r"\b(CUDA\d+|CUDA_Host|CPU) (model|KV|compute) buffer size =\s+([\d.]+) MiB")

Term = tuple[str, str]


def _model(log: dict) -> ModelConfig | None:
    return load_model(ROOT / log["model"])[0] if "model" in log else None


def _geometry(log: dict, model: ModelConfig | None) -> memory.Geometry:
    if model is not None:
        return memory.geometry(model)
    b, n = log["geometry"], log["geometry"]["n_layer"]
    return memory.Geometry(
        arch=b["arch"], n_layer=n, n_embd=b["n_embd"], n_head=b["n_head"], head_kv=(b["head_kv"],) * n,
        head_k=b["head_k"], head_v=b["head_v"], n_rot=b["n_rot"], n_vocab=b["n_vocab"], n_expert=0,
        n_expert_used=0, n_ff_exp=0, n_ff_shexp=0, n_ff=(b["n_ff"],) * n, moe_layers=(False,) * n,
    )  # fmt: skip


def _typed_bytes(log: dict, g: memory.Geometry) -> Callable[[str], int]:
    """Each weight's stored bytes by name, from the types the log names: ``by_name`` (a part of the
    name and its type), else f32 for the ``f32_names``, else the default."""
    types = log.get("weight_types", {"default": "f16", "f32_names": []})
    shapes = memory.weight_shapes(g)

    def size(name: str) -> int:
        named = [t for part, t in types.get("by_name", {}).items() if part in name]
        f32 = any(s in name for s in types["f32_names"])
        kind = named[0] if named else "f32" if f32 else types["default"]
        ne = shapes[name]
        return row_size(kind, ne[0]) * math.prod(ne[1:])

    return size


def _placement(log: dict) -> memory.Placement:
    pl = log["placement"]
    split = tuple(pl["tensor_split"]) if "tensor_split" in pl else None
    overrides = tuple(map(tuple, pl["overrides"])) + tuple(moe_rules(pl.get("n_cpu_moe", 0)))
    return memory.Placement(pl["n_devices"], pl["n_gpu_layers"], split, overrides)


def _device(buffer: str) -> str:
    return "Host" if buffer == "CPU" else buffer.replace("RPC", "CUDA")


def _model_buffers(log: dict, model: ModelConfig | None, g: memory.Geometry, p: memory.Placement) -> dict:
    """MiB of weights per device: from the log's weight types when it names them, else from the model
    file (its expert tensors, each layer's other weights with the layer, the embeddings and the head)."""
    buffers = memory.weight_buffers(g, p)
    if "weight_types" in log or model is None:
        size = _typed_bytes(log, g)
        parts = [(name, size(name)) for name in buffers]
    else:
        dense = per_layer(model.dense_bytes, model.layers)
        parts = list(memory.stored_bytes(model))
        parts += [(f"blk.{il}.attn_norm.weight", int(nbytes)) for il, nbytes in enumerate(dense)]
        parts += [("token_embd.weight", model.embedding_bytes or 0)]
        parts += [("output.weight", model.last_stage_bytes)]
    out: dict[Term, float] = {}
    for name, nbytes in parts:
        key = (_device(buffers[name]), "model")
        out[key] = out.get(key, 0) + nbytes / 2**20
    return out


def figures(log: dict, offload_min_batch: int) -> dict[Term, float]:
    """moesplit's MiB for each (device, kind), the host as ``Host``; ``offload_min_batch`` as in
    compute_bytes."""
    model = _model(log)
    g, p = _geometry(log, model), _placement(log)
    f = memory.effective(memory.Flags(**log["flags"]))
    stored = dict(memory.stored_bytes(model)) if model is not None and "weight_types" not in log else {}
    typed = _typed_bytes(log, g)
    kv = memory.context_bytes(g, p, f)
    comp = memory.compute_bytes(g, p, f, offload_min_batch, lambda name: stored.get(name) or typed(name))
    out = _model_buffers(log, model, g, p)
    for i in range(p.n_devices):
        out[(f"CUDA{i}", "KV")] = kv.get(i, 0) / 2**20
        out[(f"CUDA{i}", "compute")] = comp[i] / 2**20
    out[("Host", "KV")] = kv.get(-1, 0) / 2**20
    out[("Host", "compute")] = comp[-1] / 2**20
    return out


def quoted(log: dict) -> dict[Term, float]:
    """The log's MiB for each (device, kind); the host's pinned (``CUDA_Host``) and plain (``CPU``)
    buffers of one kind are summed into ``Host``."""
    out: dict[Term, float] = {}
    for line in log["lines"]:
        m = _LINE.search(line)
        if m:
            key = ("Host" if m[1] in ("CPU", "CUDA_Host") else m[1], m[2])
            out[key] = out.get(key, 0) + float(m[3])
    return out


def _name(term: Term) -> str:
    return f"{term[0]} {term[1]}"


@pytest.mark.parametrize("path", LOGS, ids=[p.stem for p in LOGS])
def test_a_cuda_builds_figures_are_within_the_logs_bounds(path: Path) -> None:
    log = json.loads(path.read_text())
    theirs = quoted(log)
    assert theirs, f"{path.name} quotes no buffer line"
    skipped = log.get("not_compared", {})
    assert set(skipped) <= {_name(t) for t in theirs}, (path.stem, set(skipped))
    ours = figures(log, memory.CUDA_OFFLOAD_MIN_BATCH)
    for term, value in theirs.items():
        if _name(term) in skipped:
            continue
        bound = log.get("bounds_mib", {}).get(_name(term), log["bound_mib"])
        assert abs(ours[term] - value) <= bound, (path.stem, term, round(ours[term], 2), value, bound)


def test_the_offload_upload_buffer_is_what_a_cuda_build_adds():
    """Qwen3-235B with layers 14-93's FFN on the CPU: the CPU-backed count misses CUDA0's buffer by
    the copy of one offloaded expert tensor (630 MiB of Q6_K) and puts the MoE intermediates on the
    host; counting the op offload closes both."""
    log = json.loads((LOGS[0].parent / "qwen3-235b-a22b-b5271-2x3090.json").read_text())
    theirs = quoted(log)
    cpu_backed = figures(log, 0)
    cuda = figures(log, memory.CUDA_OFFLOAD_MIN_BATCH)
    assert theirs[("CUDA0", "compute")] - cpu_backed[("CUDA0", "compute")] > 500
    assert cpu_backed[("Host", "compute")] - theirs[("Host", "compute")] > 100
    assert cpu_backed[("CUDA1", "compute")] == cuda[("CUDA1", "compute")]


def test_the_older_builds_mla_cache_holds_v_apart():
    """DeepSeek-V3 on build 5331: each device's KV is moesplit's (the pinned build's: V a view of the
    compressed K row) plus a separate V of ``kv_lora_rank`` f16 values per cell in every layer."""
    log = json.loads((LOGS[0].parent / "deepseek-v3-0324-b5331-4gpu.json").read_text())
    model = _model(log)
    g, p = _geometry(log, model), _placement(log)
    devices = memory.layer_devices(g, p)[: g.n_layer]
    ours, theirs = figures(log, memory.CUDA_OFFLOAD_MIN_BATCH), quoted(log)
    for d in range(p.n_devices):
        v_mib = devices.count(d) * log["flags"]["n_ctx"] * g.kv_lora_rank * 2 / 2**20
        assert ours[(f"CUDA{d}", "KV")] + v_mib == theirs[(f"CUDA{d}", "KV")]
