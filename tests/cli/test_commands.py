"""From a downloaded model to a command that runs: the export is one whole command, with the model file,
the context and the KV cache type the plan assumed, and the KV type changes what the plan holds."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.files.config import load_model
from solver.files.kvcache import scale_kv
from solver.importers.hf import checkpoint_of
from solver.planning.resolve import Overrides, load_problem
from tests.helpers.engine_mapping import llama_slot_devices, llama_tensor_split, main_argv, parse_lines
from tests.helpers.ggufbuild import qwen3_235b_like, write_sparse_gguf
from tests.helpers.rigfiles import tiny_rig

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "tests" / "fixtures" / "hf"


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def plan_json(*args: object) -> dict:
    res = run(*args, "--json", "--workers", "1")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def newcomer_rig(tmp_path: Path, shard: bool = False) -> Path:
    """A GGUF header, the model from it and a llama.cpp rig from card names: three commands, no YAML."""
    kv, tensors = qwen3_235b_like(vocab=1024, tokenizer=False)
    gguf = tmp_path / "dl" / ("Q-00001-of-00001.gguf" if shard else "Qwen3-235B-A22B-Q4_K_M.gguf")
    gguf.parent.mkdir()
    write_sparse_gguf(gguf, "qwen3moe", kv, tensors)
    model = tmp_path / "models" / "q.yaml"
    model.parent.mkdir()
    assert run("model", "from-gguf", gguf, "-o", model).exit_code == 0
    rig = tmp_path / "rigs" / "mine.yaml"
    rig.parent.mkdir()
    made = run(
        "rig", "new", "RTX 4090", "RTX 3090", "--engine", "llama.cpp", "--host-bandwidth", "DDR5-5600x2",
        "--context", "16384", "--model", model, "-o", rig,
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    return rig


def test_from_gguf_names_the_file_and_the_export_loads_it(tmp_path):
    rig = newcomer_rig(tmp_path)
    text = (tmp_path / "models" / "q.yaml").read_text()
    assert 'gguf: "../dl/Qwen3-235B-A22B-Q4_K_M.gguf"' in text  # relative to the model file
    d = plan_json(rig, "--export", "llama.cpp")
    lines = d["export"]["lines"]
    assert d["export"]["shell"] == "posix" and len(lines) == 1  # one command, no placeholder note
    argv = main_argv(lines)
    assert argv[:5] == [
        "llama-server",
        "-m",
        str(tmp_path / "dl" / "Qwen3-235B-A22B-Q4_K_M.gguf"),
        "-c",
        "16384",
    ]
    assert "-ctk" not in argv and "-fit" not in argv
    _, flags = parse_lines(lines)
    n = d["stages"][-1]["end"]
    devices = llama_slot_devices(llama_tensor_split(flags["--tensor-split"]), n, int(flags["-ngl"]), 2)
    assert devices == [i for i, s in enumerate(d["stages"]) for _ in range(s["end"] - s["start"])] + [1]


def test_a_split_model_names_its_first_shard(tmp_path):
    newcomer_rig(tmp_path, shard=True)
    assert 'gguf: "../dl/Q-00001-of-00001.gguf"' in (tmp_path / "models" / "q.yaml").read_text()


@pytest.mark.slow
def test_kv_type_scales_the_cache_and_goes_into_the_command(tmp_path):
    """q8_0 takes 34 bytes per 32 values, not 64: each layer holds that much less at the context, the plan
    is never slower, and -ctk/-ctv/-fa on say so in the command."""
    rig = newcomer_rig(tmp_path)
    model, _ = load_model(tmp_path / "models" / "q.yaml")
    per_token = model.kv_bytes_per_token
    assert scale_kv(per_token, "f16", "q8_0") == per_token * 34 // 64  # 128-value rows: whole blocks
    f16, q8 = load_problem(rig), load_problem(rig, Overrides(kv_type="q8_0"))
    saved = f16.layer_bytes - q8.layer_bytes
    assert (saved == 16384 * (per_token - per_token * 34 // 64)).all() and q8.kv_type == "q8_0"
    plan16, plan8 = plan_json(rig), plan_json(rig, "--kv-type", "q8_0", "--export", "llama.cpp", "--fit-off")
    assert plan8["window_ms"] <= plan16["window_ms"] and plan8["kv_type"] == "q8_0"
    argv = main_argv(plan8["export"]["lines"])
    assert argv[-8:] == ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-fit", "off"]
    rig.write_text(rig.read_text() + "kv_type: q8_0\n")  # the rig's key plans the same
    assert plan_json(rig)["stages"] == plan8["stages"]


def test_a_kv_type_the_engine_cannot_run_is_named_at_its_key(tmp_path):
    rig = tiny_rig(tmp_path, rig_extra={"kv_type": "q4_0"})
    res = run(rig)
    assert res.exit_code == 2 and "kv_type: q4_0: engine strata runs its KV cache at f16 only" in res.stderr
    rig = tiny_rig(tmp_path, model_extra={"kv_type": "q8_0"})
    res = run(rig)
    assert res.exit_code == 2 and "model.yaml" in res.stderr and "set kv_type: f16 in the rig" in res.stderr
    rig.write_text(rig.read_text() + "kv_type: f16\n")
    assert run(rig).exit_code == 0
    res = run(tiny_rig(tmp_path), "--kv-type", "q8_0")
    assert res.exit_code == 2 and "--kv-type q8_0: engine strata" in res.stderr


@pytest.mark.slow
def test_shells_quote_the_whole_command(tmp_path):
    rig = newcomer_rig(tmp_path)
    for shell, start in (("cmd", "llama-server -m "), ("powershell", "llama-server -m ")):
        d = plan_json(rig, "--export", "llama.cpp", "--shell", shell)
        [line] = d["export"]["lines"]
        assert line.startswith(start) and d["export"]["shell"] == shell
        assert main_argv([line], shell)[:2] == ["llama-server", "-m"]
    res = run(rig, "--export", "llama.cpp", "--shell", "cmd")
    assert res.exit_code == 0 and "llama.cpp command (cmd):" in res.stdout


def test_from_hf_knows_what_vllm_serves(tmp_path):
    cached = tmp_path / "hub" / "models--Qwen--Qwen3-30B-A3B-FP8" / "snapshots" / "0123abc" / "config.json"
    cached.parent.mkdir(parents=True)
    cached.write_text((HF / "qwen3-30b-a3b.json").read_text())
    assert checkpoint_of(cached) == "Qwen/Qwen3-30B-A3B-FP8"
    named = run("model", "from-hf", cached, "--weights", "FP8").stdout
    assert 'name: "Qwen3-30B-A3B-FP8"' in named  # not the revision folder's hash
    local = tmp_path / "ckpt" / "config.json"
    local.parent.mkdir()
    local.write_text(cached.read_text())
    assert checkpoint_of(local) is None  # a config alone is not a checkpoint
    (local.parent / "model-00001-of-00002.safetensors").write_bytes(b"")
    assert checkpoint_of(local) == local.parent.resolve()
    out = tmp_path / "m.yaml"
    assert run("model", "from-hf", local, "--weights", "FP8", "-o", out).exit_code == 0
    assert 'hf_model: "ckpt"' in out.read_text()
    made = run("model", "from-hf", local, "--weights", "FP8", "--hf-model", "Qwen/Qwen3-30B-A3B-FP8")
    assert 'hf_model: "Qwen/Qwen3-30B-A3B-FP8"' in made.stdout
    rig = tmp_path / "r.yaml"
    assert (
        run("rig", "new", "RTX 4090", "RTX 3090", "--engine", "vllm", "--model", out, "-o", rig).exit_code
        == 0
    )
    d = plan_json(rig, "--export", "vllm")
    argv = main_argv(d["export"]["lines"])
    assert argv[:3] == ["vllm", "serve", str(tmp_path / "ckpt")] and argv[-2:] == ["--max-model-len", "32768"]


def test_kv_types_agree_with_ggml():
    """The planner's bytes per cached value are ggml's block sizes, as the importers write them."""
    from solver.files.kvcache import KV_TYPES
    from solver.importers.ggmltypes import KV_TYPES as GGML

    assert set(KV_TYPES) == set(GGML)
    for name, kind in GGML.items():
        assert KV_TYPES[name] == Fraction(kind.size, kind.block), name


@pytest.mark.slow
def test_the_plans_command_scores_as_the_plan_at_every_kv_type(tmp_path):
    """solve score reads -ctk/-ctv against the KV type the plan's bytes are at: the export of a q8_0 plan
    scores as that plan, and the same command without -ctk/-ctv as an f16 cache."""
    rig = newcomer_rig(tmp_path)
    for kv in ("f16", "q8_0", "q4_0"):
        d = plan_json(rig, "--kv-type", kv, "--export", "llama.cpp")
        res = run("score", rig, "--json", "--", *d["export"]["lines"])
        assert res.exit_code == 0, res.output
        assert abs(json.loads(res.stdout)["score"]["window_ms"] - d["window_ms"]) <= 1e-9 * d["window_ms"], kv
    q8 = plan_json(rig, "--kv-type", "q8_0", "--export", "llama.cpp")
    [line] = [x for x in q8["export"]["lines"] if not x.startswith("#")]
    f16_line = line.replace(" -ctk q8_0 -ctv q8_0 -fa on", "")
    rig.write_text(rig.read_text() + "kv_type: q8_0\n")
    as_f16 = json.loads(run("score", rig, "--json", "--", f16_line).stdout)["score"]
    same = json.loads(run("score", rig.parent / "mine.yaml", "--json", "--", line).stdout)["score"]
    assert as_f16["window_ms"] >= same["window_ms"] and abs(same["window_ms"] - q8["window_ms"]) < 1e-6
