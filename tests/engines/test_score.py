"""``solve score``: a command's placement read as the engine reads it, timed as a plan is.

The placement is judged by tests/helpers/engine_mapping.py (llama.cpp's float32 layer split and its -ot
loop, re-implemented from the source) and the window by the time model written out here unit by unit;
the plan's own export scores exactly as the plan, and ``--n-cpu-moe N`` as the default split.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.cli import cli
from solver.engines import engine_of, evaluate, export_lines
from solver.engines.export import Offload
from solver.engines.export_hosts import Hosts
from solver.engines.llamacpp.args import LlamaArgs, parse_llama_args
from solver.engines.llamacpp.flags import FFN_EXPS_REGEX, moe_rules
from solver.errors import ArgsError
from solver.planning.planner import plan_rig
from solver.planning.resolve import Overrides, load_problem
from solver.problem.problem import Problem
from solver.solvers import Limits
from tests.helpers.engine_mapping import (
    llama_cpu_moe_rules,
    llama_model_devices,
    llama_overrides,
    llama_slot_devices,
    llama_split_none,
    llama_tensor_buft,
)
from tests.helpers.enginefactory import random_engine_problem, with_engine_fields
from tests.helpers.tiers import examples

ROOT = Path(__file__).resolve().parents[2]


def export_words(lines: list[str]) -> list[str]:
    """The main command's words of an export: the lines after '# on HOST: the main command' (all
    lines when there is no such heading), ``export`` dropped, comments skipped."""
    main = [i for i, line in enumerate(lines) if line.startswith("# on ") and "main command" in line]
    words: list[str] = []
    for line in lines[main[0] + 1 :] if main else lines:
        for word in shlex.split(line, comments=True):
            if word != "export":
                words.append(word)
    return words


def plan_json(rig: str, *extra: str) -> dict:
    result = CliRunner().invoke(cli, [str(ROOT / rig), "--json", "--workers", "1", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def score_words(p: Problem, words: list[str]):
    engine = engine_of(p)
    return engine.score(p, engine.read_command(words))


# The plan's own export, and llama.cpp's default split


@pytest.mark.parametrize("rig", ["rigs/llama-mix.yaml", "rigs/two-hosts.yaml"])
def test_the_plans_export_scores_as_the_plan(rig: str) -> None:
    """Every shipped llama.cpp rig: its export, read back, gives the plan's window and stages."""
    d = plan_json(rig, "--export", "llama.cpp")
    p = load_problem(ROOT / rig)
    s = score_words(p, export_words(d["export"]["lines"]))
    assert math.isclose(s.window_ms, d["window_ms"], rel_tol=1e-9)
    assert s.placement.gpus == d["gpus"] and s.placement.cuts == d["cuts"]
    assert [st.held_pairs for st in s.placement.stages] == [st["held_pairs"] for st in d["stages"]]
    assert s.fits


@pytest.mark.parametrize("rig", ["rigs/llama-mix.yaml", "rigs/two-hosts.yaml"])
def test_export_lines_pasted_as_arguments_score_as_the_plan(rig: str) -> None:
    """The export's lines, each one argument as printed (rpc-server lines and comments included)."""
    d = plan_json(rig, "--export", "llama.cpp")
    result = CliRunner().invoke(cli, ["score", str(ROOT / rig), "--json", "--", *d["export"]["lines"]])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert math.isclose(out["score"]["window_ms"], d["window_ms"], rel_tol=1e-9)
    assert out["score"]["gpus"] == d["gpus"] and out["score"]["fits"]


def test_n_cpu_moe_scores_as_the_default_split() -> None:
    """``--n-cpu-moe N`` with no -ts: llama.cpp's free-memory split, as the JSON ``default`` says."""
    d = plan_json("rigs/llama-mix.yaml", "--default", "free-memory")
    n = int(d["default"]["note"].rsplit(" ", 1)[1])
    p = load_problem(ROOT / "rigs/llama-mix.yaml")
    s = score_words(p, ["llama-server", "-m", "model.gguf", "--n-cpu-moe", str(n)])
    assert math.isclose(s.window_ms, d["default"]["window_ms"], rel_tol=1e-9)
    assert s.placement.cuts == d["default"]["cuts"]


