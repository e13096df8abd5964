"""ik_llama.cpp as its own engine (solver.engines.ik_llama): its placement rules on the worked examples
read from its source, fills that never part a layer's up and gate experts, plans the exhaustive oracle
agrees with, and exports that ik's own byte split (re-implemented from src/llama.cpp llm_load_tensors)
and its -ot search (src/llama-load-tensors.cpp get_context_for_tensor) put exactly where the plan says."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from solver.engines import build_table, engine_named, evaluate
from solver.engines.base import Shape
from solver.engines.export import Command, Offload
from solver.engines.ik_llama import rules as r
from solver.engines.ik_llama.bench import bench_row
from solver.engines.ik_llama.export import replay
from solver.engines.ik_llama.units import layer_sizes
from solver.errors import ArgsError
from solver.planning.build import build_arcs
from solver.solvers.cpsat import solve_cpsat
from solver.solvers.exhaustive import solve_exhaustive
from solver.solvers.route import exact_dp
from tests.engines.test_engines import _assert_fills_are_the_best_subsets
from tests.helpers.enginefactory import random_engine_problem

ROOT = Path(__file__).resolve().parents[2]
IK = engine_named("ik_llama.cpp")


# --- the rules on SPEC's worked examples (48 equal layers of 100, output 50, max_compute 0) -------------


def test_layer_split_is_by_bytes() -> None:
    sizes = [100] * 48 + [50]
    assert r.layer_placement(sizes, 2, 999).layers == [0] * 24 + [1] * 24
    three = r.layer_placement(sizes, 3, 999)
    assert [three.layers.count(d) for d in range(3)] == [16, 16, 16] and three.output == 2
    ts = r.layer_placement(sizes, 2, 999, r.cumulative_splits([3, 1]))
    assert ts.layers.count(0) == 36 and ts.output == 1
    dense_first = r.layer_placement([10] * 3 + [100] * 45 + [50], 2, 999)
    assert dense_first.layers.count(0) == 26  # mainline's slot count gives 25
    partial = r.layer_placement(sizes, 2, 40)
    assert partial.layers[:8] == [r.CPU] * 8 and partial.layers[8:28] == [0] * 20 and partial.output == r.CPU
    assert r.layer_placement(sizes, 1, 48).output == r.CPU and r.layer_placement(sizes, 1, 49).output == 0


def test_free_memory_weights_take_one_gib_off() -> None:
    gib = 2**30
    assert r.split_weights([0, 0], [24 * gib, 12 * gib]) == [23 * gib, 11 * gib]


@pytest.mark.parametrize(
    ("counts", "n", "want"),
    [
        ([24, 24], 10, [5, 5]),
        ([16, 16, 16], 10, [4, 3, 3]),  # roundf(3.33) = 3 each, 9 < 10, the tie to GPU0
        ([20, 28], 8, [3, 5]),  # -ngl 40: the 8 CPU layers count on the last device
        ([3, 3], 3, [1, 2]),  # roundf(1.5) = 2 + 2 = 4 > 3, GPU0 gives one back
    ],
)
def test_ncmoe_spread_over_devices(counts, n, want) -> None:
    assert r.ncmoe_device_counts(counts, sum(counts), n) == want


def test_ncmoe_worked_examples() -> None:
    assert r.cpu_moe_layers(48, 10) == list(range(47, 37, -1))  # one GPU: the last 10 (mainline: 0..9)
    ds = dict(moe_layers=range(3, 62), nextn_layers=1)  # DeepSeek-V3: 61 + 1 NextN, dense 0-2
    assert r.cpu_moe_layers(62, 5, **ds) == [60, 59, 58, 57, 56]
    assert r.cpu_moe_layers(62, 999, **ds) == list(range(60, 2, -1))  # -cmoe keeps the MTP layer's
    two = r.layer_placement([100] * 48 + [50], 2, 999).default
    assert r.cpu_moe_layers(48, 10, two, 2) == [*range(47, 42, -1), *range(23, 18, -1)]
    three = r.layer_placement([100] * 48 + [50], 3, 999).default
    assert r.cpu_moe_layers(48, 10, three, 3) == [47, 46, 45, 31, 30, 29, 15, 14, 13, 12]
    partial = r.layer_placement([100] * 48 + [50], 2, 40).default
    assert r.cpu_moe_layers(48, 8, partial, 2) == [47, 46, 45, 44, 43, 27, 26, 25]
    assert r.cpu_moe_layers(48, 10, two, 2, split_mode="none") == []
    deep = [10] * 3 + [100] * 59 + [50]  # DeepSeek-like: 3 dense, 58 MoE, the MTP layer, output
    d2 = r.layer_placement(deep, 2, 999).default
    assert r.cpu_moe_layers(62, 8, d2, 2) == [61, 60, 59, 58, 32, 31, 30, 29]
    d3 = r.layer_placement(deep, 3, 999).default
    assert r.cpu_moe_layers(62, 8, d3, 3) == [61, 60, 42, 41, 40, 22, 21, 20]


def test_user_ot_beats_ncmoe() -> None:
    rules = [(r"blk\.47\.ffn_up_exps", 0)] + [(p, r.CPU) for p, _ in r.ncmoe_rules([47, 46], "one")]
    assert r.tensor_device("blk.47.ffn_up_exps.weight", 0, rules) == 0
    assert r.tensor_device("blk.47.ffn_gate_exps.weight", 0, rules) == r.CPU
    assert r.tensor_device("blk.46.ffn_down_exps.weight", 0, rules) == r.CPU


def test_fit_moves_each_overflowing_gpus_last_layers() -> None:
    gib = 2**30
    sizes = [10 * gib] * 8 + [gib]
    default = r.layer_placement(sizes, 2, 999).default
    res = r.fit_layer_mode(sizes, [6 * gib] * 8 + [0], default, [40 * gib, 40 * gib])
    assert res.layers == [7]


def test_prompt_offload_threshold() -> None:
    assert [r.offload_min_batch(e, a) for e, a in [(128, 8), (256, 8), (160, 6), (8, 2)]] == [
        512,
        1024,
        854,
        128,
    ]


# --- the command ----------------------------------------------------------------------------------------


def test_ik_refuses_what_ik_refuses() -> None:
    for words, what in [
        (["-fmoe"], "fused MoE is on"),
        (["-sm", "graph"], "not modelled"),
        (["-sm", "attn"], "not modelled"),
        (["-sm", "row"], "invalid value"),
        (["-fa"], "takes auto"),
        (["-ngl", "auto"], "not an integer"),
        (["--n-gpu-layers=99"], "unknown argument"),
        (["llama-bench", "-d", "512", "-ncmoe", "3"], "unknown argument"),
    ]:
        with pytest.raises(ArgsError, match=what):
            IK.read_command(words)
    assert IK.read_command(["-no-fmoe", "-cmoe"]).n_cpu_moe == 999
    assert not IK.read_command(["-no-fmoe"]).fused_moe


def test_bench_ncmoe_takes_the_first_layers() -> None:
    args = IK.read_command(["llama-bench", "--n-cpu-moe", "2", "-fmoe", "1", "-gp", "4096,128"])
    assert [p for p, _ in args.overrides] == [
        r"blk\.0\.(ffn_(up|down|gate)_exps\.weight)",
        r"blk\.1\.(ffn_(up|down|gate)_exps\.weight)",
    ]
    assert args.depth == 4096 and args.ctx_size == 4096 + 128


def test_bench_json_fields() -> None:
    row = {
        "n_prompt": 4096,
        "n_gen": 128,
        "test": "tg128@pp4096",
        "avg_ts": 10.0,
        "fused_moe": True,
        "override_tensor": "a=CPU,b=CUDA0",
        "n_gpu_layers": 99,
    }
    out = bench_row(row)
    assert out["tensor_buft_overrides"] == "a=CPU;b=CUDA0" and out["n_depth"] == 4096 and out["n_prompt"] == 0
    assert out["n_cpu_moe"] == 0 and out["devices"] == "auto" and "override_tensor" not in out
    mainline = {"n_prompt": 0, "n_gen": 128, "avg_ts": 1.0, "tensor_buft_overrides": "none"}
    assert bench_row(mainline) is mainline


# --- fills and plans ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_ik_fill_is_the_best_subset_and_keeps_up_with_gate(seed) -> None:
    p = random_engine_problem(seed, "ik_llama.cpp", n_layers=4, n_gpus=2)
    f = p.engine_fields
    fused = [
        int(la) for la, n in zip(f.unit_layer, f.unit_names) if {"ffn_gate_exps", "ffn_up_exps"} & set(n)
    ]
    assert len(fused) == len(set(fused))  # a layer's gate and up are one unit: held or left together
    _assert_fills_are_the_best_subsets(p)


@pytest.mark.parametrize("seed", range(12))
def test_ik_plans_agree_with_the_exhaustive_oracle(seed) -> None:
    p = random_engine_problem(seed, "ik_llama.cpp", n_layers=5 + seed % 3, n_gpus=1 + seed % 3)
    arcs = build_arcs(p, build_table(p))
    ex, dp, cp = solve_exhaustive(arcs), exact_dp(arcs), solve_cpsat(arcs)
    assert (ex.status, ex.gpus, ex.cuts) == (dp.status, dp.gpus, dp.cuts) == (cp.status, cp.gpus, cp.cuts)


# --- exports replayed through ik's rules ----------------------------------------------------------------


def _command(p, plan) -> Command:
    """The engine's command for the plan, as plan_lines builds it (before a shell writes it)."""
    offload = [Offload(layer, n) for s in plan.stages for layer, names in s.offload for n in names]
    shape = Shape(plan.gpus, plan.cuts, p.n_layers, offload, None, IK.extra_blocks(p), None, IK.launch(p))
    return next(line for line in IK.export(shape) if isinstance(line, Command))


