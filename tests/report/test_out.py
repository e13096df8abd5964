"""``--out plan.json``: the --json object, written atomically, never over an input; and ``--export``."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.errors import InputError
from solver.files.atomicfile import atomic_open, write_atomic
from tests.helpers.rigfiles import tiny_rig


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def run(*args: str | Path):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_out_holds_the_same_object_as_json(tmp_path):
    rig = tiny_rig(tmp_path)
    res = run(rig, "--json", "--check", "--export", "strata", "--out", "plan.json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == json.loads((tmp_path / "plan.json").read_text())
    assert res.stdout == (tmp_path / "plan.json").read_text()


def test_out_with_the_table_still_printed(tmp_path):
    rig = tiny_rig(tmp_path)
    res = run(rig, "--out", "plan.json")
    assert res.exit_code == 0, res.output
    assert "proportional" in res.stdout and not res.stdout.lstrip().startswith("{")
    got = json.loads((tmp_path / "plan.json").read_text())
    assert got["rig"] == "tiny" and got["status"] == "optimal" and got["cuts"]


def test_out_is_written_for_an_infeasible_rig(tmp_path):
    rig = tiny_rig(tmp_path, gpus=[{"free": 100, "layer_ms": 1.0}, {"free": 100, "layer_ms": 1.0}])
    res = run(rig, "--out", "plan.json")
    assert res.exit_code == 3
    got = json.loads((tmp_path / "plan.json").read_text())
    assert got["status"] == "infeasible" and got["stages"] == [] and got["reason"]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_write_failing_midway_keeps_the_old_file(tmp_path, monkeypatch):
    rig = tiny_rig(tmp_path)
    (tmp_path / "plan.json").write_text("old plan\n")

    def half_then_fail(obj, f, **kw):
        f.write('{"rig": "ti')
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(json, "dump", half_then_fail)
    res = run(rig, "--out", "plan.json")
    assert isinstance(res.exception, RuntimeError)
    assert (tmp_path / "plan.json").read_text() == "old plan\n"
    assert leftovers(tmp_path) == []


def test_a_failing_rename_is_one_line_and_keeps_the_old_file(tmp_path, monkeypatch):
    rig = tiny_rig(tmp_path)
    (tmp_path / "plan.json").write_text("old plan\n")

    def no_rename(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", no_rename)
    res = run(rig, "--out", "plan.json")
    assert res.exit_code == 2
    assert res.stderr.strip() == "plan.json: cannot write: Permission denied"
    assert (tmp_path / "plan.json").read_text() == "old plan\n"
    assert leftovers(tmp_path) == []


def test_an_unwritable_place_is_one_line(tmp_path):
    rig = tiny_rig(tmp_path)
    res = run(rig, "--out", "no/such/dir/plan.json")
    assert res.exit_code == 2
    assert res.stderr.strip() == "no/such/dir/plan.json: cannot write: No such file or directory"


@pytest.mark.parametrize(
    "target", ["rig.yaml", "model.yaml", "profile.txt", "link.yaml", "./sub/../rig.yaml"]
)
def test_out_refuses_to_overwrite_an_input(tmp_path, target):
    rig = tiny_rig(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.yaml").symlink_to(tmp_path / "model.yaml")
    before = {p: p.read_bytes() for p in (rig, tmp_path / "model.yaml", tmp_path / "profile.txt")}
    res = run(rig, "--out", target)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to overwrite an input file" in lines[0]
    assert before == {p: p.read_bytes() for p in before}


def test_out_refuses_a_profile_given_on_the_command_line(tmp_path):
    rig = tiny_rig(tmp_path)
    (tmp_path / "other.txt").write_bytes((tmp_path / "profile.txt").read_bytes())
    res = run(rig, "--profile", "other.txt", "--out", "other.txt")
    assert res.exit_code == 2 and "refusing to overwrite an input file" in res.stderr


def test_out_and_plot_cannot_be_the_same_file(tmp_path):
    rig = tiny_rig(tmp_path)
    res = run(rig, "--out", "x.png", "--plot", "x.png")
    assert res.exit_code == 2 and "refusing to overwrite the --out file" in res.stderr
    assert not (tmp_path / "x.png").exists()


def test_write_atomic_keeps_the_targets_mode_and_gives_new_files_the_umask(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "f.txt", "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "g.bin", "g.bin", b"\x00\x01")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "g.bin").stat().st_mode) == 0o644
    assert leftovers(tmp_path) == []


def test_atomic_open_leaves_nothing_when_the_body_fails(tmp_path):
    with pytest.raises(ValueError), atomic_open(tmp_path / "f.txt", "f.txt") as f:
        f.write("partial")
        raise ValueError("stop")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InputError, match="d: cannot write"):
        write_atomic(tmp_path, "d", "x")


# --export through the CLI


def reordering_rig(tmp_path: Path) -> Path:
    """Only the big card can hold layer 0's embeddings, so a free order must put it first."""
    gpus = [{"name": "small", "free": 1500, "layer_ms": 1.0}, {"name": "big", "free": 3000, "layer_ms": 1.0}]
    return tiny_rig(tmp_path, gpus=gpus, rig_extra={"order": "auto"}, model_extra={"first_stage_bytes": 1200})


def test_export_strata_prints_the_flag_and_the_config_snippet(tmp_path):
    rig = tiny_rig(tmp_path)
    res = run(rig, "--json")
    cuts = json.loads(res.stdout)["cuts"]
    res = run(rig, "--export", "strata")
    assert res.exit_code == 0, res.output
    split = ",".join(map(str, cuts))
    assert f"--layer-split {split}\n" in res.stdout
    assert f'"layer_split": {json.dumps(cuts)}\n' in res.stdout
    assert "CUDA_VISIBLE_DEVICES" not in res.stdout


def test_export_strata_sets_the_device_order_when_it_changed(tmp_path):
    rig = reordering_rig(tmp_path)
    res = run(rig, "--json", "--export", "strata")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["gpus"] == [1, 0]
    lines = got["export"]["lines"]
    cuts = ",".join(map(str, got["cuts"]))
    assert lines == ["export CUDA_VISIBLE_DEVICES=1,0", f"--layer-split {cuts}", f'"layer_split": [{cuts}]']
    table = run(rig, "--export", "strata")
    assert all(f"{line}\n" in table.stdout for line in lines)


def test_export_vllm_gives_layers_per_stage(tmp_path):
    gpus = [{"name": "small", "free": 2500, "layer_ms": 1.0}, {"name": "big", "free": 4000, "layer_ms": 1.0}]
    rig = tiny_rig(tmp_path, gpus=gpus, rig_extra={"order": "auto"}, model_extra={"first_stage_bytes": 1200})
    got = json.loads(run(rig, "--engine", "vllm", "--json").stdout)
    sizes = ",".join(str(s["end"] - s["start"]) for s in got["stages"])
    assert (
        f"VLLM_PP_LAYER_PARTITION={sizes} vllm serve"
        in run(rig, "--engine", "vllm", "--export", "vllm").stdout
    )


def test_export_strata_with_one_gpu_prints_no_empty_flag(tmp_path):
    rig = tiny_rig(tmp_path, gpus=[{"free": 10_000, "layer_ms": 1.0}])
    res = run(rig, "--export", "strata")
    assert res.exit_code == 0, res.output
    assert "--layer-split" not in res.stdout.replace("no --layer-split needed", "")
    assert '"layer_split": []' in res.stdout
