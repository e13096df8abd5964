"""``solve calibrate RIG --llama-bench/--llama-log/--suggest``: reading, fitting, writing, bad input.

The runs here are llama-bench rows whose rates the scorer itself predicts under known "true"
constants, so a fit that identifies a constant must find it again, and one that does not must say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner, Result

from solver.calibrate.llamabench import Expect, read_bench, weight_bytes
from solver.calibrate.llamafit import at, constants_of, load, score_run, weights_of
from solver.calibrate.speedfit import CONSTANTS, to_x
from solver.cli import cli
from solver.engines import REGISTRY, engine_named
from solver.engines.bandwidth import with_constants
from solver.files.config import load_rig
from solver.planning.resolve import load_problem

MEASURED = Path(__file__).resolve().parents[1] / "fixtures" / "measured"
MODEL = MEASURED / "models" / "qwen3.6-35b-a3b-q4_k_m.yaml"
TRUTH = {"host_bandwidth": 61e9, "gpu_efficiency": 0.7, "switch_ms": 0.11, "layer_overhead_ms": 0.05}
RULE = "blk\\.(" + "|".join(map(str, range(24, 40))) + ")\\.ffn_gate_exps=CPU"

RIG = """# a test rig: its comments and key order must survive --write
name: box5080
model: {model}
engine: llama.cpp
host_bandwidth: 38.4 GB/s          # half of two channels of DDR5-4800
context: 4096
gpus:
{gpus}"""
GPU_5080 = """  - name: RTX 5080
    free: 15 GiB   # what nvidia-smi shows
    mem_bandwidth: 960 GB/s
"""
GPU_3060 = """  - name: RTX 3060
    free: 11 GiB
    mem_bandwidth: 360 GB/s
