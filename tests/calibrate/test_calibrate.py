"""``solve calibrate``: the least-squares fit of the cover exponent b, its inputs, and ``--write``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

from solver.calibrate.cover import fit_cover, parse_point, points_from_log, write_curve
from solver.cli import cli
from solver.errors import InputError
from solver.files.config import CoverCurve, load_model

REFERENCE = ["5805/24576=69.2", "14384/24576=89.8", "14541/24576=92.2", "0.8138=99.4"]


def fit_of(*texts: str) -> float:
    return fit_cover([parse_point(t) for t in texts]).b


def test_the_reference_points_land_near_b_4():
    b = fit_of(*REFERENCE)
    assert 3.9 < b < 4.1
    # the same minimum by brute force over a fine grid, written out independently
    f = np.array([5805 / 24576, 14384 / 24576, 14541 / 24576, 0.8138])
    h = np.array([0.692, 0.898, 0.922, 0.994])
    grid = np.linspace(3.0, 5.0, 200_001)
    sse = ((1 - (1 - f[None, :]) ** grid[:, None] - h[None, :]) ** 2).sum(axis=1)
    assert b == pytest.approx(grid[np.argmin(sse)], abs=2e-5)


@pytest.mark.parametrize(
    ("point", "b"),
    [
        ("0.5=87.5", 3.0),  # 1 - 0.5^3 = 0.875
        ("1/4=43.75", 2.0),  # 1 - 0.75^2 = 0.4375
        ("1/2=50", 1.0),  # the uniform curve
        ("0.9=68.377223398", 0.5),  # 1 - 0.1^0.5
    ],
)
def test_one_point_has_an_exact_b(point, b):
    assert fit_of(point) == pytest.approx(b, rel=1e-9)


def test_one_point_matches_the_closed_form():
    p = parse_point("5805/24576=69.2")
    assert fit_of("5805/24576=69.2") == pytest.approx(math.log(1 - p.hit) / math.log(1 - p.f), rel=1e-9)


def test_consistent_points_give_their_common_b():
    assert fit_of("0.5=75", "0.75=93.75", "0.1=19") == pytest.approx(2.0, rel=1e-9)


def test_the_fit_reports_fitted_hits_and_rms():
    fit = fit_cover([parse_point("0.5=75"), parse_point("0.5=85")])
    # two measurements at one f: the best H(0.5) is their mean, 80%, so b = log2(5)
    assert fit.b == pytest.approx(math.log2(5), rel=1e-9)
    assert fit.fitted == pytest.approx([0.8, 0.8])
    assert fit.rms_pp == pytest.approx(5.0)


@pytest.mark.parametrize(
    ("text", "f", "hit", "held"),
    [
        ("5805/24576=69.2", 5805 / 24576, 0.692, 5805),
        ("0.8138=99.4%", 0.8138, 0.994, None),
        (" 1 / 2 = 50 % ", 0.5, 0.5, 1),
        (".25=10", 0.25, 0.1, None),
    ],
)
def test_point_forms(text, f, hit, held):
    p = parse_point(text)
    assert (p.f, p.hit, p.held) == (pytest.approx(f), pytest.approx(hit), held)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("abc", "expected HELD/TOTAL=HIT%"),
        ("5805/24576", "expected HELD/TOTAL=HIT%"),
        ("0.5=-3", "expected HELD/TOTAL=HIT%"),
        ("1/0=5", "pairs held must be 1 to 0"),
        ("3/2=50", "pairs held must be 1 to 2"),
        ("0/2=50", "above 0 and below 1, got 0"),
        ("1=50", "above 0 and below 1, got 1"),
        ("0.5=0", "above 0% and below 100%, got 0%"),
        ("0.5=100", "above 0% and below 100%, got 100%"),
        ("0.5=150", "got 150%"),
    ],
)
def test_bad_points_are_one_clear_error(text, says):
    with pytest.raises(InputError) as err:
        parse_point(text)
    assert says in str(err.value) and str(err.value).startswith("--point:")


def split(cuda: int, a: int, b: int, held: int, profiled: int) -> str:
    return (
        f"[I 12:00:0{cuda}] layer split: CUDA{cuda} runs layers {a}-{b}, expert cache {held + 7} slots "
        f"(2.98 GiB), {held} of its {profiled} profiled pairs"
    )


def test_log_pairs_each_boot_with_its_last_hit_line(write):
    log = "\n".join(
        [
            "boot 1",
            split(0, 0, 9, 1000, 5120),
            split(1, 10, 20, 1200, 5632),
            split(2, 21, 34, 1800, 7168),
            split(3, 35, 47, 1805, 6656),
            "[I] decode expert cache hit rate: 60.0% (600 hits / 1000 lookups)",
            "[I] decode expert cache hit rate: 69.2% (6920 hits / 10001 lookups)",
            "boot 2",
            split(0, 0, 23, 9000, 12288),
            split(1, 24, 47, 11000, 12288),
            "INFO decode expert cache hit rate: 99.4%",
        ]
    )
    points, notes = points_from_log(write("engine.log", log))
    assert notes == []
    assert [(p.held, p.total) for p in points] == [(5805, 24576), (20000, 24576)]
    assert points[0].hit == pytest.approx(6920 / 10001)  # hits / lookups, not the rounded percent
    assert points[1].hit == pytest.approx(0.994)
    assert points[0].source.endswith("engine.log:7") and points[1].source.endswith("engine.log:11")


def test_log_boots_without_a_hit_line_or_with_a_gap_are_skipped(write):
    log = "\n".join(
        [
            split(0, 0, 23, 9000, 12288),
            split(1, 24, 47, 11000, 12288),
            split(0, 0, 23, 9000, 12288),  # CUDA0 again: the first boot never reported a hit rate
            split(1, 30, 47, 11000, 9000),  # layers 24-29 missing
            "decode expert cache hit rate: 90.0% (9 hits / 10 lookups)",
            split(0, 0, 47, 100, 24576),
            "decode expert cache hit rate: 50.0% (1 hits / 2 lookups)",
        ]
    )
    points, notes = points_from_log(write("engine.log", log))
    assert [(p.held, p.total, p.hit) for p in points] == [(100, 24576, 0.5)]
    assert "engine.log:1: boot without a 'decode expert cache hit rate' line" in notes[0]
    assert "0-23, 30-47 do not run 0, 1, 2" in notes[1]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nothing to see\n", "no 'layer split: CUDA...' lines"),
        (split(0, 0, 47, 100, 200) + "\n", "no boot with both layer-split and hit-rate lines"),
        (split(0, 0, 47, 100, 200) + "\ndecode expert cache hit rate: 100.0%\n", "below 100%"),
        (
            split(0, 0, 47, 100, 200) + "\ndecode expert cache hit rate: 9% (5 hits / 4 lookups)\n",
            "more than",
        ),
    ],
)
def test_unusable_logs_are_one_clear_error(write, text, says):
    with pytest.raises(InputError, match=r"engine\.log") as err:
        points_from_log(write("engine.log", text))
    assert says in str(err.value)


MODEL = """\
# my model, hand-tuned
name: tiny
layers: 4
experts: 8            # per layer
expert_bytes: 1 MiB
profile: tiny.txt
curve: {kind: counts}   # from the profile's counts
dense_bytes: 10 MiB   # after the curve
"""


def test_write_replaces_the_curve_line_and_keeps_the_rest(write):
    path = write("m.yaml", MODEL)
    at = write_curve(path, 3.97712345, "fitted")
    lines = path.read_text().splitlines()
    assert at == 7 and lines[6] == "curve: {kind: cover, b: 3.97712}   # fitted"
    assert lines[7] == "# was: curve: {kind: counts}   # from the profile's counts"
    assert lines[:6] + lines[8:] == MODEL.splitlines()[:6] + MODEL.splitlines()[7:]
    model, _ = load_model(path)
    assert model.curve == CoverCurve(kind="cover", b=3.97712)


def test_write_replaces_a_block_curve(write):
    text = MODEL.replace(
        "curve: {kind: counts}   # from the profile's counts\n",
        "curve:\n  kind: power\n  exponent: 0.8\n\n# next\n",
    )
    path = write("m.yaml", text)
    write_curve(path, 2.5, "fitted")
    out = path.read_text()
    was = "# was: curve:\n# was:   kind: power\n# was:   exponent: 0.8\n"
    assert f"curve: {{kind: cover, b: 2.5}}   # fitted\n{was}\n# next\n" in out
    assert load_model(path)[0].curve.b == 2.5


def test_write_appends_when_there_is_no_curve(write):
    text = MODEL.replace("curve: {kind: counts}   # from the profile's counts\n", "").rstrip("\n")
    path = write("m.yaml", text)  # no newline at the end either
    assert write_curve(path, 4.0, "fitted") == 8
    assert path.read_text() == text + "\ncurve: {kind: cover, b: 4}   # fitted\n"
    assert load_model(path)[0].curve.b == 4.0


def test_write_refuses_an_invalid_model_and_leaves_it(write):
    path = write("m.yaml", MODEL.replace("layers: 4", "layers: four"))
    before = path.read_text()
    with pytest.raises(InputError, match="layers"):
        write_curve(path, 4.0, "fitted")
    assert path.read_text() == before


def test_cli_fits_prints_and_writes(write):
    path = write("m.yaml", MODEL)
    args = ["calibrate", "--write", str(path)] + [a for p in REFERENCE for a in ("--point", p)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "cover curve b = 3.97" in result.stdout and "69.20%" in result.stdout
    b = load_model(path)[0].curve.b
    assert 3.9 < b < 4.1


def test_cli_reads_a_log_and_points_together(write, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    log = write("engine.log", split(0, 0, 47, 14384, 24576) + "\ndecode expert cache hit rate: 89.8%\n")
    result = CliRunner().invoke(cli, ["calibrate", "--log", str(log), "--point", "0.8138=99.4"])
    assert result.exit_code == 0, result.output
    assert "14,384/24,576" in result.stdout and "2 points" in result.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "no points"),
        (["--point", "x"], "--point: expected"),
        (["--point", "0.5=100"], "below 100%"),
        (["--log", "missing.log"], "missing.log: no such file"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(args, says):
    result = CliRunner().invoke(cli, ["calibrate", *args])
    assert result.exit_code == 2
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