def _llama_problem(seed: int, extra: int = 0, **kw) -> Problem:
    p = random_engine_problem(seed, "llama.cpp", **kw)
    return with_engine_fields(p, host_bandwidth=20_000, nextn_layers=extra)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), extra=st.integers(0, 2), data=st.data())
def test_any_exported_placement_scores_as_evaluated(seed: int, extra: int, data: st.DataObject) -> None:
    """Any GPU order and cuts, filled by the engine's rule and exported, score as ``evaluate`` gives."""
    k = data.draw(st.integers(1, 4))
    n = data.draw(st.integers(max(k, 2), 10))
    p = _llama_problem(seed, extra, n_layers=n, n_gpus=k)
    gpus = data.draw(st.permutations(range(k)))
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), min_size=k - 1, max_size=k - 1)))
    plan = evaluate(p, gpus, cuts)
    offload = [Offload(layer, name) for s in plan.stages for layer, names in s.offload for name in names]
    s = score_words(p, export_words(export_lines("llama.cpp", gpus, cuts, n, offload, extra_blocks=extra)))
    assert s.window_ms == plan.window_ms
    assert [(x.gpu, x.start, x.end, x.fits) for x in s.placement.stages] == [
        (x.gpu, x.start, x.end, x.fits) for x in plan.stages
    ]
    assert [x.offload for x in s.placement.stages] == [x.offload for x in plan.stages]


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), data=st.data())
def test_placements_over_two_hosts_score_as_evaluated(seed: int, data: st.DataObject) -> None:
    """Two machines (rpc-server for the second): each host's stages one run, the remote GPUs in rig
    order (an --rpc endpoint is the next GPU of its host); remote layers pay the network for the CPU."""
    k = data.draw(st.integers(2, 4))
    m = data.draw(st.integers(1, k - 1))
    n = data.draw(st.integers(k, 10))
    hosts = np.array([0] * m + [1] * (k - m), dtype=np.int64)
    p = dataclasses.replace(
        _llama_problem(seed, n_layers=n, n_gpus=k),
        gpu_host=hosts,
        host_names=["a", "b"],
        network_handoff_ms=0.5,
    )
    local = list(data.draw(st.permutations(range(m))))
    gpus = local + list(range(m, k)) if data.draw(st.booleans()) else list(range(m, k)) + local
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), min_size=k - 1, max_size=k - 1)))
    plan = evaluate(p, gpus, cuts)
    offload = [Offload(layer, name) for s in plan.stages for layer, names in s.offload for name in names]
    lines = export_lines("llama.cpp", gpus, cuts, n, offload, hosts=Hosts(("a",) * m + ("b",) * (k - m), "a"))
    s = score_words(p, export_words(lines))
    assert s.window_ms == plan.window_ms, lines
    assert [(x.gpu, x.start, x.end) for x in s.placement.stages] == [
        (x.gpu, x.start, x.end) for x in plan.stages
    ]


@pytest.mark.parametrize("seed", range(12))
def test_random_rigs_plan_export_and_default_score_as_planned(seed: int) -> None:
    """Random llama.cpp rigs planned end to end: the export scores as the plan, -ncmoe N as the default."""
    p = _llama_problem(seed, n_layers=9, n_gpus=3, order="auto" if seed % 2 else "as-given")
    r = plan_rig(p, Limits(workers=1))
    if r.plan is not None:
        offload = [
            Offload(layer, name) for s in r.plan.stages for layer, names in s.offload for name in names
        ]
        lines = export_lines("llama.cpp", r.plan.gpus, r.plan.cuts, p.n_layers, offload)
        assert score_words(p, export_words(lines)).window_ms == r.plan.window_ms
    default = engine_of(p).default_split(p, "free-memory")
    if default is not None and default.feasible:
        n = int(default.note.rsplit(" ", 1)[1])
        assert score_words(p, ["-ncmoe", str(n)]).window_ms == default.plan.window_ms
    fit = r.default
    assert fit.name == "fit" and score_words(p, fit.command).window_ms == fit.plan.window_ms


