"""Every input file is read through one bounded reader: a GGUF, a binary file, an endless device and an
oversized file are one line and exit 2, read no further than the kind's limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.errors import InputError
from solver.files import bounded
from solver.files.bounded import YAML_LIMIT, read_bounded
from tests.helpers.inputs import write_base

ROOT = Path(__file__).resolve().parents[2]
GGUF_LINE = "this is a GGUF file: make a model of it with `solve model from-gguf FILE`"


def one_line(*args: object) -> str:
    """stderr of ``solve ARGS``, which must exit 2 with one line and print nothing on stdout."""
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.output
    return result.stderr.rstrip("\n")


@pytest.fixture
def gguf(tmp_path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(64))
    return path


def test_a_gguf_where_yaml_or_json_is_expected(tmp_path, gguf):
    base = write_base(tmp_path)
    for args in (
        [gguf],
        [base / "rig.yaml", "--model", gguf],
        ["rig", "new", "RTX 4090", "--model", gguf, "-o", tmp_path / "new.yaml"],
        ["calibrate", ROOT / "rigs" / "llama-mix.yaml", "--llama-bench", gguf],
        ["model", "from-hf", gguf, "--weights", "FP8"],
    ):
        assert one_line(*args) == f"{gguf}: {GGUF_LINE}", args


def test_an_endless_device_is_read_no_further_than_the_limit():
    assert one_line("/dev/zero") == "/dev/zero: is a binary file, expected a YAML file"
    with pytest.raises(InputError, match="larger than 1 KiB"):
        read_bounded(Path("/dev/zero"), "/dev/zero", "a trace", 1024, binary=None)


def test_a_device_is_not_an_empty_gguf():
    message = one_line("model", "from-gguf", "/dev/urandom")
    assert message == "/dev/urandom: not a regular file (a device or a pipe), expected a GGUF file"


def test_an_oversized_rig_is_refused_by_its_size(tmp_path):
    rig = tmp_path / "rig.yaml"
    rig.write_bytes(b"#" * YAML_LIMIT + b"\n")
    assert one_line(rig) == (
        f"{rig}: is larger than 2 MiB, the most moesplit reads as a YAML file ({YAML_LIMIT + 1:,} bytes)"
    )


def test_running_out_of_memory_is_one_line(tmp_path, monkeypatch):
    base = write_base(tmp_path)

    def exhausted(*args: object, **kwargs: object) -> bytes:
        raise MemoryError

    monkeypatch.setattr("solver.files.yamlfile.read_bounded", exhausted)
    assert one_line(base / "rig.yaml").startswith("out of memory:")
    monkeypatch.setattr(bounded, "open", lambda *a: (_ for _ in ()).throw(MemoryError), raising=False)
    with pytest.raises(InputError, match="too large to read into memory"):
        read_bounded(base / "rig.yaml", "rig.yaml", "a YAML file", YAML_LIMIT)
