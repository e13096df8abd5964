"""Plans and ``score`` on a GPU backend count llama.cpp's op offload: an op whose expert weight is in
host memory runs on the first GPU of the main machine from a batch of 32 tokens, the weight copied into
that GPU's compute buffer. A rig's ``backend: rpc`` (CPU-backed ``--rpc`` devices) never offloads."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from solver.cli import cli
from solver.engines.llamacpp import memory
from solver.engines.llamacpp.fields import LlamaFields
from solver.files.config import load_model
from solver.planning.resolve import load_problem
from tests.conftest import ROOT

MiB = 2**20
QWEN30B = ROOT / "models" / "qwen3-30b-a3b-q4_k_m.yaml"
LOG_235B = ROOT / "tests" / "fixtures" / "cuda-logs" / "qwen3-235b-a22b-b5271-2x3090.json"


def _rig(folder: Path, backend: str, free_mib: int, model: Path = QWEN30B, **extra: object) -> Path:
    """Two RTX 3060 12GB (``free_mib`` free each) planning ``model`` at 8K on ``backend``."""
    card = {"name": "RTX 3060 12GB", "free": f"{free_mib} MiB", "reserve": "0 MiB"}
    rig = {
        "name": f"duo-{backend}",
        "model": str(model),
        "engine": "llama.cpp",
        "backend": backend,
        "host_bandwidth": "60 GB/s",
        "context": 8192,
        **extra,
        "gpus": [card, dict(card)],
    }
    path = folder / f"{backend}.yaml"
    path.write_text(yaml.safe_dump(rig, sort_keys=False))
    return path


def _plan(rig: Path, *args: str) -> dict:
    done = CliRunner().invoke(cli, [str(rig), "--json", "--export", "llama.cpp", *args])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def _score(rig: Path, lines: list[str]) -> dict:
    done = CliRunner().invoke(cli, ["score", str(rig), "--json", "--", *lines])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)["score"]


def test_a_plan_that_fits_only_without_the_copy_is_changed(tmp_path: Path) -> None:
    """The CPU-backed plan leaves experts on the host and fills GPU 0 to within less than the copy: on
    CUDA its command does not fit GPU 0 (and only GPU 0). The CUDA plan leaves more on the host, and
    its own command fits every card; the oracle (exhaustive) agrees with the product's solver."""
    rpc, cuda = _rig(tmp_path, "rpc", 8000), _rig(tmp_path, "cuda", 8000)
    cpu_backed = _plan(rpc)
    assert cpu_backed["host_bytes"] > 0
    scored = _score(cuda, cpu_backed["export"]["lines"])
    short = {c["gpu"]: c["shortfall_bytes"] for c in scored["cards"] if c["gpu"] is not None}
    assert not scored["fits"] and short[0] > 0 and short[1] == 0, short
    planned = _plan(cuda, "--check")
    assert planned["oracle"]["agrees"] and planned["oracle"]["name"] == "exhaustive"
    assert planned["host_bytes"] > cpu_backed["host_bytes"]
    assert _score(cuda, planned["export"]["lines"])["fits"]
    assert _score(rpc, cpu_backed["export"]["lines"])["fits"]


def test_the_first_stage_counts_the_offload_bound_and_rpc_does_not(tmp_path: Path) -> None:
    rpc = load_problem(_rig(tmp_path, "rpc", 8000))
    cuda = load_problem(_rig(tmp_path, "cuda", 8000))
    pm = LlamaFields.of(cuda).llama_memory
    roles = memory.role_compute(pm.geometry, pm.flags)
    bound = memory.offload_compute(pm.geometry, pm.flags, 32, pm.stored, "first")
    assert bound > roles.first
    assert cuda.first_stage_bytes - rpc.first_stage_bytes == bound - roles.first
    assert list(cuda.buffers) == list(rpc.buffers) and cuda.last_stage_bytes == rpc.last_stage_bytes
    assert LlamaFields.of(rpc).llama_memory.offload_min_batch == 0


def test_no_copy_below_the_offload_batch_or_without_host_room(tmp_path: Path) -> None:
    """A micro-batch under 32 tokens never offloads; a host_memory no expert tensor fits in leaves none."""
    rpc = load_problem(_rig(tmp_path, "rpc", 8000, n_ubatch=16))
    cuda = load_problem(_rig(tmp_path, "cuda", 8000, n_ubatch=16))
    assert cuda.first_stage_bytes == rpc.first_stage_bytes
    tight = load_problem(_rig(tmp_path, "cuda", 8000, host_memory="150 MiB"))
    loose = load_problem(_rig(tmp_path, "rpc", 8000, host_memory="150 MiB"))
    assert tight.first_stage_bytes == loose.first_stage_bytes


