"""Outputs that are not plain files: a device or FIFO is written through, a symlink's target is written
(the link stays), anything else is refused with one line; and never over an input, even through a link."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import solver.probe.run as probe_mod
from solver.cli import cli
from solver.errors import InputError
from solver.files.atomicfile import write_atomic
from tests.helpers.rigfiles import tiny_rig

#: Seconds a FIFO reader waits for the writer: only catches a hang.
READ_TIMEOUT = 30


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def run(*args: str | Path):
    return CliRunner().invoke(cli, [str(a) for a in args])


@contextmanager
def fifo_reader(path: Path) -> Iterator[list[bytes]]:
    """A FIFO at ``path`` with a thread reading it to the end; the list holds what it read."""
    os.mkfifo(path)
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield got
    finally:
        reader.join(READ_TIMEOUT)
        if reader.is_alive():  # the command never opened the FIFO: unblock the reader
            with open(path, "wb"):
                pass
            reader.join(READ_TIMEOUT)


def no_temp_files(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_out_to_a_fifo_writes_through_and_keeps_the_fifo(tmp_path):
    rig = tiny_rig(tmp_path)
    with fifo_reader(tmp_path / "plan.fifo") as got:
        res = run(rig, "--json", "--out", "plan.fifo")
    assert res.exit_code == 0, res.output
    assert stat.S_ISFIFO(os.lstat(tmp_path / "plan.fifo").st_mode)
    assert got and json.loads(got[0]) == json.loads(res.stdout)
    assert no_temp_files(tmp_path)


def test_out_through_a_symlink_to_a_fifo_keeps_both(tmp_path):
    rig = tiny_rig(tmp_path)
    (tmp_path / "link").symlink_to(tmp_path / "plan.fifo")
    with fifo_reader(tmp_path / "plan.fifo") as got:
        res = run(rig, "--json", "--out", "link")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "link").is_symlink() and stat.S_ISFIFO(os.lstat(tmp_path / "plan.fifo").st_mode)
    assert json.loads(got[0]) == json.loads(res.stdout)


def test_out_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    rig = tiny_rig(tmp_path)
    (tmp_path / "plans").mkdir()
    target = tmp_path / "plans" / "plan.json"
    target.write_text("old\n")
    target.chmod(0o640)
    (tmp_path / "link").symlink_to(target)
    res = run(rig, "--json", "--out", "link")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "link").is_symlink() and os.readlink(tmp_path / "link") == str(target)
    assert json.loads(target.read_text()) == json.loads(res.stdout)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert no_temp_files(tmp_path) and no_temp_files(tmp_path / "plans")


def test_a_dangling_symlink_creates_its_target(tmp_path):
    (tmp_path / "link").symlink_to("made.txt")
    write_atomic(tmp_path / "link", "link", "text\n")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "made.txt").read_text() == "text\n"


def test_a_chain_of_symlinks_writes_the_last_target(tmp_path):
    (tmp_path / "file.txt").write_text("old")
    (tmp_path / "b").symlink_to("file.txt")
    (tmp_path / "a").symlink_to("b")
    write_atomic(tmp_path / "a", "a", "new")
    assert (tmp_path / "file.txt").read_text() == "new"
    assert (tmp_path / "a").is_symlink() and (tmp_path / "b").is_symlink()


def test_a_character_device_is_written_through_not_replaced():
    """/dev/null (a character device every POSIX system has) stays one after a write."""
    before = os.stat("/dev/null")
    if not os.access("/dev/null", os.W_OK):
        pytest.skip("/dev/null is not writable here")
    write_atomic(Path("/dev/null"), "/dev/null", "discarded\n")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_out_dev_null_keeps_it_a_device(tmp_path):
    rig = tiny_rig(tmp_path)
    res = run(rig, "--json", "--out", "/dev/null")
    assert res.exit_code == 0, res.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_directory_or_a_socket_is_refused_in_one_line(tmp_path):
    rig = tiny_rig(tmp_path)
    (tmp_path / "dir").mkdir()
    (tmp_path / "to-dir").symlink_to("dir")
    for out in ("dir", "to-dir"):  # messages name the file a link leads to
        res = run(rig, "--out", out)
        assert res.exit_code == 2 and res.stderr == "dir: cannot write: is a directory\n"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind("s.sock")
        res = run(rig, "--out", "s.sock")
    finally:
        sock.close()
    assert res.exit_code == 2 and res.stderr == "s.sock: cannot write: is a socket\n"
    assert stat.S_ISSOCK(os.lstat(tmp_path / "s.sock").st_mode) and no_temp_files(tmp_path)


def test_a_symlink_loop_is_one_line(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(InputError, match=r"^a: cannot write: Too many levels of symbolic links$"):
        write_atomic(tmp_path / "a", "a", "x")


@pytest.mark.parametrize("link", ["to-rig", "to-to-rig"])
def test_an_input_behind_symlinks_is_still_refused(tmp_path, link):
    rig = tiny_rig(tmp_path)
    (tmp_path / "to-rig").symlink_to("rig.yaml")
    (tmp_path / "to-to-rig").symlink_to("to-rig")
    before = rig.read_bytes()
    res = run(rig, "--out", link)
    assert res.exit_code == 2 and "refusing to overwrite an input file" in res.stderr
    assert rig.read_bytes() == before and (tmp_path / link).is_symlink()


def test_rig_new_into_a_fifo(tmp_path):
    with fifo_reader(tmp_path / "rig.fifo") as got:
        res = run("rig", "new", "RTX 4090", "RTX 3090", "-o", "rig.fifo")
    assert res.exit_code == 0, res.output
    assert [g["name"] for g in yaml.safe_load(got[0])["gpus"]] == ["RTX 4090", "RTX 3090"]
    assert stat.S_ISFIFO(os.lstat(tmp_path / "rig.fifo").st_mode)


def test_probe_writes_through_a_symlink_atomically(tmp_path, monkeypatch):
    from tests.probe.test_probe import box, fake_nvml

    monkeypatch.setattr(probe_mod, "load_nvml", lambda: fake_nvml(box()))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (tmp_path / "rigs").mkdir()
    (tmp_path / "mine.yaml").symlink_to("rigs/real.yaml")
    res = run("probe", "-o", "mine.yaml")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "mine.yaml").is_symlink() and "gpus:" in (tmp_path / "rigs" / "real.yaml").read_text()
    res = run("probe", "-o", "rigs", "--force")
    assert res.exit_code == 2 and res.stderr.strip() == "rigs: cannot write: is a directory"
