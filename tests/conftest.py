"""Shared fixtures: the repository root and a helper that writes rig/model/profile files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


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