def test_the_main_machines_gpus_count_it_over_several_hosts(tmp_path: Path) -> None:
    """Over two hosts the first GPU of the main machine (the rig's first GPU's host) offloads, whatever
    stage it runs: every GPU there counts the middle role's bound; a remote GPU does not."""
    rig = yaml.safe_load(_rig(tmp_path, "cuda", 8000).read_text())
    rig["gpus"] = [{**g, "host": h} for g, h in zip(rig["gpus"] * 2, "aabb", strict=True)]
    rig["order"] = "auto"
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(rig, sort_keys=False))
    p = load_problem(path)
    pm = LlamaFields.of(p).llama_memory
    roles = memory.role_compute(pm.geometry, pm.flags)
    middle = max(roles.middle, memory.offload_compute(pm.geometry, pm.flags, 32, pm.stored, "middle"))
    assert list(p.buffers) == [middle, middle, roles.middle, roles.middle]
    assert middle > roles.middle


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-q4_k_m", "gpt-oss-120b-mxfp4", "qwen3-next-80b-a3b-q4_k_m"])
def test_the_bound_holds_for_mixed_placements(name: str) -> None:
    """Random ``-ot`` placements of single expert tensors over random splits: the offloading device's
    compute buffer never exceeds the plan's bound of its role."""
    model, _ = load_model(ROOT / "models" / f"{name}.yaml")
    g = memory.geometry(model)
    f = memory.run_flags(8192, 512, True, model.kv_type)
    stored = memory.stored_bytes(model)
    kinds = memory.expert_kinds(stored)
    rng = random.Random(name)
    bound = {r: memory.offload_compute(g, f, 32, stored, r) for r in ("first", "middle", "last")}
    for _ in range(8):
        chosen = [f"{il}\\.{k}" for il in range(g.n_layer) for k in kinds if rng.random() < 0.3]
        k = rng.choice([2, 3, 4])
        split = tuple(float(rng.randint(1, 5)) for _ in range(k))
        p = memory.Placement(k, tensor_split=split, overrides=((f"^blk\\.({'|'.join(chosen)})\\.", "CPU"),))
        device = rng.randrange(k)
        role = "first" if device == 0 else "last" if device == k - 1 else "middle"
        got = memory.compute_bytes(g, p, f, 32, dict(stored).get, device)[device]
        assert got <= bound[role], (name, k, split, device, got / MiB, bound[role] / MiB)


_NOTE = re.compile(r"compute buffers for this command .*?: (.*); host ([\d.]+) MiB")


def _note_mib(scored: dict) -> tuple[list[float], float]:
    note = next(m for n in scored["notes"] for m in [_NOTE.search(n)] if m)
    return [float(x) for x in re.findall(r"([\d.]+) MiB", note[1])], float(note[2])


def test_score_of_the_qwen3_235b_logs_command_matches_its_cuda_buffers(tmp_path: Path) -> None:
    """The public CUDA log's own command (tests/fixtures/cuda-logs), scored on a rig of its two cards:
    each card's compute buffer and the host's within the log's bound; on rpc CUDA0 lacks the copy."""
    log = json.loads(LOG_235B.read_text())
    theirs = {
        (m[1], m[2]): float(m[3])
        for line in log["lines"]
        for m in [re.search(r"(CUDA\d+|CUDA_Host) (KV|compute) buffer size =\s+([\d.]+) MiB", line)]
        if m
    }
    command = ["llama-server", "-m", "model.gguf", "-c", "16384", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]
    command += ["-ngl", "99"]
    for pattern, device in log["placement"]["overrides"]:
        command += ["-ot", f"{pattern}={device.replace('RPC', 'CUDA')}"]
    model = ROOT / "models" / "qwen3-235b-a22b-q4_k_m.yaml"
    for backend in ("cuda", "rpc"):
        rig = _rig(tmp_path, backend, 23871, model, kv_type="q8_0")
        text = rig.read_text().replace("RTX 3060 12GB", "RTX 3090").replace("8192", "16384")
        rig.write_text(text)
        gpus, host = _note_mib(_score(rig, command))
        if backend == "cuda":
            assert abs(gpus[0] - theirs[("CUDA0", "compute")]) <= log["bound_mib"], gpus
            assert abs(gpus[1] - theirs[("CUDA1", "compute")]) <= log["bound_mib"], gpus
            assert abs(host - theirs[("CUDA_Host", "compute")]) <= log["bound_mib"], host
        else:
            assert theirs[("CUDA0", "compute")] - gpus[0] > 500


def test_a_plan_with_every_expert_on_gpus_counts_that_host_buffer(tmp_path: Path) -> None:
    """With every expert on a GPU and no ``-ot``, the host's compute buffer holds pipeline-parallel
    copies of its split inputs: on CUDA more than with experts there (whose products the first GPU
    then runs). The plan's host_reserve is the larger, and is what score counts for the plan's command."""
    rig = _rig(tmp_path, "cuda", 16000, host_memory="64 GiB")
    p = load_problem(rig)
    pm = LlamaFields.of(p).llama_memory
    on_gpus = memory.compute_bytes(pm.geometry, memory.Placement(2), pm.flags)[-1]
    on_host = memory.compute_bytes(
        pm.geometry, memory.Placement(2, overrides=(("_exps", "CPU"),)), pm.flags, 32, dict(pm.stored).get
    )[-1]
    assert on_gpus > on_host and p.host_reserve == on_gpus
    planned = _plan(rig)
    assert planned["host_bytes"] == 0
    _, host = _note_mib(_score(rig, planned["export"]["lines"]))
    assert abs(host - on_gpus / MiB) < 0.01