# Any command, against llama.cpp's own mapping and the time model written out


@st.composite
def commands(draw, k: int, n_blocks: int) -> tuple[list[str], dict]:
    """Random placement flags over a rig of k GPUs, and what they say in plain terms."""
    visible = draw(
        st.none() | st.permutations(range(k)).flatmap(lambda o: st.integers(1, k).map(lambda m: o[:m]))
    )
    n_cuda = k if visible is None else len(visible)
    words: list[str] = [] if visible is None else [f"CUDA_VISIBLE_DEVICES={','.join(map(str, visible))}"]
    words.append(draw(st.sampled_from(["llama-server", "./build/bin/llama-cli", "-m"])))
    if words[-1] == "-m":
        words.append("model.gguf")
    spec: dict = {"visible": visible, "rules": []}
    devices = draw(
        st.none()
        | st.permutations(range(n_cuda)).flatmap(lambda o: st.integers(1, n_cuda).map(lambda m: o[:m]))
    )
    if devices is not None:
        words += [draw(st.sampled_from(["-dev", "--device"])), ",".join(f"CUDA{i}" for i in devices)]
    spec["devices"] = devices
    n_dev = n_cuda if devices is None else len(devices)
    if draw(st.booleans()) and n_dev > 1:
        mg = draw(st.integers(0, n_dev - 1))
        words += ["-sm", "none", "-mg", str(mg)]
        spec["main"] = mg
    ts = draw(st.none() | st.lists(st.integers(0, 6), min_size=1, max_size=n_dev + 1))
    if ts is not None:
        words += [
            draw(st.sampled_from(["-ts", "--tensor-split"])),
            draw(st.sampled_from([",", "/"])).join(map(str, ts)),
        ]
    spec["ts"] = ts
    ngl = draw(st.none() | st.integers(0, n_blocks + 2))
    if ngl is not None:
        words += [draw(st.sampled_from(["-ngl", "--n-gpu-layers", "--gpu-layers"])), str(ngl)]
    spec["ngl"] = ngl
    bufts = ["CPU", *[f"CUDA{i}" for i in range(n_cuda)]]
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.integers(0, 4)) == 0:
            ncmoe = draw(st.integers(0, n_blocks))
            words += ["--n-cpu-moe", str(ncmoe)]
            spec["rules"] += llama_cpu_moe_rules(ncmoe)
            continue
        rules = []
        for _ in range(draw(st.integers(1, 2))):
            layers = draw(st.sets(st.integers(0, n_blocks - 1), min_size=1, max_size=3))
            tensors = draw(st.sets(st.sampled_from(["gate", "up", "down"]), min_size=1))
            pattern = f"blk\\.({'|'.join(map(str, sorted(layers)))})\\.ffn_({'|'.join(sorted(tensors))})_exps"
            rules.append(f"{pattern}={draw(st.sampled_from(bufts))}")
        words += [draw(st.sampled_from(["-ot", "--override-tensor"])), ",".join(rules)]
        spec["rules"] += llama_overrides(",".join(rules), set(bufts))
    return words, spec


