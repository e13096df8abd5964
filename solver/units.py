"""Byte sizes (``12884901888``, ``"11.2 GiB"``, ``"1.95 MiB"``) and rates (``"60 GB/s"``), rounded down to
a whole byte; token counts (``32K``)."""

from __future__ import annotations

import re
from decimal import ROUND_FLOOR, Context, Decimal, InvalidOperation

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
#: Most tokens of context moesplit takes: a count, stored in int32 like the engines' own (2^31 - 1).
MAX_CONTEXT = 2**31 - 1
#: A context as users write it: tokens, or K (1,024 tokens, as llama.cpp's 128K is 131,072) or M.
_TOKENS = re.compile(r"\s*(\d+)\s*([kKmM]?)\s*")
_TOKEN_SCALE = {"": 1, "k": 1024, "m": 1024**2}


def parse_tokens(text: str) -> int:
    """``32K`` -> 32768, ``1M`` -> 1048576, ``65536`` -> 65536; ValueError for anything else and for more
    than MAX_CONTEXT tokens."""
    m = _TOKENS.fullmatch(text) if text.isascii() else None
    if m is None:
        raise ValueError(f"expected contexts like 8K, 32K or 65536 (K is 1,024 tokens), got {brief(text)}")
    tokens = int(m[1]) * _TOKEN_SCALE[m[2].lower()]
    if tokens > MAX_CONTEXT:
        raise ValueError(f"{brief(text)} is {tokens:,} tokens, more than the {MAX_CONTEXT:,} moesplit plans")
    return tokens


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*/\s*[sS]\s*$")
#: The size units by lower-case spelling, for rates (``gb/s``); the sizes themselves keep their case.
_UNIT_ANY_CASE = {unit.lower(): unit for unit in UNITS} | {"": "B"}


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
        except InvalidOperation as exc:  # an exponent beyond what Decimal can hold
            raise ValueError(f"expected a size, got {brief(value)}") from exc
        size = _floor_bytes(number, UNITS[unit or "B"])
    if size < 0:
        raise ValueError(f"a size cannot be negative, got {brief(value)}")
    if size > INT64_MAX:
        raise ValueError(f"{brief(value)} is beyond the largest size, 2^63-1 bytes")
    return size


def parse_rate(value: object) -> int:
    """Bytes per second of a rate: a non-negative integer or a size string ending in ``/s`` (``60 GB/s``).

    The unit's case does not matter (``60 gb/s`` is 60 GB/s: memory bandwidth is quoted in bytes). Raises
    ValueError calling it a rate; floats and booleans are refused because a bare ``55.5`` could mean
    bytes or GB per second.
    """
    units = " ".join(f"{u}/s" for u in UNITS)
    expected = f"expected a rate like '60 GB/s' (units {units})"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{expected}, got {brief(value)}")
    if isinstance(value, str):
        match = _RATE.match(value)
        unit = _UNIT_ANY_CASE.get(match.group(2).lower()) if match else None
        if not match or unit is None:
            raise ValueError(f"{expected}, got {brief(value)}")
        try:
            number = Decimal(match.group(1))
        except InvalidOperation as exc:  # an exponent beyond what Decimal can hold
            raise ValueError(f"{expected}, got {brief(value)}") from exc
        rate = _floor_bytes(number, UNITS[unit])
    else:
        rate = value
    if rate < 0:
        raise ValueError(f"a rate cannot be negative, got {brief(value)}")
    if rate == 0:
        raise ValueError("a rate must be above 0 bytes per second")
    if rate > INT64_MAX:
        raise ValueError(f"{brief(value)} is beyond the largest rate, 2^63-1 bytes per second")
    return rate


def format_rate(rate: int) -> str:
    """A rate in decimal GB/s, exact so that ``parse_rate`` reads it back: ``936.2 GB/s``, ``8000 GB/s``."""
    gb = (Decimal(rate) / 10**9).normalize()
    text = f"{gb:f}"
    return f"{text} GB/s"


def _floor_bytes(number: Decimal, unit: int) -> int:
    """``floor(number * unit)``, exact and quick for any exponent (INT64_MAX + 1 for anything beyond).

    Decimal's default 28 digits would round ``5.99...9 B`` with 30 nines up to 6 before the floor,
    and ``1e999999 B`` would build a million-digit integer.
    """
    if number > INT64_MAX:
        return INT64_MAX + 1
    if number.adjusted() < -20:  # below 1e-20 bytes per unit, and units are below 1e13 bytes
        return 0
    exact = Context(prec=len(number.as_tuple().digits) + 20)
    return int(exact.multiply(number, Decimal(unit)).to_integral_value(rounding=ROUND_FLOOR))


def format_size(n: int) -> str:
    """Short human form in binary units: ``11.20 GiB``, ``700.0 MiB``, ``512 B``."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{sign}{value:.2f} {unit}" if value < 100 else f"{sign}{value:.1f} {unit}"
    return f"{sign}{n} B"


def per_layer(value: int | list[int], n: int) -> list[int]:
    """A per-layer key's value as one entry per layer: a list as given, a single value repeated."""
    return list(value) if isinstance(value, list) else [value] * n
