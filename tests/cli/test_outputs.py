"""Every shipped rig's outputs (plan, ``--json --check``, every ``--export``, ``score`` of its export,
``--contexts``) are those stored in tests/fixtures/outputs, byte for byte once timing is normalised.

scripts/compare-outputs.py writes the snapshot and makes the outputs; here they are made in-process
(the same CLI, without a fresh interpreter's imports per run) and compared with it. A change that is
meant to change an output regenerates the snapshot, and its diff shows what changed.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from solver.cli import cli

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "tests" / "fixtures" / "outputs"
REGENERATE = "python scripts/compare-outputs.py write tests/fixtures/outputs"
#: Lines of unified diff shown for the first output that differs.
SHOWN_LINES = 40


def _script() -> ModuleType:
    """scripts/compare-outputs.py as a module (its name has a hyphen, and scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("compare_outputs", ROOT / "scripts" / "compare-outputs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and annotations look their module up
    spec.loader.exec_module(module)
    return module


compare = _script()


def run_in_process(args: list[str]) -> tuple[int, str, str]:
    """``solve ARGS`` through the CLI in this process; an exception escaping it fails the test."""
    result = CliRunner().invoke(cli, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"solve {' '.join(args)} raised") from result.exception
    return result.exit_code, result.stdout, result.stderr


def first_difference(stored: dict[str, str], made: dict[str, str]) -> str | None:
    """A message naming the first output that differs (with its diff) or is on one side only, or None."""
    for name in sorted(stored.keys() | made.keys()):
        if name not in stored:
            return f"{name}: made but not in the snapshot"
        if name not in made:
            return f"{name}: in the snapshot but no longer made"
        if stored[name] != made[name]:
            lines = difflib.unified_diff(
                stored[name].splitlines(), made[name].splitlines(), "snapshot", "now", lineterm=""
            )
            return f"{name} differs:\n" + "\n".join(list(lines)[:SHOWN_LINES])
    return None


def stored_outputs(rig: str) -> dict[str, str]:
    """The snapshot's outputs of one rig, by file name."""
    names = (f"{rig}.{name}.txt" for name in compare.NAMES)
    return {n: (SNAPSHOT / n).read_text() for n in names if (SNAPSHOT / n).exists()}


#: The rigs the quick tier compares: strata in a free order, and vLLM (every engine's export of each);
#: the full suite compares every shipped rig.
QUICK_OUTPUTS = {"duo", "vllm-mix"}


@pytest.mark.parametrize(
    "rig",
    [
        pytest.param(rig, id=rig.stem, marks=() if rig.stem in QUICK_OUTPUTS else pytest.mark.slow)
        for rig in sorted((ROOT / "rigs").glob("*.yaml"))
    ],
)
def test_outputs_match_the_snapshot(rig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the outputs name files as a run at the checkout's root shows them
    made = compare.rig_outputs(rig.relative_to(ROOT), run_in_process)
    assert f"{rig.stem}.plan.txt" in made
    why = first_difference(stored_outputs(rig.stem), made)
    assert why is None, f"{why}\nIf the change is intended, regenerate the snapshot: {REGENERATE}"


def test_snapshot_holds_only_shipped_rigs() -> None:
    """Every stored file is RIG.NAME.txt for a shipped rig and an output the script makes."""
    rigs = {p.stem for p in (ROOT / "rigs").glob("*.yaml")}
    known = {f"{rig}.{name}.txt" for rig in rigs for name in compare.NAMES}
    stray = sorted(p.name for p in SNAPSHOT.iterdir() if p.name not in known)
    assert not stray, f"not outputs of a shipped rig: {stray}; regenerate: {REGENERATE}"
    assert {n.split(".", 1)[0] for n in (p.name for p in SNAPSHOT.iterdir())} == rigs


def test_a_changed_output_is_named_with_its_diff() -> None:
    stored = {"box.plan.txt": "exit 0\nwindow 65.479 ms\n", "box.contexts.txt": "same\n"}
    made = {"box.plan.txt": "exit 0\nwindow 65.480 ms\n", "box.contexts.txt": "same\n"}
    why = first_difference(stored, made)
    assert why is not None and why.startswith("box.plan.txt differs:")
    assert "-window 65.479 ms" in why and "+window 65.480 ms" in why
    assert first_difference(stored, dict(stored)) is None
    assert first_difference(stored, {"box.plan.txt": stored["box.plan.txt"]}) == (
        "box.contexts.txt: in the snapshot but no longer made"
    )


def test_timing_is_normalised_and_the_rest_kept() -> None:
    """Wall times become 0 in JSON and <time> in the solver line; a plan's own milliseconds stay."""
    text = '{"solver": {"wall_ms": 12.5, "table_ms": 3.25, "arcs": 7}, "window_ms": 65.4}'
    shown = compare._shown(0, text, "dp: optimal; 25 ms (table 15.5 ms, 2,068 arcs, 0 solves)\n")
    assert '"wall_ms": 0' in shown and '"table_ms": 0' in shown
    assert '"window_ms": 65.4' in shown and '"arcs": 7' in shown
    assert "; <time> (table <time>, 2,068 arcs, 0 solves)" in shown
