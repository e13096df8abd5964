"""llama.cpp's --fit (solver.engines.llamacpp.fit) replayed on rigs recorded against the pinned binary.

Each fixture (tests/fixtures/fit/*.json) is one emulated rig: 2-4 ggml-rpc-servers on 127.0.0.1, each a
device reporting all of the host's memory free, a smaller card emulated by a per-device ``-fitt`` margin;
``command`` is what the pinned ``llama-fit-params ARGS`` printed (null: it exited 1), and ``measurements``
every dry run the fit asked for, measured by the binary's ``--fit-print on -v`` to the byte. Replaying them
through ``fit`` must print the binary's command byte for byte and the fit's trace line for line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solver.engines.llamacpp.fit import (
    DeviceMemory,
    DryRun,
    FitDevice,
    Measurement,
    ModelInfo,
    OracleError,
    fit,
    user_params_from_cli,
)

CASES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "fit").glob("*.json"))


class Replay:
    """The recorded dry runs, by their llama.cpp arguments (KeyError: the fit asked for another)."""

    def __init__(self, rec: dict) -> None:
        self.free = rec["free_bytes"]
        self.extra = rec["dry_run_args"]
        self.runs = {m["args"]: m for m in rec["measurements"]}

    def __call__(self, run: DryRun) -> Measurement:
        m = self.runs[" ".join([*run.args(), *self.extra])]
        if m.get("error"):
            raise OracleError(m["error"])
        f = self.free
        devices = tuple(DeviceMemory(f, f, *b) for b in m["bytes"])
        return Measurement(devices, DeviceMemory(f, f, *m["host_bytes"]))


def test_the_fixtures_cover_enough_rigs():
    """At least 30 recorded rigs over at least three model shapes, some of them searched."""
    recs = [json.loads(p.read_text()) for p in CASES]
    assert len(recs) >= 30
    assert len({r["model"] for r in recs}) >= 3
    assert sum(1 for r in recs if r["command"] and "-ot" in r["command"]) >= 15


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_replay_prints_the_binarys_command(path: Path):
    rec = json.loads(path.read_text())
    devices = [FitDevice(**d) for d in rec["devices"]]
    user = user_params_from_cli(rec["args"], len(devices))
    res = fit(ModelInfo(**rec["model_info"]), devices, user, Replay(rec))
    assert res.command() == rec["command"]
    assert res.log == rec["trace"]
