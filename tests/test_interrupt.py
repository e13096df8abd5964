"""Ctrl-C: one line ``interrupted`` on stderr, exit 130, no traceback, no output file left, and a CP-SAT
search that stops (the run ends within seconds, not when the search would have)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from ortools.sat.python import cp_model

from solver import interrupt
from solver.exitcodes import ExitCode
from solver.files.atomicfile import atomic_open

#: Seconds a stopped run may take to exit: only catches a hang (a search left running).
HANG_S = 20
#: Seconds to wait for a run to reach the phase a test interrupts.
REACH_S = 180


def slow_rig(folder: Path, n_gpus: int = 24, layers: int = 256, kinds: int = 6) -> Path:
    """A free-order rig of ``kinds`` kinds of card whose slowest-stage plan CP-SAT takes many seconds
    to prove (a table of about 700,000 arcs)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    experts = 16
    counts = rng.integers(1, 1000, layers * experts)
    rows = [f"{i // experts} {i % experts} {c}\n" for i, c in enumerate(counts)]
    (folder / "profile.txt").write_text("".join(rows))
    model = {
        "name": "slow-moe",
        "layers": layers,
        "experts": experts,
        "expert_bytes": "20 MiB",
        "dense_bytes": "80 MiB",
        "stage_bytes": "1 GiB",
        "profile": "profile.txt",
        "curve": {"kind": "counts"},
    }
    (folder / "model.yaml").write_text(yaml.safe_dump(model, sort_keys=False))
    free = ["24 GiB", "16 GiB", "12 GiB", "48 GiB", "20 GiB", "32 GiB"]
    speed = [0.31, 0.45, 0.62, 0.27, 0.38, 0.29]
    gpus = [
        {
            "name": f"card{g % kinds}",
            "free": free[g % kinds],
            "reserve": "700 MiB",
            "layer_ms": speed[g % kinds],
        }
        for g in range(n_gpus)
    ]
    rig = {"name": "slow", "model": "model.yaml", "order": "auto", "objective": "throughput", "gpus": gpus}
    (folder / "rig.yaml").write_text(yaml.safe_dump(rig, sort_keys=False))
    return folder / "rig.yaml"


def threads(pid: int) -> int:
    """Threads of process ``pid`` (Linux /proc); 0 once it has ended."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    except (OSError, StopIteration):
        return 0


def maps(pid: int) -> str:
    """The files mapped into process ``pid`` (Linux /proc)."""
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def interrupt_when(args: list[str], reached: Callable[[int], bool], cwd: Path) -> tuple[int, str, str, float]:
    """Run ``python -m solver ARGS`` in a process group of its own and, once ``reached(pid)``, send SIGINT
    to the group, as a terminal's Ctrl-C does; (rc, stdout, stderr, seconds from the signal to the exit)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH", "")]
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "solver", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a test run in the background inherits SIGINT ignored, which the command would keep
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        start = time.monotonic()
        while not reached(proc.pid):
            if proc.poll() is not None or time.monotonic() - start > REACH_S:
                out, err = proc.communicate()
                pytest.fail(
                    f"the run never reached the phase to interrupt (rc {proc.returncode}): {err[-500:]}"
                )
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=HANG_S)
        return proc.returncode, out, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def check_interrupted(rc: int, out: str, err: str, folder: Path) -> None:
    assert (rc, err) == (ExitCode.INTERRUPTED, "interrupted\n"), (rc, err[-2000:])
    assert rc == 130 and out == ""
    assert not (folder / "plan.json").exists()
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_ctrl_c_during_a_cp_sat_search_stops_it(tmp_path):
    rig = slow_rig(tmp_path)
    args = [str(rig), "--json", "--workers", "2", "--out", "plan.json"]
    # main thread + the search's helper thread + CP-SAT's workers: a search is running
    rc, out, err, took = interrupt_when(args, lambda pid: threads(pid) >= 3, tmp_path)
    check_interrupted(rc, out, err, tmp_path)
    assert took < HANG_S


