"""``solve bench`` runs and reports the right structure; it never checks a time."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from solver.bench.measure import measure
from solver.bench.sweeprigs import sweep_problem
from solver.bench.timing import Settings, repeat_timed
from solver.cli import cli

PIECES = {"read", "table", "arcs", "dp", "exhaustive", "cp-sat", "end-to-end"}

MODEL = """\
layers: 4
experts: 3
expert_bytes: 10
dense_bytes: 100
active_experts: 1
profile: p.txt
"""
PROFILE = "".join(f"{layer} {e}\n" for e in range(3) for layer in range(4))
RIG = """\
model: m.yaml
gpus:
  - {free: 400, layer_ms: 1.0}
  - {free: 300, layer_ms: 2.0}
"""


def tiny_rig(write):
    write("m.yaml", MODEL)
    write("p.txt", PROFILE)
    return write("tiny.yaml", RIG)


def run(*args: str):
    return CliRunner().invoke(cli, ["bench", *args], env={"COLUMNS": "200"})


def check_timing(t: dict, most: int) -> None:
    assert 1 <= t["runs"] <= most
    assert t["min_ms"] <= t["median_ms"] <= t["max_ms"]


def test_bench_json_on_a_tiny_rig(write):
    rig = tiny_rig(write)
    res = run("--rig", str(rig), "--repeat", "2", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["settings"]["repeat"] == 2
    assert out["import"]["runs"] == 2  # the yardstick always gets every run
    [row] = out["rigs"]
    assert (row["rig"], row["gpus"], row["layers"], row["pairs"]) == ("tiny", 2, 4, 12)
    assert row["placements"] == 3 and row["gap"] == 0.0  # C(3, 1) cut lists
    assert row["arcs"] > 0 and row["status"] == "optimal" and row["cpsat_equals_dp"] is True
    assert set(row["pieces"]) == PIECES
    for t in row["pieces"].values():
        check_timing(t, 2)
    assert row["ratios"]["cpsat_over_dp"] > 0 and row["ratios"]["end_to_end_over_import"] > 0
    assert "sweep" not in out


def test_bench_table_and_process_time(write):
    rig = tiny_rig(write)
    res = run("--rig", str(rig), "--repeat", "1", "--process")
    assert res.exit_code == 0, res.output
    assert "tiny" in res.output and "cp-sat" in res.output
    assert "solve tiny --json, fresh interpreter" in res.output


@pytest.mark.slow
def test_bench_sweep_covers_the_grid_in_both_orders(write):
    rig = tiny_rig(write)
    res = run(
        "--rig", str(rig), "--repeat", "1", "--json", "--sweep",
        "--gpus", "2,3", "--layers", "6", "--experts", "4",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    sweep = json.loads(res.output)["sweep"]
    rows = sweep["rows"]
    assert [(r["order"], r["gpus"], r["layers"]) for r in rows] == [
        ("as-given", 2, 6),
        ("as-given", 3, 6),
        ("auto", 2, 6),
        ("auto", 3, 6),
    ]
    for r in rows:
        assert r["pairs"] == 6 * 4 and r["status"] == "optimal" and r["cpsat_equals_dp"] is True
        assert set(r["pieces"]) == PIECES - {"read"}  # no files to read


def test_oracles_out_of_reach_are_skipped_with_a_reason():
    from solver.solvers.policy import Policy

    small = Policy(max_states_free_order=100)  # the rig's GPUs fall into 864 class-count states
    p = sweep_problem(seed=1, n_gpus=13, n_layers=14, experts=2, order="auto")
    row = measure(p, Settings(repeat=1, budget_s=0.0, workers=2, exhaustive_limit=1000), policy=small)
    assert "not 864" in row.pieces["dp"].skipped and not row.pieces["dp"].runs
    assert "1,000-placement limit" in row.pieces["exhaustive"].skipped and row.placements > 1000
    assert row.agrees is None and row.ratio("cp-sat", "dp") is None
    assert row.status == "optimal" and len(row.pieces["cp-sat"].runs) == 1


def test_repeat_stops_at_the_count_or_once_the_budget_is_spent():
    calls = []
    timing, out = repeat_timed(lambda: calls.append(1) or len(calls), 4, budget_s=3600.0)
    assert len(timing.runs) == 4 and out == 4
    calls.clear()
    timing, _ = repeat_timed(lambda: calls.append(1), 4, budget_s=0.0)
    assert len(timing.runs) == 1 == len(calls)


def test_bench_bad_rig_is_one_line_and_exit_2(write):
    bad = write("bad.yaml", "gpus: []\nmodel: m.yaml\n")
    res = run("--rig", str(bad))
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "bad.yaml" in lines[0] and "Traceback" not in res.output


def test_bench_bad_grid_is_a_usage_error():
    res = run("--sweep", "--gpus", "four")
    assert res.exit_code == 2 and "comma-separated" in res.output


def test_bench_finds_the_rigs_of_the_working_directory(write, tmp_path, monkeypatch):
    """An installed ``solve bench`` run in a clone plans its rigs/*.yaml (not the site-packages folder)."""
    tiny_rig(write)
    write("rigs/here.yaml", RIG.replace("model: m.yaml", "model: ../m.yaml"))
    monkeypatch.chdir(tmp_path)
    res = run("--repeat", "1", "--budget", "0", "--json")
    assert res.exit_code == 0, res.output
    assert [r["rig"] for r in json.loads(res.stdout)["rigs"]] == ["here"]


def test_bench_takes_several_rigs_after_one_option(write):
    """``--rig rigs/*.yaml`` as the shell expands it: one --rig, then more paths; repeats are planned once."""
    first = tiny_rig(write)
    second = write("second.yaml", RIG)
    res = run(
        "--rig", str(first), str(second), "--rig", str(first), "--repeat", "1", "--budget", "0", "--json"
    )
    assert res.exit_code == 0, res.output
    assert [r["rig"] for r in json.loads(res.stdout)["rigs"]] == ["tiny", "second"]


def test_bench_without_rigs_says_where_it_looked(tmp_path, monkeypatch):
    import solver.cli.bench

    monkeypatch.setattr(solver.cli.bench, "RIG_DIRS", (tmp_path / "rigs", tmp_path / "elsewhere"))
    res = run("--repeat", "1")
    assert res.exit_code == 2
    assert (
        "no rigs given and no rigs/*.yaml under" in res.stderr and str(tmp_path / "elsewhere") in res.stderr
    )


def test_bench_plans_every_rig_for_the_engine_asked(write):
    rig = tiny_rig(write)
    res = run("--rig", str(rig), "--repeat", "1", "--budget", "0", "--engine", "vllm", "--json")
    assert res.exit_code == 0, res.output
    [row] = json.loads(res.output)["rigs"]
    assert row["rig"] == "tiny (vllm)" and row["status"] in ("optimal", "infeasible")


def sweep_rows(write, *args: str) -> list[dict]:
    """The rows of ``solve bench --sweep ARGS --json`` (beside the tiny rig, whose row is not looked at)."""
    res = run("--rig", str(tiny_rig(write)), "--repeat", "1", "--budget", "0", "--json", "--sweep", *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["sweep"]["rows"]


def check_fresh_process(row: dict) -> None:
    fresh = row["process"]
    assert fresh["peak_mib"] > 0 and fresh["process_s"] > fresh["plan_s"] > 0
    assert fresh["status"] == row["status"] == "optimal" and fresh["gap"] == row["gap"] == 0.0
    assert fresh["solver"] in ("dp", "cp-sat", "exhaustive")


@pytest.mark.slow
def test_sweep_with_every_gpu_a_different_card(write):
    rows = sweep_rows(write, "--gpus", "3", "--layers", "8", "--experts", "4", "--kinds", "0", "--hosts", "1")
    assert [(r["order"], r["gpus"], r["layers"], r["hosts"], r["kinds"]) for r in rows] == [
        ("as-given", 3, 8, 1, 3),
        ("auto", 3, 8, 1, 3),
    ]
    for r in rows:
        check_fresh_process(r)
        assert r["cpsat_equals_dp"] is True


def test_sweep_over_hosts_in_a_free_order(write):
    shape = ("--hosts", "2", "--kinds", "2", "--orders", "auto")
    rows = sweep_rows(write, "--gpus", "4", "--layers", "8", "--experts", "4", *shape)
    [row] = rows
    assert (row["order"], row["gpus"], row["hosts"]) == ("auto", 4, 2) and 1 <= row["kinds"] <= 4
    check_fresh_process(row)


def test_sweep_cards_come_from_the_kinds_of_each_host():
    import numpy as np

    from solver.bench.sweeprigs import CARDS, SweepShape

    assert len({(c[1], c[2] * c[3]) for c in CARDS}) == len(CARDS) == 16  # every card its own kind
    p = sweep_problem(
        7, n_gpus=12, n_layers=13, experts=2, order="as-given", shape=SweepShape(kinds=2, hosts=3)
    )
    assert p.gpu_host.tolist() == [0] * 4 + [1] * 4 + [2] * 4 and p.host_names == ["host0", "host1", "host2"]
    assert p.network_handoff_ms == 2.0
    for h in range(3):
        assert len({p.gpu_names[g] for g in np.flatnonzero(p.gpu_host == h)}) <= 2
    every = sweep_problem(7, n_gpus=16, n_layers=17, experts=2, order="auto", shape=SweepShape(kinds=0))
    assert sorted(every.gpu_names) == sorted(c[0] for c in CARDS) and every.gpu_host is None


def test_sweep_shape_errors_are_usage_errors():
    res = run("--sweep", "--gpus", "17", "--kinds", "0")
    assert res.exit_code == 2 and "Traceback" not in res.output
    [line] = [x for x in res.output.splitlines() if "Error" in x]
    assert "--kinds 0" in line and "at most 16 GPUs, not 17" in line
    res = run("--sweep", "--gpus", "6", "--hosts", "4")
    assert res.exit_code == 2 and "6 GPUs do not divide" in res.output
    res = run("--sweep", "--orders", "auto,random")
    assert res.exit_code == 2 and "as-given, auto" in res.output


@pytest.mark.slow
def test_sweep_plans_for_the_objective_and_idle_gpus_asked(write):
    grid = ("--gpus", "3", "--layers", "2,6", "--experts", "4", "--orders", "as-given")
    res = run(
        "--rig", str(tiny_rig(write)), "--repeat", "1", "--budget", "0", "--json", "--sweep", *grid,
        "--objective", "throughput", "--idle-gpus",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    sweep = json.loads(res.stdout)["sweep"]
    assert (sweep["objective"], sweep["idle_gpus"]) == ("throughput", True)
    rows = sweep["rows"]
    assert [(r["gpus"], r["layers"]) for r in rows] == [(3, 2), (3, 6)]  # idle GPUs: fewer layers than GPUs
    for r in rows:
        check_fresh_process(r)