def reference(p: Problem, spec: dict) -> tuple[float, dict[int, int]]:
    """The window and each GPU's bytes, from llama.cpp's mapping (engine_mapping) and the time model
    written out unit by unit: GPU layers by bytes over bandwidth (or layer_ms), a held tensor's active
    share and its part of its layer's moe_layer_ms (over the layer's tensors) on the GPU holding it, a
    tensor on the CPU at host bandwidth and its GPU layer's two
    switches, two switches per tensor held on another GPU than its layer's, a layer on the CPU at
    host bandwidth, a hand-off per change of GPU (the output's card counted last)."""
    k, n = p.n_gpus, p.n_layers
    n_blocks = n + p.engine_fields.nextn_layers
    cuda = list(range(k)) if spec["visible"] is None else list(spec["visible"])
    device_arg = None if spec["devices"] is None else ",".join(f"CUDA{i}" for i in spec["devices"])
    names = llama_model_devices([], device_arg, len(cuda))
    if "main" in spec:
        names = llama_split_none(names, spec["main"])
    model = [cuda[int(name[4:])] for name in names]
    ts = spec["ts"]
    if ts is None or not any(ts[: len(model)]):
        split = [np.float32(p.free[g]) for g in model]
    else:
        split = [np.float32(x) for x in ts]
    ngl = 10**6 if spec["ngl"] is None else spec["ngl"]
    slots = llama_slot_devices(split, n_blocks, ngl, len(model))
    dev = [None if d is None else model[d] for d in slots]
    sp = p.engine_fields.speed
    rate = sp.bandwidth * sp.efficiency
    per_byte = [0.0 if sp.given[g] else 1000.0 / rate[g] for g in range(k)]
    switch = 2 * sp.switch_ms
    units_in = np.bincount(p.engine_fields.unit_layer, minlength=n_blocks)
    window = 0.0
    need = dict.fromkeys(range(k), 0)
    cpu_units_layers = set()
    for u in range(len(p.engine_fields.unit_layer)):
        layer = int(p.engine_fields.unit_layer[u])
        name = f"blk.{layer}.{p.engine_fields.unit_names[u][0]}.weight"
        buft = llama_tensor_buft(name, spec["rules"])
        home = dev[layer]
        at = home if buft is None else None if buft == "CPU" else cuda[int(buft[4:])]
        size = int(p.engine_fields.unit_bytes[u])
        if at is None:
            window += float(p.engine_fields.unit_ms[u])
            if home is not None:
                cpu_units_layers.add(layer)
        else:
            window += p.engine_fields.active_experts / p.experts[layer] * size * per_byte[at]
            window += 0.0 if sp.given[at] else sp.moe_layer_ms / units_in[layer]
            need[at] += size
            if at != home:
                window += switch
    window += switch * len(cpu_units_layers)
    for layer in range(n):
        g = dev[layer]
        if g is None:
            window += 1000.0 * int(p.engine_fields.dense_bytes[layer]) / p.engine_fields.host_bandwidth
            continue
        window += (
            p.layer_ms[g]
            if sp.given[g]
            else sp.overhead_ms + int(p.engine_fields.dense_bytes[layer]) * per_byte[g]
        )
        need[g] += int(p.layer_bytes[layer])
    path = [g for g in dev[:n] if g is not None] + ([dev[n_blocks]] if dev[n_blocks] is not None else [])
    hops = [g for i, g in enumerate(path) if i == 0 or g != path[i - 1]]
    window += p.handoff_ms * (len(hops) - 1) if hops else 0.0
    for g in range(k):
        if need[g] or dev[n_blocks] == g:
            need[g] += p.stage_bytes
    if dev[0] is not None:
        need[dev[0]] += p.first_stage_bytes
    if dev[n_blocks] is not None:
        need[dev[n_blocks]] += p.last_stage_bytes
    return window, need


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), extra=st.integers(0, 1), data=st.data())
def test_any_command_places_and_times_as_llama_cpp_would(seed: int, extra: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(1, 4))
    n = data.draw(st.integers(2, 10))
    p = _llama_problem(seed, extra, n_layers=n, n_gpus=k)
    words, spec = data.draw(commands(k, n + extra))
    s = score_words(p, words)
    window, need = reference(p, spec)
    assert math.isclose(s.window_ms, window, rel_tol=1e-9, abs_tol=1e-9), (words, s.window_ms, window)
    cards = {c.gpu: c.need_bytes for c in s.cards if c.gpu is not None}
    assert cards == {g: b for g, b in need.items() if b}, words