@pytest.mark.parametrize("seed", range(40))
def test_export_lands_every_layer_and_tensor_where_the_plan_says(seed) -> None:
    rng = np.random.default_rng(seed)
    k = 1 + seed % 4
    p = random_engine_problem(seed, "ik_llama.cpp", n_layers=int(rng.integers(k + 1, 14)), n_gpus=k)
    gpus = [int(g) for g in rng.permutation(k)]
    cuts = sorted(int(c) for c in rng.choice(np.arange(1, p.n_layers), k - 1, replace=False))
    plan = evaluate(p, gpus, cuts)
    cmd = _command(p, plan)
    words = list(cmd.argv)
    # ik's byte split (rules.layer_placement, re-implemented from llm_load_tensors) on the -ts words
    want = [d for d, (a, b) in enumerate(zip([0, *cuts], [*cuts, p.n_layers])) for _ in range(a, b)]
    if "-ts" in words:
        ts = words[words.index("-ts") + 1].split(",")
        assert replay(layer_sizes(p), ts, p.engine_fields.max_compute, p.n_layers) == want
    else:
        assert k == 1
    # CUDA order is the plan's GPU order; every tensor the plan leaves on the CPU, and none else, matches
    visible = dict(cmd.env).get("CUDA_VISIBLE_DEVICES")
    assert [int(x) for x in visible.split(",")] == gpus if visible else gpus == list(range(k))
    offload = {f"blk.{layer}.{n}.weight" for s in plan.stages for layer, names in s.offload for n in names}
    every = {
        f"blk.{layer}.{n}.weight"
        for layer, names in zip(p.engine_fields.unit_layer, p.engine_fields.unit_names)
        for n in names
    }
    rule = words[words.index("-ot") + 1] if "-ot" in words else None
    hit = {n for n in every if rule and re.search(rule.rsplit("=", 1)[0], n)}
    assert hit == offload
    # and ik's scorer, reading the command back, places the same stages and tensors
    visible_gpus = [f"CUDA_VISIBLE_DEVICES={visible}"] if visible else []
    s = IK.score(p, IK.read_command([*visible_gpus, *words]))
    assert [(st.gpu, st.start, st.end) for st in s.placement.stages] == [
        (st.gpu, st.start, st.end) for st in plan.stages
    ]
    assert s.placement.window_ms == pytest.approx(plan.window_ms, rel=1e-9)


