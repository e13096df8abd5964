"""``solve RIG --contexts ... [--kv-types ...]``: one plan per (context, KV type), each the plan that
``--context N --kv-type T`` gives, in one table, a JSON list and a plot of tokens/s against context."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.report.contexts import parse_contexts, parse_kv_types, short_context
from tests.helpers import tiers
from tests.helpers.rigfiles import tiny_rig

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "rigs" / "llama-mix.yaml"
VLLM = ROOT / "rigs" / "vllm-mix.yaml"


def run(*args: object, columns: str | None = None):
    return CliRunner(env={"COLUMNS": columns}).invoke(cli, [str(a) for a in args])


def test_contexts_read_as_users_write_them():
    assert parse_contexts("8K, 32k,65536,1M,8K") == [8192, 32768, 65536, 1048576]
    assert [short_context(c) for c in (8192, 131072, 1000, 0)] == ["8K", "128K", "1,000", "0"]
    assert parse_kv_types("f16,q8_0,f16") == ["f16", "q8_0"]
    for bad in ("8KB", "", "-4K", "1.5K"):
        with pytest.raises(ValueError, match="expected contexts like 8K"):
            parse_contexts(bad)
    with pytest.raises(ValueError, match="unknown KV cache type 'q5_0'"):
        parse_kv_types("f16,q5_0")


def test_each_row_is_the_plan_of_that_context_and_kv_type():
    res = run(LLAMA, "--contexts", "8K,64K", "--kv-types", "f16,q8_0", "--json", "--workers", "1")
    assert res.exit_code == 0, res.output
    points = json.loads(res.stdout)
    assert [(d["context"], d["kv_type"]) for d in points] == [
        (8192, "f16"),
        (65536, "f16"),
        (8192, "q8_0"),
        (65536, "q8_0"),
    ]
    # the quick tier plans (8K, f16) and (64K, q8_0) alone: each context and each type once
    for d in points[::3] if tiers.quick else points:
        one = run(LLAMA, "--context", d["context"], "--kv-type", d["kv_type"], "--json", "--workers", "1")
        alone = json.loads(one.stdout)
        for key in ("window_ms", "tokens_per_s", "cuts", "host_bytes", "stages"):
            assert d[key] == alone[key], key
        assert d["default"]["window_ms"] == alone["default"]["window_ms"]
    table = run(LLAMA, "--contexts", "8K,64K", "--kv-types", "f16,q8_0", "--workers", "1").stdout
    rows = [line.replace("no fit", "no-fit").split() for line in table.splitlines()]
    rows = [row for row in rows if row and row[0] in ("8K", "64K")]
    assert len(rows) == 4
    for row, d in zip(rows, points):
        assert row[:3] == [short_context(d["context"]), d["kv_type"], f"{d['tokens_per_s']:.2f}"]
        assert row[3] == (f"{d['default']['tokens_per_s']:.2f}" if d["default"]["feasible"] else "no-fit")
        assert row[-len(d["cuts"]) :] == [f"{c}," for c in d["cuts"][:-1]] + [str(d["cuts"][-1])]


@pytest.mark.parametrize(
    ("contexts", "kv_types"),
    [
        pytest.param([4096, 49152, 163840], ["f16", "q4_0"], id="3x2"),
        pytest.param(
            [4096, 16384, 49152, 98304, 163840], ["f16", "q8_0", "q4_0"], marks=pytest.mark.slow, id="5x3"
        ),
    ],
)
def test_a_longer_context_never_plans_faster_and_a_smaller_cache_never_slower(contexts, kv_types):
    """More KV bytes leave every range less room, so the best window can only grow with the context and
    shrink with a quantised cache (nothing is read per token of KV at depth 0), and a context too long to
    plan stays so. ``kv_types`` go from the largest cache to the smallest."""
    sweep = ["--contexts", ",".join(map(str, contexts)), "--kv-types", ",".join(kv_types)]
    res = run(LLAMA, *sweep, "--json", "--workers", "1")
    inf = float("inf")  # no plan: every longer context has none either
    points = {(d["context"], d["kv_type"]): d["window_ms"] or inf for d in json.loads(res.stdout)}
    assert set(points) == {(c, kv) for c in contexts for kv in kv_types}
    for kv in kv_types:
        windows = [points[(c, kv)] for c in contexts]
        assert windows == sorted(windows), kv
    for c in contexts:
        windows = [points[(c, kv)] for kv in kv_types]
        assert windows == sorted(windows, reverse=True), c


def test_the_table_fits_80_columns_and_says_what_moved():
    res = run(LLAMA, "--contexts", "8K,32K,128K", "--kv-types", "f16,q8_0", "--workers", "1", columns="80")
    assert res.exit_code == 0, res.output
    for line in res.stdout.splitlines():
        assert len(line) <= 80 and line == line.rstrip() and "\u2026" not in line, line
    assert "experts" in res.stdout and "fit tokens/s" in res.stdout
    vllm = run(VLLM, "--contexts", "4K,32K", "--workers", "1", columns="80")
    assert "spare KV" in vllm.stdout and "even" in vllm.stdout


def test_points_without_a_plan_say_why_and_all_without_exit_3(tmp_path):
    gpus = [{"name": "a", "free": 2000, "layer_ms": 1.0}]
    rig = tiny_rig(tmp_path, gpus=gpus, model_extra={"kv_bytes_per_token": 1})
    res = run(rig, "--contexts", "0,1K,100K", "--workers", "1")
    assert res.exit_code == 0, res.output
    assert "100K f16: " in res.stdout and "no plan: infeasible" in res.stdout
    res = run(rig, "--contexts", "100K,200K", "--workers", "1", "--json")
    assert res.exit_code == 3 and [d["status"] for d in json.loads(res.stdout)] == ["infeasible"] * 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--contexts", "8K", "--export", "llama.cpp"], "--export plans one context"),
        (["--contexts", "8K", "--context", "4096"], "--context plans one context"),
        (["--kv-types", "f16", "--kv-type", "q8_0"], "--kv-type plans one context"),
        (["--contexts", "8 K B"], "expected contexts like 8K"),
        (["--kv-types", "f32"], "unknown KV cache type 'f32'"),
    ],
)
def test_bad_sweeps_are_one_line(args, says):
    res = run(LLAMA, *args)
    assert res.exit_code == 2 and res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1 and says in res.stderr


def test_an_engine_that_cannot_run_a_kv_type_says_so():
    res = run(ROOT / "rigs" / "box.yaml", "--kv-types", "f16,q8_0")
    assert res.exit_code == 2 and "--kv-type q8_0: engine strata runs its KV cache at f16 only" in res.stderr


def test_the_plot_draws_tokens_per_second_against_context(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    res = run(LLAMA, "--contexts", "8K,32K", "--kv-types", "f16,q8_0", "--plot", "ctx.svg", "--workers", "1")
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == "wrote ctx.svg" and (tmp_path / "ctx.svg").read_bytes().startswith(
        b"<?xml"
    )


@pytest.mark.slow
def test_a_context_beyond_the_model_warns_and_is_marked(tmp_path):
    """The model supports 40,960 tokens: 64K is planned as given, warned once on stderr (as --context
    warns), starred in the table; every row says the KV-cache depth its speed is predicted at."""
    model = ROOT / "models" / "qwen3-30b-a3b-q4_k_m.yaml"
    res = run(LLAMA, "--model", model, "--contexts", "8K,64K", "--kv-types", "f16,q8_0", "--workers", "1")
    assert res.exit_code == 0, res.output
    warned = [line for line in res.stderr.splitlines() if "beyond" in line]
    assert len(warned) == 1
    assert warned[0].startswith("--contexts: 65,536 tokens (64K) is beyond the 40,960 tokens the model")
    assert warned[0].endswith("qwen3-30b-a3b-q4_k_m.yaml:45); planned as given")
    rows = [line.split()[0] for line in res.stdout.splitlines() if line.strip()[:2] in ("8K", "64")]
    assert rows == ["8K", "64K*", "8K", "64K*"]
    assert "tokens/s at an empty KV cache (the rig's depth), not with the context full" in res.stdout
    assert "*: beyond the 40,960 tokens the model supports; planned as given" in res.stdout
    within = run(LLAMA, "--model", model, "--contexts", "8K,32K", "--workers", "1")
    assert "beyond" not in within.stderr and "*" not in within.stdout
