"""The README and docs stand alone in a clone: no link outside the repository, every link and anchor
resolves, the reference page names every key the files accept, and the solver page every threshold."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from solver.engines import REGISTRY
from solver.files.config import CountsCurve, CoverCurve, ModelConfig, PowerCurve, gpus_schema, rig_schema
from solver.solvers.policy import POLICY

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", page.read_text(), re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_reference_to_files_a_clone_does_not_have(page):
    text = page.read_text()
    for word in ("../shared", "shared/", "SPEC", "REFERENCE"):
        assert word not in text, f"{page.name} mentions {word}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_and_anchor_resolves(page):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.name}: {target}"


def test_the_reference_names_every_key():
    text = (ROOT / "docs" / "reference.md").read_text()
    rig = rig_schema(REGISTRY)  # the common keys and every engine's
    for schema in (rig, gpus_schema(rig), ModelConfig, CoverCurve, PowerCurve, CountsCurve):
        for key in schema.model_fields:
            assert f"`{key}`" in text or f"{key}:" in text, (schema.__name__, key)


def doc_number(text: str) -> float:
    """A value as docs/solvers.md writes it: ``200,000``, ``2^23``, ``1e-4``, ``5.0``."""
    text = text.replace(",", "").strip()
    base, caret, power = text.partition("^")
    return float(base) ** int(power) if caret else float(text)


def test_the_solver_page_gives_every_threshold_its_value():
    """docs/solvers.md's table names each ``Policy`` field with the value the route uses."""
    rows = re.findall(r"^\| (`.+?) \| ([0-9].*?) \| .+ \|$", (ROOT / "docs" / "solvers.md").read_text(), re.M)
    shown: dict[str, float] = {}
    for names, values in rows:
        for name, value in zip(re.findall(r"`(\w+)`", names), values.split(", "), strict=True):
            shown[name] = doc_number(value)
    assert shown == {f.name: float(getattr(POLICY, f.name)) for f in dataclasses.fields(POLICY)}
