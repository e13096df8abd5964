"""``solve verify``'s clean failures, without llama.cpp: no llama-fit-params, a build without
``--fit-print``, no GGUF; each one line naming what was looked for, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from tests.conftest import ROOT

RIG = ROOT / "rigs" / "llama-mix.yaml"


def _verify(*args: str | Path) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["verify", str(RIG), *map(str, args)])
    return res.exit_code, res.output


def test_no_binary_in_the_folder_given(tmp_path):
    code, out = _verify("--llama-bin", tmp_path, "--gguf", tmp_path / "m.gguf")
    assert code == 2 and out.strip() == (
        f"verify: no llama-fit-params in {tmp_path}; --llama-bin names the folder of your llama.cpp "
        "binaries (build/bin)"
    )


def test_no_binary_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out = _verify("--gguf", tmp_path / "m.gguf")
    assert code == 2 and "no llama-fit-params on PATH" in out and "--llama-bin DIR" in out
    assert len(out.strip().splitlines()) == 1


def test_a_build_without_fit_print(tmp_path):
    fake = tmp_path / "llama-fit-params"
    fake.write_text("#!/bin/sh\necho 'usage: llama-fit-params [options]'\necho '  -m, --model FNAME'\n")
    fake.chmod(0o755)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    code, out = _verify("--llama-bin", tmp_path, "--gguf", gguf)
    assert code == 2 and out.strip().startswith(f"verify: {fake} has no --fit-print")


@pytest.mark.parametrize("given", [True, False])
def test_no_gguf(tmp_path, given):
    fake = tmp_path / "llama-fit-params"
    fake.write_text("#!/bin/sh\necho '--fit-print'\n")
    fake.chmod(0o755)
    extra = ["--gguf", tmp_path / "absent.gguf"] if given else []
    code, out = _verify("--llama-bin", tmp_path, *extra)
    want = f"verify: no GGUF {tmp_path / 'absent.gguf'}" if given else "verify: the model file names no GGUF"
    assert code == 2 and out.strip().startswith(want) and "--gguf FILE" in out
