"""``solve profile synth|convert|from-traces|show`` driven through the CLI."""

from __future__ import annotations

import re
import shlex
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.profiles.format import Profile, read_profile, strp_bytes
from solver.profiles.stats import layer_ranges, layer_skew, top_shares
from solver.profiles.synth import SynthParams, counts_curve, synth_profile
from solver.profiles.traces import write_trace


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Run every command from tmp_path, so files are named as a user in that folder sees them."""
    monkeypatch.chdir(tmp_path)


def run(*args: str | Path):
    return CliRunner().invoke(cli, [str(a) for a in args])


def pairs(p: Profile) -> list[tuple[int, int]]:
    return list(zip(p.layer.tolist(), p.expert.tolist()))


def test_synth_reproduces_the_shipped_profile(tmp_path, root):
    out = tmp_path / "s.txt"
    res = run("profile", "synth", "--layers", 48, "--experts", 512, "--seed", 0, "-o", out)
    assert res.exit_code == 0, res.output
    got = read_profile(out, "s.txt")
    shipped = read_profile(root / "models/profiles/qwen3-next-80b-a3b.txt", "shipped")
    assert pairs(got) == pairs(shipped)
    assert got.count.tolist() == shipped.count.tolist()


def test_synth_header_says_synthetic_and_its_command_reproduces_the_file(tmp_path):
    out = tmp_path / "a.txt"
    res = run(
        "profile", "synth", "--layers", 6, "--experts", "0,8,8,16,8,8", "--skew", 0.9, "--seed", 3, "-o", out
    )
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert text.startswith("# SYNTHETIC")
    command = re.search(r"^# Made by: (solve profile synth .*)$", text, re.M).group(1)
    args = [*shlex.split(command)[1:], "-o", str(tmp_path / "b.txt")]
    assert run(*args).exit_code == 0
    assert (tmp_path / "b.txt").read_text() == text


def test_synth_dense_layers_have_no_pairs_and_strp_keeps_the_ranking(tmp_path):
    experts = "0,8,8,16,8,8"
    assert (
        run("profile", "synth", "--layers", 6, "--experts", experts, "-o", tmp_path / "a.txt").exit_code == 0
    )
    res = run("profile", "synth", "--layers", 6, "--experts", experts, "-o", tmp_path / "a.strp")
    assert res.exit_code == 0
    assert "STRP v1 carries no counts" in res.stderr
    text, strp = read_profile(tmp_path / "a.txt", "t"), read_profile(tmp_path / "a.strp", "s")
    assert 0 not in text.layer.tolist() and len(text) == 48
    assert strp.shape == (6, 16) and strp.count is None
    assert pairs(strp) == pairs(text)


def test_synth_prints_the_counts_curve_and_no_measured_rates_for_another_model(tmp_path):
    res = run("profile", "synth", "--layers", 4, "--experts", 64, "--tokens", 2000, "-o", tmp_path / "p.txt")
    assert res.exit_code == 0, res.output
    p = synth_profile([64] * 4, SynthParams(tokens=2000))
    for f, share in zip((0.1, 0.25, 0.5), counts_curve(p.count, [0.1, 0.25, 0.5])):
        assert re.search(rf"{f:.1%}\s.*\s{share:.1%}", res.output), (f, res.output)
    # the box's hit rates were measured on Qwen3-Next (48 x 512): they say nothing about this model
    for text in (res.output, (tmp_path / "p.txt").read_text()):
        assert "69.2%" not in text and "measured," not in text and "23.6%" not in text


def test_synth_of_the_box_model_compares_with_the_box_measurements(tmp_path):
    res = run("profile", "synth", "--layers", 48, "--experts", 512, "--tokens", 500, "-o", tmp_path / "p.txt")
    assert res.exit_code == 0, res.output
    p = synth_profile([512] * 48, SynthParams(tokens=500))
    for f, share in zip((0.236, 0.59), counts_curve(p.count, [0.236, 0.59])):
        assert re.search(rf"{f:.1%}\s.*\s{share:.1%}\s.*\s(69.2|89.8-92.2)%", res.output), f
    assert "measured, Qwen3-Next on the 3060/5060 Ti box" in res.output
    assert "(measured, Qwen3-Next on the 3060/5060 Ti box: 69.2% and" in (tmp_path / "p.txt").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", 3, "--experts", "4,4"], "expected one per layer (3)"),
        (["--layers", 2, "--experts", "0,0"], "every layer is dense"),
        (["--layers", 2, "--experts", "four"], "expected an integer or a comma list"),
        (["--layers", 2, "--experts", "4", "--skew", "nan"], "finite"),
    ],
)
def test_synth_rejects_bad_parameters(args, message):
    res = run("profile", "synth", *args)
    assert res.exit_code == 2
    assert message in res.output


def write_profile(path: Path, rows: list[tuple[int, ...]]) -> Path:
    path.write_text("# test\n" + "\n".join(" ".join(map(str, r)) for r in rows) + "\n")
    return path


def model_file(tmp_path: Path, layers: int = 3, experts: int = 5) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(f"layers: {layers}\nexperts: {experts}\nexpert_bytes: 1\n")
    return path


ROWS = [(2, 1, 50), (0, 3, 40), (1, 0, 40), (0, 0, 7), (2, 4, 1)]


def test_round_trip_text_strp_text(tmp_path):
    src = write_profile(tmp_path / "p.txt", ROWS)
    res = run("profile", "convert", src, tmp_path / "p.strp")
    assert res.exit_code == 0, res.output
    assert "inferred from the pairs" in res.stderr and "no counts" in res.stderr
    raw = (tmp_path / "p.strp").read_bytes()
    assert struct.unpack_from("<4s5I", raw) == (b"STRP", 1, 3, 5, 5, 5)
    assert run("profile", "convert", tmp_path / "p.strp", tmp_path / "back.txt").exit_code == 0
    back = read_profile(tmp_path / "back.txt", "back")
    assert pairs(back) == [r[:2] for r in ROWS] and back.count is None
    assert "# converted from p.strp (STRP v1, 3 layers x 5 experts)" in (tmp_path / "back.txt").read_text()


def test_convert_takes_the_shape_from_the_model(tmp_path):
    src = write_profile(tmp_path / "p.txt", ROWS)
    model = model_file(tmp_path, layers=4, experts=9)
    res = run("profile", "convert", src, tmp_path / "p.strp", "--model", model)
    assert res.exit_code == 0, res.output
    assert "inferred" not in res.stderr
    p = read_profile(src, "p")
    assert (tmp_path / "p.strp").read_bytes() == strp_bytes(p, 4, 9)


def test_text_to_text_keeps_counts(tmp_path):
    src = write_profile(tmp_path / "p.txt", ROWS)
    assert run("profile", "convert", src, tmp_path / "q.txt").exit_code == 0
    q = read_profile(tmp_path / "q.txt", "q")
    assert list(zip(q.layer.tolist(), q.expert.tolist(), q.count.tolist())) == ROWS


@pytest.mark.parametrize(
    ("rows", "model_args", "message"),
    [
        ([(0, 1), (1, 1), (0, 1)], (), "p.txt:4: pair (0, 1) ranked twice (first at line 2)"),
        ([(0, 1), (3, 1)], (3, 5), "p.txt:3: pair (3, 1): layer out of range (the model has 3 layers)"),
        ([(0, 9)], (3, 5), "p.txt:2: pair (0, 9): expert out of range (layer 0 has 5 experts)"),
    ],
)
def test_convert_rejects_bad_profiles_in_one_line(tmp_path, rows, model_args, message):
    src = write_profile(tmp_path / "p.txt", rows)
    extra = ["--model", model_file(tmp_path, *model_args)] if model_args else []
    res = run("profile", "convert", src, tmp_path / "o.strp", *extra)
    assert res.exit_code == 2
    assert res.stderr.strip() == message
    assert not (tmp_path / "o.strp").exists()


def test_strp_shape_must_match_the_model(tmp_path):
    src = write_profile(tmp_path / "p.txt", ROWS)
    run("profile", "convert", src, tmp_path / "p.strp")
    res = run(
        "profile", "convert", tmp_path / "p.strp", tmp_path / "o.txt", "--model", model_file(tmp_path, 4, 5)
    )
    assert res.exit_code == 2
    assert "STRP shape is 3 layers x 5 experts; the model has 4 x 5" in res.stderr


def test_convert_refuses_to_overwrite_its_inputs(tmp_path):
    src = write_profile(tmp_path / "p.txt", ROWS)
    model = model_file(tmp_path)
    before = src.read_text(), model.read_text()
    for out in (src, model):
        res = run("profile", "convert", src, out, "--model", model)
        assert res.exit_code == 2 and "refusing to overwrite an input file" in res.stderr
    assert (src.read_text(), model.read_text()) == before


def test_from_traces_writes_ranked_counts(tmp_path):
    records = [
        (0, [1, 2], [0.5, 0.5]),
        (1, [2, 0], [0.7, 0.3]),
        (0, [1, 3], [0.6, 0.4]),
        (0, [1, 2], [0.9, 0.1]),
    ]
    write_trace(tmp_path / "a.bin", records[:2])
    write_trace(tmp_path / "b.bin", records[2:])
    res = run("profile", "from-traces", tmp_path / "a.bin", tmp_path / "b.bin", "-o", tmp_path / "p.txt")
    assert res.exit_code == 0, res.output
    p = read_profile(tmp_path / "p.txt", "p")
    assert list(zip(p.layer.tolist(), p.expert.tolist(), p.count.tolist())) == [
        (0, 1, 3),
        (0, 2, 2),
        (0, 3, 1),
        (1, 0, 1),
        (1, 2, 1),
    ]
    text = (tmp_path / "p.txt").read_text()
    assert "4 records, 8 routing events" in text and "gate weights are not used" in text


def test_from_traces_bad_record_is_one_line_and_writes_nothing(tmp_path):
    write_trace(tmp_path / "a.bin", [(0, [1, 2], [0.5, 0.5])] * 3)
    raw = (tmp_path / "a.bin").read_bytes()
    (tmp_path / "a.bin").write_bytes(raw[:-6])
    res = run("profile", "from-traces", tmp_path / "a.bin", "-o", tmp_path / "p.txt")
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("a.bin: record at byte offset 48: truncated")
    assert not (tmp_path / "p.txt").exists()


def test_from_traces_to_strp_with_a_model_and_refusals(tmp_path):
    write_trace(tmp_path / "a.bin", [(0, [1, 2], [0.5, 0.5]), (2, [4], [1.0])])
    model = model_file(tmp_path, 3, 5)
    res = run("profile", "from-traces", tmp_path / "a.bin", "-o", tmp_path / "p.strp", "--model", model)
    assert res.exit_code == 0, res.output
    assert read_profile(tmp_path / "p.strp", "p").shape == (3, 5)
    res = run("profile", "from-traces", tmp_path / "a.bin", "-o", tmp_path / "a.bin")
    assert res.exit_code == 2 and "refusing to overwrite" in res.stderr
    res = run(
        "profile",
        "from-traces",
        tmp_path / "a.bin",
        "-o",
        tmp_path / "q.txt",
        "--model",
        model_file(tmp_path, 2, 5),
    )
    assert res.exit_code == 2 and "layer 2 out of range" in res.stderr
    (tmp_path / "e.bin").write_bytes(b"")
    res = run("profile", "from-traces", tmp_path / "e.bin", "-o", tmp_path / "q.txt")
    assert res.exit_code == 2 and "no routing records" in res.stderr


def test_show_with_counts(tmp_path):
    rows = [(1, 0, 60), (1, 1, 20), (0, 0, 10), (1, 2, 5), (0, 1, 3), (3, 0, 2)]
    src = write_profile(tmp_path / "p.txt", rows)
    res = run("profile", "show", src)
    assert res.exit_code == 0, res.output
    out = res.output
    assert "text, with counts" in out and "0-1, 3" in out and "100 (the counts' total)" in out
    # top 10% of 6 pairs rounds to 1 pair: 60 of 100; 25% -> 2 pairs: 80; 50% -> 3 pairs: 90
    assert re.search(r"10\.0%\s.*\s1\s.*60\.0%", out)
    assert re.search(r"25\.0%\s.*\s2\s.*80\.0%", out)
    assert re.search(r"50\.0%\s.*\s3\s.*90\.0%", out)
    # per layer, top 10% of its pairs is 1 pair: layer 1 60/85, layer 0 10/13, layer 3 2/2
    assert re.search(r"min\s.*\s1\s.*70\.6%", out)
    assert re.search(r"median\s.*\s0\s.*76\.9%", out)
    assert re.search(r"max\s.*\s3\s.*100\.0%", out)


def test_show_strp_and_model_coverage(tmp_path):
    src = write_profile(tmp_path / "p.txt", ROWS)
    run("profile", "convert", src, tmp_path / "p.strp")
    res = run("profile", "show", tmp_path / "p.strp", "--model", model_file(tmp_path, 3, 5))
    assert res.exit_code == 0, res.output
    assert "STRP v1, header 3 layers x 5 experts" in res.output
    assert "5 of the model's 15 (33.3%)" in res.output
    assert "none:" in res.output and "per-layer skew" not in res.output


def test_an_empty_profile_shows_and_converts_to_text_but_strp_needs_a_model(tmp_path):
    src = write_profile(tmp_path / "e.txt", [])
    res = run("profile", "show", src)
    assert res.exit_code == 0 and "layers covered" in res.output and "none" in res.output
    assert run("profile", "convert", src, tmp_path / "e2.txt").exit_code == 0
    res = run("profile", "convert", src, tmp_path / "e.strp")
    assert res.exit_code == 2 and "give --model" in res.stderr
    res = run("profile", "convert", src, tmp_path / "e.strp", "--model", model_file(tmp_path))
    assert res.exit_code == 0 and read_profile(tmp_path / "e.strp", "e").shape == (3, 5)


def test_show_bad_file_is_one_line(tmp_path):
    (tmp_path / "bad.txt").write_text("0 1\n0 x\n")
    res = run("profile", "show", tmp_path / "bad.txt")
    assert res.exit_code == 2
    assert res.stderr.strip() == ("bad.txt:2: expected whole numbers, got 'x'")


def test_layer_skew_uses_the_models_expert_count():
    p = Profile("p", np.array([0, 0, 1]), np.array([0, 1, 0]), np.array([30, 10, 5]))
    # with 20 experts a layer's top 10% is 2 experts: layer 0 holds 40/40, layer 1 5/5
    assert layer_skew(p, np.array([20, 20])).share.tolist() == [1.0, 1.0]
    # without a model, the top 10% of 2 ranked pairs is 1 pair: 30/40
    assert layer_skew(p).share.tolist() == [0.75, 1.0]
    assert top_shares(np.array([5, 30, 10, 0]), (0.25, 0.5)) == [30 / 45, 40 / 45]


def test_layer_ranges():
    assert layer_ranges(np.array([0, 1, 2, 5, 7, 8])) == "0-2, 5, 7-8"
    assert layer_ranges(np.array([], dtype=int)) == "none"
