"""Routing profiles (docs/profiles.md): ranked (layer, expert) pairs, hottest first, as text or STRP v1."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from solver.errors import InputError, brief
from solver.files.atomicfile import write_atomic
from solver.files.bounded import PROFILE_LIMIT, read_bounded
from solver.units import INT64_MAX

STRP_MAGIC = b"STRP"
_HEADER = struct.Struct("<4s5I")


@dataclass(frozen=True)
class Profile:
    """Ranked pairs: ``layer[r], expert[r]`` for rank r (0 = hottest), optional ``count[r]``.

    ``lines[r]`` is the text line of rank r (None for STRP); ``shape`` is STRP's
    ``(n_layers, n_expert)`` header, checked against the model later.
    """

    file: str
    layer: np.ndarray
    expert: np.ndarray
    count: np.ndarray | None = None
    lines: np.ndarray | None = None
    shape: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.layer)

    def where(self, rank: int) -> tuple[int | None, str]:
        """Line (text) or pair number (STRP) of a rank, for messages."""
        if self.lines is not None:
            return int(self.lines[rank]), f"pair ({self.layer[rank]}, {self.expert[rank]})"
        return None, f"pair #{rank} ({self.layer[rank]}, {self.expert[rank]})"


def read_profile(path: Path, shown: str) -> Profile:
    """Read a profile, telling STRP from text by its first four bytes."""
    raw = read_bounded(path, shown, "a profile file", PROFILE_LIMIT, binary=(STRP_MAGIC,))
    return _read_strp(raw, shown) if raw[:4] == STRP_MAGIC else _read_text(raw, shown)


def _read_strp(raw: bytes, shown: str) -> Profile:
    if len(raw) < _HEADER.size:
        raise InputError(shown, f"STRP header truncated: {len(raw)} of {_HEADER.size} bytes")
    _, version, n_layers, n_expert, slots, n_ranked = _HEADER.unpack_from(raw)
    if version != 1:
        raise InputError(shown, f"STRP version {version}; only version 1 is supported")
    if n_ranked > slots:
        raise InputError(shown, f"STRP n_ranked {n_ranked} exceeds slots {slots}")
    need = _HEADER.size + 4 * n_ranked
    if len(raw) < need:
        raise InputError(shown, f"STRP truncated: {n_ranked} pairs need {need} bytes, file has {len(raw)}")
    pairs = np.frombuffer(raw, dtype="<u2", count=2 * n_ranked, offset=_HEADER.size).reshape(-1, 2)
    return Profile(
        file=shown,
        layer=pairs[:, 0].astype(np.int64),
        expert=pairs[:, 1].astype(np.int64),
        shape=(n_layers, n_expert),
    )


def _read_text(raw: bytes, shown: str) -> Profile:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(shown, f"not a STRP file and not UTF-8 text (offset {exc.start})") from None
    rows: list[list[str]] = []
    linenos: list[int] = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if fields:
            rows.append(fields)
            linenos.append(n)
    widths = {len(r) for r in rows}
    for row, n in zip(rows, linenos):
        if len(row) not in (2, 3):
            raise InputError(
                shown, f"expected 'layer expert' or 'layer expert count', got {brief(' '.join(row))}", n
            )
    if len(widths) > 1:
        n = linenos[next(i for i, r in enumerate(rows) if len(r) != len(rows[0]))]
        raise InputError(shown, "counts must be given on every line or on none", n)
    try:
        values = np.array(rows, dtype=np.int64) if rows else np.zeros((0, 2), np.int64)
    except (ValueError, OverflowError):
        for row, n in zip(rows, linenos):
            for field in row:
                try:
                    value = int(field)
                except ValueError:
                    raise InputError(shown, f"expected whole numbers, got {brief(field)}", n) from None
                if abs(value) > INT64_MAX:
                    raise InputError(shown, f"{brief(field)} is too large (at most 2^63-1)", n) from None
        raise InputError(shown, "a number is too large") from None
    bad = np.flatnonzero((values < 0).any(axis=1))
    if bad.size:
        raise InputError(shown, "layers, experts and counts cannot be negative", linenos[bad[0]])
    return Profile(
        file=shown,
        layer=values[:, 0],
        expert=values[:, 1],
        count=values[:, 2] if values.shape[1] == 3 else None,
        lines=np.array(linenos, dtype=np.int64),
    )


def check_against(profile: Profile, experts: np.ndarray) -> None:
    """Every pair in the model's range, no pair twice, and an STRP shape that matches.

    ``experts[l]`` is the number of experts of layer l.
    """
    n_layers = len(experts)
    if profile.shape is not None:
        want = (n_layers, int(experts.max(initial=0)))
        if profile.shape != want:
            raise InputError(
                profile.file,
                f"STRP shape is {profile.shape[0]} layers x {profile.shape[1]} experts; "
                f"the model has {want[0]} x {want[1]}",
            )
    layer, expert = profile.layer, profile.expert
    out_layer = layer >= n_layers
    out_expert = ~out_layer & (expert >= experts[np.minimum(layer, n_layers - 1)])
    bad = np.flatnonzero(out_layer | out_expert)
    if bad.size:
        r = int(bad[0])
        line, what = profile.where(r)
        if out_layer[r]:
            msg = f"{what}: layer out of range (the model has {n_layers} layers)"
        else:
            msg = f"{what}: expert out of range (layer {layer[r]} has {experts[layer[r]]} experts)"
        raise InputError(profile.file, msg, line)
    key = layer * (int(experts.max(initial=0)) + 1) + expert
    order = np.argsort(key, kind="stable")
    dup = np.flatnonzero(key[order][1:] == key[order][:-1])
    if dup.size:
        firsts = order[dup + 1]
        r = int(firsts.min())
        first = int(order[np.searchsorted(key[order], key[r])])
        line, what = profile.where(r)
        before = profile.where(first)[0]
        seen = f" (first at line {before})" if before is not None else f" (first at rank {first})"
        raise InputError(profile.file, f"{what} ranked twice{seen}", line)


def text_image(profile: Profile, header: str = "") -> str:
    """The text format: ``#`` header lines, then ``layer expert [count]`` lines, hottest first."""
    lines = [f"# {h}" if h else "#" for h in header.splitlines()]
    cols = [profile.layer, profile.expert] + ([profile.count] if profile.count is not None else [])
    body = np.column_stack(cols) if len(profile) else np.zeros((0, len(cols)), np.int64)
    lines += [" ".join(map(str, row)) for row in body.tolist()]
    return "\n".join(lines) + "\n"


def write_text(path: Path, profile: Profile, header: str = "", shown: str | None = None) -> None:
    """Write the text format atomically (see solver.files.atomicfile)."""
    write_atomic(path, shown or str(path), text_image(profile, header))


def strp_bytes(profile: Profile, n_layers: int, n_expert: int) -> bytes:
    """An STRP v1 image of the profile (counts are not representable and are dropped)."""
    if len(profile) and (profile.layer.max() > 0xFFFF or profile.expert.max() > 0xFFFF):
        raise ValueError("STRP stores layers and experts as uint16")
    header = _HEADER.pack(STRP_MAGIC, 1, n_layers, n_expert, len(profile), len(profile))
    pairs = np.column_stack([profile.layer, profile.expert]).astype("<u2")
    return header + pairs.tobytes()
