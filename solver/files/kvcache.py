"""KV cache types: bytes one cached value takes, and a model's KV bytes per token at another type.

llama.cpp stores its KV cache at the type ``-ctk``/``-ctv`` name, in ggml's blocks: f16 takes 2 bytes
per value, q8_0 34 bytes per block of 32 values, q4_0 18 per 32. A model file says which type its
``kv_bytes_per_token`` is at (``kv_type``, f16 unless the importer was told otherwise) and a rig may run
another; the bytes scale by the ratio, exactly when each cached row holds whole blocks of 32 values (every
published head size does), rounded up to a whole byte otherwise.
"""

from __future__ import annotations

from fractions import Fraction

#: Bytes per cached value of each type llama.cpp's -ctk/-ctv take (ggml's type traits).
KV_TYPES: dict[str, Fraction] = {"f16": Fraction(2), "q8_0": Fraction(34, 32), "q4_0": Fraction(18, 32)}
#: The type a model's KV bytes are at unless its file says otherwise, and what the engines run unasked.
DEFAULT_KV_TYPE = "f16"


def scale_kv(per_token: int, written_at: str, run_at: str) -> int:
    """Bytes of a token's cache at ``run_at`` when it takes ``per_token`` bytes at ``written_at``."""
    if written_at == run_at:
        return per_token
    return -(-per_token * KV_TYPES[run_at] // KV_TYPES[written_at])


def scale_per_kind(value: int | dict[str, int], written_at: str, run_at: str) -> int | dict[str, int]:
    """A model's ``kv_bytes_per_token`` (one size, or one per layer kind) at another cache type."""
    if isinstance(value, dict):
        return {kind: scale_kv(v, written_at, run_at) for kind, v in value.items()}
    return scale_kv(value, written_at, run_at)
