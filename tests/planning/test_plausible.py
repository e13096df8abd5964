"""Valid but implausible values plan as given, with one warning line each on stderr (docs/reference.md,
"Warnings")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.planning.plausible import MAX_CLOCK_GHZ, MIN_FREE
from tests.helpers.clirun import key_line

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def box(tmp_path, monkeypatch) -> Path:
    """A copy of the shipped box rig and its model and profile, with the working directory above them."""
    shutil.copytree(ROOT / "rigs", tmp_path / "rigs")
    shutil.copytree(ROOT / "models", tmp_path / "models")
    monkeypatch.chdir(tmp_path)
    return Path("rigs/box.yaml")


MODEL = Path("models/qwen3-next-80b-a3b.yaml")


def edit(path: Path, old: str, new: str, count: int = 1) -> str:
    text = path.read_text()
    assert old in text
    text = text.replace(old, new, count)
    path.write_text(text)
    return text


def run(*args: str | Path) -> tuple[int, dict, list[str]]:
    res = CliRunner().invoke(cli, [*map(str, args), "--json", "--workers", "1"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, json.loads(res.stdout), res.stderr.splitlines()


def test_the_shipped_box_has_no_warning(box):
    code, _, err = run(box)
    assert code == 0 and err == []


def test_free_without_a_unit(box):
    text = edit(box, "free: 11.5 GiB", "free: 24")
    code, out, err = run(box)
    assert code == 3 and out["status"] == "infeasible"  # 24 bytes is valid: the plan says it cannot fit
    line = key_line(text, ("gpus", 0, "free"))
    assert err == [
        f"rigs/box.yaml:{line}: gpus[0].free: 24 bytes is implausibly small for a GPU; did you mean '24 GiB'?"
    ]


def test_small_free_with_a_unit_and_the_threshold(box):
    edit(box, "free: 11.5 GiB", "free: 100 MiB")
    edit(box, "free: 11.5 GiB", f"free: {MIN_FREE}")  # the second 3060: exactly the threshold is fine
    _, _, err = run(box)
    assert len(err) == 1 and err[0].startswith(
        "rigs/box.yaml:9: gpus[0].free: 100 MiB (100.0 MiB) is implausibly"
    )


def test_clock_in_mhz(box):
    text = edit(box, "clock_ghz: 2.572", "clock_ghz: 2572")
    code, out, err = run(box)
    assert code == 0 and out["status"] == "optimal"
    line = key_line(text, ("gpus", 2, "clock_ghz"))
    assert err == [
        f"rigs/box.yaml:{line}: gpus[2].clock_ghz: 2572 GHz is implausibly fast for a GPU "
        f"(none runs above {MAX_CLOCK_GHZ:g}); did you mean 2.572 (MHz given as GHz)?"
    ]


def test_an_expert_no_card_can_hold(box):
    text = edit(MODEL, "expert_bytes: 1.95 MiB", "expert_bytes: 1.95 TiB")
    code, out, err = run(box)
    assert code == 0 and out["held_pairs"] == 0  # valid, planned, nothing cached
    line = key_line(text, ("expert_bytes",))
    [msg] = err
    assert msg.startswith(
        f"models/qwen3-next-80b-a3b.yaml:{line}: expert_bytes: one expert (1.95 TiB) is bigger"
    )
    assert "on GPU 2 (RTX 5060 Ti)" in msg and msg.endswith(
        "so no expert of any layer can be cached; did you mean '1.95 GiB'?"
    )


def test_an_expert_too_big_for_some_layers_only(box):
    text = MODEL.read_text().replace(
        "expert_bytes: 1.95 MiB", "expert_bytes: [" + ", ".join(["1.95 MiB"] * 47 + ["30 GiB"]) + "]"
    )
    MODEL.write_text(text)
    code, _, err = run(box)
    assert code == 0
    [msg] = err
    assert msg.startswith(
        f"models/qwen3-next-80b-a3b.yaml:{key_line(text, ('expert_bytes', 47))}: expert_bytes[47]: "
    )
    assert "so no expert of layers 47 can be cached; did you mean '30 MiB'?" in msg


def test_context_beyond_the_model(box):
    text = MODEL.read_text() + "max_context: 65536\n"
    MODEL.write_text(text)
    where = f"models/qwen3-next-80b-a3b.yaml:{key_line(text, ('max_context',))}"
    code, out, err = run(box, "--context", "65536")
    assert code == 0 and err == []
    code, out, err = run(box, "--context", "100000")
    assert out["context"] == 100000
    assert err == [
        f"--context: 100,000 tokens is beyond the 65,536 tokens the model supports ({where}); "
        "did you mean --context 65536?"
    ]
    rig = edit(box, "context: 32768", "context: 70000")
    _, out, err = run(box)
    assert err == [
        f"rigs/box.yaml:{key_line(rig, ('context',))}: context: 70,000 tokens is beyond the 65,536 "
        f"tokens the model supports ({where}); did you mean 'context: 65536'?"
    ]


LLAMA = Path("rigs/llama-mix.yaml")


def test_host_bandwidth_without_a_unit_names_its_line_when_nothing_can_be_planned(box):
    text = edit(LLAMA, "host_bandwidth: 60 GB/s", "host_bandwidth: 55")
    res = CliRunner().invoke(cli, [str(LLAMA), "--json"])
    assert res.exit_code == 2 and res.stdout == ""
    [msg] = res.stderr.splitlines()
    line = key_line(text, ("host_bandwidth",))
    assert msg.startswith(
        f"rigs/llama-mix.yaml:{line}: host_bandwidth: 55 bytes per second is implausibly slow for host "
        "memory (a bare number is bytes per second); did you mean '55 GB/s'? (a window could take"
    )
    assert "layer_ms" not in msg and "miss_ms" not in msg


def test_host_bandwidth_without_a_unit_warns_where_it_plans(tmp_path):
    from tests.helpers.rigfiles import tiny_rig

    rig = tiny_rig(
        tmp_path,
        rig_extra={"engine": "llama.cpp", "host_bandwidth": 55},
        model_extra={"active_experts": 2},
    )
    code, out, err = run(rig)
    assert code == 0 and out["status"] == "optimal"
    line = key_line(rig.read_text(), ("host_bandwidth",))
    assert (  # among the tiny rig's other doubts (its sizes are bytes on purpose)
        f"{rig}:{line}: host_bandwidth: 55 bytes per second is implausibly slow for host memory "
        "(a bare number is bytes per second); did you mean '55 GB/s'?"
    ) in err


def test_a_rate_in_lower_case_is_a_rate(box):
    edit(LLAMA, "host_bandwidth: 60 GB/s", "host_bandwidth: 60 gb/s")
    lower = run(LLAMA)
    edit(LLAMA, "host_bandwidth: 60 gb/s", "host_bandwidth: 60 GB/s")
    assert lower[0] == 0 and lower[2] == [] and lower[1] == run(LLAMA)[1] | {"solver": lower[1]["solver"]}


def test_a_rate_in_the_wrong_unit(box):
    text = edit(LLAMA, "host_bandwidth: 60 GB/s", "host_bandwidth: 60 mb/s")
    res = CliRunner().invoke(cli, [str(LLAMA), "--json"])
    line = key_line(text, ("host_bandwidth",))
    assert res.exit_code in (0, 2), res.output
    assert (
        f"rigs/llama-mix.yaml:{line}: host_bandwidth: 60 mb/s is implausibly slow for host memory "
        "(under 1 GB/s); check the unit; did you mean '60 GB/s'?" in res.stderr
    )


@pytest.mark.parametrize("value", ["60 Gbit/s", "60 GB", "sixty GB/s", "60.5", "-60 GB/s"])
def test_a_bad_rate_is_called_a_rate_with_line_and_key(box, value):
    text = edit(LLAMA, "host_bandwidth: 60 GB/s", f"host_bandwidth: {value}")
    res = CliRunner().invoke(cli, [str(LLAMA), "--json"])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert res.stderr.startswith(
        f"rigs/llama-mix.yaml:{key_line(text, ('host_bandwidth',))}: host_bandwidth: "
    )
    assert "rate" in res.stderr and "size" not in res.stderr


def test_a_gpu_memory_bandwidth_without_a_unit(write):
    from solver.files.yamlfile import load_yaml
    from solver.planning.plausible import rate_doubts

    text = "gpus:\n  - name: a\n    free: 8 GiB\n    mem_bandwidth: 936\n"
    text += "  - name: b\n    mem_bandwidth: 936 GB/s\n"
    path = write("rig.yaml", text)
    [doubt] = rate_doubts(load_yaml(path, "rig.yaml"))
    assert str(doubt) == (
        "rig.yaml:4: gpus[0].mem_bandwidth: 936 bytes per second is implausibly slow for a GPU's memory "
        "(a bare number is bytes per second); did you mean '936 GB/s'?"
    )
    path.write_text(text.replace("936 GB/s", "936 TB/s"))
    [_, fast] = rate_doubts(load_yaml(path, "rig.yaml"))
    assert fast.line == 6 and fast.message.endswith(
        "(over 20000 GB/s); check the unit; did you mean '936 GB/s'?"
    )