# Reading the flags


def test_flag_spellings_read_alike() -> None:
    base = parse_llama_args(["-ngl", "99", "-ts", "3,1", "-ot", "a=CPU,b=CUDA1", "-ncmoe", "2", "-c", "8192"])
    for words in (
        [
            "--n-gpu-layers",
            "99",
            "--tensor-split",
            "3/1",
            "--override-tensor",
            "a=CPU,b=CUDA1",
            "--n-cpu-moe",
            "2",
            "--ctx-size",
            "8192",
        ],
        [
            "/opt/llama/llama-server",
            "--gpu-layers",
            "99",
            "-ts",
            "3,,1",
            "-ot",
            "a=CPU",
            "-ot",
            "b=CUDA1",
            "--n_cpu_moe",
            "2",
            "-c",
            "8192",
        ],
        [
            "llama-cli",
            "--n-gpu-layers=99",
            "--tensor-split=3,1",
            "-ot",
            "a=CPU,b=CUDA1",
            "--n-cpu-moe=2",
            "-c",
            "8192",
        ],
    ):
        got = parse_llama_args(words)
        assert (got.n_gpu_layers, got.tensor_split, got.overrides, got.ctx_size) == (
            base.n_gpu_layers,
            base.tensor_split,
            base.overrides,
            base.ctx_size,
        ), words
    assert base.tensor_split == (3.0, 1.0) and base.n_cpu_moe == 2
    assert base.overrides == (("a", "CPU"), ("b", "CUDA1"), *moe_rules(2))


def test_rules_keep_the_order_given_and_ncmoe_is_llama_cpps_regex() -> None:
    got = parse_llama_args(["-ncmoe", "1", "-ot", r"blk\.0\.ffn_up_exps=CUDA0", "-cmoe"])
    assert got.overrides == (
        (r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),
        (r"blk\.0\.ffn_up_exps", "CUDA0"),
        (FFN_EXPS_REGEX, "CPU"),
    )
    assert got.cpu_moe and got.n_cpu_moe == 1


def test_other_flags_are_ignored_and_named() -> None:
    got = parse_llama_args(
        [
            "CUDA_VISIBLE_DEVICES=1,0",
            "OMP_NUM_THREADS=8",
            "llama-server",
            "-m",
            "m.gguf",
            "--jinja",
            "-fa",
            "on",
            "-t",
            "16",
            "-ngl",
            "99",
            "--no-mmap",
            "-dev",
            "CUDA1,CUDA0",
            "-sm",
            "none",
            "-mg",
            "1",
            "-ctk",
            "q8_0",
        ]
    )
    assert got.visible == (1, 0) and got.devices == ("CUDA1", "CUDA0") and got.split_mode == "none"
    assert got.main_gpu == 1 and got.type_k == "q8_0" and got.type_v == "f16"
    assert got.ignored == ("OMP_NUM_THREADS=8", "-m m.gguf", "--jinja", "-t 16", "--no-mmap")
    assert got.flash_attn == "on"


def test_llama_bench_words_are_one_test() -> None:
    got = parse_llama_args(
        [
            "llama-bench",
            "-m",
            "m.gguf",
            "-ngl",
            "99",
            "-ts",
            "3/1",
            "-ot",
            "a=CPU;b=CUDA0",
            "-ncmoe",
            "1",
            "-d",
            "4096",
            "-n",
            "64",
            "-p",
            "0",
        ]
    )
    assert got.bench and got.tensor_split == (3.0, 1.0) and got.depth == 4096 and got.ctx_size == 4160
    assert got.overrides == (("a", "CPU"), ("b", "CUDA0"), *moe_rules(1))  # -ncmoe after -ot, as llama-bench
    assert parse_llama_args(["llama-bench", "-dev", "CUDA1/CUDA0"]).devices == ("CUDA1", "CUDA0")


