"""The engine tier: tests that run the real llama.cpp (the pinned build of scripts/build-llama.sh).

Every test in this folder is marked ``engine``. The build is one session fixture: the binaries come from
``MOESPLIT_LLAMA_BIN`` when set (a missing binary there fails the tier), else from the script, which
builds once into a cache outside the checkout (about 7-10 minutes on 2 cores) and afterwards answers at
once. The quick tier (``-m "not slow"``) never builds: without a cached build it skips this tier with one
line. Sparse model files are written once per session into a temporary folder.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, quick_tier

BUILD = ROOT / "scripts" / "build-llama.sh"
BINARIES = ("llama-fit-params", "ggml-rpc-server")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(item.fspath).is_relative_to(here):
            item.add_marker(pytest.mark.engine)


def _cached() -> Path | None:
    """The cached build's bin folder, if the script would answer without building."""
    done = subprocess.run(["bash", str(BUILD), "--cached"], capture_output=True, text=True)
    return Path(done.stdout.strip()) if done.returncode == 0 else None


@pytest.fixture(scope="session")
def llama_bin(request: pytest.FixtureRequest) -> Path:
    """The folder of the pinned llama.cpp's binaries."""
    given = os.environ.get("MOESPLIT_LLAMA_BIN")
    if given:
        missing = [b for b in BINARIES if not (Path(given) / b).is_file()]
        if missing:
            pytest.fail(f"MOESPLIT_LLAMA_BIN={given} has no {', '.join(missing)}", pytrace=False)
        return Path(given)
    if quick_tier(request.config):
        cached = _cached()
        if cached is None:
            pytest.skip("engine tier: no cached llama.cpp build (run scripts/build-llama.sh)")
        return cached
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(done.stderr.strip().splitlines()[-1], pytrace=False)
    return Path(done.stdout.strip())


@pytest.fixture(scope="session")
def gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for the session's sparse model files."""
    return tmp_path_factory.mktemp("gguf")
