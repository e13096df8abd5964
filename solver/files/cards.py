"""The card table: memory, memory bandwidth, SMs and boost clock of the GPUs people put in one rig.

``solve probe`` reads a card's SM count from here when NVML cannot give it, and ``solve rig new`` builds
a whole rig from card names with it (no NVML, no GPU needed). For the llama.cpp, vLLM and SGLang engines
a GPU's time per layer follows from the bytes it reads over ``bandwidth``.

Names never guess. A name that several cards share ("RTX 4060 Ti": 8 and 16 GB; "A100": four cards) is
an AmbiguousCard error that lists the names to write instead ("RTX 4060 Ti 16GB"); ``solve probe`` knows
the card's total memory from NVML and picks the one with that memory. NVML's own full names ("NVIDIA
A100-SXM4-80GB", "NVIDIA H200") name one card each. Where two versions of a card share the name and the
memory and differ in memory type (RTX 3060 Ti GDDR6 or GDDR6X, RTX 4070 GDDR6X or GDDR6), the plain name
is the launch version and the other has its own name; NVML cannot tell them apart either.

The rows, what each number means and the source of each family's figures are in ``cards.yaml``, shipped
beside this module.

Free memory of a headless card, before the model loads, is ``vram_mib - DRIVER_MIB``: the driver keeps
part of the memory for itself (NVML's memory info v2 reports it as ``reserved``, a few hundred MiB), and
the CUDA context takes more once a program starts. 700 MiB reproduces the free memory the shipped rigs
give for the RTX 5060 Ti, 3090 and 5080 (15.3, 23.3, 15.3 GiB) within 0.02 GiB; the RTX 3060 in
``rigs/box.yaml`` reports 11.5 GiB, 0.2 GiB more. A desktop on the card, ECC on a data-centre card or a
ROCm runtime take different amounts: edit ``free``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

#: MiB a headless card's driver and CUDA context take before a model loads (see the module docstring).
DRIVER_MIB = 700

#: Bytes/s one PCIe lane carries, by generation: the transfer rate (8, 16, 32 GT/s) after 128b/130b
#: encoding, over 8 bits (the PCI-SIG figures: 15.75, 31.5, 63 GB/s for 16 lanes).
PCIE_LANE_BYTES = {"3.0": 8e9 * 128 / 130 / 8, "4.0": 16e9 * 128 / 130 / 8, "5.0": 32e9 * 128 / 130 / 8}

#: What an unknown card's message says: how to write the GPU by hand.
BY_HAND = (
    "to plan it, write the GPU in the rig by hand: name, free (its memory less 700 MiB: "
    "nvidia-smi --query-gpu=memory.total, or rocm-smi --showmeminfo vram), and mem_bandwidth "
    "(the memory bandwidth on the vendor's spec sheet, e.g. '936 GB/s')"
)


@dataclass(frozen=True)
class Card:
    """One card model: its name (as NVML spells it less ``NVIDIA`` / ``GeForce``, where it has one name
    for one card), its specs, and ``aka``: other names it goes by, which other cards may share."""

    name: str
    vram_mib: int
    bandwidth: int
    sms: int | None = None
    boost_ghz: float | None = None
    aka: tuple[str, ...] = ()
    pcie: str | None = None
    tflops: float | None = None
    matrix_efficiency: float | None = None

    @property
    def pcie_bandwidth(self) -> int | None:
        """The host link's rate in bytes/s: ``pcie`` ("4.0x16") at its generation's rate per lane."""
        if not self.pcie:
            return None
        gen, lanes = self.pcie.split("x")
        return round(PCIE_LANE_BYTES[gen] * int(lanes))

    @property
    def free_mib(self) -> int:
        """Free memory of the card running headless, before the model loads."""
        return self.vram_mib - DRIVER_MIB

    @property
    def memory(self) -> str:
        """The memory size as people say it: ``16 GiB``, ``79.6 GiB``."""
        gib = self.vram_mib / 1024
        return f"{gib:.0f} GiB" if self.vram_mib % 1024 == 0 else f"{gib:.1f} GiB"


def _card(row: dict[str, Any]) -> Card:
    """One row of cards.yaml: memory in ``gib`` or ``mib``, bandwidth in ``gbs`` (GB/s), the rest as named."""
    row = dict(row)
    vram_mib = row.pop("gib") * 1024 if "gib" in row else row.pop("mib")
    bandwidth = round(row.pop("gbs") * 10**9)
    row["pcie"] = str(row["pcie"]) if row.get("pcie") else None
    return Card(vram_mib=vram_mib, bandwidth=bandwidth, aka=tuple(row.pop("aka", ())), **row)


@functools.cache
def table() -> tuple[Card, ...]:
    """The rows of ``cards.yaml``, in the file's order; read on first use (a rig that gives every
    ``mem_bandwidth`` never reads it)."""
    text = resources.files("solver.files").joinpath("cards.yaml").read_text(encoding="utf-8")
    return tuple(_card(row) for row in yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


@functools.cache
def cards() -> dict[str, Card]:
    """The cards by their table name."""
    return {card.name: card for card in table()}


#: Vendor words a name may start with, in any order: "NVIDIA GeForce", "AMD Radeon Instinct", "Tesla".
_PREFIXES = ("nvidia", "geforce", "tesla", "amd", "radeon", "instinct")


def _key(name: str) -> str:
    """Case, spaces, dashes, vendor prefixes and a bracketed driver note (Vulkan's ``(RADV NAVI31)``)
    do not matter."""
    key = re.sub(r"[^a-z0-9]", "", re.sub(r"\([^)]*\)", "", name.lower()))
    while key.startswith(_PREFIXES):
        key = key.removeprefix(next(p for p in _PREFIXES if key.startswith(p)))
    return key


@functools.cache
def _by_key() -> dict[str, list[Card]]:
    """The cards each matching key (``_key``) of their names names."""
    by_key: dict[str, list[Card]] = {}
    for card in table():
        for key in dict.fromkeys(_key(n) for n in (card.name, *card.aka)):
            by_key.setdefault(key, []).append(card)
    return by_key


class CardError(ValueError):
    """A card name the table cannot turn into one card; the message says what to write instead."""


class UnknownCard(CardError):
    """A name the table does not hold; the message lists the closest names it does."""


class AmbiguousCard(CardError):
    """A name several cards share; the message lists them and how to write each."""


def choices(cards: list[Card]) -> str:
    """``"RTX 4060 Ti 8GB" (8 GiB, 288 GB/s), ...``: what to write, with what tells the cards apart."""
    return ", ".join(f'"{c.name}" ({c.memory}, {c.bandwidth / 1e9:g} GB/s)' for c in cards)


#: A card's figures a plan may read, and how messages name them.
FIGURES = {"vram_mib": "memory", "bandwidth": "bandwidth", "sms": "SM count", "boost_ghz": "boost clock"}


def find_card(
    name: str, total_mib: int | None = None, reads: tuple[str, ...] = tuple(FIGURES)
) -> Card | None:
    """The card ``name`` means (``NVIDIA GeForce RTX 3090``, ``rtx3090``, ``RTX 3090``), or None.

    A name several cards share raises AmbiguousCard, naming the figures they differ in, unless they
    agree on every figure in ``reads`` (the ones the plan uses: then any of them plans alike, and the
    first is taken under the name given) or ``total_mib`` (the total memory NVML reports) is nearest to
    the memory of exactly one of them (within 10%).
    """
    found = _by_key().get(_key(name))
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    differ = [key for key in reads if len({getattr(c, key) for c in found}) > 1]
    if not differ:
        return dataclasses.replace(found[0], name=name.strip(), aka=())
    if total_mib is not None:
        nearest = min(abs(c.vram_mib - total_mib) for c in found)
        best = [c for c in found if abs(c.vram_mib - total_mib) == nearest]
        if len(best) == 1 and nearest <= best[0].vram_mib // 10:
            return best[0]
    what = " and ".join(FIGURES[key] for key in differ)
    raise AmbiguousCard(
        f"{name.strip()!r} names {len(found)} cards that differ in {what}: write one of {choices(found)}"
    )


def card(name: str, reads: tuple[str, ...] = tuple(FIGURES)) -> Card:
    """The card ``name`` means; UnknownCard, listing close matches and how to write the GPU by hand, when
    the table does not hold it; AmbiguousCard when several cards share the name and differ in a figure
    of ``reads`` (see find_card)."""
    found = find_card(name, reads=reads)
    if found is not None:
        return found
    close = difflib.get_close_matches(_key(name), list(_by_key()), n=4, cutoff=0.5)
    names = list(dict.fromkeys(c.name for k in close for c in _by_key()[k]))[:4]
    hint = f" (closest: {', '.join(names)})" if names else " (`solve rig new --list` shows the table)"
    raise UnknownCard(f"unknown card {name.strip()!r}{hint}; {BY_HAND}")
