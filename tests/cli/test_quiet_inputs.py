"""Inputs that used to be taken silently, or crash a command: each is refused in one line (exit 2), or
taken with a note or a warning that says what happened."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.engines.llamacpp.args import parse_llama_args
from solver.errors import ArgsError

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "rigs" / "llama-mix.yaml"


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def refused(*args: object) -> str:
    """The one stderr line of ``solve ARGS``, which must exit 2 without a traceback."""
    result = run(*args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr.rstrip("\n")


@pytest.mark.parametrize("shares", ["-1,2", "-1,1", "inf,1", "3e38,3e38,3e38", "nan,1,1"])
def test_tensor_split_shares_that_are_no_shares(shares):
    assert refused("score", LLAMA, "--", "-ngl", "99", "-ts", shares).startswith(f"score: -ts {shares}: ")


def test_more_tensor_split_shares_than_gpus_is_a_note():
    result = run("score", LLAMA, "--", "-ngl", "99", "-ts", "1,1,1,1,1")
    assert result.exit_code == 0, result.output
    assert (
        "-ts gives 5 shares for the 3 GPU(s) the model runs on; llama.cpp ignores the last 2" in result.output
    )


def test_negative_counts_say_what_the_value_is():
    assert "a context of tokens, 0 or more" in refused("score", LLAMA, "--", "-c", "-1")
    assert "a count of layers, 0 or more" in refused("score", LLAMA, "--", "-ncmoe", "-1")


def test_rig_new_warns_of_host_memory_in_bytes(tmp_path):
    result = run("rig", "new", "RTX 4090", "--host-memory", "64", "-o", tmp_path / "r.yaml")
    assert result.exit_code == 0, result.output
    assert (
        "--host-memory: 64 bytes is implausibly small for host RAM; did you mean '64 GiB'?" in result.stderr
    )


def test_rig_new_keeps_an_existing_file_without_force(tmp_path):
    out = tmp_path / "r.yaml"
    out.write_text("mine\n")
    assert refused("rig", "new", "RTX 4090", "-o", out).endswith(
        "exists; give --force to write over it, or another -o"
    )
    assert out.read_text() == "mine\n"
    assert run("rig", "new", "RTX 4090", "-o", out, "--force").exit_code == 0
    assert out.read_text() != "mine\n"


def test_contexts_take_the_same_suffixes_everywhere(tmp_path):
    out = tmp_path / "r.yaml"
    assert run("rig", "new", "RTX 4090", "--context", "32k", "-o", out).exit_code == 0
    assert "context: 32768 " in out.read_text()
    result = run(ROOT / "rigs" / "duo.yaml", "--context", "32k", "--json", "--workers", "1")
    assert result.exit_code == 0, result.output
    for args in (["--contexts", "99999999999999999999M"], ["--context", "99999999999999999999"]):
        result = run(ROOT / "rigs" / "duo.yaml", *args)
        assert result.exit_code == 2 and f"'{args[0]}'" in result.stderr and "moesplit plans" in result.stderr


def test_a_card_name_whose_editions_plan_alike_is_taken(tmp_path):
    out = tmp_path / "r.yaml"
    assert run("rig", "new", "RTX PRO 6000 Blackwell", "--engine", "vllm", "-o", out).exit_code == 0
    assert 'name: "RTX PRO 6000 Blackwell"' in out.read_text()
    message = refused("rig", "new", "RTX PRO 6000 Blackwell")  # strata reads the boost clock
    assert "differ in boost clock" in message
    assert "differ in memory" in refused("rig", "new", "RTX 4060 Ti", "--engine", "vllm")


def test_n_cpu_moe_makes_no_rule_past_the_last_layer():
    assert len(parse_llama_args(["-ncmoe", "2147483647"]).overrides) <= 8192
    result = run("score", LLAMA, "--", "-ngl", "99", "-ncmoe", "2147483647")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("pattern", ["(.*)*z", "(a+)+", "(?:x|y*)+"])
def test_a_pattern_that_backtracks_exponentially_is_refused(pattern):
    with pytest.raises(ArgsError, match="repeats a repeat"):
        parse_llama_args(["-ot", f"{pattern}=CPU"])
    assert "repeats a repeat" in refused("score", LLAMA, "--", "-ngl", "99", "-ot", f"{pattern}=CPU")


@pytest.mark.parametrize(
    ("rig", "words", "says"),
    [
        (LLAMA, ["-ts '3"], "No closing quotation"),
        (LLAMA, ["llama-bench", "-ngl", "0-2000000000"], "expands to more than 4,096 values"),
        (LLAMA, ["-ngl", "９９"], "not an integer"),
        (LLAMA, ["CUDA_VISIBLE_DEVICES=０", "-ngl", "9"], "is not a GPU index"),
        (LLAMA, ["LLAMA_ARG_N_GPU_LAYERS=abc"], "LLAMA_ARG_N_GPU_LAYERS 'abc': not an integer"),
        (LLAMA, ["-ngl", "9" * 5000], "out of range"),
        (
            ROOT / "rigs" / "vllm-mix.yaml",
            ["vllm", "serve", "M", "-pp", "0"],
            "-pp 0: a pipeline has at least 1",
        ),
    ],
)
def test_commands_the_engine_would_refuse(rig, words, says):
    assert says in refused("score", rig, "--", *words)


def test_values_written_into_files_cannot_add_keys(tmp_path):
    message = refused("rig", "new", "RTX 4090", "--name", "x\nobjective: mass #", "-o", tmp_path / "r.yaml")
    assert message.startswith("--name: ") and "control character" in message
    config = ROOT / "tests" / "fixtures" / "hf" / "qwen3-30b-a3b.json"
    message = refused(
        "model", "from-hf", config, "--weights", "q8_0", "--hf-model", "X\nstage_bytes: 20 GiB #"
    )
    assert message.startswith("--hf-model: ") and not (tmp_path / "r.yaml").exists()


def test_rig_new_lists_each_machines_gpus_together(tmp_path):
    out = tmp_path / "r.yaml"
    result = run("rig", "new", "a:RTX 4090", "b:RTX 4090", "a:RTX 3090", "--engine", "vllm", "-o", out)
    assert result.exit_code == 0 and "listed together" in result.stderr, result.output
    model = ROOT / "models" / "qwen3-30b-a3b-fp8.yaml"
    assert run(out, "--model", model, "--json", "--workers", "1").exit_code == 0


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("hidden_size", 0, "expected at least 1"),
        ("num_key_value_heads", 0, "expected at least 1"),
        ("head_dim", 0, "expected at least 1"),
        ("num_attention_heads", 0, "expected at least 1"),
        ("tie_word_embeddings", "false", "expected true or false"),
        ("moe_intermediate_size", 2**31 - 1, "past the 2^63-1"),
    ],
)
def test_from_hf_configs_that_are_no_model(tmp_path, key, value, says):
    import json

    config = json.loads((ROOT / "tests" / "fixtures" / "hf" / "qwen3-30b-a3b.json").read_text())
    config |= {key: value, **({"hidden_size": 2**31 - 1} if key == "moe_intermediate_size" else {})}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert says in refused("model", "from-hf", path, "--weights", "q8_0")


def test_from_hf_names_no_missing_profile(tmp_path):
    config = ROOT / "tests" / "fixtures" / "hf" / "qwen3-30b-a3b.json"
    assert "does not exist" in refused(
        "model", "from-hf", config, "--weights", "q8_0", "--profile", tmp_path / "no"
    )


@pytest.mark.parametrize("option", [["--fit-off"], ["--shell", "cmd"]])
def test_export_options_without_export_are_usage_errors(option):
    assert "give --export ENGINE with it" in refused(ROOT / "rigs" / "duo.yaml", *option)


def test_score_takes_a_context_for_a_strata_command():
    result = run("score", ROOT / "rigs" / "box.yaml", "--context", "8K", "--", "--layer-split", "8,16,33")
    assert result.exit_code == 0 and "context 8,192" in result.stdout, result.output
