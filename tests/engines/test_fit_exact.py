"""moesplit's --fit default (solver.engines.llamacpp.fitdefault) with the exact dry run (``ExactOracle``)
against the binary's recorded fits (tests/fixtures/fit/*.json, see tests/engines/test_fit_replay.py).

Each case with a set context and no placement of its own (``-c N -fitt ...``) becomes an equivalent rig:
the case's sparse GGUF (tests/engine/harness.py ``MODELS``) read by ``solve model from-gguf`` (so the model
file has a geometry and exact tensor bytes), one GPU per device with free = the device's free bytes less
its ``-fitt`` margin plus the 1024 MiB fit keeps. Two checks:

* **the dry runs**: fit run on the binary's recorded measurements (so it walks the binary's path), each
  dry run also answered by ``ExactOracle``; on every dry run with a ``-ts`` (an explicit split, the same
  layers on both sides) the KV cache is exact, the compute buffer within 1 MiB, and the weights within
  15 MiB: moesplit moves expert tensors only, while fit's extra-layer rules (``blk\\.N\\.ffn_down.*``,
  ``blk\\.N\\.ffn_(gate|gate_up|down).*``) move the layer's shared-expert and router tensors too, whose
  bytes the model file gives only inside the layer's ``dense_bytes`` (up to 1 MiB on qwen3-30b-a3b, 1.4
  on gpt-oss-120b, 2 on qwen3-235b, 8 on deepseek-v2-lite, 14 on glm-4.5-air).
* **the commands**: moesplit's fit default alone on the rig prints the binary's ``-ngl -ts -ot`` (buffer
  ``CUDAi`` read as the case's ``RPC0[host:port]`` of device i) on at least ``AGREE`` of the cases. The
  others differ for two reasons: the recordings' devices all report the host's free memory, so the
  binary's first dry run (``-ngl auto``, no ``-ts``) splits layers evenly where the rig, whose cards
  differ, splits them by free memory; the rig's first dry run then fits and fit stops at once with
  ``-ngl -1`` (5 cases: deepseek-v2-lite-small-03, qwen3-30b-a3b-06, -07, -09, -small-01).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from solver.engines import engine_of
from solver.engines.llamacpp import fitdefault
from solver.engines.llamacpp.fit import DeviceMemory, Measurement, MiB, ModelInfo, fit, user_params_from_cli
from solver.planning.resolve import load_problem
from tests.engine import harness

CASES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "fit").glob("*.json"))
#: Cases whose command moesplit's fit default prints byte for byte (of 46; see the module docstring).
AGREE = 41


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


def _problem(rec: dict, model: Path, d: Path):
    user = user_params_from_cli(rec["args"], len(rec["devices"]))
    lines = [f"name: {rec['name']}", f"model: {model}", "engine: llama.cpp", "host_bandwidth: 60 GB/s"]
    lines += [f"context: {user.n_ctx}", "gpus:"]
    for i, m in enumerate(user.margins):
        free = rec["free_bytes"] - m + fitdefault.FIT_MARGIN
        lines += [f"  - name: GPU{i}", f"    free: {free} B", "    reserve: 0 B"]
        lines += ["    mem_bandwidth: 936 GB/s"]
    path = d / f"{rec['name']}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_problem(path)


def _as_recorded(text: str, rec: dict) -> str:
    for i, dev in reversed(list(enumerate(rec["devices"]))):
        text = text.replace(f"CUDA{i}", dev["buft"])
    return text


def _fit(rec: dict, p, oracle):
    rig = fitdefault.FitRig.of(p)
    user = fitdefault.UserParams(margins=(fitdefault.FIT_MARGIN,) * p.n_gpus, n_ctx=p.context)
    return fit(ModelInfo(**rec["model_info"]), rig.devices, user, oracle)


@pytest.mark.slow
def test_the_exact_dry_run_is_llamacpps_count(models, tmp_path):
    n = 0
    for rec in RECS:
        p = _problem(rec, models[rec["model"]], tmp_path)
        exact = fitdefault.oracle_for(p, fitdefault.FitRig.of(p), engine_of(p))
        assert isinstance(exact, fitdefault.ExactOracle)
        runs = {m["args"]: m for m in rec["measurements"]}

        def recorded(run, rec=rec, p=p, exact=exact, runs=runs):
            nonlocal n
            key = _as_recorded(" ".join(run.args()), rec)
            m, mine = runs[key], exact(run)
            if "-ts" in key:
                for got, want in zip(mine.devices, m["bytes"]):
                    n += 1
                    assert got.context == want[1], (rec["name"], key)
                    assert abs(got.compute - want[2]) < MiB, (rec["name"], key)
                    assert abs(got.model - want[0]) <= 15 * MiB, (rec["name"], key)
            f = rec["free_bytes"]
            free = [d.free for d in mine.devices]
            devices = tuple(DeviceMemory(free[i], free[i], *b) for i, b in enumerate(m["bytes"]))
            return Measurement(devices, DeviceMemory(f, f, *m["host_bytes"]))

        _fit(rec, p, recorded)
    assert n > 1000


@pytest.mark.slow
def test_the_fit_default_prints_the_binarys_command(models, tmp_path):
    agree = []
    for rec in RECS:
        p = _problem(rec, models[rec["model"]], tmp_path)
        res, _ = fitdefault.fit_rig(p, engine_of(p))
        printed = res.command()
        if (printed and _as_recorded(printed, rec)) == rec["command"]:
            agree.append(rec["name"])
    assert len(agree) >= AGREE, sorted(r["name"] for r in RECS if r["name"] not in agree)