"""


def cli_run(*args: str | Path) -> Result:
    result = CliRunner().invoke(cli, ["calibrate", *map(str, args)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"traceback for {args}: {result.exception!r}")
    return result


def one_line(result: Result) -> str:
    """The one line a bad input prints (exit 2)."""
    assert result.exit_code == 2, result.output
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.stderr
    return lines[0]


def make_rig(folder: Path, gpus: str = GPU_5080, name: str = "rig.yaml") -> Path:
    path = folder / name
    path.write_text(RIG.format(model=MODEL, gpus=gpus))
    return path


def bench_row(
    ncmoe: int = 0,
    ot: str = "none",
    ts: str = "0.00",
    depth: int = 0,
    tps: float = 50.0,
    n_gen: int = 64,
    n_prompt: int = 0,
    gpus: int = 1,
    size: int | None = None,
    devices: str = "auto",
) -> dict:
    """A llama-bench -o json row as tools/llama-bench prints it."""
    return {
        "build_commit": "abc1234",
        "build_number": 7000,
        "cpu_info": "AMD Ryzen 9 9950X",
        "gpu_info": ", ".join(["NVIDIA GeForce RTX 5080"] * gpus),
        "backends": "CUDA",
        "model_filename": "qwen.gguf",
        "model_type": "qwen35moe 35B.A3B Q4_K - Medium",
        "model_size": weight_bytes(load_model_config()) if size is None else size,
        "model_n_params": 34660000000,
        "n_batch": 2048,
        "n_ubatch": 512,
        "n_threads": 16,
        "type_k": "f16",
        "type_v": "f16",
        "n_gpu_layers": 999,
        "n_cpu_moe": ncmoe,
        "split_mode": "layer",
        "main_gpu": 0,
        "no_kv_offload": False,
        "flash_attn": -1,
        "devices": devices,
        "tensor_split": ts,
        "tensor_buft_overrides": ot,
        "n_prompt": n_prompt,
        "n_gen": n_gen,
        "n_depth": depth,
        "avg_ts": tps,
        "stddev_ts": 0.2,
        "samples_ts": [tps],
    }


def load_model_config():
    from solver.files.config import load_model

    return load_model(MODEL)[0]


def true_rates(rig: Path, rows: list[dict], truth: dict[str, float]) -> list[dict]:
    """The rows with ``avg_ts`` as the scorer predicts it under the ``truth`` constants."""
    setup = load(rig, None)
    p, engine = setup.p, engine_named("llama.cpp")
    x = weights_of(p)
    for i, key in enumerate(CONSTANTS):
        if key in truth:
            x[i] = to_x(key, truth[key])
    tmp = rig.parent / "rates.json"
    tmp.write_text(json.dumps(rows))
    runs, _ = read_bench(tmp, "rates.json", Expect(weight_bytes(setup.model), p.n_gpus))
    out = []
    for row, run in zip(rows, runs):
        window = engine.score(with_constants(at(p, x), depth=run.depth), engine.read_command(list(run.words)))
        out.append({**row, "avg_ts": 1000.0 / window.window_ms})
    return out


def design_rows() -> list[dict]:
    """Runs that identify host_bandwidth, gpu_efficiency and switch_ms on one GPU (as --suggest asks)."""
    return [bench_row(ncmoe=m, ot=ot, depth=d) for m in (14, 24) for ot in ("none", RULE) for d in (0, 32768)]


def write_json(folder: Path, rows: list[dict], name: str = "runs.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(rows, indent=2))
    return path


def test_the_fit_finds_the_constants_the_runs_identify(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    runs = write_json(tmp_path, true_rates(rig, design_rows(), TRUTH))
    result = cli_run(rig, "--llama-bench", runs, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    fitted = {k: v["after"] for k, v in out["constants"].items() if v["identified"]}
    assert set(fitted) == {"host_bandwidth", "gpu_efficiency", "switch_ms"}
    for key, value in fitted.items():
        assert value == pytest.approx(TRUTH[key], rel=1e-6), key
    for run in out["runs"]:
        assert run["after_tps"] == pytest.approx(run["measured_tps"], rel=1e-6)
        assert run["leave_one_out_tps"] is not None
    assert set(out["not_identified"]) == {"layer_overhead_ms", "handoff_ms", "moe_layer_ms"}
    assert "one GPU" in out["not_identified"]["handoff_ms"]


def test_leave_one_out_is_the_fit_of_the_other_runs(tmp_path: Path) -> None:
    """A run's leave-one-out rate is what the rig calibrated on the other runs predicts for it."""
    rig = make_rig(tmp_path)
    rows = true_rates(rig, design_rows(), TRUTH)
    rows[5]["avg_ts"] *= 1.1  # a run the others do not explain
    out = json.loads(cli_run(rig, "--llama-bench", write_json(tmp_path, rows), "--json").stdout)
    for i in (0, 5):
        others = write_json(tmp_path, rows[:i] + rows[i + 1 :], "others.json")
        fitted_rig = tmp_path / f"fitted{i}.yaml"
        assert cli_run(rig, "--llama-bench", others, "--write", fitted_rig).exit_code == 0
        alone = write_json(tmp_path, [rows[i]], "alone.json")
        again = json.loads(cli_run(fitted_rig, "--llama-bench", alone, "--json").stdout)
        assert again["runs"][0]["before_tps"] == pytest.approx(out["runs"][i]["leave_one_out_tps"], rel=1e-3)


def test_the_linear_model_is_the_scorer(tmp_path: Path) -> None:
    """A run's base + slope . x equals the scorer's window at other constants (the fit's premise)."""
    setup = load(make_rig(tmp_path), None)
    p, engine = setup.p, engine_named("llama.cpp")
    path = write_json(tmp_path, design_rows())
    runs, _ = read_bench(path, "runs.json", Expect(weight_bytes(setup.model), 1))
    rng = np.random.default_rng(7)
    for run in runs:
        s = score_run(p, run, engine)
        x = weights_of(p) * rng.uniform(0.5, 2.0, len(CONSTANTS))
        window = engine.score(with_constants(at(p, x), depth=run.depth), engine.read_command(list(run.words)))
        assert s.base + s.slope @ x == pytest.approx(window.window_ms, rel=1e-9)


