"""llama.cpp's host compute buffer under ``host_memory``: a plan that leaves experts on the host must
leave room there for the buffer the CPU backend allocates to run them, as ``score`` counts it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from solver.engines.llamacpp import memory
from solver.files.config import load_model
from tests.helpers.clirun import invoke
from tests.helpers.rigfiles import as_llama_rig, on_rpc

MODEL = Path("models/qwen3-30b-a3b-q4_k_m.yaml")


def _plan(rig: Path, text: str) -> dict:
    rig.write_text(text)
    res = invoke(rig, "--check")
    assert res.exit_code in (0, 3), res.stdout
    return json.loads(res.stdout)


def test_a_plan_leaves_room_on_the_host_for_its_compute_buffer(tmp_path):
    """Two 3060s with 7000 MiB free each hold Qwen3-30B-A3B only with experts on the host. A
    host_memory that holds the free plan's experts but not the CPU compute buffer beside them changes
    the plan (or leaves none); 1 byte more than both gives the free plan back; the oracle agrees. On
    CPU-backed devices: the host runs the experts left there."""
    rig = on_rpc(as_llama_rig(Path("rigs/qwen3-30b-3060x2.yaml"), tmp_path), tmp_path)
    text = rig.read_text().replace("free: 11588 MiB", "free: 7000 MiB")
    free = _plan(rig, text)
    host = free["host_bytes"]
    assert free["status"] == "optimal" and host > 0
    model, _ = load_model(MODEL)
    flags = memory.run_flags(32768, memory.N_UBATCH, True, model.kv_type)
    buffer = memory.host_compute(memory.geometry(model), flags, 2)
    assert 64 * 2**20 < buffer < 512 * 2**20  # a layer's MoE intermediates at -ub 512: ~100 MiB

    tight = _plan(rig, f"{text}host_memory: {host + buffer - 1}\n")
    assert tight["oracle"]["agrees"]
    assert tight["cuts"] != free["cuts"] or tight["status"] == "infeasible"
    if tight["status"] == "infeasible":
        assert "host compute buffer" in tight["reason"]
    else:
        assert tight["host_bytes"] + buffer <= host + buffer - 1

    enough = _plan(rig, f"{text}host_memory: {host + buffer}\n")
    assert (enough["status"], enough["cuts"], enough["host_bytes"]) == ("optimal", free["cuts"], host)
    assert enough["oracle"]["agrees"]


def test_the_plan_counts_the_allowance_without_a_geometry(tmp_path):
    """A model file without a geometry block counts HOST_COMPUTE_BUFFER per 512 tokens of micro-batch:
    the llama-mix rig (Qwen3-235B, no geometry) with host_memory just above its plan's experts plans
    differently than without the allowance."""
    rig = Path("rigs/llama-mix.yaml")
    text = rig.read_text()
    free = json.loads(invoke(rig).stdout)
    host = free["host_bytes"]
    out = tmp_path / "mix.yaml"
    model = (rig.parent / "../models/qwen3-235b-a22b.yaml").resolve()
    text = text.replace("model: ../models/qwen3-235b-a22b.yaml", f"model: {model}")
    text = text.replace("host_memory: 128 GiB", f"host_memory: {host + 2**20}")
    tight = _plan(out, text)
    assert tight["oracle"]["agrees"] and tight["status"] in ("optimal", "infeasible")
    assert tight.get("host_bytes") != host


@pytest.mark.parametrize("path", ["models/qwen3-30b-a3b-q4_k_m.yaml", "models/glm-4.5-air-q4_k_m.yaml"])
def test_every_expert_on_the_host_bounds_the_host_buffer_of_some(path):
    """The plan counts the host buffer with every expert there; any subset of layers' experts there
    (as a plan's ``-ot`` puts them) takes no more, at either flash-attention setting and micro-batch."""
    model, _ = load_model(Path(path))
    g = memory.geometry(model)
    rnd = random.Random(7)
    for ub, fa in ((512, True), (2048, False)):
        flags = memory.run_flags(32768, ub, fa, model.kv_type)
        bound = memory.host_compute(g, flags, 2)
        for n_gpus in (2, 3):
            layers = sorted(rnd.sample(range(g.n_layer), rnd.randint(1, g.n_layer)))
            rule = r"^blk\.(" + "|".join(map(str, layers)) + r")\.ffn_(down|gate|up)_exps\.weight$"
            some = memory.compute_bytes(g, memory.Placement(n_gpus, overrides=((rule, "CPU"),)), flags)[-1]
            assert some <= bound, (ub, fa, n_gpus, layers)
