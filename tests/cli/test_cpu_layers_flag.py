"""``--cpu-layers`` and the rig key ``cpu_layers``: what the command line says of them, a rig they
make plannable, its hint when not asked, and the engines and objective that refuse them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli

ROOT = Path(__file__).resolve().parents[2]


def _rig(tmp_path: Path, extra: str = "") -> Path:
    """Qwen3-235B-A22B at 32K on one RTX 3060: 10.07 GiB needed with every layer on it, 10.00 GiB there."""
    path = tmp_path / "rig.yaml"
    path.write_text(
        f"name: one-3060\nmodel: {ROOT / 'models' / 'qwen3-235b-a22b-q4_k_m.yaml'}\nengine: llama.cpp\n"
        "host_bandwidth: 60 GB/s\ncontext: 32768\ngpus:\n  - name: RTX 3060\n    free: 11.5 GiB\n"
        f"    reserve: 700 MiB\n    mem_bandwidth: 360 GB/s\n{extra}"
    )
    return path


def _solve(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, [*args, "--workers", "1"])
    return r.exit_code, r.stdout, r.stderr


def test_infeasible_rig_hints_at_cpu_layers_and_plans_with_them(tmp_path):
    rig = _rig(tmp_path)
    code, out, _ = _solve(str(rig), "--json")
    assert code == 3
    hints = {h["kind"]: h for h in json.loads(out)["hints"]}
    assert hints["cpu-layers"]["cpu_layers"] > 0
    assert "--cpu-layers" in hints["cpu-layers"]["text"]
    code, out, _ = _solve(str(rig), "--cpu-layers", "--json")
    assert code == 0
    plan = json.loads(out)
    assert plan["stages"][0]["cpu_layers"] == hints["cpu-layers"]["cpu_layers"]
    assert plan["tokens_per_s"] == pytest.approx(hints["cpu-layers"]["tokens_per_s"])
    code, out, _ = _solve(str(rig), "--cpu-layers", "--export", "llama.cpp")
    n = plan["stages"][0]["cpu_layers"]
    assert f"-ngl {94 + 1 - n} --tensor-split {94 - n + 1}" in out


@pytest.mark.parametrize(
    ("extra", "args", "says"),
    [
        (
            "",
            ("--cpu-layers", "--engine", "ik_llama.cpp"),
            "--cpu-layers: the ik_llama.cpp engine plans every",
        ),
        ("cpu_layers: true\n", ("--engine", "vllm"), "rig.yaml:11: cpu_layers: the vllm engine plans every"),
        (
            "cpu_layers: true\n",
            ("--objective", "request", "--generate", "64"),
            "rig.yaml:11: cpu_layers: the request objective",
        ),
    ],
)
def test_cpu_layers_are_refused_where_they_are_not_planned(tmp_path, extra, args, says):
    code, _, err = _solve(str(_rig(tmp_path, extra)), *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and says in err


def test_the_key_must_be_a_boolean(tmp_path):
    code, _, err = _solve(str(_rig(tmp_path, "cpu_layers: some\n")))
    assert code == 2 and "rig.yaml:11: cpu_layers" in err
