"""Byte sizes: ``12884901888``, ``"11.2 GiB"`` or ``"1.95 MiB"``, rounded down to a whole byte."""

from __future__ import annotations

import re
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

from solver.errors import brief

UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
INT64_MAX = 2**63 - 1
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(value: object) -> int:
    """Bytes of a size given as a non-negative integer or a ``"<number> <unit>"`` string.

    Raises ValueError with a message fit for the user; floats and booleans are refused because
    a bare ``11.5`` could mean bytes or GiB.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a size (bytes, or a string like '11.2 GiB'), got {brief(value)}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.match(value)
        unit = match.group(2) if match else ""
        if not match or (unit and unit not in UNITS):
            units = " ".join(UNITS)
            raise ValueError(f"expected a size like '11.2 GiB' (units {units}), got {brief(value)}")
        try:
            number = Decimal(match.group(1))
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
            raise ValueError(f"expected a size, got {brief(value)}") from exc
        size = int((number * UNITS[unit or "B"]).to_integral_value(rounding=ROUND_FLOOR))
    if size < 0:
        raise ValueError(f"a size cannot be negative, got {brief(value)}")
    if size > INT64_MAX:
        raise ValueError(f"{brief(value)} is beyond the largest size, 2^63-1 bytes")
    return size


def format_size(n: int) -> str:
    """Short human form in binary units: ``11.20 GiB``, ``700.0 MiB``, ``512 B``."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{sign}{value:.2f} {unit}" if value < 100 else f"{sign}{value:.1f} {unit}"
    return f"{sign}{n} B"
