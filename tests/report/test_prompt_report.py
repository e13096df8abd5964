"""Every llama.cpp plan and score reports prompt processing (solver.engines.llamacpp.prompt): the JSON's
``pp_tokens_per_s``, ``ttft_ms``, ``n_ubatch`` and ``flash_attn`` for the plan, the default and the
proportional split, the tables' rows and the ``--contexts`` columns; ``--prompt N`` replaces the rig's
``prompt``; the other engines report none of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from solver.cli import cli
from solver.cli.score import command_words
from solver.engines.llamacpp.fields import LlamaFields
from solver.planning.resolve import Overrides, load_problem

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "rigs" / "llama-mix.yaml"
VLLM = ROOT / "rigs" / "vllm-mix.yaml"
STRATA = ROOT / "rigs" / "box.yaml"
PROMPT_KEYS = ("pp_tokens_per_s", "ttft_ms", "prompt", "n_ubatch", "flash_attn")


def run(*args: object, columns: str | None = None):
    return CliRunner(env={"COLUMNS": columns}).invoke(cli, [str(a) for a in args])


def plan_json(*args: object) -> dict:
    res = run(*args, "--json", "--workers", "1")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def predicted_ttft(rig: Path, out: dict, prompt: int | None = None) -> float:
    """The prompt's time by prompt.py's arithmetic, from the JSON's own stages: micro-batches of the
    rig's n_ubatch, pipelined only when no stage leaves experts in host memory."""
    pm = LlamaFields.of(load_problem(rig, Overrides(prompt=prompt))).prompt
    stages = [(s["gpu"], s["start"], s["end"], s["host_bytes"]) for s in out["stages"]]
    pipeline = len(stages) > 1 and not any(s["host_bytes"] for s in out["stages"])
    return pm.time_ms(stages, pipeline, n_ubatch=min(pm.n_ubatch, pm.prompt))


def resident_rig(tmp_path: Path) -> Path:
    """The two-3060 Qwen3-30B rig under llama.cpp: every expert fits, so the stages pipeline."""
    doc = yaml.safe_load((ROOT / "rigs" / "qwen3-30b-3060x2.yaml").read_text())
    doc.update(engine="llama.cpp", host_bandwidth="60 GB/s", model=str(ROOT / "rigs" / doc["model"]))
    doc.pop("miss_ms")
    path = tmp_path / "resident.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_plan_default_and_baseline_json_give_the_prompt_model_arithmetic():
    out = plan_json(LLAMA)
    assert all(key in out for key in PROMPT_KEYS)
    assert out["prompt"] == 2048 and out["n_ubatch"] == 512 and out["flash_attn"] is True
    ttft = predicted_ttft(LLAMA, out)
    assert out["ttft_ms"] == pytest.approx(ttft, rel=1e-12)
    assert out["pp_tokens_per_s"] == pytest.approx(1000.0 * 2048 / ttft, rel=1e-12)
    for other in ("default", "baseline"):  # each split reports its own, from its own stages
        assert all(key in out[other] for key in PROMPT_KEYS), other
        assert out[other]["pp_tokens_per_s"] > 0
    assert out["default"]["ttft_ms"] != out["ttft_ms"]  # the free-memory split offloads more


def test_a_plan_whose_experts_all_fit_pipelines_its_prompt(tmp_path):
    rig = resident_rig(tmp_path)
    out = plan_json(rig)
    assert out["host_bytes"] == 0 and len(out["stages"]) == 2
    assert out["ttft_ms"] == pytest.approx(predicted_ttft(rig, out), rel=1e-12)
    pm = LlamaFields.of(load_problem(rig)).prompt
    stages = [(s["gpu"], s["start"], s["end"], 0) for s in out["stages"]]
    assert out["ttft_ms"] < pm.time_ms(stages, pipeline=False)  # overlapped, not added


def test_score_of_the_plans_own_export_gives_the_plans_prompt_speed():
    out = plan_json(LLAMA, "--export", "llama.cpp")
    words = command_words([line for line in out["export"]["lines"] if not line.startswith("#")])
    res = run("score", LLAMA, "--json", "--workers", "1", "--", *words)
    assert res.exit_code == 0, res.output
    both = json.loads(res.stdout)
    for key in PROMPT_KEYS:
        assert both["score"][key] == pytest.approx(out[key], rel=1e-12), key
        assert both["plan"][key] == pytest.approx(out[key], rel=1e-12), key


