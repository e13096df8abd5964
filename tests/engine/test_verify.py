"""``solve verify`` against the pinned llama.cpp: its ``llama-fit-params --fit-print on`` on a sparse GGUF
of the rig's model, the devices two local rpc-servers (a wrapper in ``--llama-bin`` adds ``--rpc``, as a
user's build would see its CUDA cards), the plan's command and a given one, and ``--write``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from solver.cli import cli
from tests.conftest import ROOT
from tests.engine import harness

MODEL = ROOT / "models" / "qwen3-30b-a3b-q4_k_m.yaml"


@pytest.fixture(scope="module")
def rig_bin(llama_bin: Path, gguf_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """(rig file, wrapper folder, GGUF): two 16 GiB cards planning Qwen3-30B-A3B at 8K."""
    gguf, _ = harness.ensure_gguf("qwen3-30b-a3b", gguf_dir)
    folder = tmp_path_factory.mktemp("verify")
    rig = folder / "rig.yaml"
    gpu = "  - name: RTX 4060 Ti 16GB\n    free: 16 GiB\n    reserve: 700 MiB\n    mem_bandwidth: 288 GB/s\n"
    rig.write_text(
        f"# two cards\nname: duo\nmodel: {MODEL}\nengine: llama.cpp\nbackend: rpc\nhost_bandwidth: 60 GB/s\n"
        f"context: 8192\ngpus:\n{gpu}{gpu}"
    )
    with harness.rpc_servers(2, llama_bin) as rpc:
        wrap = folder / "bin"
        wrap.mkdir()
        script = wrap / "llama-fit-params"
        script.write_text(f'#!/bin/sh\nexec "{llama_bin / "llama-fit-params"}" --rpc {rpc} "$@"\n')
        script.chmod(0o755)
        yield rig, wrap, gguf


def _verify(rig: Path, *args: str | Path) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, ["verify", str(rig), *map(str, args)])
    return res.exit_code, res.stdout, res.stderr


def test_the_plans_command_against_llama_cpps_estimate(rig_bin):
    rig, wrap, gguf = rig_bin
    code, out, err = _verify(rig, "--llama-bin", wrap, "--gguf", gguf, "--json")
    assert code == 0, out + err
    d = json.loads(out)
    assert d["fits"] and [c["device"] for c in d["cards"]] == ["RPC0", "RPC1"]
    assert "-ngl" in d["command"] and "--tensor-split" in d["command"]
    for c in d["cards"]:
        assert c["total_bytes"] == c["model_bytes"] + c["context_bytes"] + c["compute_bytes"]
        assert 0 < c["total_bytes"] <= c["free_bytes"] and c["compute_bytes"] > 0
        # the plan's count (weights, KV, the 256 MiB allowance) within 10% of llama.cpp's own
        assert abs(c["plan_bytes"] - c["total_bytes"]) <= 0.10 * c["total_bytes"], c
    code, text, _ = _verify(rig, "--llama-bin", wrap, "--gguf", gguf)
    assert code == 0 and "RPC0" in text and "the command fits every card" in text


def test_given_args_and_a_command_that_does_not_fit(rig_bin):
    rig, wrap, gguf = rig_bin
    code, out, _ = _verify(
        rig, "--llama-bin", wrap, "--gguf", gguf, "--json", "--", "-c", "8192", "-ngl", "999"
    )
    d = json.loads(out)
    assert code == 0 and d["command"] == ["-c", "8192", "-ngl", "999"] and d["fits"]
    code, out, _ = _verify(
        rig, "--llama-bin", wrap, "--gguf", gguf, "--json", "--", "-c", "8192", "-ngl", "999", "-ts", "1,0"
    )
    d = json.loads(out)
    assert code == 1 and not d["fits"] and not d["cards"][0]["fits"]


def test_write_sets_each_gpus_buffer_from_llama_cpps_compute(rig_bin, tmp_path):
    rig, wrap, gguf = rig_bin
    out = tmp_path / "calibrated.yaml"
    code, text, err = _verify(rig, "--llama-bin", wrap, "--gguf", gguf, "--json", "--write", out)
    assert code == 0 and err.strip() == f"wrote {out}"
    d = json.loads(text)
    written = out.read_text()
    assert written.startswith("# two cards\n") and "llama-fit-params --fit-print (build " in written
    gpus = yaml.safe_load(written)["gpus"]
    assert [g["buffer"] for g in gpus] == [f"{c['compute_bytes'] // 2**20} MiB" for c in d["cards"]]
    code, again, _ = _verify(out, "--llama-bin", wrap, "--gguf", gguf, "--json")
    assert code == 0 and json.loads(again)["fits"]
