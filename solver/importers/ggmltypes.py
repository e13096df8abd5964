"""ggml's tensor storage types: elements per block and bytes per block, and what a row of them takes.

The numbers are ggml's type traits (``ggml.c`` ``type_traits``: ``blck_size`` and ``type_size``, the
block structs of ``ggml-common.h``); gguf-py mirrors them as ``GGML_QUANT_SIZES`` and a test checks
this table against it. A tensor's row (``ne0`` values, the input length) is stored in whole blocks, so
``row_bytes`` rounds up as llama.cpp's KV cache does (``ggml_row_size``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from solver.errors import InputError


@dataclass(frozen=True)
class GgmlType:
    """A storage type: ``block`` elements take ``size`` bytes."""

    name: str
    block: int
    size: int

    @property
    def bits(self) -> Fraction:
        """Bits per element (weight)."""
        return Fraction(8 * self.size, self.block)


#: Every type a GGUF importer writes or reads bytes for (ggml's type traits).
TYPES: dict[str, GgmlType] = {
    t.name: t
    for t in (
        GgmlType("F32", 1, 4),
        GgmlType("F16", 1, 2),
        GgmlType("BF16", 1, 2),
        GgmlType("Q8_0", 32, 34),
        GgmlType("Q4_0", 32, 18),
        GgmlType("Q4_1", 32, 20),
        GgmlType("Q5_0", 32, 22),
        GgmlType("Q5_1", 32, 24),
        GgmlType("Q2_K", 256, 84),
        GgmlType("Q3_K", 256, 110),
        GgmlType("Q4_K", 256, 144),
        GgmlType("Q5_K", 256, 176),
        GgmlType("Q6_K", 256, 210),
        GgmlType("IQ1_S", 256, 50),
        GgmlType("IQ1_M", 256, 56),
        GgmlType("IQ2_XXS", 256, 66),
        GgmlType("IQ2_XS", 256, 74),
        GgmlType("IQ2_S", 256, 82),
        GgmlType("IQ3_XXS", 256, 98),
        GgmlType("IQ3_S", 256, 110),
        GgmlType("IQ4_NL", 32, 18),
        GgmlType("IQ4_XS", 256, 136),
        GgmlType("MXFP4", 32, 17),
    )
}

#: llama.cpp's KV cache types (``-ctk``/``-ctv``) as the importers' ``--kv-type`` names them.
KV_TYPES: dict[str, GgmlType] = {"f16": TYPES["F16"], "q8_0": TYPES["Q8_0"], "q4_0": TYPES["Q4_0"]}
#: Bytes per element of llama.cpp's recurrent (linear-attention) state, which it holds in F32.
STATE_ELEMENT_BYTES = TYPES["F32"].size


def check_kv_type(shown: str, name: str) -> None:
    """An importer's ``--kv-type``: one of KV_TYPES, else an InputError naming the file being read."""
    if name not in KV_TYPES:
        raise InputError(shown, f"unknown KV cache type {name!r} (expected one of {', '.join(KV_TYPES)})")


def row_bytes(kind: GgmlType, elements: int) -> int:
    """Bytes of a row of ``elements`` values stored as ``kind``, in whole blocks."""
    return -(-elements // kind.block) * kind.size


def tensor_bytes(kind: GgmlType, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor whose last dimension is the row: rows times ``row_bytes``."""
    rows = 1
    for dim in shape[:-1]:
        rows *= dim
    return rows * row_bytes(kind, shape[-1])