def test_environment_sets_flags_before_the_command_line() -> None:
    got = parse_llama_args(["LLAMA_ARG_N_GPU_LAYERS=20", "LLAMA_ARG_N_CPU_MOE=1", "-ngl", "30"])
    assert got.n_gpu_layers == 30 and got.overrides == tuple(moe_rules(1))
    assert LlamaArgs().n_gpu_layers is None


@pytest.mark.parametrize(
    "words",
    [
        ["-ts", "abc"],
        ["-ts", ",".join(["1"] * 16)],
        ["-ngl"],
        ["-ngl", "many"],
        ["-ot", "exps"],
        ["-ot", "(unclosed=CPU"],
        ["-sm", "rows"],
        ["-ctk", "q3_k"],
        ["-ncmoe", "-1"],
        ["-c", "-5"],
        ["-dev", "CUDA0,none"],
        ["CUDA_VISIBLE_DEVICES=GPU-abc", "-ngl", "9"],
        ["CUDA_VISIBLE_DEVICES=0,0"],
        ["llama-bench", "-ngl", "99,50"],
        ["llama-bench", "-ngl", "90-99"],
        ["llama-bench", "-ts", "3/1,1/1"],
        ["llama-bench", "-ngl", "99", "-ngl", "50"],
    ],
)
def test_a_command_llama_cpp_refuses_is_one_line(words: list[str]) -> None:
    with pytest.raises(ArgsError) as err:
        parse_llama_args(words)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "words",
    [
        ["-ot", "exps=CUDA3"],
        ["-ot", "exps=GPU0"],
        ["-dev", "CUDA7"],
        ["-dev", "CUDA0,CUDA0"],
        ["CUDA_VISIBLE_DEVICES=5"],
        ["-sm", "row"],
        ["-sm", "none", "-mg", "3"],
        ["--rpc", "b:50052"],
    ],
)
def test_a_command_the_rig_cannot_run_is_one_line_exit_2(words: list[str]) -> None:
    result = CliRunner().invoke(cli, ["score", str(ROOT / "rigs/llama-mix.yaml"), "--", *words])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("score: "), result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("rig", "words", "engine"),
    [
        ("rigs/vllm-mix.yaml", ["-ngl", "99", "-ts", "3,1"], "llama.cpp"),
        ("rigs/llama-mix.yaml", ["VLLM_PP_LAYER_PARTITION=30,30,34", "-pp", "3"], "vllm"),
        ("rigs/llama-mix.yaml", ["--pp-size", "3"], "sglang"),
        ("rigs/box.yaml", ["-ngl", "99"], "llama.cpp"),
    ],
)
def test_another_engines_command_says_which_engine(rig: str, words: list[str], engine: str) -> None:
    result = CliRunner().invoke(cli, ["score", str(ROOT / rig), "--", *words])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert f"--engine {engine}" in result.stderr


def test_without_placement_flags_the_score_says_fit_is_not_modelled() -> None:
    p = load_problem(ROOT / "rigs/llama-mix.yaml")
    assert any("--fit" in n for n in score_words(p, ["-c", "8192"]).notes)
    assert not any("--fit" in n for n in score_words(p, ["-c", "8192", "-fit", "off"]).notes)
    assert not any("--fit" in n for n in score_words(p, ["-ngl", "99"]).notes)


# What a placement costs


def test_no_device_runs_everything_on_the_cpu() -> None:
    p = load_problem(ROOT / "rigs/llama-mix.yaml")
    s = score_words(p, ["-dev", "none"])
    assert s.placement.stages == [] and s.cpu_layers == (0, p.n_layers)
    expected = 1000.0 * float(p.engine_fields.dense_bytes.sum()) / p.engine_fields.host_bandwidth + float(
        p.engine_fields.unit_ms.sum()
    )
    assert math.isclose(s.window_ms, expected, rel_tol=1e-12)
    assert score_words(p, ["-ngl", "0"]).window_ms == s.window_ms


