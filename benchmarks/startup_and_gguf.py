"""Start-up and the planning of a real GGUF model, each timed beside what it is held against.

    python benchmarks/startup_and_gguf.py [--runs 7] [--contexts 4K,8K,12K,16K,24K,32K]

Three pairs, each pair's two processes run in turn (A B A B ...) after one warm-up of each, so a
drift of the machine's speed hits both; it prints each command's median wall time and the median of
the pair-by-pair ratios A/B, of wall time and of CPU time (user + system: steadier on a shared
machine):

* start-up: ``solve rigs/box.yaml`` against a process that only imports the libraries it needs
  (numpy, OR-Tools' CP-SAT, pydantic, PyYAML, click, rich), and against those but CP-SAT (a plan
  that a DP answers never imports CP-SAT);
* GGUF plan: a Qwen3-235B-A22B Q4_K_M imported by ``solve model from-gguf`` (per-layer sizes differ:
  llama-quantize gives some layers' ``ffn_down_exps`` and ``attn_v`` Q6_K, the rest Q4_K), planned
  for llama.cpp on an RTX 4090 and two RTX 3090s with host RAM, against ``solve rigs/box.yaml``;
* contexts: that rig with ``--contexts`` of six contexts against its one plan.

The GGUF is a header over a sparse data region (``tests/engine/harness.py``'s shapes, typed by
``solver.importers.quant``, the port of llama-quantize's recipe), written to a temporary folder, or
with ``--keep DIR`` to DIR, where it stays (with its model file and ``rig.yaml``) for other runs:
``--keep DIR --runs 0`` only writes them.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test harness's model headers

from solver.importers.quant import Facts, assign_types  # noqa: E402
from tests.engine.harness import Q, TensorSpec, qwen3_235b, write_sparse_gguf  # noqa: E402

SOLVE = str(Path(sys.executable).with_name("solve"))
LIBRARIES = "import numpy, pydantic, yaml, click, rich; from ortools.sat.python import cp_model"
#: The same but CP-SAT, which a plan its DP answers no longer imports: the stricter baseline.
LIBRARIES_NO_CPSAT = "import numpy, pydantic, yaml, click, rich"

RIG = """\
name: qwen3-235b-gguf-4090-3090x2
model: {model}
engine: llama.cpp
host_bandwidth: 60 GB/s
host_memory: 128 GiB
context: 32768
gpus:
  - {{name: RTX 4090, free: 23876 MiB, reserve: 700 MiB, sms: 128, clock_ghz: 2.52}}
  - {{name: RTX 3090, free: 23876 MiB, reserve: 700 MiB, sms: 82, clock_ghz: 1.695}}
  - {{name: RTX 3090, free: 23876 MiB, reserve: 700 MiB, sms: 82, clock_ghz: 1.695}}
"""


def q4_k_m_gguf(path: Path) -> None:
    """A sparse Qwen3-235B-A22B GGUF with llama-quantize's Q4_K_M types."""
    spec = qwen3_235b()
    shapes = [(t.name, tuple(reversed(t.shape))) for t in spec.tensors]
    facts = Facts(n_expert=128, n_gqa=16, n_blocks=94)
    types = assign_types("Q4_K_M", shapes, facts)
    tensors = tuple(TensorSpec(t.name, Q[types[t.name]], t.shape) for t in spec.tensors)
    write_sparse_gguf(path, type(spec)(spec.name, spec.arch, spec.kv, tensors, spec.n_ctx_train))


def _timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one process, its output thrown away (a failure stops
    the benchmark). On a shared machine the CPU figure is the steadier one."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def pair(name: str, a: list[str], b: list[str], runs: int) -> tuple[float, float]:
    """Time A and B in turn; print their medians and the median ratios A/B, wall and CPU, and return
    those two ratios."""
    _timed(a), _timed(b)
    times_a, times_b = [], []
    for _ in range(runs):
        times_a.append(_timed(a))
        times_b.append(_timed(b))
    ratios = []
    for k, unit in ((0, "wall"), (1, "cpu ")):
        ta, tb = [t[k] for t in times_a], [t[k] for t in times_b]
        ratios.append(statistics.median(x / y for x, y in zip(ta, tb)))
        print(
            f"{name:<10} {unit} A {statistics.median(ta):6.3f} s  B {statistics.median(tb):6.3f} s  "
            f"A/B {ratios[-1]:5.2f}  (A {min(ta):.3f}-{max(ta):.3f} s, B {min(tb):.3f}-{max(tb):.3f} s)",
            flush=True,
        )
    return ratios[0], ratios[1]


def main() -> None:
    """Write the GGUF, its model file and rig, then time the three pairs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="counted runs of each command")
    parser.add_argument("--contexts", default="4K,8K,12K,16K,24K,32K", help="the --contexts list")
    parser.add_argument("--only", choices=("startup", "gguf", "contexts"), action="append")
    parser.add_argument("--keep", type=Path, help="keep the GGUF, model and rig here")
    args = parser.parse_args()
    only = set(args.only or ("startup", "gguf", "contexts"))
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        q4_k_m_gguf(folder / "qwen3-235b-a22b-q4_k_m.gguf")
        model = folder / "qwen3-235b-a22b-q4_k_m.yaml"
        subprocess.run(
            [SOLVE, "model", "from-gguf", str(folder / "qwen3-235b-a22b-q4_k_m.gguf"), "-o", str(model)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        rig = folder / "rig.yaml"
        rig.write_text(RIG.format(model=model))
        box = [SOLVE, "rigs/box.yaml"]
        plan = [SOLVE, str(rig)]
        if args.runs == 0:
            return
        print(f"{args.runs} runs of each, medians; A/B is the median of the pair-by-pair ratios")
        if "startup" in only:
            wall, cpu = pair("start-up", box, [sys.executable, "-c", LIBRARIES], args.runs)
            print(f"solve rigs/box.yaml / its libraries' import: {wall:.2f} wall, {cpu:.2f} CPU (target 1.3)")
            wall, cpu = pair("no CP-SAT", box, [sys.executable, "-c", LIBRARIES_NO_CPSAT], args.runs)
            print(f"solve rigs/box.yaml / those libraries but CP-SAT: {wall:.2f} wall, {cpu:.2f} CPU")
        if "gguf" in only:
            wall, cpu = pair("gguf plan", plan, box, args.runs)
            print(f"gguf 235B on 3 GPUs / solve rigs/box.yaml: {wall:.2f} wall, {cpu:.2f} CPU (target 1.5)")
        if "contexts" in only:
            wall, cpu = pair("contexts", [*plan, "--contexts", args.contexts], plan, args.runs)
            print(f"--contexts {args.contexts} / one plan: {wall:.2f} wall, {cpu:.2f} CPU (target 3)")


if __name__ == "__main__":
    main()
