"""Planning times of the shipped rigs with idle GPUs and hosts: ``plan_rig`` in one process, median
of 3 runs each, with the solver that answered and the GPUs used.

Run from a checkout's root: ``python tests/rigs/bench_hosts.py [RIG[+idle|+auto|+idleauto] ...]``;
without arguments it takes every ``rigs/*.yaml`` as is and a few with ``--idle-gpus`` (and
``--order auto``). Run it in a checkout without host support to compare (leave out the suffixed ones).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from solver.planning.planner import plan_rig
from solver.planning.resolve import Overrides, load_problem

EXTRA = ["two-hosts+idle", "box+idle", "eight+idle", "sixteen+idle", "six-auto+idle", "eight+idleauto"]
EXTRA += ["sixteen+idleauto", "llama-mix+idleauto"]
FLAGS = {
    "idle": Overrides(idle_gpus=True),
    "auto": Overrides(order="auto"),
    "idleauto": Overrides(order="auto", idle_gpus=True),
}


def main() -> None:
    names = sys.argv[1:] or [p.stem for p in sorted(Path("rigs").glob("*.yaml"))] + EXTRA
    for name in names:
        rig, _, flag = name.partition("+")
        p = load_problem(Path("rigs") / f"{rig}.yaml", FLAGS.get(flag, Overrides()))
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            r = plan_rig(p)
            times.append((time.perf_counter() - t0) * 1e3)
        gpus = r.plan.gpus if r.plan else None
        print(f"{name:34s} {statistics.median(times):9.1f} ms  {r.status} {r.solution.name} gpus={gpus}")


if __name__ == "__main__":
    main()