def test_minus_ot_to_another_gpu_is_held_there_and_costs_two_switches() -> None:
    p = load_problem(ROOT / "rigs/llama-mix.yaml")
    base = score_words(p, ["-ngl", "99", "-ts", "40,40,15", "-ncmoe", "94"])
    moved = score_words(
        p, ["-ngl", "99", "-ts", "40,40,15", "-ot", r"blk\.3\.ffn_.*_exps=CUDA1", "-ncmoe", "94"]
    )
    c = p.engine_fields.speed
    unit = int(p.engine_fields.unit_bytes[p.engine_fields.unit_layer == 3][0])
    read = p.engine_fields.active_experts / p.experts[3] * unit * 1000.0 / (c.bandwidth[1] * c.efficiency)
    cpu = float(p.engine_fields.unit_ms[p.engine_fields.unit_layer == 3][0])
    moe = c.moe_layer_ms / int((p.engine_fields.unit_layer == 3).sum())
    expected = base.window_ms - cpu - 2 * c.switch_ms + read + moe + 2 * c.switch_ms
    assert math.isclose(moved.window_ms, expected, rel_tol=1e-12)
    gpu1 = {x.gpu: x for x in moved.cards}[1]
    assert gpu1.guests == 1 and gpu1.need_bytes - {x.gpu: x for x in base.cards}[1].need_bytes == unit


def test_split_mode_none_puts_every_layer_on_the_main_gpu() -> None:
    p = load_problem(ROOT / "rigs/llama-mix.yaml")
    s = score_words(p, ["-sm", "none", "-mg", "1", "-cmoe"])
    assert [(x.gpu, x.start, x.end) for x in s.placement.stages] == [(1, 0, p.n_layers)]
    assert {x.gpu for x in s.cards if x.gpu is not None} == {1}


def test_layers_left_on_the_cpu_cost_their_bytes_at_host_bandwidth() -> None:
    p = load_problem(ROOT / "rigs/llama-mix.yaml")
    s = score_words(p, ["-ngl", "5", "-cmoe"])
    on_gpu = p.n_layers + 1 - 5
    assert s.cpu_layers == (0, on_gpu) and s.placement.stages[0].start == on_gpu
    dense = 1000.0 * float(p.engine_fields.dense_bytes[:on_gpu].sum()) / p.engine_fields.host_bandwidth
    assert math.isclose(
        s.cpu_ms,
        dense + float(p.engine_fields.unit_ms[p.engine_fields.unit_layer < on_gpu].sum()),
        rel_tol=1e-12,
    )


def test_context_and_cache_types_change_the_kv_bytes() -> None:
    p = load_problem(ROOT / "rigs/llama-mix.yaml")
    f16 = score_words(p, ["-c", "65536", "-cmoe"])
    q8 = score_words(p, ["-c", "65536", "-ctk", "q8_0", "-ctv", "q8_0", "-cmoe"])
    assert f16.problem.context == 65536
    kv = int(p.kv_per_layer.sum())
    assert f16.problem.layer_bytes.sum() - p.layer_bytes.sum() == kv * (65536 - p.context)
    assert f16.problem.layer_bytes.sum() - q8.problem.layer_bytes.sum() == kv * 65536 - sum(
        math.ceil(int(x) * 65536 * 34 / 32 / 2) for x in p.kv_per_layer
    )


