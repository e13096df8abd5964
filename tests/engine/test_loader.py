"""Every shipped rig's llama.cpp export, loaded by llama.cpp itself: its own loader log (``-v``) puts each
layer on the device of the plan's stage and each expert tensor where the plan says.

The devices are local rpc-servers (RPC0, RPC1, ... in the order the export lists its devices); the model
is a sparse GGUF of the rig's model's real shapes. ``llama-fit-params --fit-print on`` loads the tensor
infos without allocating anything, so the placement it logs is the one ``llama-server`` would make.

The sparse GGUF's weight types are not the shipped model files' (its estimate of a plan's weights would
not be the plan's), so each rig is also planned with the model file ``solve model from-gguf`` makes of
that very GGUF: llama.cpp's estimate of that plan's command (model + context + compute per device) must
fit each card's free memory, and agree with the plan's own count of the card.
"""

from __future__ import annotations

import json
import random
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from solver.cli import cli
from solver.engines import engine_of
from solver.engines.llamacpp.args import parse_llama_args
from solver.engines.llamacpp.commandmemory import with_command_memory
from solver.engines.llamacpp.devices import devices_of, layer_devices
from solver.engines.llamacpp.fields import LlamaFields
from solver.engines.llamacpp.memory import PlanMemory
from solver.engines.llamacpp.score import score
from solver.planning.resolve import load_problem
from tests.conftest import SHIPPED_RIGS
from tests.engine import harness
from tests.helpers.rigfiles import as_llama_rig, on_rpc, rig_model_path

#: The sparse model that has each shipped model file's layers, experts and tensor names.
MODEL_OF = {
    "qwen3-next-80b-a3b.yaml": "qwen3-next-80b-a3b",
    "qwen3-next-80b-a3b-q4_k_m.yaml": "qwen3-next-80b-a3b",
    "qwen3-235b-a22b.yaml": "qwen3-235b-a22b",
    "qwen3-235b-a22b-q4_k_m.yaml": "qwen3-235b-a22b",
    "qwen3-30b-a3b-q4_k_m.yaml": "qwen3-30b-a3b",
    "qwen3-30b-a3b-fp8.yaml": "qwen3-30b-a3b",
    "deepseek-v3.yaml": "deepseek-v3",
    "deepseek-v3-q4_k_m.yaml": "deepseek-v3",
    "gpt-oss-120b-mxfp4.yaml": "gpt-oss-120b",
    "glm-4.5-air-q4_k_m.yaml": "glm-4.5-air",
    "mixtral-8x22b-q4_k_m.yaml": "mixtral-8x22b",
}
RIGS = sorted(SHIPPED_RIGS.glob("*.yaml"))
ROOT_MODELS = SHIPPED_RIGS.parent / "models"
#: Shipped rigs that have no llama.cpp plan, and what the refusal says: six small cards cannot hold a
#: layer of a model made for Strata's session buffers; sixteen GPUs exceed what -ts takes.
NO_PLAN = {"six-auto": "cannot hold its minimum", "sixteen": "at most 15 GPUs"}


def _solve(*args: str, status: int = 0) -> str:
    result = CliRunner().invoke(cli, [*args, "--workers", "1"])
    assert result.exit_code == status, result.output
    return result.output


def _model_file(rig: Path) -> str:
    return Path(rig_model_path(rig.read_text())).name


def _server_words(export: str) -> list[str]:
    """The llama-server command of an export: its words after the program name."""
    line = next(ln for ln in export.splitlines() if "llama-server " in ln and not ln.startswith("#"))
    words = shlex.split(line)
    return words[words.index("llama-server") + 1 :]


def _devices(words: list[str], n_gpus: int) -> list[str]:
    """The export's devices in llama.cpp's order: ``--device`` when given, else CUDA0.."""
    if "--device" in words:
        return words[words.index("--device") + 1].split(",")
    return [f"CUDA{i}" for i in range(n_gpus)]


