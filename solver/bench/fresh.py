"""What a fresh interpreter pays: importing the CLI, ``solve RIG --json``, and planning a sweep point
(process time and peak memory)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from solver import interrupt
from solver.bench.sweeprigs import SweepPoint
from solver.bench.timing import Settings, Timing, repeat_timed

#: What every ``solve`` imports before it plans: the yardstick of the end-to-end ratios.
IMPORT_CODE = "import solver.cli, ortools.sat.python.cp_model"


def _fresh_env() -> dict[str, str]:
    """The environment of a fresh interpreter that imports this very ``solver``, wherever it runs from."""
    import os

    home = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": home if not path else f"{home}{os.pathsep}{path}"}


def run_fresh(cmd: list[str], **popen: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, **popen)`` for a fresh interpreter, in a session of its own so that a
    Ctrl-C at the terminal reaches bench alone, which then ends the child (even one just starting)."""
    child = None
    try:
        with interrupt.held():
            child = subprocess.Popen(cmd, env=_fresh_env(), start_new_session=True, **popen)
        out, err = child.communicate()
    except BaseException:
        if child is not None:
            child.kill()
            child.wait()
        raise
    return subprocess.CompletedProcess(cmd, child.returncode, out, err)


def import_time(repeat: int) -> Timing:
    """Wall time of a fresh interpreter importing the CLI and CP-SAT (what every ``solve`` pays).

    Always ``repeat`` runs, whatever the budget: it is the yardstick of every end-to-end ratio.
    """
    cmd = [sys.executable, "-c", IMPORT_CODE]
    timing, _ = repeat_timed(lambda: run_fresh(cmd).check_returncode(), repeat, float("inf"))
    return timing


def process_time(rig: Path, settings: Settings, engine: str | None = None) -> Timing:
    """Wall time of ``solve RIG --json`` in a fresh interpreter, imports included."""
    cmd = [sys.executable, "-m", "solver.cli", str(rig), "--json", "--workers", str(settings.workers)]
    cmd += ["--engine", engine] if engine else []

    def run() -> None:
        done = run_fresh(cmd, stdout=subprocess.DEVNULL)
        if done.returncode not in (0, 3):  # a plan, or an infeasibility explained: both are answers
            raise subprocess.CalledProcessError(done.returncode, cmd)

    timing, _ = repeat_timed(run, settings.repeat, settings.budget_s)
    return timing


@dataclass(frozen=True)
class FreshRun:
    """``plan_rig`` on a sweep point in a fresh interpreter: the wall time of the whole process
    (start-up, imports and building the rig included), of plan_rig alone, the peak RSS, and what
    answered (the solver's name, and the arcs Lagrangian pruning kept where it ran)."""

    process_s: float
    plan_s: float
    peak_mib: float
    status: str
    gap: float | None
    solver: str
    pruned_arcs: int | None

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FRESH_CODE = "import sys; from solver.bench.fresh import fresh_point_main; fresh_point_main(sys.argv[1])"


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB: Linux's VmHWM, the high-water mark of the address
    space since exec. (``ru_maxrss`` keeps the parent's RSS at fork across exec, so a child of a big
    bench process would report at least the parent's size.) Elsewhere ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def fresh_point_main(arg: str) -> None:
    """In the fresh interpreter: plan the point ``arg`` (JSON: SweepPoint and its limits), print JSON."""
    from solver.planning.planner import plan_rig
    from solver.report.planview import to_json as plan_json
    from solver.solvers import Limits

    spec = json.loads(arg)
    problem = SweepPoint(**spec["point"]).problem()
    t0 = time.perf_counter()
    result = plan_rig(problem, Limits(time_limit=spec["time_limit"], workers=spec["workers"]))
    plan_s = time.perf_counter() - t0
    sol = result.solution
    got = {"plan_s": plan_s, "peak_mib": peak_rss_mib(), "status": result.status}
    got |= {"gap": plan_json(result)["solver"]["gap"], "solver": sol.name}
    print(json.dumps({**got, "pruned_arcs": sol.work.pruned_arcs}))


def fresh_point(point: SweepPoint, settings: Settings) -> FreshRun:
    """Plan ``point`` once in a fresh interpreter under the sweep's time limit (what ``solve`` pays)."""
    spec = {
        "point": dataclasses.asdict(point),
        "time_limit": settings.time_limit,
        "workers": settings.workers,
    }
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", FRESH_CODE, json.dumps(spec)]
    done = run_fresh(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process_s = time.perf_counter() - t0
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise click.ClickException(f"the fresh process for {point} failed: {last}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return FreshRun(process_s=process_s, **got)
