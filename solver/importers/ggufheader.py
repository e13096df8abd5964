"""A lean GGUF header reader: metadata and tensor infos from a memory map, never the tensor data.

``gguf.GGUFReader`` turns every tokenizer string into numpy objects (seconds and hundreds of MB on a
150,000-token vocabulary). This reader walks the same layout (gguf-py ``gguf_reader.py``) but only
steps over string arrays and long numeric arrays by their lengths, so a header costs a few pages of
the file and a fraction of a second. Malformed or truncated input raises ``GGUFFormatError``.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType

#: Numeric arrays up to this length are decoded (per-layer values); longer ones are skipped.
MAX_DECODED_ARRAY = 4096
#: GGML_MAX_DIMS: a tensor has at most this many dimensions.
MAX_DIMS = 4

STRING = 8
ARRAY = 9
#: GGUF value type -> struct format of one element (all but STRING and ARRAY).
SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class GGUFFormatError(ValueError):
    """The bytes are not a well-formed GGUF header."""


@dataclass(frozen=True)
class SkippedArray:
    """An array the reader stepped over without decoding: its GGUF element type and length."""

    item_type: int
    count: int


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry. ``shape`` is in GGML order (ne0, the row length, first)."""

    name: str
    ggml_type: int
    shape: tuple[int, ...]
    offset: int
    n_bytes: int

    @property
    def type_name(self) -> str:
        """The GGML type's name (``Q4_K``, ``F32``, ...)."""
        return GGMLQuantizationType(self.ggml_type).name


@dataclass
class GGUFHeader:
    """A GGUF file's header: version, metadata (string arrays as ``SkippedArray``) and tensor infos."""

    path: Path
    version: int
    metadata: dict[str, object]
    tensors: list[TensorInfo]
    data_offset: int
    file_size: int


def tensor_n_bytes(ggml_type: int, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of this GGML type and shape: elements over the block size times its bytes."""
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise GGUFFormatError(f"unknown GGML tensor type {ggml_type}") from None
    elements = 1
    for dim in shape:
        elements *= dim
    return elements * type_size // block


class _Cursor:
    """Reads little- or big-endian values from a buffer, failing cleanly past its end."""

    def __init__(self, buf: mmap.mmap, order: str):
        self.buf = buf
        self.size = len(buf)
        self.pos = 0
        self.order = order
        self.u64 = struct.Struct(order + "Q")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            end = f"the end ({self.size} bytes)"
            raise GGUFFormatError(f"truncated header: {what} at byte {self.pos} runs past {end}")

    def scalar(self, fmt: str, what: str) -> int | float | bool:
        size = struct.calcsize(fmt)
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self, what: str) -> str:
        n = int(self.scalar("Q", what))
        self.need(n, what)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFFormatError(f"{what} at byte {self.pos - n} is not UTF-8") from None

    def skip_strings(self, count: int, what: str) -> None:
        """Step over ``count`` length-prefixed strings, reading only their lengths."""
        self.need(8 * count, what)  # every string has at least its 8-byte length
        unpack, buf, pos, size = self.u64.unpack_from, self.buf, self.pos, self.size
        for _ in range(count):
            if pos + 8 > size:
                break
            pos += 8 + unpack(buf, pos)[0]
        else:
            if pos <= size:
                self.pos = pos
                return
        raise GGUFFormatError(f"truncated header: {what} runs past the end ({size} bytes)")


def _value(cur: _Cursor, value_type: int, key: str) -> object:
    """One metadata value of ``value_type`` at the cursor."""
    if value_type == STRING:
        return cur.string(f"value of {key}")
    fmt = SCALAR_FORMATS.get(value_type)
    if fmt is not None:
        return cur.scalar(fmt, f"value of {key}")
    if value_type != ARRAY:
        raise GGUFFormatError(f"{key}: unknown value type {value_type}")
    item_type = int(cur.scalar("I", f"array type of {key}"))
    count = int(cur.scalar("Q", f"array length of {key}"))
    if item_type == STRING:
        cur.skip_strings(count, f"string array {key}")
        return SkippedArray(item_type, count)
    fmt = SCALAR_FORMATS.get(item_type)
    if fmt is None:
        raise GGUFFormatError(f"{key}: unsupported array element type {item_type}")
    size = struct.calcsize(fmt)
    cur.need(size * count, f"array {key}")
    if count > MAX_DECODED_ARRAY:
        cur.pos += size * count
        return SkippedArray(item_type, count)
    values = list(struct.unpack_from(f"{cur.order}{count}{fmt}", cur.buf, cur.pos))
    cur.pos += size * count
    return values


def _parse(buf: mmap.mmap, path: Path) -> GGUFHeader:
    if len(buf) < 8 or struct.unpack_from("<I", buf, 0)[0] != GGUF_MAGIC:
        raise GGUFFormatError("not a GGUF file (no GGUF magic at the start)")
    version = struct.unpack_from("<I", buf, 4)[0]
    order = "<"
    if version & 0xFFFF == 0:  # written on a machine of the other byte order
        order, version = ">", struct.unpack_from(">I", buf, 4)[0]
    if version not in (2, 3):
        raise GGUFFormatError(f"GGUF version {version} is not supported (2 or 3)")
    cur = _Cursor(buf, order)
    cur.pos = 8
    n_tensors = int(cur.scalar("Q", "tensor count"))
    n_kv = int(cur.scalar("Q", "metadata count"))
    cur.need(n_kv * 12, "metadata")  # each entry has at least a key length and a type
    metadata: dict[str, object] = {}
    for _ in range(n_kv):
        key = cur.string("metadata key")
        value_type = int(cur.scalar("I", f"type of {key}"))
        if key in metadata:
            raise GGUFFormatError(f"duplicate metadata key {key}")
        metadata[key] = _value(cur, value_type, key)
    cur.need(n_tensors * 24, "tensor infos")  # name length, dims, type, offset at the least
    tensors: list[TensorInfo] = []
    for _ in range(n_tensors):
        name = cur.string("tensor name")
        n_dims = int(cur.scalar("I", f"dimensions of {name}"))
        if n_dims > MAX_DIMS:
            raise GGUFFormatError(f"tensor {name} has {n_dims} dimensions (at most {MAX_DIMS})")
        shape = tuple(int(cur.scalar("Q", f"shape of {name}")) for _ in range(n_dims))
        ggml_type = int(cur.scalar("I", f"type of {name}"))
        offset = int(cur.scalar("Q", f"offset of {name}"))
        tensors.append(TensorInfo(name, ggml_type, shape, offset, tensor_n_bytes(ggml_type, shape)))
    alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFFormatError(f"general.alignment {alignment!r} is not a power of two")
    data_offset = -(-cur.pos // alignment) * alignment
    return GGUFHeader(path, version, metadata, tensors, data_offset, len(buf))


def read_header(path: Path) -> GGUFHeader:
    """The header of the GGUF file at ``path``, read through a read-only memory map.

    Raises OSError when the file cannot be opened and GGUFFormatError when it is not a GGUF header.
    """
    with open(path, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # a device or pipe: no size to map
            raise GGUFFormatError("not a regular file (a device or a pipe), expected a GGUF file")
        if handle.seek(0, 2) == 0:
            raise GGUFFormatError("empty file, not a GGUF file")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, path)
