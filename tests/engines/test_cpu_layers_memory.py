"""The compute buffers with layers on the CPU (solver.engines.llamacpp.cpumemory): those of more than
FIGURE_LAYERS layers there are those of FIGURE_LAYERS, as the figures' key caps a run of alike layers,
while each GPU keeps more than ``memory.RUN_CAP`` layers; one GPU left fewer is counted with its own
figures; the first of several left fewer may count others, at most SHORT_GAP more than the ones the
plan counts (2 KiB measured, gpt-oss-120b with two GPU layers; the memory is held to 64 MiB of
llama.cpp's own estimate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from solver.engines import REGISTRY
from solver.engines.llamacpp import memory
from solver.engines.llamacpp.cpumemory import FIGURE_LAYERS, _figures, cpu_layers_of
from solver.files.config import load_model, load_rig

ROOT = Path(__file__).resolve().parents[2]
#: What a GPU left few layers may count beyond the figures of FIGURE_LAYERS on the CPU.
SHORT_GAP = 64 * 2**10
MODELS = ["qwen3-235b-a22b-q4_k_m", "qwen3-30b-a3b-q4_k_m", "gpt-oss-120b-mxfp4", "glm-4.5-air-q4_k_m"]


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("backend", ["cuda", "rpc"])
def test_more_cpu_layers_give_the_same_buffers(tmp_path, model, backend):
    path = tmp_path / "rig.yaml"
    gpu = "  - name: RTX 3060\n    free: 11.5 GiB\n    mem_bandwidth: 360 GB/s\n"
    path.write_text(
        f"model: {ROOT / 'models' / (model + '.yaml')}\nengine: llama.cpp\nhost_bandwidth: 60 GB/s\n"
        f"context: 32768\nbackend: {backend}\nidle_gpus: true\ncpu_layers: true\ngpus:\n{gpu}{gpu}"
    )
    rig, _ = load_rig(path, REGISTRY)
    m, _ = load_model(Path(rig.model))
    got = cpu_layers_of(rig, m)
    g = memory.geometry(m)
    flags = memory.run_flags(rig.context, 512, True, m.kv_type)
    stored, offload = memory.stored_bytes(m), memory.offload_batch(backend)
    for c in [*range(FIGURE_LAYERS + 1, m.layers - 1, 9), *range(m.layers - 2 * memory.RUN_CAP, m.layers)]:
        first, host = _figures(g, flags, offload, stored, c, 2)
        only, alone = _figures(g, flags, offload, stored, c, 1)
        assert got.only[c] == only, c
        if (m.layers + 1 - c) // 2 > memory.RUN_CAP:
            assert (got.first[c], got.host[c]) == (first, max(host, alone)), c
        else:
            assert first - got.first[c] <= SHORT_GAP and max(host, alone) - got.host[c] <= SHORT_GAP, c