def test_a_card_that_would_run_out_is_named_with_its_shortfall() -> None:
    result = CliRunner().invoke(
        cli, ["score", str(ROOT / "rigs/llama-mix.yaml"), "--json", "--", "-ngl", "99"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    score, plan = out["score"], out["plan"]
    assert not score["fits"] and score["status"] == "infeasible"
    short = {c["gpu"]: c["shortfall_bytes"] for c in score["cards"] if not c["fits"]}
    assert short and short == {x["gpu"]: x["shortfall_bytes"] for x in score["out_of_memory"]}
    for key in ("window_ms", "tokens_per_s", "held_mass", "held_pairs", "cuts", "stages", "bottleneck_ms"):
        assert key in score and key in plan
    assert plan["export"]["engine"] == "llama.cpp"
    assert math.isclose(out["speedup"], score["window_ms"] / plan["window_ms"])


# vLLM, SGLang and Strata


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_resident_exports_score_as_the_plan_and_no_partition_is_the_even_split(engine: str) -> None:
    d = plan_json("rigs/vllm-mix.yaml", "--engine", engine, "--export", engine)
    p = load_problem(ROOT / "rigs/vllm-mix.yaml", Overrides(engine=engine))
    s = score_words(p, export_words(d["export"]["lines"]))
    assert math.isclose(s.window_ms, d["window_ms"], rel_tol=1e-9) and s.placement.cuts == d["cuts"]
    size = "--pipeline-parallel-size" if engine == "vllm" else "--pp-size"
    even = score_words(p, [size, str(p.n_gpus)])
    assert math.isclose(even.window_ms, d["default"]["window_ms"], rel_tol=1e-9)
    assert even.placement.cuts == d["default"]["cuts"]


@pytest.mark.parametrize("seed", range(8))
def test_random_partitions_score_as_evaluated(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = random_engine_problem(seed, "vllm", n_layers=10, n_gpus=3)
    order = [int(x) for x in rng.permutation(3)]
    sizes = [3, 4, 3]
    s = score_words(
        p, [f"CUDA_VISIBLE_DEVICES={','.join(map(str, order))}", "VLLM_PP_LAYER_PARTITION=3,4,3", "-pp", "3"]
    )
    plan = evaluate(p, order, [3, 7])
    assert s.window_ms == plan.window_ms and [c.fits for c in s.cards] == [x.fits for x in plan.stages]
    assert sum(sizes) == p.n_layers


@pytest.mark.parametrize(
    "words",
    [
        ["VLLM_PP_LAYER_PARTITION=16,16", "-pp", "3"],
        ["VLLM_PP_LAYER_PARTITION=16,16,10", "-pp", "3"],
        ["VLLM_PP_LAYER_PARTITION=a,b", "-pp", "2"],
        ["-pp", "4"],
        ["-tp", "2"],
    ],
)
def test_a_bad_partition_is_one_line(words: list[str]) -> None:
    result = CliRunner().invoke(cli, ["score", str(ROOT / "rigs/vllm-mix.yaml"), "--", *words])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output


def test_strata_layer_split_scores_as_the_plan() -> None:
    d = plan_json("rigs/box.yaml", "--export", "strata")
    p = load_problem(ROOT / "rigs/box.yaml")
    s = score_words(p, export_words(d["export"]["lines"][:-1]))
    assert s.window_ms == d["window_ms"]


def test_fits_printed_command_scores_as_the_default_across_hosts() -> None:
    """--fit's command as llama-fit-params prints it (``-ot`` to ``RPC0[host:port]`` buffer types) scores
    as the JSON ``default`` says; a buffer type of an endpoint the command lacks is refused."""
    d = plan_json("rigs/two-hosts.yaml")
    words = d["default"]["command"]
    p = load_problem(ROOT / "rigs/two-hosts.yaml")
    s = score_words(p, ["llama-server", "-m", "model.gguf", *words])
    assert math.isclose(s.window_ms, d["default"]["window_ms"], rel_tol=1e-9)
    endpoint = words[words.index("--rpc") + 1].split(",")[0]
    s = score_words(p, [*words, "-ot", rf"blk\.3\.ffn_down_exps=RPC0[{endpoint}]"])
    assert s.window_ms > 0
    for buft, why in ((f"RPC0[{endpoint}9]", "no --rpc endpoint"), (f"RPC1[{endpoint}]", "one GPU")):
        with pytest.raises(ArgsError, match=re.escape(why)):
            score_words(p, [*words, "-ot", rf"blk\.3\.ffn_down_exps={buft}"])