# --- the engine is one package and one registry line ------------------------------------------------------


def test_nothing_outside_solver_engines_names_ik_but_the_registry() -> None:
    hits = subprocess.run(
        ["git", "grep", "-l", "-i", "ik_llama", "--", "solver"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    outside = [
        h for h in hits if not h.startswith("solver/engines/ik_llama/") and h != "solver/engines/__init__.py"
    ]
    assert outside == []


def test_rig_new_offers_the_engine(tmp_path) -> None:
    from click.testing import CliRunner

    from solver.cli import cli

    out = tmp_path / "ik.yaml"
    res = CliRunner().invoke(
        cli,
        ["rig", "new", "RTX 3090", "--engine", "ik_llama.cpp", "--host-bandwidth", "60 GB/s", "-o", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert "engine: ik_llama.cpp" in out.read_text()


def test_a_rig_over_several_hosts_is_refused_with_its_reason(tmp_path) -> None:
    """ik's rpc device order is not modelled: exit 3 with the reason, never a plan the export refuses."""
    text = (ROOT / "rigs" / "two-hosts.yaml").read_text().replace("engine: llama.cpp", "engine: ik_llama.cpp")
    model = (ROOT / "rigs" / "two-hosts.yaml").parent / "../models/gpt-oss-120b-mxfp4.yaml"
    rig = tmp_path / "ik-hosts.yaml"
    rig.write_text(text.replace('"../models/gpt-oss-120b-mxfp4.yaml"', f'"{model.resolve()}"'))
    from tests.helpers.clirun import invoke

    result = invoke(rig)
    assert result.exit_code == 3, result.output
    assert "several hosts" in json.loads(result.stdout)["reason"]