def _for_rpc(words: list[str], devices: list[str], rpc: str) -> list[str]:
    """The export's arguments on the test's devices: the i-th device is RPCi, the model the sparse file
    (given separately), buffer names in ``-ot`` the RPC buffer types."""
    ports = rpc.split(",")
    rename = {d: f"RPC{i}[{ports[i]}]" for i, d in enumerate(devices)}
    out: list[str] = []
    skip = {"-m", "--rpc", "--device"}
    it = iter(words)
    for w in it:
        if w in skip:
            next(it)
            continue
        if out and out[-1] in ("-ot", "--override-tensor"):
            w = ",".join(
                f"{pat}={rename.get(buft, buft)}" for pat, buft in (r.rsplit("=", 1) for r in w.split(","))
            )
        out.append(w)
    return [*out, "--device", ",".join(f"RPC{i}" for i in range(len(devices)))]


def twin_model(key: str, gguf_dir: Path) -> Path:
    """The model file ``solve model from-gguf`` writes of the sparse GGUF ``key`` (made once a session)."""
    gguf, _ = harness.ensure_gguf(key, gguf_dir)
    out = gguf_dir / f"{key}.yaml"
    if not out.exists():
        made = CliRunner().invoke(cli, ["model", "from-gguf", str(gguf), "-o", str(out)])
        assert made.exit_code == 0, made.output
    return out


def with_twin(rig: Path, folder: Path, gguf_dir: Path) -> Path:
    """A copy of the (llama.cpp) rig ``rig`` in ``folder`` whose model is its sparse GGUF's twin."""
    model = twin_model(MODEL_OF[_model_file(rig)], gguf_dir)
    text = re.sub(r"^model:.*$", f'model: "{model}"', rig.read_text(), count=1, flags=re.M)
    out = folder / f"twin-{rig.name}"
    out.write_text(text)
    return out


@pytest.mark.parametrize("rig", RIGS, ids=[r.stem for r in RIGS])
def test_export_loads_where_the_plan_says(rig: Path, llama_bin: Path, gguf_dir: Path, tmp_path: Path) -> None:
    planned = on_rpc(as_llama_rig(rig, tmp_path), tmp_path)
    if rig.stem in NO_PLAN:
        assert NO_PLAN[rig.stem] in json.loads(_solve(str(planned), "--json", status=3))["reason"]
        return
    plan = json.loads(_solve(str(planned), "--json"))
    export = _solve(str(planned), "--export", "llama.cpp")
    check_loads(rig, plan, llama_bin, gguf_dir, export, planned)


#: Shipped rigs whose plan with the sparse twin's weights is refused, and what the refusal says (six-auto
#: plans with the twin: its hand-written model's layers are larger than the GGUF's).
NO_TWIN_PLAN = {"sixteen": NO_PLAN["sixteen"]}
#: Shipped rigs whose twin plan the quick tier loads (one GPU pair, two hosts); the full suite loads all.
QUICK_TWINS = {"qwen3-30b-3060x2", "two-hosts"}


@pytest.mark.parametrize(
    "rig",
    [r if r.stem in QUICK_TWINS else pytest.param(r, marks=pytest.mark.slow) for r in RIGS],
    ids=[r.stem for r in RIGS],
)
def test_the_twin_plan_fits_each_card_as_llama_cpp_counts_it(
    rig: Path, llama_bin: Path, gguf_dir: Path, tmp_path: Path
) -> None:
    """The shipped rig planned with its sparse GGUF's own model file: its export loads where the plan
    says, and llama.cpp's estimate of each card fits the card's free memory."""
    planned = with_twin(on_rpc(as_llama_rig(rig, tmp_path), tmp_path), tmp_path, gguf_dir)
    if rig.stem in NO_TWIN_PLAN:
        assert NO_TWIN_PLAN[rig.stem] in json.loads(_solve(str(planned), "--json", status=3))["reason"]
        return
    plan = json.loads(_solve(str(planned), "--json"))
    export = _solve(str(planned), "--export", "llama.cpp")
    check_loads(rig, plan, llama_bin, gguf_dir, export, planned, twin=True)