def test_jsonl_reads_as_json_and_prompt_rows_are_prompt_runs(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rows = [*true_rates(rig, design_rows()[:3], TRUTH), bench_row(n_prompt=512, n_gen=0, tps=2000)]
    array = write_json(tmp_path, rows)
    lines = tmp_path / "runs.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b = cli_run(rig, "--llama-bench", array, "--json"), cli_run(rig, "--llama-bench", lines, "--json")
    assert a.exit_code == b.exit_code == 0
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert [r["measured_tps"] for r in ja["runs"]] == [r["measured_tps"] for r in jb["runs"]]
    assert len(ja["runs"]) == 3
    assert [r["measured_tps"] for r in ja["prompt"]["runs"]] == [
        r["measured_tps"] for r in jb["prompt"]["runs"]
    ]
    assert [r["measured_tps"] for r in ja["prompt"]["runs"]] == [2000]


def test_rows_of_another_model_or_machine_are_warned_and_skipped(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    good = true_rates(rig, design_rows()[:3], TRUTH)
    size = good[0]["model_size"]
    rows = [
        *good,
        bench_row(size=int(size * 1.02)),
        bench_row(gpus=2),
        bench_row(devices="CUDA1"),
        bench_row(devices="none"),
    ]
    result = cli_run(rig, "--llama-bench", write_json(tmp_path, rows))
    assert result.exit_code == 0, result.output
    assert "row 4: model_size" in result.stderr and "2.0% from the model's" in result.stderr
    assert "row 5: llama-bench saw 2 GPUs" in result.stderr and "the rig has 1" in result.stderr
    assert "row 6: devices names CUDA1, but the rig has 1 GPU(s): skipped" in result.stderr
    assert "row 7: ran on no GPU" in result.stderr
    assert "3 run(s)" in result.stdout


def test_a_size_within_one_percent_is_the_model(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    row = true_rates(rig, [bench_row(ncmoe=20)], TRUTH)[0]
    row["model_size"] = int(row["model_size"] * 1.009)
    result = cli_run(rig, "--llama-bench", write_json(tmp_path, [row]), "--json")
    assert result.exit_code == 0 and len(json.loads(result.stdout)["runs"]) == 1


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"results": [1, 2]}', "has no 'n_prompt': not llama-bench -o json or -o jsonl output"),
        ("[1, 2]", "row 1 is 1, not a test object"),
        ("[]", "holds no rows"),
        ("", "is empty"),
        ("| model | size |\n| --- | --- |\n", "not JSON"),
        ('"text"', "holds 'text', not test objects"),
    ],
)
def test_not_llama_bench_json_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    rig = make_rig(tmp_path)
    (tmp_path / "bad.json").write_text(text)
    line = one_line(cli_run(rig, "--llama-bench", tmp_path / "bad.json"))
    assert "bad.json" in line and says in line


