"""solver.calibrate.rigedit: keys set in a rig's own text, other lines kept, the result a loadable rig."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from solver.calibrate.rigedit import Edit, edit_text, write_rig
from solver.engines import REGISTRY
from solver.errors import InputError
from solver.files.config import check_rig
from solver.files.yamlfile import parse_yaml

BLOCK = """# my rig
model: m.yaml        # the model
engine: llama.cpp
gpus:
  - name: A           # first card
    free: 10 GiB
  - {name: B, free: 8 GiB}
"""


def loads(text: str) -> dict:
    check_rig(parse_yaml(text, "t.yaml"), REGISTRY)
    return yaml.safe_load(text)


def test_new_keys_go_before_gpus_and_into_each_gpu() -> None:
    edits = [
        Edit("host_bandwidth", "61.6 GB/s", "fitted"),
        Edit("buffer", "300 MiB", "from the log", gpu=0),
        Edit("buffer", "200 MiB", gpu=1),
    ]
    text = edit_text(BLOCK, edits, "t.yaml")
    data = loads(text)
    assert data["host_bandwidth"] == "61.6 GB/s"
    assert data["gpus"][0]["buffer"] == "300 MiB" and data["gpus"][1]["buffer"] == "200 MiB"
    assert "host_bandwidth: 61.6 GB/s   # fitted\ngpus:" in text
    assert "    free: 10 GiB\n    buffer: 300 MiB   # from the log\n" in text
    assert "  - {name: B, free: 8 GiB, buffer: 200 MiB}" in text
    for line in BLOCK.splitlines():
        assert line in text.replace(", buffer: 200 MiB", "")


def test_an_existing_key_is_replaced_and_its_old_line_kept_as_a_comment() -> None:
    text = edit_text(
        BLOCK.replace("engine: llama.cpp", "engine: llama.cpp\nswitch_ms: 0.08   # default"),
        [Edit("switch_ms", "0.11", "fitted"), Edit("free", "9 GiB", gpu=1)],
        "t.yaml",
    )
    assert "switch_ms: 0.11   # fitted\n# was: switch_ms: 0.08   # default\n" in text
    assert loads(text)["switch_ms"] == 0.11 and loads(text)["gpus"][1]["free"] == "9 GiB"


def test_a_file_without_a_final_newline() -> None:
    text = edit_text(
        BLOCK.rstrip("\n").replace("  - {name: B, free: 8 GiB}", "  - name: B\n    free: 8 GiB"),
        [Edit("buffer", "1 GiB", gpu=1)],
        "t.yaml",
    )
    assert loads(text)["gpus"][1] == {"name": "B", "free": "8 GiB", "buffer": "1 GiB"}


def test_nothing_is_written_when_the_edit_would_not_load(tmp_path: Path) -> None:
    out = tmp_path / "r.yaml"
    out.write_text(BLOCK)
    with pytest.raises(InputError, match="not written: the edited rig would not load"):
        write_rig(BLOCK, [Edit("gpu_efficiency", "1.5")], out, "r.yaml")
    assert out.read_text() == BLOCK
    with pytest.raises(InputError, match="gpus\\[5\\]: no such GPU"):
        write_rig(BLOCK, [Edit("buffer", "1 GiB", gpu=5)], out, "r.yaml")
    assert out.read_text() == BLOCK
