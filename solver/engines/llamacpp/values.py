"""One flag value read as llama.cpp reads it: ``std::stoi`` and ``std::stof`` (the longest number at the
start of the word), ``-ts`` splits, ``-ot`` rules, ``-dev`` names, CUDA_VISIBLE_DEVICES and
llama-bench's value lists; ArgsError (one line) for a value llama.cpp would refuse."""

from __future__ import annotations

import math
import re

import numpy as np

from solver.engines.llamacpp.flags import LLAMA_MAX_DEVICES
from solver.engines.llamacpp.otrules import pattern_fault
from solver.errors import ArgsError


def stoi(flag: str, text: str) -> int:
    """``std::stoi``: optional blanks and sign, then digits; what follows them is not read."""
    m = re.match(r"\s*([+-]?\d+)", text, re.ASCII)  # the C locale's digits and blanks, as std::stoi
    if m is None:
        raise ArgsError(f"{flag} {text!r}: not an integer")
    value = int(m.group(1)) if len(m.group(1)) <= 20 else 2**64  # past int's digit limit: out of range
    if not -(2**31) <= value < 2**31:
        raise ArgsError(f"{flag} {text!r}: out of range")
    return value


_FLOAT = re.compile(
    r"\s*([+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan))", re.IGNORECASE | re.ASCII
)


def stof(flag: str, text: str) -> float:
    """``std::stof`` rounded to float32: the longest decimal number at the start of the word."""
    m = _FLOAT.match(text)
    if m is None:
        raise ArgsError(f"{flag} {text!r}: not a number")
    with np.errstate(over="ignore"):
        value = np.float32(float(m.group(1)))
    if not np.isfinite(value) and "inf" not in m.group(1).lower() and "nan" not in m.group(1).lower():
        raise ArgsError(f"{flag} {text!r}: out of range")
    return float(value)


def split_ratios(flag: str, text: str, separators: str) -> tuple[float, ...]:
    """``-ts``: the values between runs of ``separators``, each by ``std::stof``; 16 or more refused."""
    parts = re.split(f"[{re.escape(separators)}]+", text)
    if parts and parts[-1] == "" and len(parts) > 1:  # std::sregex_token_iterator drops an empty tail
        parts = parts[:-1]
    if len(parts) >= LLAMA_MAX_DEVICES:
        raise ArgsError(f"{flag} {text}: got {len(parts)} input configs, but llama.cpp takes at most 15")
    shares = tuple(stof(flag, p) for p in parts)
    for share in shares:  # llama.cpp divides by their float sum: a negative, nan or inf share is nonsense
        if not math.isfinite(share) or share < 0:
            raise ArgsError(f"{flag} {text}: {share:g} is not a share (a finite number, 0 or more)")
    if not sum(shares) <= float(np.finfo(np.float32).max):
        raise ArgsError(f"{flag} {text}: the shares add up past float32's range; scale them down")
    return shares


def override_rules(flag: str, text: str, separator: str) -> list[tuple[str, str]]:
    """``-ot``: ``PATTERN=BUFT`` rules between ``separator``s, each split at its first ``=``."""
    rules = []
    for rule in text.split(separator):
        if separator == ";" and rule == "":
            continue
        pattern, eq, buft = rule.partition("=")
        if not eq:
            raise ArgsError(f"{flag} {text}: rule {rule!r} has no '=BUFFER_TYPE' (e.g. 'exps=CPU')")
        bad, why = pattern_fault(pattern)
        if bad:
            raise ArgsError(f"{flag} {text}: {pattern!r} is not a regular expression ({why})")
        if why:
            raise ArgsError(
                f"{flag} {text}: {pattern!r} {why}, which can take exponential time to match; "
                "write it without the inner repeat (e.g. '.*' for '(.*)*')"
            )
        rules.append((pattern, buft))
    return rules


def device_names(flag: str, text: str, separator: str) -> tuple[str, ...]:
    """``-dev``: device names (``CUDA0``, ``RPC1``; ``none`` for no GPU)."""
    names = tuple(n.strip() for n in text.split(separator))
    if not names or any(not n for n in names):
        raise ArgsError(f"{flag} {text!r}: no devices specified")
    if "none" in names and len(names) > 1:
        raise ArgsError(f"{flag} {text}: 'none' means no GPU and stands alone")
    return names


def visible_devices(text: str) -> tuple[int, ...]:
    """CUDA_VISIBLE_DEVICES as GPU indices; a UUID or a repeated index is refused."""
    if text.strip() == "":
        return ()
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"[0-9]+", part):
            raise ArgsError(
                f"CUDA_VISIBLE_DEVICES={text}: {part!r} is not a GPU index (name GPUs by rig index)"
            )
        if int(part) in out:
            raise ArgsError(f"CUDA_VISIBLE_DEVICES={text}: GPU {part} is listed twice")
        out.append(int(part))
    return tuple(out)


#: Most values a llama-bench list may expand to: a bench of more tests than this is no real bench.
MAX_VALUES = 4096


def int_list(flag: str, text: str, negative: bool = False) -> list[int]:
    """llama-bench's ``parse_int_range``: ``a``, ``a-b``, ``a-b+s``, ``a-b*m``, comma separated."""
    sign = "-?" if negative else ""
    item = re.compile(rf"({sign}\d+)(?:-(\d+)(?:([+*])(\d+))?)?(?:,|$)", re.ASCII)
    out: list[int] = []
    pos = 0
    while pos < len(text):
        m = item.match(text, pos)
        if m is None or m.end() == pos:
            raise ArgsError(f"{flag} {text}: invalid range format")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        op, step = m.group(3) or "+", int(m.group(4)) if m.group(4) else 1
        if op == "+" and step > 0 and len(out) + max(0, (last - first) // step + 1) > MAX_VALUES:
            raise ArgsError(f"{flag} {text}: expands to more than {MAX_VALUES:,} values")
        i = first
        while i <= last:
            out.append(i)
            nxt = i + step if op == "+" else i * step
            if nxt <= i:
                raise ArgsError(f"{flag} {text}: invalid range")
            i = nxt
            if len(out) > MAX_VALUES:
                raise ArgsError(f"{flag} {text}: expands to more than {MAX_VALUES:,} values")
        pos = m.end()
    if not out:
        raise ArgsError(f"{flag} {text!r}: no value")
    return out


def one_value(flag: str, text: str, values: list) -> object:
    """The single value of a llama-bench list: a score is one test."""
    if len(values) != 1:
        raise ArgsError(
            f"{flag} {text}: llama-bench runs one test per value; a score takes one value (score each one)"
        )
    return values[0]
