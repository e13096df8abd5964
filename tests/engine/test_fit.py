"""moesplit's --fit default (solver.engines.llamacpp.fitdefault) against the pinned ``llama-fit-params``,
live, on random emulated rigs.

Each rig is 2-3 cards of random sizes at a random context, over four model headers (qwen3-30b-a3b,
gpt-oss-120b, glm-4.5-air, deepseek-v2-lite: a plain MoE, one with biased experts and a sliding window,
one with a leading dense layer and shared experts, MLA). llama.cpp sees each card as a ggml-rpc-server
on 127.0.0.1, whose CPU device reports all of the host's memory free, so a card of C MiB is the
``-fitt`` margin free - C + 1024 MiB (what fit keeps on a real card of C MiB). moesplit runs its fit
default on the same view of the devices: a rig whose GPUs all have the host's free memory, the model file
written by ``solve model from-gguf`` from the same header, and those margins (``fit_rig(..., margins=)``).
The binary's printed ``-c -ngl -ts -ot`` must be moesplit's, with ``CUDA<i>`` read as the binary's
``RPC0[host:port]`` of device i. tests/engines/test_fit_exact.py checks 46 recorded rigs without the binary.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from solver.engines import engine_of
from solver.engines.llamacpp import fitdefault
from solver.planning.resolve import load_problem
from tests.engine import harness

MiB = 2**20
MODELS = ("qwen3-30b-a3b", "gpt-oss-120b", "glm-4.5-air", "deepseek-v2-lite")
#: Card sizes drawn from, MiB (each at most the host's free memory plus fit's 1024 MiB margin).
CARDS = (4096, 6144, 8192, 12288, 16384, 24576)
CONTEXTS = (4096, 8192, 16384, 32768)
N_RIGS = 8
#: A device line of fit's first trace (``-v``): the memory the device reports.
_TOTAL = re.compile(r"common_params_fit_impl:\s+- RPC0 \([^)]*\):\s+(\d+) total")


def _rigs() -> list[tuple[str, tuple[int, ...], int]]:
    """(model, card MiB per device, context) of each rig: every model in turn, cards and context drawn."""
    rng = random.Random("fit-live")
    rigs = []
    for i in range(N_RIGS):
        cards = tuple(rng.choice(CARDS) for _ in range(rng.choice((2, 3))))
        rigs.append((MODELS[i % len(MODELS)], cards, rng.choice(CONTEXTS)))
    return rigs


RIGS = _rigs()


@pytest.fixture(scope="module")
def rpc(llama_bin: Path) -> Iterator[list[str]]:
    """Three rpc servers for the module, their endpoints (a rig uses the first 2 or 3)."""
    with harness.rpc_servers(3, llama_bin) as endpoints:
        yield endpoints.split(",")


@pytest.fixture(scope="module")
def model_files(gguf_dir: Path) -> dict[str, tuple[Path, Path]]:
    """Per model: its sparse GGUF and the model file ``solve model from-gguf`` writes for it."""
    out = {}
    for key in MODELS:
        gguf, _ = harness.ensure_gguf(key, gguf_dir)
        yaml = gguf_dir / f"{key}-fit.yaml"
        cmd = [sys.executable, "-m", "solver", "model", "from-gguf", str(gguf), "-o", str(yaml)]
        subprocess.run(cmd, check=True, capture_output=True)
        out[key] = (gguf, yaml)
    return out


def _host_free() -> int:
    """What ggml's CPU device (each rpc server) reports free: all of the host's physical memory."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize(("key", "cards", "context"), RIGS, ids=[f"{m}-{len(c)}dev-{x}" for m, c, x in RIGS])
def test_fit_default_prints_llama_fit_params_command(
    key: str,
    cards: tuple[int, ...],
    context: int,
    rpc: list[str],
    model_files: dict[str, tuple[Path, Path]],
    llama_bin: Path,
    tmp_path: Path,
) -> None:
    """One random rig: the binary's printed command is moesplit's fit default for the same view."""
    gguf, yaml = model_files[key]
    free = _host_free()
    margins = [free // MiB - card + 1024 for card in cards]
    assert min(margins) >= 0
    endpoints = rpc[: len(cards)]
    args = ["-c", str(context), "-fitt", ",".join(map(str, margins))]
    cmd = [str(llama_bin / "llama-fit-params"), "-m", str(gguf), "--rpc", ",".join(endpoints), "-v", *args]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    seen = _TOTAL.search(run.stderr)
    assert seen is not None and int(seen[1]) == free // MiB, "the rpc device reports other free memory"
    theirs = run.stdout.strip().splitlines()[-1] if run.returncode == 0 else None

    lines = [f"model: {yaml}", "engine: llama.cpp", "backend: rpc", "host_bandwidth: 60 GB/s"]
    lines += [f"context: {context}", "gpus:"]
    for i in range(len(cards)):
        lines += [
            f"  - name: GPU{i}",
            f"    free: {free} B",
            "    reserve: 0 B",
            "    mem_bandwidth: 936 GB/s",
        ]
    rig = tmp_path / "rig.yaml"
    rig.write_text("\n".join(lines) + "\n")
    p = load_problem(rig)
    res, _ = fitdefault.fit_rig(p, engine_of(p), margins=[m * MiB for m in margins])
    assert isinstance(fitdefault.oracle_for(p, fitdefault.FitRig.of(p), engine_of(p)), fitdefault.ExactOracle)
    mine = res.command()
    for i, endpoint in reversed(list(enumerate(endpoints))):
        mine = mine and mine.replace(f"CUDA{i}", f"RPC0[{endpoint}]")
    assert mine == theirs, f"llama-fit-params {' '.join(args)}"
