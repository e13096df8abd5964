"""``solve model from-hf|from-gguf`` and ``solve rig new`` end to end: files that load and plan."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from click.testing import CliRunner

from solver.cli import cli
from solver.engines import REGISTRY
from solver.files.cards import card
from solver.files.config import load_model, load_rig
from tests.helpers.ggufbuild import qwen3_235b_like, write_sparse_gguf

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "tests" / "fixtures" / "hf"


def run(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_from_hf_prints_a_model_that_loads(tmp_path):
    result = run(
        "model", "from-hf", HF / "qwen3-30b-a3b.json", "--weights", "q8_0", "--name", "Qwen3-30B-A3B"
    )
    assert result.exit_code == 0, result.output
    assert "--weights Q8_0 --name Qwen3-30B-A3B`" in result.stdout and "ESTIMATE" in result.stdout
    path = tmp_path / "m.yaml"
    path.write_text(result.stdout)
    model, _ = load_model(path)
    assert (
        model.name == "Qwen3-30B-A3B"
        and model.layers == 48
        and model.expert_bytes == 3 * 2048 * 768 // 32 * 34
    )


def test_output_names_the_profile_relative_to_itself_and_plans(tmp_path):
    models, rigs = tmp_path / "models", tmp_path / "rigs"
    models.mkdir()
    rigs.mkdir()
    profile = models / "profiles" / "q.txt"
    profile.parent.mkdir()
    synth = [
        "profile",
        "synth",
        "--layers",
        "48",
        "--experts",
        "128",
        "--top-k",
        "8",
        "--seed",
        "0",
        "-o",
        profile,
    ]
    assert run(*synth).exit_code == 0
    out = models / "q.yaml"
    made = run(
        "model", "from-hf", HF / "qwen3-30b-a3b.json", "--weights", "Q4_K_M", "--profile", profile, "-o", out
    )
    assert made.exit_code == 0, made.output
    assert 'profile: "profiles/q.txt"' in out.read_text()
    rig = rigs / "two.yaml"
    made = run(
        "rig", "new", "RTX 3060 12GB", "rtx 5060 ti 16gb", "--model", out, "--context", "8192", "-o", rig
    )
    assert made.exit_code == 0, made.output
    text = rig.read_text()
    assert 'model: "../models/q.yaml"' in text and "solve rig new 'RTX 3060 12GB' 'rtx 5060 ti 16gb'" in text
    config, _ = load_rig(rig, REGISTRY)
    assert [g.name for g in config.gpus] == ["RTX 3060 12GB", "RTX 5060 Ti 16GB"] and config.name == "two"
    assert config.gpus[1].free == card("RTX 5060 Ti 16GB").free_mib * 2**20 and config.gpus[1].sms == 36
    assert config.context == 8192
    plan = run(rig, "--json")
    assert plan.exit_code == 0, plan.output
    report = json.loads(plan.stdout)
    assert report["status"] == "optimal" and report["model"] == "qwen3-30b-a3b"


def test_output_never_overwrites_an_input(tmp_path):
    config = tmp_path / "config.json"
    original = (HF / "mixtral-8x22b.json").read_text()
    config.write_text(original)
    result = run("model", "from-hf", config, "--weights", "BF16", "-o", config)
    assert result.exit_code == 2 and "refusing to overwrite" in result.stderr
    assert config.read_text() == original
    model = tmp_path / "m.yaml"
    model.write_text(run("model", "from-hf", config, "--weights", "BF16").stdout)
    result = run("rig", "new", "RTX 4090", "--model", model, "-o", model)
    assert result.exit_code == 2 and "refusing to overwrite" in result.stderr


def test_bad_input_is_one_line_and_exit_2(tmp_path, write):
    cases = [
        ("model", "from-hf", HF / "mixtral-8x22b.json", "--weights", "Q3_K"),
        ("model", "from-hf", write("c.json", '{"model_type": "bert"}'), "--weights", "BF16"),
        ("model", "from-hf", tmp_path / "missing.json", "--weights", "BF16"),
        ("model", "from-gguf", write("x.gguf", "not a gguf file at all")),
        ("rig", "new", "RTX 4900", "RTX 3090"),
        ("rig", "new"),
        ("rig", "new", "RTX 3090", "--reserve", "lots"),
    ]
    for args in cases:
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.output, result.stderr
    assert "closest: RTX 4090" in run("rig", "new", "RTX 4900").stderr


def test_rig_new_list_shows_the_table():
    result = run("rig", "new", "--list")
    assert result.exit_code == 0 and "RTX 4090" in result.stdout and "L40S" in result.stdout


def test_from_gguf_agrees_with_from_hf_on_the_shape(tmp_path):
    kv, tensors = qwen3_235b_like(vocab=1024, tokenizer=False)
    path = tmp_path / "Qwen3-235B-A22B-Q4_K_M.gguf"
    write_sparse_gguf(path, "qwen3moe", kv, tensors)
    out = tmp_path / "gguf.yaml"
    result = run("model", "from-gguf", path, "-o", out)
    assert result.exit_code == 0, result.output
    assert "solve model from-gguf" in out.read_text()
    exact, _ = load_model(out)
    hf = tmp_path / "hf.yaml"
    assert (
        run("model", "from-hf", HF / "qwen3-235b-a22b.json", "--weights", "Q4_K_M", "-o", hf).exit_code == 0
    )
    estimate, _ = load_model(hf)
    for key in ("layers", "experts", "active_experts", "kv_bytes_per_token"):
        assert getattr(exact, key) == getattr(estimate, key), key


def test_planning_a_rig_never_imports_the_importers(plan_modules):
    assert sorted(m for m in plan_modules if "importers" in m or m == "gguf") == []


def test_the_shipped_importer_models_are_what_their_header_commands_write(tmp_path):
    shipped = sorted(p for p in (ROOT / "models").glob("*.yaml") if "solve model from-hf" in p.read_text())
    assert len(shipped) >= 7
    for path in shipped:
        command = path.read_text().splitlines()[0].split("`")[1]
        args = shlex.split(command)[1:]
        out = args.index("-o") + 1
        assert ROOT / args[out] == path
        args[out] = str(tmp_path / path.name)
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            assert run(*args).exit_code == 0
        finally:
            os.chdir(cwd)

        # The same file but for the command's -o and the profile's path, both relative to the output.
        def body(text: str) -> list[str]:
            return [line for line in text.splitlines()[1:] if not line.startswith("profile: ")]

        assert body((tmp_path / path.name).read_text()) == body(path.read_text()), path.name


def test_both_importers_take_the_kv_type_and_write_nextn_layers(tmp_path):
    out = tmp_path / "glm.yaml"
    made = run(
        "model", "from-hf", HF / "glm-4.5-air.json", "--weights", "q4_k_m", "--kv-type", "q4_0", "-o", out
    )
    assert made.exit_code == 0, made.output
    text = out.read_text()
    assert "--weights Q4_K_M --kv-type q4_0 -o" in text.splitlines()[0]
    model, _ = load_model(out)
    assert model.kv_bytes_per_token == 2 * 8 * 128 // 32 * 18 and model.nextn_layers == 1
    kv, tensors = qwen3_235b_like(vocab=1024, tokenizer=False)
    path = tmp_path / "q.gguf"
    write_sparse_gguf(path, "qwen3moe", kv, tensors)
    made = run("model", "from-gguf", path, "--kv-type", "q8_0")
    assert made.exit_code == 0 and "--kv-type q8_0`" in made.stdout
    assert "nextn_layers" not in made.stdout  # written only where a file has such blocks


def test_counts_a_file_cannot_back_exit_2_at_once(tmp_path, write):
    """A block_count of 2^31 or 10^12 layers is refused before anything is built: one line, exit 2."""
    kv, tensors = qwen3_235b_like(vocab=1024, tokenizer=False)
    kv["qwen3moe.block_count"] = 2**31
    path = tmp_path / "bomb.gguf"
    write_sparse_gguf(path, "qwen3moe", kv, tensors)
    config = json.loads((HF / "qwen3-30b-a3b.json").read_text()) | {"num_hidden_layers": 10**12}
    cases = [
        (("model", "from-gguf", path), "above the limit of 10,000 layers"),
        (("model", "from-hf", write("c.json", json.dumps(config)), "--weights", "Q4_K_M"), "above the limit"),
        (
            ("model", "from-hf", write("b.json", '{"model_type": "bert"}'), "--weights", "BF16"),
            "docs/reference.md",
        ),
    ]
    for args, says in cases:
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
