"""moesplit's --fit default (solver.engines.llamacpp.fitdefault) with the exact dry run (``ExactOracle``)
against the binary's recorded fits (tests/fixtures/fit/*.json, see tests/engines/test_fit_replay.py).

Each case with a set context and no placement of its own (``-c N -fitt ...``) becomes a rig: the case's
sparse GGUF (tests/engine/harness.py ``MODELS``) read by ``solve model from-gguf`` (so the model file has
a geometry, exact tensor bytes and the ``ffn_tensors`` fit's extra-layer rules move), one GPU per device,
seen two ways:

* **the binary's view**: every GPU with the host's free memory, as the recorded rpc devices report it,
  and fit's margins the case's ``-fitt`` values (``fit_rig(..., margins=)``);
* **the rig's view**: each GPU with free = the host's free less its ``-fitt`` margin plus the 1024 MiB
  fit keeps, and fit's default margins: what a rig file of those cards gives.

Three checks:

* **the dry runs**: fit run on the binary's recorded measurements (so it walks the binary's path) in the
  binary's view, each dry run also answered by ``ExactOracle``; on every dry run with a ``-ts`` (an
  explicit split, the same layers on both sides) the KV cache and the weights are exact to the byte
  (the weights with the router and shared-expert tensors an ``-ot`` rule such as
  ``blk\\.N\\.ffn_down.*=...`` moves counted where it moves them), the compute buffer within 1 MiB.
* **the binary's command**: moesplit's fit default alone, in the binary's view, prints the binary's
  ``-ngl -ts -ot`` (buffer ``CUDAi`` read as the case's ``RPC0[host:port]`` of device i) on every case.
* **the rig's command**: the same in the rig's view, on every case but the ``RIG_DIFFERS``. Those
  differ because the binary's first dry run (``-ngl auto``, no ``-ts``) splits layers evenly over
  devices that all report the same free memory, where the rig, whose cards differ, splits them by free
  memory; the rig's first dry run then fits and fit stops at once with ``-ngl -1`` (5 cases:
  deepseek-v2-lite-small-03, qwen3-30b-a3b-06, -07, -09, -small-01).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from solver.engines import engine_of
from solver.engines.llamacpp import fitdefault
from solver.engines.llamacpp.fit import (
    DeviceMemory,
    FitResult,
    Measurement,
    MiB,
    ModelInfo,
    Oracle,
    fit,
    user_params_from_cli,
)
from solver.planning.resolve import load_problem
from solver.problem.problem import Problem
from tests.engine import harness

CASES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "fit").glob("*.json"))
#: The cases whose command the fit default prints otherwise on the rig's view (see the module docstring).
RIG_DIFFERS = {
    "deepseek-v2-lite-small-03-3dev",
    "qwen3-30b-a3b-06-2dev",
    "qwen3-30b-a3b-07-3dev",
    "qwen3-30b-a3b-09-2dev",
    "qwen3-30b-a3b-small-01-3dev",
}


def _eligible(rec: dict) -> bool:
    """A set, non-zero context and nothing else but fit's own margins and minimum context."""
    a = rec["args"]
    return set(a[0::2]) <= {"-c", "-fitt", "-fitc"} and "-c" in a and a[a.index("-c") + 1] != "0"


