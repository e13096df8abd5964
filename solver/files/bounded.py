"""The one way an input file is read: its size and first bytes are looked at before it is read whole.

A file that is too large for its kind, a GGUF or another binary file where text is expected, and a
device or pipe that never ends (``/dev/zero``) are refused in one line, having read at most the
kind's limit plus one byte. The limits are far above any real file of the kind (docs/edges.md,
"Sizes of input files") and far below what would take minutes or the machine's memory to parse.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from solver.errors import InputError

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

#: Rig and model YAML: a rig is a few KiB, a 1,000-layer model with per-layer lists about 100 KiB;
#: PyYAML scans about a MiB a second, so the limit also bounds the time a file takes to read.
YAML_LIMIT = 2 * MIB
#: A Hugging Face config.json: a few KiB (the largest, with quantisation maps, a few hundred).
CONFIG_LIMIT = 16 * MIB
#: A profile (text or STRP): DeepSeek-V3's 15,616 pairs with counts take 300 KiB as text.
PROFILE_LIMIT = 256 * MIB
#: A routing trace: about 70 bytes per (token, layer) record, so 100,000 tokens of 61 layers is 430 MiB.
TRACE_LIMIT = 4 * GIB
#: llama-bench JSON or JSONL: about 1 KiB a row.
BENCH_LIMIT = 64 * MIB
#: llama-server or llama-cli output, or an engine log, verbose logging included.
LOG_LIMIT = 256 * MIB

#: The first bytes of every GGUF file.
GGUF_MAGIC = b"GGUF"
#: UTF-16's byte order marks (its text holds NULs): left for the text decoder to refuse as not UTF-8.
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
#: Bytes looked at for a NUL (a binary file) before the rest is read.
HEAD = 64 * KIB


def size_text(n: int) -> str:
    """``4 MiB``, ``256 MiB``, ``4 GiB``: a limit as the messages and docs write it."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} B"


def read_bounded(
    path: Path, shown: str, what: str, limit: int, binary: tuple[bytes, ...] | None = ()
) -> bytes:
    """The bytes of the input file ``path`` (named ``shown``), at most ``limit`` of them.

    ``what`` names the expected content in messages ("a YAML file", ...). ``binary`` lists the magic
    numbers of the binary formats the reader takes (a text reader takes none); a file whose first
    bytes hold a NUL and start with none of them is refused as binary, a GGUF with a pointer to
    ``solve model from-gguf``. ``binary=None`` takes any bytes (a binary format without magic).
    A missing file, a directory, a read error, a file over ``limit`` and a file too large for the
    machine's memory are InputErrors.
    """
    too_large = f"is larger than {size_text(limit)}, the most moesplit reads as {what}"
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise InputError(shown, f"is a directory, expected {what}")
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                raise InputError(shown, f"{too_large} ({info.st_size:,} bytes)")
            head = handle.read(min(HEAD, limit + 1))
            _check_head(head, shown, what, binary)
            data = head + handle.read(limit + 1 - len(head))
    except FileNotFoundError:
        raise InputError(shown, f"no such file (expected {what})") from None
    except IsADirectoryError:
        raise InputError(shown, f"is a directory, expected {what}") from None
    except MemoryError:
        raise InputError(shown, f"too large to read into memory (expected {what})") from None
    except OSError as exc:
        raise InputError(shown, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(shown, too_large)
    return data


def _check_head(head: bytes, shown: str, what: str, binary: tuple[bytes, ...] | None) -> None:
    """Refuse a GGUF, or any binary file, where ``what`` is expected (see read_bounded)."""
    if binary is None or any(head.startswith(magic) for magic in binary):
        return
    if head.startswith(GGUF_MAGIC):
        raise InputError(shown, "this is a GGUF file: make a model of it with `solve model from-gguf FILE`")
    if b"\0" in head and not head.startswith(UTF16_BOMS):  # UTF-16 text: the decoder says "not UTF-8"
        raise InputError(shown, f"is a binary file, expected {what}")