def test_a_scored_command_reads_its_own_micro_batch_and_prompt():
    words = ["llama-bench", "-ngl", "99", "--n-cpu-moe", "70", "-ub", "256", "-p", "1024", "-fa", "0"]
    res = run("score", LLAMA, "--json", "--workers", "1", "--", *words)
    assert res.exit_code == 0, res.output
    score = json.loads(res.stdout)["score"]
    assert (score["n_ubatch"], score["prompt"], score["flash_attn"]) == (256, 1024, False)
    table = run("score", LLAMA, "--workers", "1", "--", *words, columns="200")
    assert f"prompt 1,024 tokens (-ub 256) at {score['pp_tokens_per_s']:,.1f} tokens/s" in table.stdout


def test_prompt_override_scales_the_time_to_first_token():
    """Twice the prompt is twice the micro-batches: the copies and weights' FLOPs double, attention more
    than doubles (each batch attends to every earlier token), so TTFT grows a little more than 2x."""
    short, long = plan_json(LLAMA, "--prompt", "1024"), plan_json(LLAMA, "--prompt", "2048")
    assert short["cuts"] == long["cuts"] and (short["prompt"], long["prompt"]) == (1024, 2048)
    assert 2.0 < long["ttft_ms"] / short["ttft_ms"] < 2.05
    assert short["ttft_ms"] == pytest.approx(predicted_ttft(LLAMA, short, prompt=1024), rel=1e-12)
    tiny = plan_json(LLAMA, "--prompt", "100")  # one micro-batch of the whole prompt
    assert tiny["n_ubatch"] == 100
    res = run(
        "score", LLAMA, "--json", "--workers", "1", "--prompt", "1024", "--", "-ngl", "99", "-ncmoe", "94"
    )
    assert json.loads(res.stdout)["score"]["prompt"] == 1024


def test_the_tables_show_prompt_speed_and_ttft():
    out = plan_json(LLAMA)
    table = run(LLAMA, "--workers", "1", columns="100").stdout
    assert f"prompt tokens/s          {out['pp_tokens_per_s']:,.1f}" in table
    assert f"{out['ttft_ms']:,.0f} ms" in table and "time to 1st token" in table
    assert "prompt: 2,048 tokens in micro-batches of 512" in table
    sweep = run(LLAMA, "--contexts", "8K,32K", "--workers", "1", columns="80")
    assert sweep.exit_code == 0, sweep.output
    lines = sweep.stdout.splitlines()
    assert any("prompt" in line and "TTFT" in line for line in lines)
    row = next(line for line in lines if line.startswith(" 32K"))
    assert f"{out['pp_tokens_per_s']:,.1f}" in row and f"{out['ttft_ms'] / 1000:,.1f}" in row


def test_a_card_of_unknown_matrix_throughput_gives_null_speeds(tmp_path):
    doc = yaml.safe_load(LLAMA.read_text())
    doc["model"] = str(ROOT / "models" / "qwen3-235b-a22b.yaml")
    doc["gpus"][2] = {**doc["gpus"][2], "name": "Mystery card", "mem_bandwidth": "360 GB/s"}
    rig = tmp_path / "mystery.yaml"
    rig.write_text(yaml.safe_dump(doc))
    out = plan_json(rig)
    assert out["pp_tokens_per_s"] is None and out["ttft_ms"] is None
    assert out["n_ubatch"] == 512 and out["flash_attn"] is True
    assert "its speed is unknown" in run(rig, "--workers", "1", columns="120").stdout
    doc["gpus"][2]["matrix_tflops"] = 51
    rig.write_text(yaml.safe_dump(doc))
    assert plan_json(rig)["pp_tokens_per_s"] > 0


@pytest.mark.parametrize("rig", [VLLM, STRATA])
def test_other_engines_report_no_prompt_processing(rig):
    out = plan_json(rig)
    for part in (out, out["baseline"], out.get("default", {})):
        assert not any(key in part for key in PROMPT_KEYS)
    sweep = run(rig, "--contexts", "8K", "--workers", "1", columns="100").stdout
    assert "TTFT" not in sweep and "prompt" not in sweep