RECS = [r for r in (json.loads(p.read_text()) for p in CASES) if _eligible(r)]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A model file by ``solve model from-gguf`` for every model the cases name."""
    d = tmp_path_factory.mktemp("fit-exact")
    out = {}
    for key in sorted({r["model"] for r in RECS}):
        gguf, _ = harness.ensure_gguf(key, d)
        out[key] = d / f"{key}.yaml"
        cmd = [sys.executable, "-m", "solver", "model", "from-gguf", str(gguf), "-o", str(out[key])]
        subprocess.run(cmd, check=True, capture_output=True)
    return out


def _problem(rec: dict, model: Path, d: Path, binary: bool) -> Problem:
    """The case's rig in the binary's view (every GPU the host's free memory) or the rig's (free less
    the case's margin plus fit's own)."""
    user = user_params_from_cli(rec["args"], len(rec["devices"]))
    lines = [f"name: {rec['name']}", f"model: {model}", "engine: llama.cpp", "backend: rpc"]
    lines += ["host_bandwidth: 60 GB/s"]
    lines += [f"context: {user.n_ctx}", "gpus:"]
    for i, m in enumerate(user.margins):
        free = rec["free_bytes"] if binary else rec["free_bytes"] - m + fitdefault.FIT_MARGIN
        lines += [f"  - name: GPU{i}", f"    free: {free} B", "    reserve: 0 B"]
        lines += ["    mem_bandwidth: 936 GB/s"]
    path = d / f"{rec['name']}-{'binary' if binary else 'rig'}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_problem(path)


def _margins(rec: dict) -> tuple[int, ...]:
    """The case's ``-fitt`` margin of each device."""
    return user_params_from_cli(rec["args"], len(rec["devices"])).margins


def _as_recorded(text: str, rec: dict) -> str:
    for i, dev in reversed(list(enumerate(rec["devices"]))):
        text = text.replace(f"CUDA{i}", dev["buft"])
    return text


def _fit(rec: dict, p: Problem, oracle: Oracle) -> FitResult:
    rig = fitdefault.FitRig.of(p)
    user = fitdefault.UserParams(margins=_margins(rec), n_ctx=p.context)
    return fit(ModelInfo(**rec["model_info"]), rig.devices, user, oracle)


@pytest.mark.slow
def test_the_exact_dry_run_is_llamacpps_count(models: dict[str, Path], tmp_path: Path) -> None:
    n, worst = 0, [0, 0]
    for rec in RECS:
        p = _problem(rec, models[rec["model"]], tmp_path, binary=True)
        exact = fitdefault.oracle_for(p, fitdefault.FitRig.of(p), engine_of(p))
        assert isinstance(exact, fitdefault.ExactOracle)
        runs = {m["args"]: m for m in rec["measurements"]}

        def recorded(run, rec=rec, exact=exact, runs=runs):
            nonlocal n
            key = _as_recorded(" ".join(run.args()), rec)
            m, mine = runs[key], exact(run)
            if "-ts" in key:
                for got, want in zip(mine.devices, m["bytes"]):
                    n += 1
                    worst[0] = max(worst[0], abs(got.model - want[0]))
                    worst[1] = max(worst[1], abs(got.compute - want[2]))
                    assert got.context == want[1], (rec["name"], key)
                    assert abs(got.compute - want[2]) < MiB, (rec["name"], key)
                    assert got.model == want[0], (rec["name"], key, got.model - want[0])
            f = rec["free_bytes"]
            devices = tuple(DeviceMemory(f, f, *b) for b in m["bytes"])
            return Measurement(devices, DeviceMemory(f, f, *m["host_bytes"]))

        printed = _fit(rec, p, recorded).command()
        assert (printed and _as_recorded(printed, rec)) == rec["command"], rec["name"]
    assert n > 1000
    print(f"{n} device dry runs; worst weights {worst[0]} B, compute {worst[1]} B")


def _commands(models: dict[str, Path], d: Path, binary: bool) -> tuple[list[str], list[str]]:
    """The cases whose command the fit default prints as the binary did, and the others (with both)."""
    agree, differ = [], []
    for rec in RECS:
        p = _problem(rec, models[rec["model"]], d, binary)
        margins = _margins(rec) if binary else None
        res, _ = fitdefault.fit_rig(p, engine_of(p), margins=margins)
        printed = res.command()
        got = printed and _as_recorded(printed, rec)
        if got == rec["command"]:
            agree.append(rec["name"])
        else:
            differ.append(rec["name"])
            print(f"{rec['name']}: {got} != {rec['command']}")
    return agree, differ


@pytest.mark.slow
def test_the_fit_default_prints_the_binarys_command_in_its_view(
    models: dict[str, Path], tmp_path: Path
) -> None:
    agree, differ = _commands(models, tmp_path, binary=True)
    assert not differ
    assert len(agree) == len(RECS) == 46


@pytest.mark.slow
def test_the_fit_default_prints_the_binarys_command_on_the_rig(
    models: dict[str, Path], tmp_path: Path
) -> None:
    agree, differ = _commands(models, tmp_path, binary=False)
    assert set(differ) == RIG_DIFFERS
    assert len(agree) == len(RECS) - len(RIG_DIFFERS)