def test_ctrl_c_during_the_imports(tmp_path):
    rig = slow_rig(tmp_path)
    args = [str(rig), "--json", "--out", "plan.json"]
    # numpy's core is mapped while the CLI's modules are still being imported
    rc, out, err, _ = interrupt_when(args, lambda pid: "_multiarray_umath" in maps(pid), tmp_path)
    check_interrupted(rc, out, err, tmp_path)


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_ctrl_c_while_bench_times_a_fresh_interpreter(tmp_path):
    """Bench's fresh interpreters sit in a session of their own: the Ctrl-C reaches bench alone, which
    ends the child and says ``interrupted`` once."""
    rig = slow_rig(tmp_path, n_gpus=2, layers=8)
    args = ["bench", str(rig), "--process", "--repeat", "1000", "--budget", "1000"]
    seen: list[int] = []

    def timing_a_child(pid: int) -> bool:
        seen[:] = children(pid)
        return bool(seen)

    rc, out, err, _ = interrupt_when(args, timing_a_child, tmp_path)
    assert (rc, out, err) == (130, "", "interrupted\n"), (rc, err[-2000:])
    assert not any(Path(f"/proc/{c}").exists() for c in seen)  # ended and reaped, not left running


def market_split(rows: int = 5, n: int = 50, seed: int = 0) -> cp_model.CpModel:
    """0/1 x with A x = b for random A in [0, 99] and b half the row sums: a classic that takes CP-SAT
    far longer than any test may run."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 100, (rows, n))
    m = cp_model.CpModel()
    x = [m.new_bool_var(f"x{i}") for i in range(n)]
    for row in a:
        m.add(sum(int(c) * v for c, v in zip(row, x)) == int(row.sum()) // 2)
    return m


@pytest.fixture
def sigint_restored():
    """Put back this process's SIGINT handler after a test that installs the command's."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def ctrl_c_in(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_a_search_in_progress_stops_and_the_run_exits_130(sigint_restored, capsys):
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 2
    timer = ctrl_c_in(0.5)
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as stop:
        interrupt.run(lambda: interrupt.solve(solver, market_split()))
    timer.join()
    assert stop.value.code == 130 and time.monotonic() - t0 < HANG_S
    assert capsys.readouterr().err == "interrupted\n"
    assert not [t for t in threading.enumerate() if t.name == "cp-sat"]  # the search has ended
    assert solver.wall_time < HANG_S  # the search itself ended early: stopped, not abandoned


def test_a_later_ctrl_c_is_ignored_while_the_run_stops(sigint_restored, capsys):
    def twice() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the first Ctrl-C ends this

    def command() -> None:
        try:
            twice()
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # during the clean-up: ignored
            time.sleep(0.05)

    with pytest.raises(SystemExit) as stop:
        interrupt.run(command)
    assert stop.value.code == 130 and capsys.readouterr().err == "interrupted\n"


def test_a_search_off_the_main_thread_is_the_plain_call():
    m = cp_model.CpModel()
    v = m.new_int_var(0, 10, "v")
    m.maximize(v)
    got: list = []
    solver = cp_model.CpSolver()
    worker = threading.Thread(target=lambda: got.append(interrupt.solve(solver, m)))
    worker.start()
    worker.join()
    assert got == [cp_model.OPTIMAL] and solver.value(v) == 10


def test_an_error_in_the_search_reaches_the_caller():
    class Failing:
        parameters = SimpleNamespace()

        def solve(self, model: object, callback: object = None) -> None:
            raise ValueError("no such model")

    with pytest.raises(ValueError, match="no such model"):
        interrupt.solve(Failing(), None)


def test_an_interrupted_write_leaves_the_old_file(tmp_path):
    target = tmp_path / "plan.json"
    target.write_text("old\n")
    with pytest.raises(interrupt.Interrupted), atomic_open(target, "plan.json") as f:
        f.write('{"half": ')
        raise interrupt.Interrupted
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_a_process_that_ignores_sigint_keeps_ignoring_it(sigint_restored):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    interrupt.run(lambda: None)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_a_ctrl_c_inside_held_is_raised_as_the_block_ends(sigint_restored, capsys):
    steps: list[str] = []

    def command() -> None:
        with interrupt.held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            steps.append("finished the held step")
        steps.append("ran past the block")

    with pytest.raises(SystemExit) as stop:
        interrupt.run(command)
    assert stop.value.code == 130 and steps == ["finished the held step"]
    assert capsys.readouterr().err == "interrupted\n"
