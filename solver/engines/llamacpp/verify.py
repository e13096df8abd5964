"""``solve verify``'s engine half: llama.cpp's own estimate of a command, from the user's
``llama-fit-params --fit-print on``, against each card's free memory and the plan's count.

``--fit-print on`` (common/fit.cpp ``common_fit_print``) loads the model's tensor infos and creates the
context with ``no_alloc``: no weights are read and no device memory is taken. It prints one line per
device in the model's device order, ``NAME model context compute`` in MiB (each truncated), then
``Host ...``. The devices are matched to the rig's GPUs by that order (the command's ``-dev``/``--rpc``
read as ``solve score`` reads them), so a build whose devices are rpc-servers answers as one with CUDA.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from solver.engines.base import Engine
from solver.engines.llamacpp.args import parse_llama_args
from solver.engines.llamacpp.devices import devices_of
from solver.engines.llamacpp.score import score
from solver.problem.problem import Problem

MiB = 2**20

FIT_PARAMS = "llama-fit-params"
_USAGE = re.compile(r"^(\S+) (\d+) (\d+) (\d+)\s*$")
#: llama-server's own words a fit-print run drops: the program and the model file (verify gives -m).
_MODEL_FLAGS = ("-m", "--model")


class NotVerifiable(Exception):
    """What verify needs and could not find, in one line that says how to point at it."""


@dataclass(frozen=True)
class Usage:
    """One device's line of fit-print, MiB."""

    name: str
    model: int
    context: int
    compute: int

    @property
    def total(self) -> int:
        return self.model + self.context + self.compute


@dataclass(frozen=True)
class CardCheck:
    """A rig GPU under the command: llama.cpp's estimate, the card's free memory, the plan's count
    (what the card holds plus the engine's buffer, as ``solve score`` counts it) and whether it fits."""

    gpu: int
    name: str
    usage: Usage
    free_bytes: int
    plan_bytes: int

    @property
    def fits(self) -> bool:
        return self.usage.total * MiB <= self.free_bytes


@dataclass(frozen=True)
class Verified:
    """The run: the binary, its build, the words it was given, every card and the host's line."""

    binary: Path
    build: str
    words: list[str]
    cards: list[CardCheck]
    host: Usage

    @property
    def fits(self) -> bool:
        return all(c.fits for c in self.cards)


def find_fit_params(llama_bin: Path | None) -> Path:
    """``llama-fit-params`` in ``llama_bin``, else on PATH, else beside ``llama-server``."""
    if llama_bin is not None:
        found = llama_bin / FIT_PARAMS
        if found.is_file() and os.access(found, os.X_OK):
            return found
        raise NotVerifiable(
            f"verify: no {FIT_PARAMS} in {llama_bin}; --llama-bin names the folder of your llama.cpp "
            f"binaries (build/bin)"
        )
    on_path = shutil.which(FIT_PARAMS)
    if on_path:
        return Path(on_path)
    server = shutil.which("llama-server")
    if server:
        beside = Path(server).resolve().parent / FIT_PARAMS
        if beside.is_file() and os.access(beside, os.X_OK):
            return beside
    where = f"on PATH or beside llama-server ({server})" if server else "on PATH (nor llama-server)"
    raise NotVerifiable(
        f"verify: no {FIT_PARAMS} {where}; point at your llama.cpp build with --llama-bin DIR (its build/bin)"
    )


def build_of(binary: Path) -> str:
    """The build as ``--version`` names it, and the check that it has ``--fit-print`` (llama.cpp builds
    since late 2025); NotVerifiable for one without it."""
    done = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    if "--fit-print" not in done.stdout + done.stderr:
        raise NotVerifiable(
            f"verify: {binary} has no --fit-print (llama.cpp builds since late 2025 have it); "
            f"point --llama-bin at a newer build"
        )
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    line = next((ln for ln in (version.stdout + version.stderr).splitlines() if ln.startswith("version")), "")
    return line.removeprefix("version:").strip() or "unknown build"


def fit_print_words(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """The environment assignments before the program, and the flags after it without ``-m``."""
    env: dict[str, str] = {}
    i = 0
    while i < len(words) and re.fullmatch(r"[A-Za-z_]\w*=.*", words[i]):
        name, value = words[i].split("=", 1)
        env[name] = value
        i += 1
    if i < len(words) and not words[i].startswith("-"):
        i += 1  # llama-server, llama-cli
    out: list[str] = []
    rest = iter(words[i:])
    for word in rest:
        if word in _MODEL_FLAGS:
            next(rest, None)
        elif not word.startswith(("--model=", "-m=")):
            out.append(word)
    return env, out


def parse_fit_print(stdout: str) -> tuple[list[Usage], Usage]:
    """fit-print's device lines in order, and its Host line; ValueError where there is none."""
    devices: list[Usage] = []
    host: Usage | None = None
    for line in stdout.splitlines():
        m = _USAGE.match(line.strip())
        if m:
            usage = Usage(m[1], int(m[2]), int(m[3]), int(m[4]))
            if m[1] == "Host":
                host = usage
            else:
                devices.append(usage)
    if host is None:
        raise ValueError("no Host line in llama-fit-params --fit-print output")
    return devices, host


def verify(p: Problem, engine: Engine, words: list[str], binary: Path, gguf: Path) -> Verified:
    """Run ``binary -m GGUF --fit-print on FLAGS`` for the command ``words`` and set each device's
    estimate beside its rig GPU; NotVerifiable where the binary refuses the command."""
    build = build_of(binary)
    args = parse_llama_args(words)
    gpus = devices_of(p, args).model
    scored = score(p, args, engine)
    env, flags = fit_print_words(words)
    run = [str(binary), "-m", str(gguf), "--fit-print", "on", *flags]
    done = subprocess.run(run, capture_output=True, text=True, env=os.environ | env, timeout=600)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise NotVerifiable(f"verify: {binary.name} refused the command: {tail}")
    usages, host = parse_fit_print(done.stdout)
    if len(usages) != len(gpus):
        names = ", ".join(u.name for u in usages)
        raise NotVerifiable(
            f"verify: llama.cpp lists {len(usages)} devices ({names}), the command {len(gpus)} of the rig"
        )
    need = {c.gpu: c.need_bytes for c in scored.cards if c.gpu is not None}
    buffers = p.buffers if len(p.buffers) else [0] * p.n_gpus
    cards = [
        CardCheck(
            g, p.gpu_names[g], u, int(p.free[g]), need.get(g, 0) + (int(buffers[g]) if g in need else 0)
        )
        for g, u in zip(gpus, usages)
    ]
    return Verified(binary, build, words, cards, host)
