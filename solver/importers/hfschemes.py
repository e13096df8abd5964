"""Bytes of a Hugging Face model's tensors under a stated weight scheme (``solve model from-hf --weights``).

A config gives the shapes of every tensor, not their bytes; the bytes come from the weight scheme, so
the result is an estimate. A tensor of ``n`` weights takes its storage type's whole blocks
(``solver.importers.ggmltypes``).

Two kinds of scheme:

- **llama-quantize recipes** (``Q2_K`` .. ``Q8_0``, ``IQ1_S`` .. ``IQ4_XS``, ``IQ4_NL``, the ``_S``/
  ``_M``/``_L`` mixes, ``MXFP4_MOE``): every tensor gets the type llama-quantize gives it, from a port
  of its rules (``solver.importers.quant``; docs/models.md lists the types per tensor class).
- **checkpoint schemes**, by tensor class:

============  =============================  ==========  =============  ==========  ====================
scheme        attention, dense and shared    routed      token          head        router, norms,
              MLPs                           experts     embeddings     (lm_head)   biases (1-D)
============  =============================  ==========  =============  ==========  ====================
BF16          16                             16          16             16          16
FP8           8 + a float32 scale per        as attn.    16             16          16 (router too)
              128 x 128 block (DeepSeek/
              Qwen FP8 checkpoints)
MXFP4         16                             4.25 (17 B  16             16          16
                                             per 32)
Q4_K          4.5 (144 B per 256) [Q5_0]     4.5         4.5            6.5625      32 (F32)
                                                                        (Q6_K)
============  =============================  ==========  =============  ==========  ====================

``Q4_K`` is one uniform type (not llama-quantize's ``Q4_K`` alias, which is ``Q4_K_M``). A block type
whose block does not divide a row falls back as llama.cpp does (in brackets; F16 when nothing fits).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from solver.importers.ggmltypes import TYPES, tensor_bytes
from solver.importers.hflayers import Tensor
from solver.importers.quant import FTYPES, Facts, assign_types

FP8_BLOCK = 128


@dataclass(frozen=True)
class Format:
    """A checkpoint storage type: bits per weight; block formats need rows of ``block`` weights."""

    name: str
    bits: Fraction
    block: int = 1
    fallback: str | None = None


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("F32", Fraction(32)),
        Format("F16", Fraction(16)),
        Format("BF16", Fraction(16)),
        Format("FP8", Fraction(8)),
        Format("Q5_0", Fraction(11, 2), 32, "F16"),
        Format("Q4_K", Fraction(9, 2), 256, "Q5_0"),
        Format("Q6_K", Fraction(105, 16), 256, "Q8_0"),
        Format("Q8_0", Fraction(17, 2), 32, "F16"),
        Format("MXFP4", Fraction(17, 4), 32, "BF16"),
    )
}

#: Tensor classes: matrix (attention, dense and shared MLP), expert (routed experts), embed, head,
#: router, vector (norms, biases, sinks and other 1-D tensors).
CLASSES = ("matrix", "expert", "embed", "head", "router", "vector")


def _formats(*names: str) -> dict[str, str]:
    return dict(zip(CLASSES, names, strict=True))


#: The storage type of each tensor class under each checkpoint scheme (the docstring's table).
SCHEMES: dict[str, dict[str, str]] = {
    "BF16": _formats("BF16", "BF16", "BF16", "BF16", "BF16", "BF16"),
    "FP8": _formats("FP8", "FP8", "BF16", "BF16", "BF16", "BF16"),
    "MXFP4": _formats("BF16", "MXFP4", "BF16", "BF16", "BF16", "BF16"),
    "Q4_K": _formats("Q4_K", "Q4_K", "Q4_K", "Q6_K", "F32", "F32"),
}

#: Every ``--weights`` name: the checkpoint schemes, then llama-quantize's recipes.
WEIGHTS = (*SCHEMES, *(f for f in FTYPES if f not in SCHEMES))


def checkpoint_bytes(fmt: Format, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of ``shape`` stored as ``fmt`` (falling back when rows do not fit its blocks)."""
    while fmt.block > 1 and shape[-1] % fmt.block:
        fmt = FORMATS[str(fmt.fallback)]
    n = math.prod(shape)
    if fmt.name == "FP8" and len(shape) >= 2:
        out, row = shape[-2], shape[-1]
        scales = math.ceil(out / FP8_BLOCK) * math.ceil(row / FP8_BLOCK) * 4
        return n + math.prod(shape[:-2]) * scales
    if fmt.name == "FP8":
        fmt = FORMATS["BF16"]
    return math.ceil(n * fmt.bits / 8)


@dataclass
class Sizes:
    """Bytes of every tensor by GGUF name, and how the scheme stored them (for the header)."""

    by_name: dict[str, int]
    kind: dict[str, str]
    summary: str


def sizes(scheme: str, entries: list[tuple[str, Tensor, int]], facts: Facts) -> Sizes:
    """Bytes of each (GGUF name, tensor, layer) under ``scheme``."""
    if scheme in SCHEMES:
        table = SCHEMES[scheme]
        by_name = {name: checkpoint_bytes(FORMATS[table[t.cls]], t.shape) for name, t, _ in entries}
        summary = f"{scheme}: " + ", ".join(f"{cls} {table[cls]}" for cls in CLASSES)
        return Sizes(by_name, {name: table[t.cls] for name, t, _ in entries}, summary)
    types = assign_types(scheme, [(name, t.shape) for name, t, _ in entries], facts)
    by_name = {name: tensor_bytes(TYPES[types[name]], t.shape) for name, t, _ in entries}
    counts = Counter(types.values())
    used = ", ".join(f"{kind} x {counts[kind]}" for kind in sorted(counts, key=lambda k: -counts[k]))
    summary = (
        f"{scheme}: llama-quantize's recipe (docs/models.md; an imatrix assumed), tensors by type: {used}"
    )
    return Sizes(by_name, types, summary)
