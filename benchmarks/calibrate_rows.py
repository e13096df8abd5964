"""How long ``solve calibrate RIG --llama-bench FILE`` takes on a file of N llama-bench rows.

    python benchmarks/calibrate_rows.py [--rows 50] [--repeat 3] [--rig RIG]

Writes N generation rows for RIG (default docs/examples/rtx5080.yaml: ``-ncmoe`` over the later three
quarters of the layers, depths 0-16384, with and without an ``-ot`` rule on the last ten layers'
``ffn_gate_exps``; rates from the scorer at other constants, with 2% noise) to a temporary
folder, then prints the medians of: the command in-process after its imports (``calibrate_llama_report.run``),
a fresh ``solve calibrate ... --json`` process, and a fresh process that only imports what the command
imports (its start-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from solver.calibrate.llamabench import Expect, read_bench, weight_bytes
from solver.calibrate.llamafit import at, load, weights_of
from solver.calibrate.llamafit_report import run
from solver.calibrate.speedfit import to_x
from solver.engines import engine_named
from solver.engines.bandwidth import with_constants

ROOT = Path(__file__).resolve().parent.parent
RIG = ROOT / "docs" / "examples" / "rtx5080.yaml"


def rows(n: int, size: int, layers: int, gpus: int) -> list[dict]:
    """N llama-bench rows of different placements and depths (rates filled in later)."""
    rule = "blk\\.(" + "|".join(map(str, range(layers - 10, layers))) + ")\\.ffn_gate_exps=CPU"
    first = layers // 4
    out = []
    for i in range(n):
        out.append(
            {
                "gpu_info": ", ".join(["GPU"] * gpus),
                "backends": "CUDA",
                "model_size": size,
                "n_gpu_layers": 99,
                "n_cpu_moe": first + i % (layers - first),
                "split_mode": "layer",
                "main_gpu": 0,
                "devices": "auto",
                "tensor_split": "0.00",
                "tensor_buft_overrides": rule if i % 2 else "none",
                "type_k": "f16",
                "type_v": "f16",
                "n_prompt": 0,
                "n_gen": 128,
                "n_depth": (0, 4096, 16384)[i % 3],
                "avg_ts": 1.0,
                "stddev_ts": 0.3,
            }
        )
    return out


def write_file(rig: Path, folder: Path, n: int) -> Path:
    setup = load(rig, None)
    p, engine = setup.p, engine_named("llama.cpp")
    path = folder / "runs.json"
    path.write_text(json.dumps(rows(n, weight_bytes(setup.model), p.n_layers, p.n_gpus)))
    runs, _ = read_bench(path, "runs.json", Expect(weight_bytes(setup.model), p.n_gpus))
    x = weights_of(p)
    x[0], x[2] = to_x("host_bandwidth", 61e9), 0.11
    noise = np.random.default_rng(0).normal(0, 0.02, n)
    data = json.loads(path.read_text())
    for row, r, e in zip(data, runs, noise):
        ms = engine.score(
            with_constants(at(p, x), depth=r.depth), engine.read_command(list(r.words))
        ).window_ms
        row["avg_ts"] = 1000.0 / ms * (1 + e)
    path.write_text(json.dumps(data, indent=1))
    return path


def fresh(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rig", type=Path, default=RIG)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_file(a.rig, Path(tmp), a.rows)
        inside = []
        for _ in range(a.repeat):
            started = time.perf_counter()
            with open("/dev/null", "w") as sink:
                from rich.console import Console

                run(a.rig, None, (path,), (), (), None, False, Console(file=sink))
            inside.append(time.perf_counter() - started)
        solve = [sys.executable, "-m", "solver.cli", "calibrate"]
        whole = [fresh([*solve, str(a.rig), "--llama-bench", str(path), "--json"]) for _ in range(a.repeat)]
        imports = "import solver.cli, solver.calibrate.llamafit_report"
        start = [fresh([sys.executable, "-c", imports]) for _ in range(a.repeat)]
    print(f"{a.rig}: {a.rows} rows, medians of {a.repeat}:")
    print(f"  in-process, after imports: {statistics.median(inside):.3f} s")
    print(f"  fresh process:             {statistics.median(whole):.3f} s")
    print(f"  start-up (its imports):    {statistics.median(start):.3f} s")
    print(f"  beyond start-up:           {statistics.median(whole) - statistics.median(start):.3f} s")


if __name__ == "__main__":
    main()
