"""Shared fixtures (the repository root, a helper that writes rig/model/profile files) and the quick tier.

``python -m pytest -m "not slow"`` is the quick tier: it skips the tests marked ``slow`` and runs every
hypothesis test on at most ``tiers.QUICK_EXAMPLES`` examples (``tiers.examples`` for a test's own
``@settings``, the hypothesis profile ``quick`` for the others). Without ``-m "not slow"`` every test
runs with the example count its own ``@settings`` gives. A test parametrized over the shipped rigs (a
``rig`` parameter in rigs/) is marked ``slow`` here for the rigs outside ``QUICK_RIGS``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from tests.helpers import tiers

ROOT = Path(__file__).resolve().parent.parent

settings.register_profile("quick", max_examples=tiers.QUICK_EXAMPLES)

#: The shipped rigs a sweep over every shipped rig keeps in the quick tier: strata as given and in a free
#: order (box, duo), llama.cpp, vLLM and two hosts. The model-zoo and big rigs run in the full suite.
QUICK_RIGS = frozenset({"box", "duo", "llama-mix", "vllm-mix", "two-hosts"})
SHIPPED_RIGS = ROOT / "rigs"


def quick_tier(config: pytest.Config) -> bool:
    """Whether this run is the quick tier: its mark expression leaves out the ``slow`` tests."""
    return "not slow" in (config.option.markexpr or "")


def pytest_configure(config: pytest.Config) -> None:
    """Run the CLI at the width it has in a pipe, whatever the terminal that started the tests, and
    set the example counts of the quick tier.

    The CLI wraps at COLUMNS when set. Importing readline (pytest's debugger support does) sets
    COLUMNS=80 and LINES=24 in the process environment that subprocesses and pytest-xdist's workers
    inherit, which would wrap messages that name a long tmp_path; tests that need a width pass COLUMNS
    themselves.
    """
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
        os.unsetenv(name)
    tiers.quick = quick_tier(config)
    if tiers.quick:
        settings.load_profile("quick")


def shipped_rig(item: pytest.Item) -> Path | None:
    """The shipped rig a parametrized test runs on (its ``rig`` parameter), or None."""
    callspec = getattr(item, "callspec", None)
    rig = callspec.params.get("rig") if callspec is not None else None
    return rig if isinstance(rig, Path) and rig.parent == SHIPPED_RIGS else None


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the shipped-rig sweeps ``slow`` outside ``QUICK_RIGS``."""
    for item in items:
        rig = shipped_rig(item)
        if rig is not None and rig.stem not in QUICK_RIGS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def plan_modules() -> frozenset[str]:
    """The modules a fresh interpreter holds once it has imported what ``solve RIG`` runs (the CLI, the
    planner, the plan's report): one interpreter per test process for every check of what planning
    leaves unimported (matplotlib, the importers, NVML)."""
    code = "import sys, solver.cli, solver.planning.planner, solver.report.planview; print(*sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    modules = frozenset(out.stdout.split())
    assert "solver.planning.planner" in modules  # the list is the interpreter's, not empty
    return modules


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def write(tmp_path: Path):
    """write(name, text) -> path of a file under tmp_path holding ``text``."""

    def _write(name: str, text: str | bytes) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return path

    return _write
