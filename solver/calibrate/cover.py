"""``solve calibrate``: fit the cover curve's exponent b to measured expert-cache hit rates.

The cover curve says the top share f of the ranked pairs holds ``H(f) = 1 - (1 - f)^b`` of the routing
(docs/reference.md, "The arithmetic"). A point is a measured (f, hit rate); b minimises the sum of
squared hit-rate errors. Points come from the command line or from the engine's INFO log lines.
``--write`` stores the curve in a model file, editing only its ``curve:`` line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from solver.errors import InputError
from solver.files.atomicfile import write_atomic
from solver.files.bounded import LOG_LIMIT, YAML_LIMIT, read_bounded
from solver.files.config import load_model, shown_path
from solver.files.console import console as make_console

#: b is searched over [B_MIN, B_MAX] on a log grid, then refined by bisection on the slope.
B_MIN, B_MAX, GRID = 1e-4, 1e4, 8001

_NUMBER = r"([0-9]*\.?[0-9]+)"
_POINT = re.compile(rf"^\s*(?:(\d+)\s*/\s*(\d+)|{_NUMBER})\s*=\s*{_NUMBER}\s*%?\s*$")
SPLIT_LINE = re.compile(
    r"layer split: CUDA(\d+) runs layers (\d+)-(\d+), expert cache (\d+) slots \(([0-9.]+) GiB\), "
    r"(\d+) of its (\d+) profiled pairs"
)
HIT_LINE = re.compile(rf"decode expert cache hit rate: {_NUMBER}%(?: \((\d+) hits / (\d+) lookups\))?")


@dataclass(frozen=True)
class Point:
    """One measurement: the share ``f`` of ranked pairs held, and the hit rate (a fraction)."""

    f: float
    hit: float
    source: str
    held: int | None = None
    total: int | None = None


@dataclass(frozen=True)
class Fit:
    """The fitted exponent, the points, and what the curve says at each."""

    b: float
    points: list[Point]
    fitted: np.ndarray

    @property
    def rms_pp(self) -> float:
        """Root-mean-square error in percentage points of hit rate."""
        measured = np.array([p.hit for p in self.points])
        return float(np.sqrt(np.mean((self.fitted - measured) ** 2)) * 100)


def cover_hit(f: np.ndarray | float, b: float) -> np.ndarray:
    """``H(f) = 1 - (1 - f)^b``: the routing share the top share f of pairs holds."""
    return 1.0 - (1.0 - np.asarray(f, dtype=np.float64)) ** b


def _checked(f: float, hit_pct: float, file: str, what: str, line: int | None = None) -> None:
    if not 0.0 < f < 1.0:
        raise InputError(
            file, f"{what}: the share of pairs held must be above 0 and below 1, got {f:g}", line
        )
    if not 0.0 < hit_pct < 100.0:
        raise InputError(
            file, f"{what}: the hit rate must be above 0% and below 100%, got {hit_pct:g}%", line
        )


def parse_point(text: str) -> Point:
    """``5805/24576=69.2`` (pairs held / ranked = hit %) or ``0.8138=99.4`` (share held = hit %)."""
    m = _POINT.match(text)
    if not m:
        raise InputError(
            "--point",
            f"expected HELD/TOTAL=HIT% (like 5805/24576=69.2) or FRACTION=HIT% (like 0.8138=99.4), "
            f"got {text!r}",
        )
    held = total = None
    if m.group(1) is not None:
        held, total = int(m.group(1)), int(m.group(2))
        if total == 0 or held > total:
            raise InputError("--point", f"{text!r}: pairs held must be 1 to {total} (the ranked pairs)")
        f = held / total
    else:
        f = float(m.group(3))
    hit_pct = float(m.group(4))
    _checked(f, hit_pct, "--point", repr(text))
    return Point(f=f, hit=hit_pct / 100.0, source="--point", held=held, total=total)


@dataclass
class _Boot:
    """One engine start in a log: its split lines, then the hit-rate lines that follow them."""

    splits: list[tuple[int, int, int, int, int, int]]  # (line, cuda, first, last, held, profiled)
    hits: list[tuple[int, float, int | None, int | None]]  # (line, percent, hits, lookups)


def points_from_log(path: Path) -> tuple[list[Point], list[str]]:
    """Points from an engine log, one per boot, and notes on what was skipped.

    Pairing rule: a run of ``layer split`` lines (one per card) opens a boot; a split line for a card the
    boot already has, or one after a hit-rate line, opens the next. Each boot's pairs held are the sum of
    its cards' "N of its M" held counts, and its ranked total the sum of the M (the cards' ranges together
    cover every layer, so the M add up to the profile's pairs). The boot's hit rate is its last hit-rate
    line (the engine's counters run over the whole boot), taken as hits / lookups when the line has them.
    """
    shown = shown_path(path)
    text = read_bounded(path, shown, "an engine log", LOG_LIMIT).decode("utf-8", errors="replace")
    boots: list[_Boot] = []
    notes: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if m := SPLIT_LINE.search(line):
            cuda, first, last, _slots, _gib, held, profiled = m.groups()
            boot = boots[-1] if boots else None
            if boot is None or boot.hits or int(cuda) in {s[1] for s in boot.splits}:
                boot = _Boot([], [])
                boots.append(boot)
            boot.splits.append((lineno, int(cuda), int(first), int(last), int(held), int(profiled)))
        elif m := HIT_LINE.search(line):
            if not boots:
                notes.append(f"{shown}:{lineno}: hit-rate line before any layer-split line: skipped")
                continue
            hits, lookups = m.group(2), m.group(3)
            boots[-1].hits.append(
                (
                    lineno,
                    float(m.group(1)),
                    None if hits is None else int(hits),
                    None if lookups is None else int(lookups),
                )
            )
    if not boots:
        raise InputError(shown, "no 'layer split: CUDA...' lines: is this the engine's INFO log?")
    points = []
    for boot in boots:
        point = _boot_point(boot, shown, notes)
        if point is not None:
            points.append(point)
    if not points:
        raise InputError(shown, "no boot with both layer-split and hit-rate lines: " + "; ".join(notes))
    return points, notes


def _boot_point(boot: _Boot, shown: str, notes: list[str]) -> Point | None:
    first_line = boot.splits[0][0]
    if not boot.hits:
        notes.append(f"{shown}:{first_line}: boot without a 'decode expert cache hit rate' line: skipped")
        return None
    ranges = sorted((s[2], s[3]) for s in boot.splits)
    expected = 0
    for a, b in ranges:
        if a != expected or b < a:
            notes.append(
                f"{shown}:{first_line}: boot skipped: its cards' layers "
                + ", ".join(f"{x}-{y}" for x, y in ranges)
                + " do not run 0, 1, 2, ... without a gap (a missing split line?)"
            )
            return None
        expected = b + 1
    held = sum(s[4] for s in boot.splits)
    total = sum(s[5] for s in boot.splits)
    lineno, pct, hits, lookups = boot.hits[-1]
    if lookups == 0:
        notes.append(f"{shown}:{lineno}: boot with 0 lookups: skipped")
        return None
    if hits is not None and lookups is not None:
        if hits > lookups:
            raise InputError(shown, f"{hits} hits of {lookups} lookups is more than all of them", lineno)
        pct = 100.0 * hits / lookups
    if total == 0 or held > total:
        raise InputError(shown, f"the boot holds {held} of {total} profiled pairs", first_line)
    _checked(held / total, pct, shown, "hit-rate line", lineno)
    return Point(f=held / total, hit=pct / 100.0, source=f"{shown}:{lineno}", held=held, total=total)


def fit_cover(points: list[Point]) -> Fit:
    """b > 0 minimising ``sum (1 - (1 - f_i)^b - hit_i)^2``: a log grid over b, then bisection."""
    if not points:
        raise ValueError("no points to fit")
    f = np.array([p.f for p in points])
    h = np.array([p.hit for p in points])

    def sse(log_b: np.ndarray | float) -> np.ndarray:
        b = np.exp(np.atleast_1d(np.asarray(log_b, dtype=np.float64)))[:, None]
        return ((1.0 - (1.0 - f[None, :]) ** b - h[None, :]) ** 2).sum(axis=1)

    grid = np.linspace(math.log(B_MIN), math.log(B_MAX), GRID)
    i = int(np.argmin(sse(grid)))
    if i in (0, GRID - 1):
        raise InputError(
            "solve calibrate", f"the points ask for b beyond {B_MIN:g}-{B_MAX:g}: check the hit rates"
        )

    # Refine on the derivative's sign change (precise to the last bit, unlike comparing flat SSE values):
    # d SSE / d b = 2 sum r_i (1 - f_i)^b |ln(1 - f_i)|, with r_i the fitted minus the measured hit rate.
    def slope(log_b: float) -> float:
        q = (1.0 - f) ** math.exp(log_b)
        return float(((1.0 - q - h) * q * -np.log1p(-f)).sum())

    lo, hi = grid[i - 1], grid[i + 1]
    if slope(lo) < 0.0 < slope(hi):
        for _ in range(200):
            mid = (lo + hi) / 2.0
            if mid in (lo, hi):
                break
            lo, hi = (mid, hi) if slope(mid) < 0.0 else (lo, mid)
    else:
        lo = hi = grid[i]
    b = math.exp((lo + hi) / 2.0)
    return Fit(b=b, points=points, fitted=cover_hit(f, b))


def print_fit(fit: Fit, console: Console) -> None:
    """b, then a table of each point's measured and fitted hit rate."""
    console.print(
        f"[bold]cover curve b = {fit.b:.4f}[/bold]  (least squares over "
        f"{len(fit.points)} point{'s' if len(fit.points) != 1 else ''}, RMS error {fit.rms_pp:.2f} pp)"
    )
    table = Table()
    for col in ("point", "held / ranked", "f", "measured", "fitted", "error"):
        if col == "point":
            table.add_column(col, overflow="fold")
        else:
            table.add_column(col, justify="right", no_wrap=True)
    for p, fitted in zip(fit.points, fit.fitted):
        table.add_row(
            p.source,
            f"{p.held:,}/{p.total:,}" if p.held is not None else "",
            f"{p.f:.4f}",
            f"{p.hit * 100:.2f}%",
            f"{fitted * 100:.2f}%",
            f"{(fitted - p.hit) * 100:+.2f} pp",
        )
    console.print(table)


def b_text(b: float) -> str:
    """b to 6 significant digits; within [B_MIN, B_MAX] this never takes an exponent, which YAML would
    read as a string (``1e-05``)."""
    return f"{b:.6g}"


def write_curve(path: Path, b: float, note: str) -> int:
    """Store ``curve: {kind: cover, b: ...}`` in the model file at ``path``; the 1-based line written.

    Only the ``curve:`` entry changes: it is replaced in place (its old lines kept below it as comments),
    or appended when the file has none. Every other line and comment stays as it was. The file is
    validated before and after; if the edit does not load, the original is put back.
    """
    load_model(path)
    shown = shown_path(path)
    original = read_bounded(path, shown, "a YAML file", YAML_LIMIT).decode("utf-8")
    lines = original.splitlines(keepends=True)
    root = yaml.compose(original, Loader=yaml.SafeLoader)
    assert isinstance(root, yaml.MappingNode)  # load_model accepted it
    if root.flow_style:
        raise InputError(shown, "is one flow-style {...} mapping; add the curve line by hand")
    found = [(k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "curve"]
    new = f"curve: {{kind: cover, b: {b_text(b)}}}"
    if not found:
        indent = " " * root.value[0][0].start_mark.column if root.value else ""
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines.append(f"{indent}{new}   # {note}\n")
        at = len(lines)
    else:
        key, value = found[0]
        start = key.start_mark.line
        if lines[start][: key.start_mark.column].strip() or value.start_mark.line < start:
            raise InputError(shown, "curve: cannot edit this curve entry in place; set it by hand", start + 1)
        end = value.end_mark.line if value.end_mark.column > 0 else value.end_mark.line - 1
        while end > start and (not lines[end].strip() or lines[end].lstrip().startswith("#")):
            end -= 1
        indent = " " * key.start_mark.column
        old = [f"{indent}# was: {line.rstrip()[len(indent) :]}\n" for line in lines[start : end + 1]]
        lines[start : end + 1] = [f"{indent}{new}   # {note}\n", *old]
        at = start + 1
    write_atomic(path, shown, "".join(lines))
    try:
        load_model(path)
    except InputError as exc:
        write_atomic(path, shown, original)
        raise InputError(shown, f"left unchanged: the edited file did not load ({exc})") from None
    return at


def run(point_texts: tuple[str, ...], logs: tuple[Path, ...], model: Path | None, console: Console) -> Fit:
    """The command: gather the points, fit, print, and store the curve when asked."""
    points = [parse_point(t) for t in point_texts]
    notes: list[str] = []
    for log in logs:
        found, skipped = points_from_log(log)
        points += found
        notes += skipped
    if not points:
        raise InputError("solve calibrate", "no points: give --point HELD/TOTAL=HIT% or --log FILE")
    fit = fit_cover(points)
    for line in notes:
        make_console(stderr=True).print(f"note: {line}", markup=False)
    print_fit(fit, console)
    if model is not None:
        note = f"fitted by solve calibrate to {len(points)} point(s), RMS {fit.rms_pp:.2f} pp"
        at = write_curve(model, fit.b, note)
        shown = shown_path(model)
        console.print(f"wrote curve: {{kind: cover, b: {b_text(fit.b)}}} to {shown}:{at}", markup=False)
    return fit
