"""What a plan prints reads well in an 80-column terminal: nothing cut short, no trailing blanks, notes
that name the real limit, and every file written said so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from tests.helpers.rigfiles import tiny_rig

ROOT = Path(__file__).resolve().parents[2]
RIGS = sorted((ROOT / "rigs").glob("*.yaml"))


def run(*args: object, columns: str | None = "80"):
    return CliRunner(env={"COLUMNS": columns}).invoke(cli, [str(a) for a in args])


def check_lines(text: str, width: int = 80) -> None:
    for line in text.splitlines():
        assert len(line) <= width, line
        assert line == line.rstrip(), repr(line)
        assert "\u2026" not in line, line  # rich's ellipsis: a cell cut short


@pytest.mark.parametrize("objective", ["time", "throughput"])
@pytest.mark.parametrize("rig", RIGS, ids=lambda p: p.stem)
def test_every_shipped_rig_fits_80_columns_whole(rig, objective):
    res = run(rig, "--objective", objective, "--workers", "1", "--time-limit", "20")
    assert res.exit_code == 0, res.output
    check_lines(res.stdout)
    plan = run(rig, "--objective", objective, "--workers", "1", "--time-limit", "20", "--json", columns=None)
    for stage in json.loads(plan.stdout)["stages"]:  # every layer range whole, never "0-..."
        assert re.search(rf"\b{stage['start']}-{stage['end'] - 1}\b", res.stdout), stage


def test_long_card_names_wrap_and_numbers_stay_whole(tmp_path):
    """Three long names under llama.cpp with the throughput objective (the widest table): the names
    wrap inside their column; every number and range is printed whole."""
    names = ["NVIDIA RTX PRO 6000 Blackwell Workstation", "GeForce RTX 4060 Ti 16GB", "Radeon RX 7900 XTX"]
    gpus = [{"name": n, "free": 4000 + 500 * i, "mem_bandwidth": "500 GB/s"} for i, n in enumerate(names)]
    rig = tiny_rig(
        tmp_path,
        gpus=gpus,
        rig_extra={"engine": "llama.cpp", "host_bandwidth": "60 GB/s", "objective": "throughput"},
        model_extra={"active_experts": 2},
    )
    res = run(rig, "--workers", "1")
    assert res.exit_code == 0, res.output
    check_lines(res.stdout)
    for piece in ("Workstation", "16GB", "XTX", "stage", "switch"):
        assert piece in res.stdout, piece


def test_a_default_that_cannot_fit_names_host_memory(tmp_path):
    """Every free-memory split fits the GPUs only with experts in host RAM that host_memory cannot hold:
    the note says so, rather than blaming the GPUs."""
    gpus = [{"name": n, "free": 900, "mem_bandwidth": "500 GB/s"} for n in "ab"]
    extra = {"engine": "llama.cpp", "host_bandwidth": "60 GB/s", "host_memory": 1}
    rig = tiny_rig(tmp_path, gpus=gpus, rig_extra=extra, model_extra={"active_experts": 2})
    res = run(rig, "--json", "--default", "free-memory", columns=None)
    d = json.loads(res.stdout)
    note = d["default"]["note"]
    assert not d["default"]["feasible"], d["default"]
    assert "more than host_memory (1 B)" in note and "the least that fits the GPUs" in note, note
    assert "every expert on the CPU" not in note


def test_a_default_that_cannot_hold_its_layers_names_the_gpu(tmp_path):
    gpus = [{"name": n, "free": f, "mem_bandwidth": "500 GB/s"} for n, f in (("a", 1000), ("b", 1400))]
    extra = {"engine": "llama.cpp", "host_bandwidth": "60 GB/s"}
    rig = tiny_rig(
        tmp_path, gpus=gpus, rig_extra=extra, model_extra={"active_experts": 2, "stage_bytes": 800}
    )
    res = run(rig, "--json", "--default", "free-memory", columns=None)
    d = json.loads(res.stdout)
    note = d["default"]["note"]
    assert res.exit_code == 0 and not d["default"]["feasible"]  # the plan gives GPU a one layer
    assert note.startswith("does not fit even with every expert on the CPU: GPU 0 (a) lacks "), note


def test_plot_says_where_it_wrote(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    res = run(tiny_rig(tmp_path), "--plot", "plan.svg")
    assert res.exit_code == 0 and res.stderr.splitlines()[0] == "wrote plan.svg"


def test_wide_tables_split_into_parts_that_fit(tmp_path):
    """solve bench's table has 14 columns: in 80 it prints as parts, each led by the rig column, with
    every cell whole; profile show fits as it is."""
    rig = tiny_rig(tmp_path)
    res = run("bench", "--rig", rig, "--repeat", "1", "--budget", "0")
    assert res.exit_code == 0, res.output
    check_lines(res.stdout)
    assert res.stdout.count("┃ rig ") >= 2 and "end-to-end" in res.stdout and "import" in res.stdout
    show = run("profile", "show", ROOT / "models" / "profiles" / "qwen3-next-80b-a3b.txt")
    assert show.exit_code == 0, show.output
    check_lines(show.stdout)


def test_a_score_fits_80_columns_and_keeps_its_command_whole():
    words = ["llama-server", "-ngl", "99", "--n-cpu-moe", "60", "-ts", "3,2,1"]
    res = run("score", ROOT / "rigs" / "llama-mix.yaml", "--", *words)
    assert res.exit_code == 0, res.output
    text = res.stdout.splitlines()
    command = [line for line in text if line.startswith("llama-server ")]
    assert len(command) == 1 and command[0].endswith("=CPU'")  # the plan's command, never wrapped
    check_lines("\n".join(line for line in text if not line.startswith(("llama-server ", "# "))))


def test_calibrate_reads_well_and_keeps_its_yaml_lines_whole():
    rig, runs = (
        ROOT / "docs" / "examples" / "rtx5080.yaml",
        ROOT / "docs" / "examples" / "rtx5080-llama-bench.json",
    )
    res = run("calibrate", rig, "--llama-bench", runs)
    assert res.exit_code == 0, res.output
    text = res.stdout.splitlines()
    check_lines(
        "\n".join(line for line in text if not line.startswith("  "))
    )  # "  key: value" lines to paste
    assert all(line == line.rstrip() for line in text)
