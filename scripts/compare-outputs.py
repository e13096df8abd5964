"""Every shipped rig's outputs, written to one folder, and two such folders compared.

    python scripts/compare-outputs.py write DIR     # plan, --json --check, every --export, score of
                                                    # the export, --contexts, for each rigs/*.yaml
    python scripts/compare-outputs.py diff OLD NEW  # exit 1 and name each output that differs

Timing fields (wall times, solver milliseconds) differ from run to run and are blanked before writing,
so two folders written from the same inputs by code that behaves the same are byte-identical. It runs
the installed ``solve`` from the working directory, so run it at the checkout's root.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ENGINES = ("strata", "llama.cpp", "vllm", "sglang")
CONTEXTS = "8K,32K"
TIMING_KEYS = {"wall_ms", "table_ms"}
# the solver line ends "; 25 ms (table 15.5 ms, 2,068 arcs, 0 solves)"
TIMING_TEXT = re.compile(r"; [\d.,]+ m?s \(table [\d.,]+ m?s,")


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


def _run(args: list[str]) -> str:
    """One ``solve`` run: its exit code, stdout and stderr, timing blanked."""
    done = subprocess.run(["solve", *args], capture_output=True, text=True, timeout=600)
    return f"exit {done.returncode}\n--- stdout\n{_clean(done.stdout)}--- stderr\n{_clean(done.stderr)}"


def _outputs(rig: Path) -> dict[str, list[str]]:
    """The runs of one rig, by output name."""
    runs = {
        "plan": [str(rig)],
        "json-check": [str(rig), "--json", "--check"],
        "contexts": [str(rig), "--contexts", CONTEXTS],
    }
    for engine in ENGINES:
        runs[f"export-{engine}"] = [str(rig), "--export", engine]
    return runs


def write(out: Path) -> None:
    """Write every shipped rig's outputs (and score of its own engine's export) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for rig in sorted(Path("rigs").glob("*.yaml")):
        for name, args in _outputs(rig).items():
            (out / f"{rig.stem}.{name}.txt").write_text(_run(args))
        own = json.loads(subprocess.run(["solve", str(rig), "--json"], capture_output=True, text=True).stdout)
        exported = subprocess.run(
            ["solve", str(rig), "--export", own["engine"]], capture_output=True, text=True
        ).stdout
        command = [line for line in exported.splitlines() if line and not line.startswith("#")]
        if command:
            (out / f"{rig.stem}.score.txt").write_text(_run(["score", str(rig), "--", *_split(command[-1])]))
        print(rig.stem, flush=True)


def _split(line: str) -> list[str]:
    """A POSIX command line as words."""
    return shlex.split(line)


def _read(path: Path) -> bytes | None:
    """A file's bytes, or None where it is missing."""
    return path.read_bytes() if path.exists() else None


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