def check_loads(
    rig: Path,
    plan: dict,
    llama_bin: Path,
    gguf_dir: Path,
    export: str | None = None,
    planned: Path | None = None,
    twin: bool = False,
) -> None:
    """Load the plan's export (``export``, else the rig's own) in llama.cpp and compare its loader log
    with the plan: every layer on its stage's device, the output on the last, exactly the plan's
    offloaded expert tensors on the CPU; and, for a model with a geometry, each GPU's compute buffer as
    the plan counts it for the command with fit-print's. With ``twin`` (the plan's model file is the
    sparse GGUF's own), fit-print's total of each card under the card's free memory (``check_fits``)."""
    export = export or _solve(str(rig), "--export", "llama.cpp")
    words = _server_words(export)
    devices = _devices(words, len(plan["stages"]))
    model, _ = harness.ensure_gguf(MODEL_OF[_model_file(rig)], gguf_dir)
    with harness.rpc_servers(len(devices), llama_bin) as rpc:
        args = ["-m", str(model), "--rpc", rpc, "--fit-print", "on", "-v", *_for_rpc(words, devices, rpc)]
        done = subprocess.run([str(llama_bin / "llama-fit-params"), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    log = harness.parse_loader_log(done.stderr)
    position = {s["gpu"]: i for i, s in enumerate(plan["stages"])}
    for stage in plan["stages"]:
        want = f"RPC{position[stage['gpu']]}"
        on_cpu = stage["start"] + stage.get("cpu_layers", 0)  # the first stage's layers left on the CPU
        for layer in range(stage["start"], stage["end"]):
            assert log.layer_device[layer] == ("CPU" if layer < on_cpu else want), (rig.stem, layer)
    n_layers = plan["stages"][-1]["end"]
    assert log.layer_device[max(log.layer_device)] == f"RPC{position[plan['stages'][-1]['gpu']]}"
    offloaded = {
        f"blk.{o['layer']}.{t}" for s in plan["stages"] for o in s.get("offload", []) for t in o["tensors"]
    }
    on_cpu = {
        name.removesuffix(".weight")
        for name, buft in log.tensor_buffer.items()
        if buft.startswith("CPU") and re.match(r"blk\.\d+\.ffn_\w+_exps\.(weight|bias)$", name)
    }
    assert on_cpu == offloaded
    assert max(log.layer_device) >= n_layers
    stages = {s["gpu"]: (s["start"], s["end"]) for s in plan["stages"]}
    line = next(ln for ln in export.splitlines() if "llama-server " in ln and not ln.startswith("#"))
    fit = harness.parse_fit_print(done.stdout)[0]
    check_memory(planned or rig, shlex.split(line), position, stages, fit)
    if twin:
        check_fits(planned or rig, shlex.split(line), position, fit)


def check_fits(rig: Path, command: list[str], position: dict[int, int], measured: dict) -> None:
    """llama.cpp's estimate of each card under the command (model + context + compute) within the
    card's free memory, and within max(2 %, 64 MiB) of the plan's own count of the card for the command
    (what ``solve score`` counts: the card's weights and KV cache, and its compute buffer)."""
    p = load_problem(rig)
    scored = score(p, parse_llama_args(command), engine_of(p))
    rig_reserve = p.reserve - p.buffers if len(p.buffers) else p.reserve
    need = {c.gpu: c.need_bytes for c in scored.cards if c.gpu is not None}
    for g, i in position.items():
        theirs = measured[f"RPC{i}"]
        assert theirs.total * 2**20 <= int(p.free[g]), (rig.stem, g, theirs, int(p.free[g]) // 2**20)
        ours = (need[g] + int(scored.problem.reserve[g]) - int(rig_reserve[g])) // 2**20
        assert agrees(ours, theirs.total), (rig.stem, g, ours, theirs)


def agrees(ours: int, theirs: int) -> bool:
    """Within max(2 %, 64 MiB) (both in MiB)."""
    return abs(ours - theirs) <= max(0.02 * theirs, 64)


def check_memory(
    rig: Path,
    command: list[str],
    position: dict[int, int],
    stages: dict[int, tuple[int, int]],
    measured: dict,
) -> None:
    """The plan's own count of each GPU's compute buffer for the export (what ``solve score`` counts)
    and of its KV cache against fit-print's (the sparse twins' weights are not the model file's, so
    the weights are not compared)."""
    p = load_problem(rig)
    pm = LlamaFields.of(p).llama_memory
    if not isinstance(pm, PlanMemory):  # a model file without a geometry: the allowance
        return
    args = parse_llama_args(command)
    dev = devices_of(p, args)
    layers, output = layer_devices(p, args, dev)
    q, _, _ = with_command_memory(p, args, dev, layers, output)
    for g, i in position.items():
        theirs = measured[f"RPC{i}"]
        if pm.buffers[g] is None:
            continue
        ours = (int(q.reserve[g]) - int(p.reserve[g]) + pm.buffers[g]) // 2**20
        assert agrees(ours, theirs.compute), (rig.stem, g, ours, theirs)
        a, b = stages[g]
        kv = (int(p.kv_per_layer[a:b].sum()) * p.context) // 2**20
        assert agrees(kv, theirs.context) or kv >= theirs.context, (rig.stem, g, kv, theirs)


#: Cards the random rigs draw from (the card table knows their bandwidth).
CARDS = ["RTX 3060 12GB", "RTX 3090", "RTX 4090", "RTX 4060 Ti 16GB", "RTX 5080"]
#: Model files with a sparse twin, with their GGUF's MTP blocks exercised by glm-4.5-air.
RANDOM_MODELS = ["qwen3-30b-a3b-q4_k_m.yaml", "gpt-oss-120b-mxfp4.yaml", "glm-4.5-air-q4_k_m.yaml"]


def random_rig(seed: int, folder: Path) -> Path:
    """A llama.cpp rig of 1-4 cards with random free memory, order and context, over one or two hosts."""
    rng = random.Random(seed)
    model = (SHIPPED_RIGS.parent / "models" / rng.choice(RANDOM_MODELS)).resolve()
    k = rng.randint(1, 4)
    hosts = rng.random() < 0.3 and k > 1
    gpus = []
    for g in range(k):
        card = rng.choice(CARDS)
        gpus.append(
            {
                "name": card,
                "free": f"{rng.randint(4, 24) * 1024 - 700} MiB",
                "reserve": "700 MiB",
                **({"host": "a" if g < k // 2 + 1 else "b"} if hosts else {}),
            }
        )
    rig = {
        "name": f"random-{seed}",
        "model": str(model),
        "engine": "llama.cpp",
        "host_bandwidth": "60 GB/s",
        "backend": "rpc",
        "order": rng.choice(["as-given", "auto"]),
        "context": rng.choice([4096, 16384, 32768]),
        "gpus": gpus,
    }
    path = folder / f"random-{seed}.yaml"
    path.write_text(yaml.safe_dump(rig, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "seed", [*range(2), *(pytest.param(s, marks=pytest.mark.slow) for s in range(2, 24))]
)  # the quick tier loads two
def test_random_rig_exports_load_where_the_plan_says(
    seed: int, llama_bin: Path, gguf_dir: Path, tmp_path: Path
) -> None:
    rig = random_rig(seed, tmp_path)
    result = CliRunner().invoke(cli, [str(rig), "--json", "--workers", "1"])
    if result.exit_code == 3:  # nothing fits: the reason is the answer
        assert json.loads(result.stdout)["reason"]
        return
    assert result.exit_code == 0, result.output
    check_loads(rig, json.loads(result.stdout), llama_bin, gguf_dir)


@pytest.mark.parametrize(
    "seed", [*range(2), *(pytest.param(s, marks=pytest.mark.slow) for s in range(2, 12))]
)  # the quick tier loads two
def test_random_twin_plans_fit_each_card_as_llama_cpp_counts_it(
    seed: int, llama_bin: Path, gguf_dir: Path, tmp_path: Path
) -> None:
    """A random rig planned with its model's sparse twin: loaded where the plan says, each card's
    estimate within its free memory and the plan's count."""
    rig = random_rig(seed, tmp_path)
    planned = with_twin(rig, tmp_path, gguf_dir)
    result = CliRunner().invoke(cli, [str(planned), "--json", "--workers", "1"])
    if result.exit_code == 3:
        assert json.loads(result.stdout)["reason"]
        return
    assert result.exit_code == 0, result.output
    export = _solve(str(planned), "--export", "llama.cpp")
    check_loads(rig, json.loads(result.stdout), llama_bin, gguf_dir, export, planned, twin=True)


@pytest.mark.parametrize(("free", "n_gpus"), [("3.5 GiB", 1), ("2.25 GiB", 2)])
def test_cpu_layers_export_loads_where_the_plan_says(
    free: str, n_gpus: int, llama_bin: Path, gguf_dir: Path, tmp_path: Path
) -> None:
    """A rig too small for every layer on its GPUs (Qwen3-30B-A3B at 32K), planned with ``cpu_layers``
    on its sparse twin: llama.cpp's loader puts the plan's first layers on the CPU and the rest where
    the plan says (its ``-ngl`` and ``--tensor-split``), and its estimate of each card fits the card
    and agrees with the plan's count."""
    model = twin_model("qwen3-30b-a3b", gguf_dir)
    gpus = [{"name": "RTX 3060 12GB", "free": free, "reserve": "700 MiB"} for _ in range(n_gpus)]
    rig = {"name": "cpu-layers", "model": str(model), "engine": "llama.cpp", "host_bandwidth": "60 GB/s"}
    rig |= {"backend": "rpc", "context": 32768, "gpus": gpus}
    path = tmp_path / "cpu-layers.yaml"
    path.write_text(yaml.safe_dump(rig, sort_keys=False))
    assert json.loads(_solve(str(path), "--json", status=3))["reason"]
    plan = json.loads(_solve(str(path), "--cpu-layers", "--json"))
    assert plan["stages"][0].get("cpu_layers", 0) > 0
    export = _solve(str(path), "--cpu-layers", "--export", "llama.cpp")
    assert "-ngl 999" not in export
    source = tmp_path / "source.yaml"  # check_loads finds the sparse GGUF by the shipped model's name
    source.write_text(yaml.safe_dump(rig | {"model": str(ROOT_MODELS / "qwen3-30b-a3b-q4_k_m.yaml")}))
    keyed = tmp_path / "planned.yaml"
    keyed.write_text(yaml.safe_dump(rig | {"cpu_layers": True}, sort_keys=False))
    check_loads(source, plan, llama_bin, gguf_dir, export, keyed, twin=True)


def test_a_plan_filled_again_as_it_runs_loads_where_it_says(
    llama_bin: Path, gguf_dir: Path, tmp_path: Path
) -> None:
    """Random rig 33 leaves expert tensors on the host: the solver counts each card's figure beside
    them by its bound, and the plan shown, filled again under its own command's figures, is faster.
    That plan's export loads where it says, and llama.cpp's compute buffer of each card is the count."""
    rig = random_rig(33, tmp_path)
    plan = json.loads(_solve(str(rig), "--json"))
    assert plan["refilled_from"]["window_ms"] > plan["window_ms"]
    check_loads(rig, plan, llama_bin, gguf_dir)
