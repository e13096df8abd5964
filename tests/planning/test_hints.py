"""Hints: what would help, each one true when planned again: a card left idle, more VRAM on one card,
llama.cpp for a rig whose engine keeps every weight in VRAM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from solver.cli import cli

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20
#: vllm-mix.yaml's two RTX 3060s with 3000 MiB free: nothing fits in VRAM alone.
SMALL = {1: "3000 MiB", 2: "3000 MiB"}


def planned(*args: object) -> tuple[int, dict, str]:
    """``solve ARGS --json``: exit code, the JSON, and the table ``solve ARGS`` prints."""
    runner = CliRunner()
    got = runner.invoke(cli, [*map(str, args), "--json"])
    text = runner.invoke(cli, list(map(str, args)))
    assert got.exit_code == text.exit_code, got.output
    return got.exit_code, json.loads(got.stdout), text.stdout


def shrunk(tmp_path: Path, rig: str, free: dict[int, str], name: str = "rig.yaml") -> Path:
    """A shipped rig with other ``free`` on some GPUs, its model path kept, as ``name``."""
    doc = yaml.safe_load((ROOT / "rigs" / rig).read_text())
    doc["model"] = str((ROOT / "rigs" / doc["model"]).resolve())
    for g, size in free.items():
        doc["gpus"][g]["free"] = size
    out = tmp_path / name
    out.write_text(yaml.safe_dump(doc))
    return out


@pytest.mark.parametrize("rig", ["eight.yaml", "six-auto.yaml"])
def test_an_idle_card_that_is_faster_is_named_with_the_idle_plan_figures(rig):
    code, plan, text = planned(ROOT / "rigs" / rig)
    assert code == 0 and not plan["idle"]
    [hint] = plan["hints"]
    _, idle, _ = planned(ROOT / "rigs" / rig, "--idle-gpus")
    assert hint["kind"] == "idle-gpus" and hint["idle"] == idle["idle"] and hint["idle"]
    assert hint["gpus"] == idle["gpus"] and hint["cuts"] == idle["cuts"]
    assert hint["window_ms"] == pytest.approx(idle["window_ms"], rel=1e-12)
    assert hint["saves_ms"] == pytest.approx(plan["window_ms"] - idle["window_ms"], rel=1e-9)
    assert hint["saves_ms"] > 0
    assert f"hint: {hint['text']}" in " ".join(text.split())
    assert idle["hints"] == []  # a plan that may leave cards idle has nothing to add


@pytest.mark.parametrize("rig", ["box.yaml", "two-hosts.yaml", "vllm-mix.yaml"])
def test_no_idle_hint_where_every_card_helps(rig):
    code, plan, _ = planned(ROOT / "rigs" / rig)
    _, idle, _ = planned(ROOT / "rigs" / rig, "--idle-gpus")
    assert code == 0 and plan["hints"] == []
    assert idle["window_ms"] >= plan["window_ms"] * (1 - 1e-3)


def test_an_infeasible_vllm_rig_names_the_card_and_the_vram_and_llama_cpp(tmp_path):
    rig = shrunk(tmp_path, "vllm-mix.yaml", SMALL)
    code, plan, text = planned(rig)
    assert code == 3
    vram, engine = plan["hints"]
    assert vram["kind"] == "vram" and engine["kind"] == "engine"
    # the named card with that much more plans; 1 MiB less does not
    g, more = vram["gpu"], vram["more_bytes"]
    assert more % MIB == 0
    fits = shrunk(tmp_path, "vllm-mix.yaml", {**SMALL, g: f"{(3000 * MIB + more) // MIB} MiB"}, "fits.yaml")
    code, again, _ = planned(fits)
    assert code == 0 and again["tokens_per_s"] == pytest.approx(vram["tokens_per_s"])
    short = shrunk(
        tmp_path, "vllm-mix.yaml", {**SMALL, g: f"{(3000 * MIB + more) // MIB - 1} MiB"}, "short.yaml"
    )
    assert planned(short)[0] == 3
    # llama.cpp with the experts that do not fit in host RAM
    refused = CliRunner().invoke(cli, [str(rig), "--engine", "llama.cpp"])
    assert refused.exit_code == 2 and "host_bandwidth: missing" in refused.stderr  # as the hint says
    assert "the rig needs host_bandwidth" in engine["text"] and str(rig) in engine["text"]
    doc = yaml.safe_load(rig.read_text())
    doc["host_bandwidth"] = "40 GB/s"
    rig.write_text(yaml.safe_dump(doc))
    code, llama, _ = planned(rig, "--engine", "llama.cpp")
    assert code == 0, llama
    assert llama["host_bytes"] == engine["host_bytes"] > 0, (llama["host_bytes"], engine)
    assert llama["tokens_per_s"] == pytest.approx(engine["tokens_per_s"])
    for hint in plan["hints"]:
        assert f"hint: {hint['text']}" in " ".join(text.split())


def test_no_vram_hint_where_the_layer_limits_conflict(tmp_path):
    doc = yaml.safe_load((ROOT / "rigs" / "qwen3-30b-3060x2.yaml").read_text())
    doc["model"] = str((ROOT / "rigs" / doc["model"]).resolve())
    for gpu in doc["gpus"]:
        gpu["max_layers"] = 10
    rig = tmp_path / "limits.yaml"
    rig.write_text(yaml.safe_dump(doc))
    code, plan, _ = planned(rig)
    assert code == 3 and plan["hints"] == []
