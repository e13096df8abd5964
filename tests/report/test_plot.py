"""``--plot FILE.png``: a real PNG for feasible, baseline-over and infeasible rigs; lazy and optional."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.planning.planner import plan_rig
from solver.report.plot import SEGMENTS, _bars, plot_result, stage_bytes
from tests.helpers.enginefactory import random_engine_problem
from tests.helpers.factory import random_problem
from tests.helpers.rigfiles import tiny_rig

pytest.importorskip("matplotlib")


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def run(*args: str | Path):
    return CliRunner().invoke(cli, [str(a) for a in args])


def png_size(path: Path) -> tuple[int, int]:
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR"
    return struct.unpack(">II", raw[16:24])


@pytest.mark.parametrize(
    "gpus",
    [
        None,  # the default small + big pair
        [{"name": "only", "free": 5000, "layer_ms": 1.0}],
        [{"free": 900 + 150 * i, "layer_ms": 0.5 + 0.1 * i} for i in range(8)],  # the two-row layout
    ],
)
def test_plot_writes_a_plausible_png(tmp_path, gpus):
    rig = tiny_rig(tmp_path, gpus=gpus)
    res = run(rig, "--plot", "plan.png")
    assert res.exit_code == 0, res.output
    width, height = png_size(tmp_path / "plan.png")
    assert 800 <= width <= 4000 and 400 <= height <= 2000
    assert (tmp_path / "plan.png").stat().st_size > 20_000
    assert "proportional" in res.stdout  # the table still prints


def test_plot_draws_an_infeasible_rig_and_still_exits_3(tmp_path):
    rig = tiny_rig(tmp_path, gpus=[{"free": 100, "layer_ms": 1.0}, {"free": 100, "layer_ms": 1.0}])
    res = run(rig, "--plot", "plan.png", "--json")
    assert res.exit_code == 3
    assert png_size(tmp_path / "plan.png")[0] > 800


def test_bar_segments_add_up_to_the_free_vram():
    for seed in range(6):
        p = random_problem(seed, n_layers=7, n_gpus=3)
        r = plan_rig(p)
        for plan in (r.plan, r.baseline.plan):
            if plan is None:
                continue
            parts = stage_bytes(p, plan)
            for s, row in zip(plan.stages, parts):
                assert (row >= 0).all()
                if s.room_bytes >= 0:
                    assert row.sum() == p.free[s.gpu]
                else:  # over: the parts exceed the card by exactly the missing room
                    assert row.sum() == p.free[s.gpu] - s.room_bytes


def test_without_matplotlib_it_is_one_line_and_no_plan(tmp_path, monkeypatch):
    rig = tiny_rig(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    res = run(rig, "--plot", "plan.png")
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "plan.png: --plot needs matplotlib, which is not installed: pip install 'moesplit[plot]'"
    ]
    assert res.stdout == "" and not (tmp_path / "plan.png").exists()


def test_planning_does_not_import_matplotlib(plan_modules):
    assert "matplotlib" not in plan_modules


def test_mass_curve_points_lie_on_or_below_the_curve():
    """Each plan's (pairs held, mass held) can be no better than the hottest pairs overall."""
    for seed in range(6):
        p = random_problem(seed, n_layers=7, n_gpus=3)
        r = plan_rig(p)
        best = np.concatenate([[0.0], np.cumsum(np.sort(p.mass)[::-1])])
        for plan in (r.plan, r.baseline.plan):
            if plan is not None:
                assert plan.held_mass <= best[plan.held_pairs] + 1e-12


@pytest.mark.parametrize(
    ("name", "magic"),
    [
        ("plan.svg", b"<?xml"),
        pytest.param("plan.pdf", b"%PDF-", marks=pytest.mark.slow),  # the slowest format to write
        ("Plan.PNG", b"\x89PNG"),
    ],
)
def test_the_extension_picks_the_format(tmp_path, name, magic):
    res = run(tiny_rig(tmp_path), "--plot", name, "--json")
    assert res.exit_code == 0, res.output
    raw = (tmp_path / name).read_bytes()
    assert raw.startswith(magic)
    if name.endswith(".svg"):
        assert b"<svg" in raw[:1000]


@pytest.mark.parametrize(("name", "got"), [("plan.jpg", "'.jpg'"), ("plan", "no extension")])
def test_other_extensions_are_refused_before_planning(tmp_path, name, got):
    res = run(tiny_rig(tmp_path), "--plot", name)
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        f"{name}: --plot writes .png, .svg or .pdf (chosen by the extension), got {got}"
    ]
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("engine", ["strata", "llama.cpp"])
def test_each_stage_shows_its_times_beside_its_memory(engine):
    """GPU time at the bottom, then the time of what the stage does not hold (misses, or llama.cpp's CPU
    work), then llama.cpp's device switches: stacked, they are the stage's time per token."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    make = random_problem if engine == "strata" else lambda seed: random_engine_problem(seed, engine)
    plans = ((p, r.plan) for p in map(make, range(40)) if (r := plan_rig(p)).plan)
    key = "miss_ms" if engine == "strata" else "switch_ms"
    p, plan = next((p, q) for p, q in plans if any(getattr(s, key) for s in q.stages))
    fig, ax = plt.subplots()
    twin = _bars(ax, p, plan, "plan")
    bars = [b for b in twin.patches if b.get_height() > 0]
    for i, s in enumerate(plan.stages):  # beside stage i's VRAM bar, on its right, not on top of it
        mine = [b for b in bars if i < b.get_x() + b.get_width() / 2 < i + 0.5]
        assert min(b.get_y() for b in mine) == 0
        assert sum(b.get_height() for b in mine) == pytest.approx(s.stage_ms)
        assert [b.get_height() for b in mine if b.get_y() == 0] == pytest.approx([s.compute_ms])
    labels = twin.get_legend_handles_labels()[1]
    assert labels[0].startswith("GPU time") and ("device switches" in labels[-1]) == (engine == "llama.cpp")
    plt.close(fig)


def test_an_engine_without_a_profile_gets_no_mass_curve(tmp_path, monkeypatch):
    """llama.cpp's plot sets the plan beside its free-memory default, with no mass panel."""
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    for engine in ("strata", "llama.cpp"):
        p = random_problem(3) if engine == "strata" else random_engine_problem(3, engine)
        r = plan_rig(p)
        plot_result(r, tmp_path / f"{engine}.png", "x.png")
        titles = [ax.get_title(loc="left") for ax in figures[-1].axes]
        assert ("mass curve" in titles) == (engine == "strata")
        assert any(t.startswith(r.compared.name) for t in titles)


def test_reserve_and_buffers_are_clearly_different_colours():
    from matplotlib.colors import to_rgb

    colours = {label: np.array(to_rgb(colour)) * 255 for label, colour, _ in SEGMENTS}
    for a in ("reserve", "stage buffers"):
        for b in colours:
            if b != a:
                assert np.linalg.norm(colours[a] - colours[b]) > 90, (a, b)
