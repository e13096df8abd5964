"""End-to-end times of the tie rigs here: ``python -m solver RIG --json``, median of 3 runs.

Run from a checkout's root: ``python tests/rigs/bench_ties.py [--runs N] [--timeout S]``. Each run
is a fresh interpreter, as a user pays it; a run past the timeout counts as the timeout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

RIGS = [
    "ties-9x130",
    "ties-9x42-auto",
    "near-5",
    "auto-9x23-sms1",
    "auto-9x23-sms1-fits",
    "distinct-10x130-auto",
    "near-10x130-auto",
    "mem-10x130-auto",
    "memnear-10x130-auto",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    here = Path(__file__).resolve().parent
    for rig in RIGS:
        times, status = [], "?"
        for _ in range(args.runs):
            t0 = time.perf_counter()
            try:
                out = subprocess.run(
                    [sys.executable, "-m", "solver", str(here / f"{rig}.yaml"), "--json"],
                    capture_output=True,
                    text=True,
                    timeout=args.timeout,
                )
                d = json.loads(out.stdout)
                status = f"{d['status']} by {d['solver']['name']}, {d['solver'].get('solves', 0)} solves"
            except subprocess.TimeoutExpired:
                status = f"no answer in {args.timeout:g} s"
            times.append(time.perf_counter() - t0)
        print(f"{rig:22s} median {statistics.median(times):7.2f} s  {status}", flush=True)


if __name__ == "__main__":
    main()
