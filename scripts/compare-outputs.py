"""Every shipped rig's outputs, written to one folder, and two such folders compared.

    python scripts/compare-outputs.py write DIR     # plan, --json --check, every --export, score of
                                                    # the export, --contexts, for each rigs/*.yaml
    python scripts/compare-outputs.py diff OLD NEW  # exit 1 and name each output that differs

Timing fields (wall times, solver milliseconds) differ from run to run and are normalised before
writing (0 in JSON, ``<time>`` in the tables), so two folders written from the same inputs by code that
behaves the same are byte-identical. It runs the installed ``solve`` from the working directory, without
the terminal's COLUMNS, so run it at the checkout's root. tests/cli/test_outputs.py regenerates the
snapshot stored in tests/fixtures/outputs (in-process, through ``rig_outputs``) and compares.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ENGINES = ("strata", "llama.cpp", "vllm", "sglang")
CONTEXTS = "8K,32K"
TIMING_KEYS = {"wall_ms", "table_ms"}
# the solver line ends "; 25 ms (table 15.5 ms, 2,068 arcs, 0 solves)"
TIMING_TEXT = re.compile(r"; [\d.,]+ m?s \(table [\d.,]+ m?s,")
#: The outputs each rig has, by name; ``score`` only where its own engine's export gives a command.
NAMES = ("plan", "json-check", "contexts", *(f"export-{e}" for e in ENGINES), "score")

#: One ``solve`` run: its arguments -> exit code, stdout, stderr.
Run = Callable[[list[str]], tuple[int, str, str]]


def run_solve(args: list[str]) -> tuple[int, str, str]:
    """The installed ``solve`` in a fresh process, at the width it has in a pipe (no COLUMNS/LINES)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(["solve", *args], capture_output=True, text=True, timeout=600, env=env)
    return done.returncode, done.stdout, done.stderr


def _blank(value: object) -> object:
    """The JSON value with every timing field set to 0."""
    if isinstance(value, dict):
        return {k: 0 if k in TIMING_KEYS else _blank(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_blank(v) for v in value]
    return value


def _clean(text: str) -> str:
    """Output with timing blanked: JSON by key, tables by the phrases that carry a duration."""
    try:
        return json.dumps(_blank(json.loads(text)), indent=1, sort_keys=True) + "\n"
    except ValueError:
        return TIMING_TEXT.sub("; <time> (table <time>,", text)


def _shown(code: int, stdout: str, stderr: str) -> str:
    """One run as a file: its exit code, stdout and stderr, timing blanked."""
    return f"exit {code}\n--- stdout\n{_clean(stdout)}--- stderr\n{_clean(stderr)}"


def _runs(rig: Path) -> dict[str, list[str]]:
    """The runs of one rig, by output name (score aside: its command comes from an export)."""
    runs = {
        "plan": [str(rig)],
        "json-check": [str(rig), "--json", "--check"],
        "contexts": [str(rig), "--contexts", CONTEXTS],
    }
    for engine in ENGINES:
        runs[f"export-{engine}"] = [str(rig), "--export", engine]
    return runs


def _own_command(json_check: str, exports: dict[str, str]) -> list[str] | None:
    """The words of the last command line the rig's own engine's export prints, or None."""
    try:
        engine = json.loads(json_check)["engine"]
    except (ValueError, KeyError):
        return None
    lines = exports.get(engine, "").splitlines()
    command = [line for line in lines if line and not line.startswith("#")]
    return shlex.split(command[-1]) if command else None


def rig_outputs(rig: Path, run: Run = run_solve) -> dict[str, str]:
    """One rig's outputs, by file name (``RIG.NAME.txt``): each of ``_runs`` and score of its own export."""
    raw = {name: run(args) for name, args in _runs(rig).items()}
    out = {f"{rig.stem}.{name}.txt": _shown(*done) for name, done in raw.items()}
    exports = {e: raw[f"export-{e}"][1] for e in ENGINES}
    command = _own_command(raw["json-check"][1], exports)
    if command:
        out[f"{rig.stem}.score.txt"] = _shown(*run(["score", str(rig), "--", *command]))
    return out


def shipped_rigs() -> list[Path]:
    """The shipped rigs, relative to the checkout's root (the working directory)."""
    return sorted(Path("rigs").glob("*.yaml"))


def write(out: Path) -> None:
    """Write every shipped rig's outputs into ``out``, in place of the outputs it held (a rig no longer
    shipped leaves none behind)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.txt"):
        if any(old.name.endswith(f".{name}.txt") for name in NAMES):
            old.unlink()
    for rig in shipped_rigs():
        for name, text in rig_outputs(rig).items():
            (out / name).write_text(text)
        print(rig.stem, flush=True)


def diff(old: Path, new: Path) -> int:
    """Name every output that differs or exists on one side only; 1 if any, else 0."""
    names = sorted({p.name for p in old.iterdir()} | {p.name for p in new.iterdir()})
    bad = [
        n
        for n in names
        if not (old / n).exists()
        or not (new / n).exists()
        or (old / n).read_bytes() != (new / n).read_bytes()
    ]
    for n in bad:
        print(f"differs: {n}")
    print(f"{len(names) - len(bad)} of {len(names)} outputs identical")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "diff":
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
