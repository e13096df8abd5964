"""`solve` under each engine: its JSON fields, the shipped llama.cpp rig, and its input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.engines.llamacpp.tensors import DEFAULT_EXPERT_TENSORS as TENSORS
from solver.files.config import shown_path
from tests.helpers.clirun import invoke
from tests.helpers.rigfiles import tiny_rig

LLAMA_MIX = "rigs/llama-mix.yaml"


def _json(*args) -> tuple[int, dict]:
    res = invoke(*args)
    return res.exit_code, json.loads(res.stdout) if res.stdout.strip() else {}


def test_llama_mix_plans_and_the_oracle_agrees():
    code, d = _json(LLAMA_MIX, "--check")
    assert code == 0 and d["engine"] == "llama.cpp" and d["status"] == "optimal"
    assert d["oracle"]["agrees"]
    stages = d["stages"]
    cpu = sum(s["cpu_ms"] + s["switch_ms"] for s in stages)
    compute = sum(s["gpu_ms"] for s in stages)
    assert d["window_ms"] == pytest.approx(compute + cpu, abs=1e-9)
    assert d["tokens_per_s"] == pytest.approx(1000 / d["window_ms"])
    for s in stages:
        assert s["stage_ms"] == pytest.approx(s["gpu_ms"] + s["cpu_ms"] + s["switch_ms"])
        assert len(s["offload"]) == s["tensors"] - s["held_tensors"]
        assert all(s["start"] <= o["layer"] < s["end"] for o in s["offload"])
    assert d["bottleneck_ms"] == max(s["stage_ms"] for s in stages)
    assert d["host_bytes"] == sum(s["host_bytes"] for s in stages) <= 128 * 2**30
    assert d["default"]["name"] == "fit" and d["baseline"]["name"] == "proportional"
    assert d["default"]["feasible"] and d["default"]["speedup"] >= 1


def _llama_tiny(tmp_path, **rig):
    gpus = [{"name": "a", "free": 1500, "layer_ms": 1.0}, {"name": "b", "free": 1200, "layer_ms": 2.0}]
    extra = {"engine": "llama.cpp", "host_bandwidth": "20 KB/s", **rig}
    tensors = {"ffn_gate_exps": 60, "ffn_up_exps": 60, "ffn_down_exps": [90, 90, 90, 90, 70, 70, 70, 70]}
    return tiny_rig(
        tmp_path, gpus=gpus, rig_extra=extra, model_extra={"active_experts": 2, "expert_tensors": tensors}
    )


def test_llama_cpp_tensors_fill_largest_first(tmp_path):
    code, d = _json(_llama_tiny(tmp_path), "--check")
    assert code == 0 and d["oracle"]["agrees"]
    assert any(s["offload"] for s in d["stages"])  # the rig is tight enough to leave tensors on the CPU
    down = [90, 90, 90, 90, 70, 70, 70, 70]
    for s in d["stages"]:
        units = [(60, layer, 0, "ffn_gate_exps") for layer in range(s["start"], s["end"])]
        units += [(60, layer, 1, "ffn_up_exps") for layer in range(s["start"], s["end"])]
        units += [(down[layer], layer, 2, "ffn_down_exps") for layer in range(s["start"], s["end"])]
        units.sort(key=lambda u: (-u[0], u[1], u[2]))
        used, left = 0, []
        for size, layer, _, name in units:
            if used + size <= s["room_bytes"]:
                used += size
            else:
                left.append({"layer": layer, "tensors": [name]})
        assert s["cache_bytes"] == used
        key = lambda o: (o["layer"], o["tensors"])  # noqa: E731
        assert sorted(s["offload"], key=key) == sorted(left, key=key)
        cpu = sum(
            1000 * 2 * size / (6 * 20_000)
            for size, layer, _, name in units
            if {"layer": layer, "tensors": [name]} in left
        )
        assert s["cpu_ms"] == pytest.approx(cpu)


@pytest.mark.parametrize(
    ("where", "key"),
    [("rig", "host_bandwidth"), ("model", "active_experts")],
)
def test_llama_cpp_needs_its_keys(tmp_path, where, key):
    rig = _llama_tiny(tmp_path)
    path = rig if where == "rig" else tmp_path / "model.yaml"
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith(key))
    path.write_text(text + "\n")
    res = invoke(rig)
    assert res.exit_code == 2
    assert res.stderr.startswith(shown_path(path)) and f"{key}: missing (engine llama.cpp needs" in res.stderr


def test_expert_tensor_lists_have_one_entry_per_layer(tmp_path):
    rig = tiny_rig(tmp_path, model_extra={"expert_tensors": {"ffn_up_exps": [1, 2]}})
    res = invoke(rig)
    assert (
        res.exit_code == 2
        and "expert_tensors.ffn_up_exps: has 2 entries; expected one per layer (8)" in res.stderr
    )


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_resident_engines_report_spare_kv(tmp_path, engine):
    gpus = [{"name": "a", "free": 2500, "layer_ms": 1.0}, {"name": "b", "free": 2600, "layer_ms": 1.0}]
    rig = tiny_rig(tmp_path, gpus=gpus, rig_extra={"context": 4}, model_extra={"kv_bytes_per_token": 3})
    code, d = _json(rig, "--engine", engine, "--check")
    assert code == 0 and d["engine"] == engine and d["held_mass"] == 1.0 and d["oracle"]["agrees"]
    for s in d["stages"]:
        experts = 6 * 40 * (s["end"] - s["start"])
        assert s["cache_bytes"] == experts
        assert s["spare_kv_tokens"] == (s["room_bytes"] - experts) // (3 * (s["end"] - s["start"]))
    assert d["spare_kv_tokens"] == min(s["spare_kv_tokens"] for s in d["stages"])
    assert d["window_ms"] == pytest.approx(sum(s["compute_ms"] for s in d["stages"]))
    assert d["default"]["name"] == "even" and d["baseline"]["name"] == "proportional"


def test_resident_engine_refuses_ranges_whose_experts_do_not_fit(tmp_path):
    gpus = [{"name": "a", "free": 1300, "layer_ms": 1.0}, {"name": "b", "free": 1300, "layer_ms": 1.0}]
    rig = tiny_rig(tmp_path, gpus=gpus)
    assert invoke(rig).exit_code == 0  # strata caches what fits
    code, d = _json(rig, "--engine", "vllm")
    assert code == 3 and d["status"] == "infeasible" and d["reason"]


def test_llama_mix_export_replays_to_the_plan():
    """The printed flags, read by llama.cpp's own rules (tests/helpers/engine_mapping.py), put every
    layer on its stage's GPU and exactly the plan's offloaded expert tensors on the CPU."""
    from tests.helpers.engine_mapping import (
        llama_overrides,
        llama_slot_devices,
        llama_tensor_buft,
        llama_tensor_split,
        parse_lines,
    )

    code, d = _json(LLAMA_MIX, "--export", "llama.cpp")
    assert code == 0
    env, flags = parse_lines(d["export"]["lines"])
    assert "CUDA_VISIBLE_DEVICES" not in env  # the rig's own order
    n = d["stages"][-1]["end"]
    devices = llama_slot_devices(
        llama_tensor_split(flags["--tensor-split"]), n, int(flags["-ngl"]), len(d["stages"])
    )
    for i, s in enumerate(d["stages"]):
        assert devices[s["start"] : s["end"]] == [i] * (s["end"] - s["start"])
    assert devices[n] == len(d["stages"]) - 1  # the output layer
    rules = llama_overrides(flags["-ot"], {"CPU"})
    names = [f"blk.{layer}.{t}.weight" for layer in range(n) for t in ("attn_q", "ffn_gate_inp", *TENSORS)]
    on_cpu = {name for name in names if llama_tensor_buft(name, rules) == "CPU"}
    offload = {
        f"blk.{o['layer']}.{t}.weight" for s in d["stages"] for o in s["offload"] for t in o["tensors"]
    }
    assert offload and on_cpu == offload


def test_host_memory_bounds_the_experts_left_in_host_ram(tmp_path):
    """Strata keeps every expert no card caches in host RAM; the JSON and report say how much, and a
    host_memory below what every placement needs is infeasible with the reason."""
    gpus = [{"name": "a", "free": 1200, "layer_ms": 1.0}, {"name": "b", "free": 1300, "layer_ms": 2.0}]
    code, free = _json(tiny_rig(tmp_path, gpus=gpus))
    assert code == 0 and free["host_bytes"] == 8 * 6 * 40 - sum(s["cache_bytes"] for s in free["stages"]) > 0
    code, d = _json(tiny_rig(tmp_path, gpus=gpus, rig_extra={"host_memory": free["host_bytes"]}))
    assert code == 0 and (d["cuts"], d["host_bytes"]) == (free["cuts"], free["host_bytes"])
    code, d = _json(tiny_rig(tmp_path, gpus=gpus, rig_extra={"host_memory": free["host_bytes"] - 1}))
    assert code == 3 and d["status"] == "infeasible"
    least = free["host_bytes"]  # this rig's fastest plan already caches the most
    assert d["reason"] == (
        f"every placement leaves at least {least} B of experts in host memory, more than host_memory "
        f"({least - 1} B)"
    )
    table = CliRunner().invoke(cli, [str(tiny_rig(tmp_path, gpus=gpus)), "--workers", "1"]).stdout
    [row] = [line.split() for line in table.splitlines() if "experts in host RAM" in line]
    assert row[4:6] == [str(least), "B"]  # the plan's column (the baseline's follows)


def test_llama_export_counts_the_mtp_blocks_as_slots(tmp_path):
    """GLM-4.5-Air's GGUF holds one next-token-prediction block after its 46 layers: llama.cpp maps 47
    blocks and the output over the --tensor-split, so the export must count the extra block or one layer
    lands on the wrong card."""
    from tests.helpers.engine_mapping import llama_slot_devices, llama_tensor_split, parse_lines

    rig = tmp_path / "glm.yaml"
    text = Path("rigs/glm-air-5090-4090.yaml").read_text()
    model = (Path("models") / "glm-4.5-air-q4_k_m.yaml").resolve()
    text = text.replace('model: "../models/glm-4.5-air-q4_k_m.yaml"', f'model: "{model}"')
    rig.write_text(text.replace("miss_ms: 190", "engine: llama.cpp\nhost_bandwidth: 60 GB/s"))
    code, d = _json(str(rig), "--export", "llama.cpp")
    assert code == 0, d
    _, flags = parse_lines(d["export"]["lines"])
    n, blocks = d["stages"][-1]["end"], 46 + 1
    devices = llama_slot_devices(
        llama_tensor_split(flags["--tensor-split"]), blocks, int(flags["-ngl"]), len(d["stages"])
    )
    for i, s in enumerate(d["stages"]):
        assert devices[s["start"] : s["end"]] == [i] * (s["end"] - s["start"])
    assert n == 46 and devices[n:] == [len(d["stages"]) - 1] * 2  # the MTP block and the output


def test_engines_count_their_own_memory(tmp_path):
    """llama.cpp: a compute buffer per card (or the rig's buffer), the logits on the last card, the
    embeddings in host RAM; vLLM: what gpu_memory_utilization leaves and the activations."""
    from solver.planning.resolve import load_problem

    gpus = [{"name": "a", "free": 1500, "layer_ms": 1.0}, {"name": "b", "free": 1200, "layer_ms": 2.0}]
    extra = {"engine": "llama.cpp", "host_bandwidth": "20 KB/s"}
    model = {"active_experts": 2, "vocab_size": 10, "first_stage_bytes": 30, "embedding_bytes": 20}
    p = load_problem(tiny_rig(tmp_path, gpus=gpus, rig_extra=extra, model_extra=model, engine_buffers=True))
    assert p.reserve.tolist() == [256 * 2**20] * 2  # the rig's reserve is 0 here
    assert p.first_stage_bytes == 10 and p.last_stage_bytes == 4 * 512 * 10
    gpus[1]["buffer"] = 64
    p = load_problem(tiny_rig(tmp_path, gpus=gpus, rig_extra=extra, model_extra=model, engine_buffers=True))
    assert p.reserve.tolist() == [256 * 2**20, 64]
    vllm = {"engine": "vllm", "gpu_memory_utilization": 0.5}
    p = load_problem(tiny_rig(tmp_path, gpus=gpus, rig_extra=vllm, model_extra=model, engine_buffers=True))
    assert p.reserve[0] == int(0.5 * (1500 + 700 * 2**20)) + 2**30 and p.reserve[1] == 64
    assert p.first_stage_bytes == 30  # vLLM loads the embeddings on the first card


@pytest.mark.parametrize("rig", ["rigs/vllm-mix.yaml", LLAMA_MIX])
def test_every_stage_reports_gpu_cpu_and_switch_time(rig):
    code, d = _json(rig)
    assert code == 0 and d["tokens_per_s"] == pytest.approx(1000 / d["window_ms"])
    for s in d["stages"]:
        assert s["stage_ms"] == pytest.approx(s["gpu_ms"] + s["cpu_ms"] + s["switch_ms"])
    assert d["window_ms"] == pytest.approx(sum(s["stage_ms"] for s in d["stages"]))  # no hand-offs here
