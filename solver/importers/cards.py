"""The card table: VRAM, SMs and boost clock of the NVIDIA cards people put in one rig.

``solve probe`` reads a card's SM count from here when NVML cannot give it, and ``solve rig new`` builds
a whole rig from card names with it (no NVML, no GPU needed).

Sources and conventions:

- ``vram_mib``: the card's memory as NVML reports ``total`` (the nominal GiB x 1024 for GeForce and
  workstation cards; the HBM cards report a little less than 80 GiB, e.g. H100 81,559 MiB).
- ``sms`` and ``boost_ghz``: NVIDIA's published specifications (SM count, boost clock). The rigs shipped
  with moesplit use the same boost clocks (RTX 3060 1.777, RTX 5060 Ti 2.572, RTX 3090 1.695, RTX 5080
  2.617 GHz), which is what the engine's ``layer_ms`` estimate was calibrated with; ``solve probe`` reads
  NVML's max SM clock instead, which runs 10-20% higher on GeForce cards.
- Free VRAM of a headless card, before the model loads, is ``vram_mib - DRIVER_MIB``: the driver keeps
  part of the memory for itself (NVML's memory info v2 reports it as ``reserved``, a few hundred MiB), and
  the CUDA context takes more once a program starts. 700 MiB reproduces the free memory the shipped rigs
  give for the RTX 5060 Ti, 3090 and 5080 (15.3, 23.3, 15.3 GiB) within 0.02 GiB; the RTX 3060 in
  ``rigs/box.yaml`` reports 11.5 GiB, 0.2 GiB more. A desktop on the card takes more: edit ``free``.

AMD cards are left out on purpose: a rig's speed estimate is ``SMs x GHz`` calibrated on NVIDIA cards
(a CDNA/RDNA compute unit is not an SM and does not run a layer in the same time), ``solve probe`` reads
NVML only, and the exports assume CUDA device numbering. An AMD card can still go in a rig by hand, with
a measured ``layer_ms``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

#: MiB a headless card's driver and CUDA context take before a model loads (see the module docstring).
DRIVER_MIB = 700


@dataclass(frozen=True)
class Card:
    """One card model: its name as NVML spells it (less ``NVIDIA `` / ``GeForce ``) and its specs."""

    name: str
    vram_mib: int
    sms: int
    boost_ghz: float

    @property
    def free_mib(self) -> int:
        """Free VRAM of the card running headless, before the model loads."""
        return self.vram_mib - DRIVER_MIB


def _gib(n: float) -> int:
    return int(n * 1024)


_TABLE: list[Card] = [
    # GeForce RTX 20 (Turing)
    Card("RTX 2060", _gib(6), 30, 1.680),
    Card("RTX 2060 SUPER", _gib(8), 34, 1.650),
    Card("RTX 2070", _gib(8), 36, 1.620),
    Card("RTX 2070 SUPER", _gib(8), 40, 1.770),
    Card("RTX 2080", _gib(8), 46, 1.710),
    Card("RTX 2080 SUPER", _gib(8), 48, 1.815),
    Card("RTX 2080 Ti", _gib(11), 68, 1.545),
    Card("TITAN RTX", _gib(24), 72, 1.770),
    # GeForce RTX 30 (Ampere)
    Card("RTX 3050", _gib(8), 20, 1.777),
    Card("RTX 3060", _gib(12), 28, 1.777),
    Card("RTX 3060 Ti", _gib(8), 38, 1.665),
    Card("RTX 3070", _gib(8), 46, 1.725),
    Card("RTX 3070 Ti", _gib(8), 48, 1.770),
    Card("RTX 3080", _gib(10), 68, 1.710),
    Card("RTX 3080 12GB", _gib(12), 70, 1.710),
    Card("RTX 3080 Ti", _gib(12), 80, 1.665),
    Card("RTX 3090", _gib(24), 82, 1.695),
    Card("RTX 3090 Ti", _gib(24), 84, 1.860),
    # GeForce RTX 40 (Ada)
    Card("RTX 4060", _gib(8), 24, 2.460),
    Card("RTX 4060 Ti", _gib(8), 34, 2.535),
    Card("RTX 4060 Ti 16GB", _gib(16), 34, 2.535),
    Card("RTX 4070", _gib(12), 46, 2.475),
    Card("RTX 4070 SUPER", _gib(12), 56, 2.475),
    Card("RTX 4070 Ti", _gib(12), 60, 2.610),
    Card("RTX 4070 Ti SUPER", _gib(16), 66, 2.610),
    Card("RTX 4080", _gib(16), 76, 2.505),
    Card("RTX 4080 SUPER", _gib(16), 80, 2.550),
    Card("RTX 4090", _gib(24), 128, 2.520),
    # GeForce RTX 50 (Blackwell)
    Card("RTX 5060", _gib(8), 30, 2.497),
    Card("RTX 5060 Ti", _gib(16), 36, 2.572),
    Card("RTX 5060 Ti 8GB", _gib(8), 36, 2.572),
    Card("RTX 5070", _gib(12), 48, 2.512),
    Card("RTX 5070 Ti", _gib(16), 70, 2.452),
    Card("RTX 5080", _gib(16), 84, 2.617),
    Card("RTX 5090", _gib(32), 170, 2.407),
    # RTX A-series workstation (Ampere)
    Card("RTX A2000", _gib(6), 26, 1.200),
    Card("RTX A2000 12GB", _gib(12), 26, 1.200),
    Card("RTX A4000", _gib(16), 48, 1.560),
    Card("RTX A4500", _gib(20), 56, 1.650),
    Card("RTX A5000", _gib(24), 64, 1.695),
    Card("RTX A5500", _gib(24), 80, 1.665),
    Card("RTX A6000", _gib(48), 84, 1.800),
    # RTX Ada Generation workstation
    Card("RTX 4000 SFF Ada Generation", _gib(20), 48, 1.565),
    Card("RTX 4000 Ada Generation", _gib(20), 48, 2.175),
    Card("RTX 4500 Ada Generation", _gib(24), 60, 2.580),
    Card("RTX 5000 Ada Generation", _gib(32), 100, 2.550),
    Card("RTX 6000 Ada Generation", _gib(48), 142, 2.505),
    # Data centre (names as NVML reports them)
    Card("A10", _gib(24), 72, 1.695),
    Card("A40", _gib(48), 84, 1.740),
    Card("L4", _gib(24), 58, 2.040),
    Card("L40", _gib(48), 142, 2.490),
    Card("L40S", _gib(48), 142, 2.520),
    Card("A100-SXM4-40GB", 40_960, 108, 1.410),
    Card("A100-PCIE-40GB", 40_960, 108, 1.410),
    Card("A100-SXM4-80GB", 81_920, 108, 1.410),
    Card("A100 80GB PCIe", 81_920, 108, 1.410),
    Card("H100 80GB HBM3", 81_559, 132, 1.980),
    Card("H100 PCIe", 81_559, 114, 1.755),
    Card("H100 NVL", 95_830, 132, 1.785),
    Card("H200", 143_771, 132, 1.980),
]

#: Other spellings people type for a card, by normalised key.
_ALIASES: dict[str, str] = {
    "h100": "H100 80GB HBM3",
    "h100sxm": "H100 80GB HBM3",
    "h100sxm5": "H100 80GB HBM3",
    "a100sxm40gb": "A100-SXM4-40GB",
    "a100sxm80gb": "A100-SXM4-80GB",
    "a100pcie80gb": "A100 80GB PCIe",
    "rtx6000ada": "RTX 6000 Ada Generation",
    "rtx5000ada": "RTX 5000 Ada Generation",
    "rtx4500ada": "RTX 4500 Ada Generation",
    "rtx4000ada": "RTX 4000 Ada Generation",
    "rtx4000sffada": "RTX 4000 SFF Ada Generation",
}

#: The cards by name as NVML spells it (after ``short_name``).
CARDS: dict[str, Card] = {card.name: card for card in _TABLE}


def _key(name: str) -> str:
    """Case, spaces, dashes and the ``NVIDIA`` / ``GeForce`` prefixes do not matter."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    for prefix in ("nvidia", "geforce"):
        key = key.removeprefix(prefix)
    return key


_BY_KEY: dict[str, Card] = {_key(card.name): card for card in _TABLE}
_BY_KEY.update({alias: CARDS[name] for alias, name in _ALIASES.items()})


class UnknownCard(ValueError):
    """A card name the table does not hold; the message lists the closest names it does."""


def find_card(name: str) -> Card | None:
    """The card ``name`` means (``NVIDIA GeForce RTX 3060``, ``rtx3060``, ``RTX 3060``), or None."""
    return _BY_KEY.get(_key(name))


def card(name: str) -> Card:
    """The card ``name`` means; UnknownCard listing close matches when the table does not hold it."""
    found = find_card(name)
    if found is not None:
        return found
    close = difflib.get_close_matches(_key(name), list(_BY_KEY), n=4, cutoff=0.5)
    names = list(dict.fromkeys(_BY_KEY[k].name for k in close))
    hint = f"; closest: {', '.join(names)}" if names else "; `solve rig new --list` shows the table"
    raise UnknownCard(f"unknown card {name!r}{hint}")