def test_no_usable_row_is_one_line(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rows = [bench_row(size=10**9), bench_row(n_prompt=512, n_gen=0, size=10**9)]  # another model
    result = cli_run(rig, "--llama-bench", write_json(tmp_path, rows))
    assert result.exit_code == 2
    assert "no run to calibrate from" in result.stderr and "Traceback" not in result.output


def test_fewer_runs_than_constants_fits_what_they_identify_and_says_so(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    runs = write_json(tmp_path, true_rates(rig, [bench_row(ncmoe=20)], TRUTH))
    result = cli_run(rig, "--llama-bench", runs, "--json")
    out = json.loads(result.stdout)
    assert [k for k, v in out["constants"].items() if v["identified"]] == ["host_bandwidth"]
    assert "1 run can fit at most 1 of the 5 constants they exercise" in result.stderr
    assert out["runs"][0]["after_tps"] == pytest.approx(out["runs"][0]["measured_tps"], rel=1e-9)
    assert out["runs"][0]["leave_one_out_tps"] is None


def test_a_run_that_would_not_fit_is_named_and_used(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rows = true_rates(rig, [bench_row(ncmoe=0), bench_row(ncmoe=30)], TRUTH)
    result = cli_run(rig, "--llama-bench", write_json(tmp_path, rows), "--json")
    assert result.exit_code == 0
    assert "row 1: would not fit under the rig and model" in result.stderr and "short by" in result.stderr
    assert [r["fits"] for r in json.loads(result.stdout)["runs"]] == [False, True]


def test_write_keeps_the_rig_and_names_the_source(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    before = rig.read_text()
    runs = write_json(tmp_path, true_rates(rig, design_rows(), TRUTH))
    result = cli_run(rig, "--llama-bench", runs, "--write", rig)
    assert result.exit_code == 0, result.output
    text = rig.read_text()
    assert text.startswith("# a test rig: its comments and key order must survive --write\n")
    assert "free: 15 GiB   # what nvidia-smi shows" in text
    assert "host_bandwidth: 61 GB/s   # fitted by solve calibrate from" in text and "runs.json" in text
    assert "# was: host_bandwidth: 38.4 GB/s          # half of two channels of DDR5-4800" in text
    assert "gpu_efficiency: 0.700" in text and "switch_ms: 0.11 " in text
    assert "layer_overhead_ms" not in text  # not identified: not written
    rig_cfg, _ = load_rig(rig, REGISTRY)
    assert (rig_cfg.host_bandwidth, rig_cfg.gpu_efficiency, rig_cfg.switch_ms) == (61 * 10**9, 0.7, 0.11)
    # every line of the old file is still there, as it was or as a "# was:" comment
    for line in before.splitlines():
        assert line in text or f"# was: {line.strip()}" in text
    # again: the fitted lines are replaced in place, and the plan reads them
    again = cli_run(rig, "--llama-bench", runs, "--write", rig)
    lines = rig.read_text().splitlines()
    assert again.exit_code == 0 and [x for x in lines if x.startswith("host_bandwidth:")] == [
        next(x for x in text.splitlines() if x.startswith("host_bandwidth:"))
    ]
    assert load_problem(rig).engine_fields.host_bandwidth == 61 * 10**9


def test_write_elsewhere_keeps_the_model_reachable(tmp_path: Path) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    rig = folder / "rig.yaml"
    rig.write_text(RIG.format(model="model.yaml", gpus=GPU_5080))
    (folder / "model.yaml").write_text(MODEL.read_text())
    runs = write_json(tmp_path, true_rates(rig, [bench_row(ncmoe=20)], TRUTH))
    (tmp_path / "b").mkdir()
    out = tmp_path / "b" / "fitted.yaml"
    result = cli_run(rig, "--llama-bench", runs, "--write", out)
    assert result.exit_code == 0, result.output
    assert 'model: "../a/model.yaml"' in out.read_text()
    assert load_problem(out).engine_fields.host_bandwidth == load_rig(out, REGISTRY)[0].host_bandwidth
    assert rig.read_text() == RIG.format(model="model.yaml", gpus=GPU_5080)  # the source rig untouched


def test_without_write_the_lines_to_add_are_printed(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    runs = write_json(tmp_path, true_rates(rig, design_rows(), TRUTH))
    result = cli_run(rig, "--llama-bench", runs)
    assert result.exit_code == 0
    assert f"add to {rig}" in result.stdout or "add to" in result.stdout
    assert "host_bandwidth: 61 GB/s   # fitted by solve calibrate" in result.stdout
    assert (
        "leave-one-out" in result.stdout and "kept layer_overhead_ms 0.05 ms: not identified" in result.stdout
    )
    assert rig.read_text() == RIG.format(model=MODEL, gpus=GPU_5080)


def test_a_rig_that_cannot_be_edited_is_left_whole(tmp_path: Path) -> None:
    rig = tmp_path / "flow.yaml"
    rig.write_text(
        "{model: " + str(MODEL) + ", engine: llama.cpp, host_bandwidth: 40 GB/s, "
        "gpus: [{name: RTX 5080, free: 15 GiB, mem_bandwidth: 960 GB/s}]}\n"
    )
    before = rig.read_text()
    runs = write_json(tmp_path, true_rates(rig, [bench_row(ncmoe=20)], TRUTH))
    line = one_line(cli_run(rig, "--llama-bench", runs, "--write", rig))
    assert "flow.yaml" in line and "by hand" in line
    assert rig.read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".flow")]  # no temporary left


@pytest.mark.parametrize("target", ["dir", "model", "runs"])
def test_write_refuses_a_directory_or_an_input(tmp_path: Path, target: str) -> None:
    rig = make_rig(tmp_path)
    runs = write_json(tmp_path, true_rates(rig, [bench_row(ncmoe=20)], TRUTH))
    out = {"dir": tmp_path, "model": MODEL, "runs": runs}[target]
    line = one_line(cli_run(rig, "--llama-bench", runs, "--write", out))
    assert "is a directory" in line or "refusing to overwrite" in line


def test_two_gpus_identify_the_handoff(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, GPU_5080 + GPU_3060)
    truth = {**TRUTH, "handoff_ms": 1.5}
    rows = [
        bench_row(ncmoe=m, ts=ts, depth=d, gpus=2)
        for m in (4, 14)
        for ts in ("30.00/11.00", "40.00/1.00", "41.00")
        for d in (0, 32768)
    ]
    runs = write_json(tmp_path, true_rates(rig, rows, truth))
    out = json.loads(cli_run(rig, "--llama-bench", runs, "--json").stdout)
    assert out["constants"]["handoff_ms"]["identified"]
    assert out["constants"]["handoff_ms"]["after"] == pytest.approx(1.5, rel=1e-6)


def test_a_strata_rig_is_one_line(tmp_path: Path) -> None:
    rig = Path(__file__).resolve().parents[2] / "rigs" / "box.yaml"
    line = one_line(cli_run(rig, "--llama-bench", write_json(tmp_path, [bench_row()])))
    assert "engine strata" in line and "set engine: llama.cpp" in line


def test_llama_server_log_gives_runs_and_buffers(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    flags = "-ngl 99 --n-cpu-moe 20 -c 4096"
    setup = load(rig, None)
    engine = engine_named("llama.cpp")
    x = weights_of(setup.p)
    x[0] = to_x("host_bandwidth", TRUTH["host_bandwidth"])
    rates = []
    for depth in (35, 900):
        scored = engine.score(with_constants(at(setup.p, x), depth=depth), engine.read_command(flags.split()))
        rates.append(scored.window_ms)
    log = tmp_path / "server.log"
    log.write_text(
        "llama_context:      CUDA0 compute buffer size =   300.75 MiB\n"
        "llama_context:  CUDA_Host compute buffer size =    12.01 MiB\n"
        "prompt eval time =     143.21 ms /    35 tokens (    4.09 ms per token,   244.40 tokens per "
        "second)\n"
        f"       eval time = {rates[0] * 255:10.4f} ms /   255 tokens\n"
        "prompt eval time =    1143.21 ms /   900 tokens\n"
        f"       eval time = {rates[1] * 100:10.4f} ms /   100 runs\n"
    )
    result = cli_run(rig, "--llama-log", log, "--args", flags, "--write", rig)
    assert result.exit_code == 0, result.output
    cfg, _ = load_rig(rig, REGISTRY)
    assert cfg.gpus[0].buffer == int(300.75 * 2**20)
    assert cfg.host_bandwidth == pytest.approx(TRUTH["host_bandwidth"], rel=2e-3)
    assert "buffer: 300.75 MiB   # compute buffer" in rig.read_text()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            [
                "--llama-log",
                "a.log",
                "--llama-log",
                "b.log",
                "--args",
                "-ngl 1",
                "--args",
                "x",
                "--args",
                "y",
            ],
            "--args",
        ),
        (["--args", "-ngl 99"], "no --llama-log"),
        (["--point", "0.5=80"], "take no RIG"),
        ([], "give --llama-bench FILE"),
        (["--suggest", "--write", "x.yaml"], "--suggest prints a command"),
    ],
)
def test_usage_errors_are_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    rig = make_rig(tmp_path)
    for name in ("a.log", "b.log"):
        (tmp_path / name).write_text("eval time = 10 ms / 1 tokens\n")
    args = [str(tmp_path / a) if a.endswith(".log") else a for a in args]
    assert says in one_line(cli_run(rig, *args))


def test_llama_options_need_a_rig() -> None:
    assert "need RIG" in one_line(cli_run("--llama-bench", "runs.json"))


def test_a_log_without_timing_lines_is_one_line(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    (tmp_path / "x.log").write_text("hello\n")
    line = one_line(cli_run(rig, "--llama-log", tmp_path / "x.log", "--args", "-ngl 99"))
    assert "x.log" in line and "eval time" in line


def test_help_explains_both_calibrations() -> None:
    text = CliRunner().invoke(cli, ["calibrate", "--help"]).output
    assert "--llama-bench" in text and "--suggest" in text and "--point" in text and "Strata" in text


def test_suggest_asks_for_runs_that_identify_what_it_says(tmp_path: Path) -> None:
    from solver.calibrate.suggest import suggest
    from solver.engines.llamacpp.args import parse_llama_args

    rig = make_rig(tmp_path)
    result = cli_run(rig, "--suggest")
    assert result.exit_code == 0
    command = next(x for x in result.stdout.splitlines() if x.startswith("llama-bench"))
    assert " -o json" in command and "-ncmoe " in command and "-p 0" in command
    setup = load(rig, None)
    s = suggest(setup.p, engine_named("llama.cpp"), setup.shown)
    assert set(s.identifies) >= {"host_bandwidth", "gpu_efficiency", "switch_ms"}
    # the tests as llama-bench rows, measured under the truth: the fit finds what --suggest promised
    rows = []
    for run in s.runs:
        args = parse_llama_args(list(run.words))
        ncmoe = args.n_cpu_moe
        ot = ";".join(f"{p}={b}" for p, b in args.overrides[: len(args.overrides) - ncmoe]) or "none"
        rows.append(bench_row(ncmoe=ncmoe, ot=ot, depth=args.depth or 0))
    out = json.loads(
        cli_run(rig, "--llama-bench", write_json(tmp_path, true_rates(rig, rows, TRUTH)), "--json").stdout
    )
    fitted = {k: v["after"] for k, v in out["constants"].items() if v["identified"]}
    assert set(fitted) == set(s.identifies)
    for key, value in fitted.items():
        assert value == pytest.approx(TRUTH[key], rel=1e-6)


def test_constants_round_trip() -> None:
    x = np.array([to_x(k, v) for k, v in {**TRUTH, "handoff_ms": 0.4}.items()])
    assert constants_of(x) == pytest.approx({**TRUTH, "handoff_ms": 0.4})


def test_written_keys_are_valid_yaml(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    runs = write_json(tmp_path, true_rates(rig, design_rows(), TRUTH))
    cli_run(rig, "--llama-bench", runs, "--write", rig)
    assert yaml.safe_load(rig.read_text())["gpu_efficiency"] == 0.7


def test_model_option_replaces_the_rigs_model(tmp_path: Path) -> None:
    """--model names the model the rows are checked and scored against."""
    rig = make_rig(tmp_path)
    rows = true_rates(rig, [bench_row(ncmoe=20)], TRUTH)
    q8 = MEASURED / "models" / "qwen3.6-35b-a3b-q8_0.yaml"
    result = cli_run(rig, "--model", q8, "--llama-bench", write_json(tmp_path, rows))
    assert result.exit_code == 2 and "another model or quant" in result.stderr


def test_runs_too_noisy_to_identify_anything_write_nothing(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    before = rig.read_text()
    rows = true_rates(rig, [bench_row(ncmoe=20), bench_row(ncmoe=30)], TRUTH)
    for row in rows:
        row["stddev_ts"] = row["avg_ts"]  # a spread as large as the rate
    result = cli_run(rig, "--llama-bench", write_json(tmp_path, rows), "--write", rig)
    assert result.exit_code == 0
    assert "not written: no constant identified" in result.stderr and "fitted: nothing" in result.stdout
    assert rig.read_text() == before


def test_a_rig_without_host_bandwidth_starts_from_a_default(tmp_path: Path) -> None:
    rig = tmp_path / "rig.yaml"
    rig.write_text(RIG.format(model=MODEL, gpus=GPU_5080).replace("host_bandwidth: 38.4 GB/s", ""))
    host = {"host_bandwidth": TRUTH["host_bandwidth"]}  # the other constants at their defaults
    runs = write_json(tmp_path, true_rates(rig, [bench_row(ncmoe=20)], host))
    out = json.loads(cli_run(rig, "--llama-bench", runs, "--write", rig, "--json").stdout)
    assert out["constants"]["host_bandwidth"]["before"] is None
    assert load_rig(rig, REGISTRY)[0].host_bandwidth == pytest.approx(TRUTH["host_bandwidth"], rel=2e-3)
    gpu_only = write_json(tmp_path, true_rates(rig, [bench_row(ncmoe=0)], TRUTH), "gpu.json")
    rig.write_text(RIG.format(model=MODEL, gpus=GPU_5080).replace("host_bandwidth: 38.4 GB/s", ""))
    result = cli_run(rig, "--llama-bench", gpu_only)
    assert "the rig has no host_bandwidth and these runs do not identify it" in result.stderr
