"""Plan vs llama.cpp's --fit over emulated rigs: tokens/s of each and the gain, by model, card mix,
card count and context (docs/engines.md, "--fit"). Every rig is planned with its own engine model;
--fit's placement is fit.cpp's algorithm on the same memory count, its printed command scored. With
--cpu-layers, a rig that has no plan with every layer on a GPU is planned again with whole layers on
the CPU allowed (``cpu_layers: true``), and that plan stands for it (its row says how many layers).

    python scripts/fit-sweep.py [--cpu-layers] [--contexts 8192,32768] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
from pathlib import Path

from solver.planning.planner import plan_rig
from solver.planning.resolve import load_problem
from solver.solvers import Limits

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["qwen3-235b-a22b-q4_k_m", "qwen3-30b-a3b-q4_k_m", "gpt-oss-120b-mxfp4", "glm-4.5-air-q4_k_m"]
#: name, free VRAM, memory bandwidth
CARDS = {
    "4090": ("RTX 4090", "23.3 GiB", "1008 GB/s"),
    "3090": ("RTX 3090", "23.3 GiB", "936 GB/s"),
    "4060Ti": ("RTX 4060 Ti 16GB", "15.5 GiB", "288 GB/s"),
    "3060": ("RTX 3060", "11.5 GiB", "360 GB/s"),
}
MIXES = [
    "4090",
    "3060",
    "4090+3060",
    "4090+3090",
    "3090+4060Ti",
    "4090+3090+3060",
    "4090+3060+3060",
    "3060+3060+3060+3060",
    "4090+3090+4060Ti+3060",
]
CONTEXTS = [8192, 32768]


def rig_text(model: str, mix: str, context: int) -> str:
    gpus = "".join(
        f"  - name: {name}\n    free: {free}\n    reserve: 700 MiB\n    mem_bandwidth: {bandwidth}\n"
        for name, free, bandwidth in (CARDS[c] for c in mix.split("+"))
    )
    return (
        f"name: {mix}\nmodel: {ROOT / 'models' / (model + '.yaml')}\nengine: llama.cpp\n"
        f"host_bandwidth: 60 GB/s\ncontext: {context}\ngpus:\n{gpus}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--cpu-layers", action="store_true", help="plan rigs with no all-GPU plan again with cpu_layers"
    )
    ap.add_argument(
        "--contexts", default=",".join(map(str, CONTEXTS)), help="contexts to plan at, comma-separated"
    )
    args = ap.parse_args()
    contexts = [int(x) for x in args.contexts.split(",")]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, mix, context in itertools.product(MODELS, MIXES, contexts):
            path = Path(tmp) / "rig.yaml"
            path.write_text(rig_text(model, mix, context))
            r = plan_rig(load_problem(path), Limits(workers=1))
            cpu_layers = 0
            if r.plan is None and args.cpu_layers:
                path.write_text(rig_text(model, mix, context) + "cpu_layers: true\n")
                r = plan_rig(load_problem(path), Limits(workers=1))
                cpu_layers = r.plan.stages[0].cpu_layers if r.plan else 0
            fit = r.default
            row = {
                "model": model,
                "mix": mix,
                "context": context,
                "plan": r.plan.tokens_per_s if r.plan else None,
                "fit": fit.plan.tokens_per_s if fit.plan and fit.feasible else None,
            }
            row["gain"] = row["plan"] / row["fit"] if row["plan"] and row["fit"] else None
            row["cpu_layers"] = cpu_layers
            out.append(row)
            print(
                f"{model:24} {mix:24} {context:6} plan {row['plan'] or 0:8.2f} fit {row['fit'] or 0:8.2f} "
                f"gain {(row['gain'] or 0):.3f}"
                + (f" ({cpu_layers} layer(s) on the CPU)" if cpu_layers else ""),
                flush=True,
            )
    gains = [r["gain"] for r in out if r["gain"]]
    print(
        f"{len(gains)} rigs: gain median {statistics.median(gains):.3f}, "
        f"min {min(gains):.3f}, max {max(gains):.3f}"
    )
    on_cpu = [r["gain"] for r in out if r["cpu_layers"] and r["gain"]]
    if on_cpu:
        print(
            f"{len(on_cpu)} planned with layers on the CPU: gain median {statistics.median(on_cpu):.3f}, "
            f"min {min(on_cpu):.3f}, max {max(on_cpu):.3f}"
        )
    unplanned = [r for r in out if r["plan"] is None]
    print(f"{len(unplanned)} with no plan, {sum(1 for r in unplanned if r['fit'])} of them run by --fit")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
