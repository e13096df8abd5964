"""solver.engines.llamacpp.memory against the pinned llama.cpp, live: random commands over every model
header the harness writes (every architecture the memory model rebuilds), ``-ub`` 256-4096, ``-fa`` on
and off, contexts from 4K to 128K within each model's trained context, quantised KV caches, 2-3 devices
with random ``-ts``, some with expert tensors on the CPU: each device's and the host's context and
compute within max(2 %, 64 MiB) of ``llama-fit-params --fit-print on`` (tests/fixtures/llama-memory.json
replays a larger recorded sample without the binary)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from solver.engines.llamacpp import memory
from solver.files.config import ModelConfig
from solver.importers.ggufgeometry import gguf_geometry
from solver.importers.ggufmeta import Meta
from tests.engine import harness
from tests.engines.test_llama_memory import agrees, parse

MiB = 2**20
#: Commands drawn per model header.
PER_MODEL = 3
KV_TYPES = ("f16", "q8_0", "q4_0")


def _geometry(spec: harness.ModelSpec) -> memory.Geometry:
    meta = Meta({"general.architecture": spec.arch, **spec.kv}, spec.name)
    layers = meta.block_count - meta.nextn
    names = {t.name for t in spec.tensors}
    block = gguf_geometry(meta, layers, names)
    assert block is not None
    experts = [meta.expert_count if f"blk.{il}.ffn_gate_inp.weight" in names else 0 for il in range(layers)]
    model = ModelConfig.model_validate(
        {"layers": layers, "experts": experts, "expert_bytes": 1, "active_experts": meta.active_experts,
         "vocab_size": spec.kv[f"{spec.arch}.vocab_size"], "nextn_layers": meta.nextn, "geometry": block}
    )  # fmt: skip
    g = memory.geometry(model)
    assert g is not None
    return g


def _command(rng: random.Random, spec: harness.ModelSpec, g: memory.Geometry) -> tuple[int, list[str]]:
    n_dev = rng.choice((2, 3))
    args = ["-ngl", "999", "-ts", ",".join(str(rng.randint(1, 6)) for _ in range(n_dev))]
    if rng.random() < 0.4:
        moe = [il for il in range(g.n_layer) if g.moe_layers[il]]
        a = rng.choice(moe)
        layers = "|".join(str(il) for il in range(a, min(g.n_layer, a + rng.randint(1, 8))))
        args += ["-ot", rf"blk\.({layers})\.ffn_(up|gate|down)_exps\.weight=CPU"]
    ub = rng.choice((256, 512, 1024, 2048, 4096))
    fa = rng.random() < 0.6
    ctx = rng.randint(4096, min(131_072, spec.n_ctx_train))
    ctk = rng.choice(KV_TYPES)
    ctv = rng.choice(KV_TYPES) if fa else "f16"
    if g.kv_lora_rank:
        ctv = ctk
    args += ["-c", str(ctx), "-ub", str(ub), "-fa", "on" if fa else "off", "-ctk", ctk, "-ctv", ctv]
    if ub > 2048:
        args += ["-b", str(ub)]
    return n_dev, args


@pytest.mark.parametrize(
    "key",
    [k if k == "qwen3-30b-a3b" else pytest.param(k, marks=pytest.mark.slow) for k in sorted(harness.MODELS)],
)  # the quick tier runs one model live
def test_random_commands_agree_with_fit_print(key: str, llama_bin: Path, gguf_dir: Path) -> None:
    path, spec = harness.ensure_gguf(key, gguf_dir)
    g = _geometry(spec)
    rng = random.Random(f"memory-{key}")
    with harness.rpc_servers(3, llama_bin) as rpc:
        endpoints = rpc.split(",")
        for _ in range(PER_MODEL):
            n_dev, args = _command(rng, spec, g)
            placement, flags = parse(args, n_dev)
            if memory.refusal(g, flags):  # llama.cpp refuses it too
                with pytest.raises(RuntimeError, match="failed to create llama_context"):
                    harness.fit_print(path, ",".join(endpoints[:n_dev]), args, llama_bin)
                continue
            fp = harness.fit_print(path, ",".join(endpoints[:n_dev]), args, llama_bin)
            est = memory.estimate(g, placement, flags)
            for d, u in enumerate(est.devices):
                theirs = fp.devices[f"RPC{d}"]
                assert agrees(u.context // MiB, theirs.context), (args, d)
                assert agrees(u.compute // MiB, theirs.compute), (args, d, u.compute // MiB, theirs)
            assert agrees(est.host.compute // MiB, fp.host.compute), (args, est.host, fp.host)
