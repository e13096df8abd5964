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

Conventions:

- ``vram_mib``: the card's memory as NVML reports ``total``: the nominal GiB x 1024, except the HBM cards
  whose NVML figure is known (H100 81,559 MiB, H100 NVL 95,830 MiB, H200 143,771 MiB; B200 183,359 MiB,
  the "179 GB" cloud providers' nvidia-smi listings show).
- ``bandwidth``: peak memory bandwidth in bytes per second, the vendor's figure (``936 GB/s`` = 936e9).
- ``sms`` and ``boost_ghz``: NVIDIA's published SM count and boost clock. The rigs shipped with moesplit
  use the same boost clocks (RTX 3060 1.777, RTX 5060 Ti 2.572, RTX 3090 1.695, RTX 5080 2.617 GHz),
  which is what the Strata engine's ``layer_ms`` estimate was calibrated with; ``solve probe`` reads
  NVML's max SM clock instead, which runs 10-20% higher on GeForce cards. None where they do not apply
  (an AMD compute unit is not an SM, so the estimate calibrated on NVIDIA cards says nothing about it) or
  where NVIDIA publishes no figure (B200 and RTX PRO 6000 Max-Q clocks): such a card plans under
  llama.cpp, vLLM or SGLang (speed from bandwidth), or under Strata with a ``layer_ms`` of your own.
- Free memory of a headless card, before the model loads, is ``vram_mib - DRIVER_MIB``: the driver keeps
  part of the memory for itself (NVML's memory info v2 reports it as ``reserved``, a few hundred MiB), and
  the CUDA context takes more once a program starts. 700 MiB reproduces the free memory the shipped rigs
  give for the RTX 5060 Ti, 3090 and 5080 (15.3, 23.3, 15.3 GiB) within 0.02 GiB; the RTX 3060 in
  ``rigs/box.yaml`` reports 11.5 GiB, 0.2 GiB more. A desktop on the card, ECC on a data-centre card or a
  ROCm runtime take different amounts: edit ``free``.

Sources of memory size and bandwidth, by family. The figures are the vendor's published ones; the vendor
pages themselves cannot be reached from the machine this table was built on, so each family was checked
against public copies of them (spec databases, launch coverage quoting the sheet), named where one
source stands alone:

- GeForce RTX 20: NVIDIA Turing GPU architecture whitepaper (RTX 2080 Ti, 2080, 2070) and the GeForce
  product pages (memory interface and speed); RTX 2060 12GB and the SUPER cards from their product pages.
- GeForce RTX 30: NVIDIA Ampere GA102 GPU architecture whitepaper (RTX 3090 936 GB/s, 3080 760 GB/s) and
  the GeForce RTX 30 series family page (memory interface and speed per card, incl. the 3060 8GB
  128-bit and the 3050 6GB 96-bit versions).
- GeForce RTX 40: NVIDIA Ada Lovelace GPU architecture whitepaper (RTX 4090 1008 GB/s, 4080 716.8 GB/s)
  and the GeForce RTX 40 series family page.
- GeForce RTX 50: NVIDIA RTX Blackwell GPU architecture whitepaper (RTX 5090 1792 GB/s, 5080 960 GB/s,
  5070 Ti 896 GB/s, 5070 672 GB/s) and the GeForce RTX 50 series family page (5060 / 5060 Ti 448 GB/s).
- RTX A and Ada Generation workstation cards: NVIDIA's per-card datasheets (e.g. RTX A4000 448 GB/s,
  A6000 768 GB/s, RTX 6000 Ada 960 GB/s); RTX A1000 192 GB/s as quoted from NVIDIA's launch figures.
- RTX PRO Blackwell: NVIDIA's RTX PRO Blackwell product pages (6000 1792 GB/s, 5000 1344 GB/s, 4500
  896 GB/s, 4000 672 GB/s, 4000 SFF 432 GB/s), as quoted by purepc.pl and hmc-tech.com; SM counts are
  the CUDA cores / 128; boost clocks from the TechPowerUp GPU database (NVIDIA publishes TFLOPS only).
- A10, A40, L4, L40, L40S: NVIDIA's datasheets (600, 696, 300, 864, 864 GB/s).
- A100: NVIDIA A100 datasheet (40GB 1,555 GB/s; 80GB PCIe 1,935 GB/s; 80GB SXM 2,039 GB/s).
- H100: NVIDIA H100 datasheet and product brief (PCIe 2 TB/s, SXM 3.35 TB/s, NVL 3.9 TB/s).
- H200: NVIDIA H200 datasheet (141 GB, 4.8 TB/s, SXM and NVL). B200: NVIDIA HGX B200 datasheet (8 TB/s
  per GPU); the driver reports a 7,680-bit bus, 7.67 TB/s (pytorch/ao pull request 4002), and 148 SMs.
- Tesla P40, P100, V100, V100S: NVIDIA's datasheets and product briefs (P40 346 GB/s; P100 16GB
  732 GB/s, 12GB 549 GB/s; V100 900 GB/s; V100S 1,134 GB/s).
- AMD Radeon RX 7900 XTX/XT/GRE, RX 9070 XT: amd.com product specifications (960, 800, 576, 640 GB/s).
  Instinct MI50 (16/32GB, 1,024 GB/s), MI100 (1,228.8 GB/s), MI210 (1,638.4 GB/s), MI300X (5.3 TB/s):
  amd.com product specifications. For llama.cpp's ROCm and Vulkan builds; ``solve probe`` reads NVML
  only, so these cards go in a rig through ``solve rig new``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

#: MiB a headless card's driver and CUDA context take before a model loads (see the module docstring).
DRIVER_MIB = 700

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

    @property
    def free_mib(self) -> int:
        """Free memory of the card running headless, before the model loads."""
        return self.vram_mib - DRIVER_MIB

    @property
    def memory(self) -> str:
        """The memory size as people say it: ``16 GiB``, ``79.6 GiB``."""
        gib = self.vram_mib / 1024
        return f"{gib:.0f} GiB" if self.vram_mib % 1024 == 0 else f"{gib:.1f} GiB"


def _gib(n: float) -> int:
    return int(n * 1024)


def _gbs(n: float) -> int:
    """Bytes per second of ``n`` GB/s."""
    return round(n * 10**9)


_TABLE: list[Card] = [
    # GeForce RTX 20 (Turing)
    Card("RTX 2060 6GB", _gib(6), _gbs(336), 30, 1.680, aka=("RTX 2060",)),
    Card("RTX 2060 12GB", _gib(12), _gbs(336), 34, 1.650, aka=("RTX 2060",)),
    Card("RTX 2060 SUPER", _gib(8), _gbs(448), 34, 1.650),
    Card("RTX 2070", _gib(8), _gbs(448), 36, 1.620),
    Card("RTX 2070 SUPER", _gib(8), _gbs(448), 40, 1.770),
    Card("RTX 2080", _gib(8), _gbs(448), 46, 1.710),
    Card("RTX 2080 SUPER", _gib(8), _gbs(496), 48, 1.815),
    Card("RTX 2080 Ti", _gib(11), _gbs(616), 68, 1.545),
    Card("TITAN RTX", _gib(24), _gbs(672), 72, 1.770),
    # GeForce RTX 30 (Ampere)
    Card("RTX 3050 8GB", _gib(8), _gbs(224), 20, 1.777, aka=("RTX 3050",)),
    Card("RTX 3050 6GB", _gib(6), _gbs(168), 18, 1.470, aka=("RTX 3050",)),
    Card("RTX 3060 12GB", _gib(12), _gbs(360), 28, 1.777, aka=("RTX 3060",)),
    Card("RTX 3060 8GB", _gib(8), _gbs(240), 28, 1.777, aka=("RTX 3060",)),
    Card("RTX 3060 Ti", _gib(8), _gbs(448), 38, 1.665),
    Card("RTX 3060 Ti GDDR6X", _gib(8), _gbs(608), 38, 1.665),
    Card("RTX 3070", _gib(8), _gbs(448), 46, 1.725),
    Card("RTX 3070 Ti", _gib(8), _gbs(608), 48, 1.770),
    Card("RTX 3080 10GB", _gib(10), _gbs(760), 68, 1.710, aka=("RTX 3080",)),
    Card("RTX 3080 12GB", _gib(12), _gbs(912), 70, 1.710, aka=("RTX 3080",)),
    Card("RTX 3080 Ti", _gib(12), _gbs(912), 80, 1.665),
    Card("RTX 3090", _gib(24), _gbs(936), 82, 1.695),
    Card("RTX 3090 Ti", _gib(24), _gbs(1008), 84, 1.860),
    # GeForce RTX 40 (Ada)
    Card("RTX 4060", _gib(8), _gbs(272), 24, 2.460),
    Card("RTX 4060 Ti 8GB", _gib(8), _gbs(288), 34, 2.535, aka=("RTX 4060 Ti",)),
    Card("RTX 4060 Ti 16GB", _gib(16), _gbs(288), 34, 2.535, aka=("RTX 4060 Ti",)),
    Card("RTX 4070", _gib(12), _gbs(504), 46, 2.475),
    Card("RTX 4070 GDDR6", _gib(12), _gbs(480), 46, 2.475),
    Card("RTX 4070 SUPER", _gib(12), _gbs(504), 56, 2.475),
    Card("RTX 4070 Ti", _gib(12), _gbs(504), 60, 2.610),
    Card("RTX 4070 Ti SUPER", _gib(16), _gbs(672), 66, 2.610),
    Card("RTX 4080", _gib(16), _gbs(716.8), 76, 2.505),
    Card("RTX 4080 SUPER", _gib(16), _gbs(736), 80, 2.550),
    Card("RTX 4090", _gib(24), _gbs(1008), 128, 2.520),
    # GeForce RTX 50 (Blackwell)
    Card("RTX 5060", _gib(8), _gbs(448), 30, 2.497),
    Card("RTX 5060 Ti 8GB", _gib(8), _gbs(448), 36, 2.572, aka=("RTX 5060 Ti",)),
    Card("RTX 5060 Ti 16GB", _gib(16), _gbs(448), 36, 2.572, aka=("RTX 5060 Ti",)),
    Card("RTX 5070", _gib(12), _gbs(672), 48, 2.512),
    Card("RTX 5070 Ti", _gib(16), _gbs(896), 70, 2.452),
    Card("RTX 5080", _gib(16), _gbs(960), 84, 2.617),
    Card("RTX 5090", _gib(32), _gbs(1792), 170, 2.407),
    # RTX A-series workstation (Ampere)
    Card("RTX A1000", _gib(8), _gbs(192), 18, 1.460),
    Card("RTX A2000 6GB", _gib(6), _gbs(288), 26, 1.200, aka=("RTX A2000",)),
    Card("RTX A2000 12GB", _gib(12), _gbs(288), 26, 1.200, aka=("RTX A2000",)),
    Card("RTX A4000", _gib(16), _gbs(448), 48, 1.560),
    Card("RTX A4500", _gib(20), _gbs(640), 56, 1.650),
    Card("RTX A5000", _gib(24), _gbs(768), 64, 1.695),
    Card("RTX A5500", _gib(24), _gbs(768), 80, 1.665),
    Card("RTX A6000", _gib(48), _gbs(768), 84, 1.800),
    # RTX Ada Generation workstation
    Card("RTX 4000 SFF Ada Generation", _gib(20), _gbs(280), 48, 1.565, aka=("RTX 4000 SFF Ada",)),
    Card("RTX 4000 Ada Generation", _gib(20), _gbs(360), 48, 2.175, aka=("RTX 4000 Ada",)),
    Card("RTX 4500 Ada Generation", _gib(24), _gbs(432), 60, 2.580, aka=("RTX 4500 Ada",)),
    Card("RTX 5000 Ada Generation", _gib(32), _gbs(576), 100, 2.550, aka=("RTX 5000 Ada",)),
    Card("RTX 6000 Ada Generation", _gib(48), _gbs(960), 142, 2.505, aka=("RTX 6000 Ada",)),
    # RTX PRO Blackwell workstation and server
    Card(
        "RTX PRO 6000 Blackwell Workstation",
        _gib(96),
        _gbs(1792),
        188,
        2.617,
        aka=("RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell", "RTX PRO 6000"),
    ),
    Card(
        "RTX PRO 6000 Blackwell Max-Q",
        _gib(96),
        _gbs(1792),
        188,
        None,
        aka=("RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 Blackwell", "RTX PRO 6000"),
    ),
    Card(
        "RTX PRO 6000 Blackwell Server",
        _gib(96),
        _gbs(1792),
        188,
        2.617,
        aka=("RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell", "RTX PRO 6000"),
    ),
    Card(
        "RTX PRO 5000 Blackwell 48GB",
        _gib(48),
        _gbs(1344),
        110,
        2.617,
        aka=("RTX PRO 5000 Blackwell", "RTX PRO 5000"),
    ),
    Card(
        "RTX PRO 5000 Blackwell 72GB",
        _gib(72),
        _gbs(1344),
        110,
        2.617,
        aka=("RTX PRO 5000 Blackwell", "RTX PRO 5000"),
    ),
    Card("RTX PRO 4500 Blackwell", _gib(32), _gbs(896), 82, 2.617, aka=("RTX PRO 4500",)),
    Card("RTX PRO 4000 Blackwell", _gib(24), _gbs(672), 70, 2.617, aka=("RTX PRO 4000",)),
    Card(
        "RTX PRO 4000 Blackwell SFF",
        _gib(24),
        _gbs(432),
        70,
        1.337,
        aka=("RTX PRO 4000 Blackwell SFF Edition", "RTX PRO 4000 SFF"),
    ),
    # Data centre (names as NVML reports them)
    Card("A10", _gib(24), _gbs(600), 72, 1.695),
    Card("A40", _gib(48), _gbs(696), 84, 1.740),
    Card("L4", _gib(24), _gbs(300), 58, 2.040),
    Card("L40", _gib(48), _gbs(864), 142, 2.490),
    Card("L40S", _gib(48), _gbs(864), 142, 2.520),
    Card(
        "A100-PCIE-40GB",
        40_960,
        _gbs(1555),
        108,
        1.410,
        aka=("A100", "A100 40GB", "A100 PCIe", "A100 40GB PCIe"),
    ),
    Card(
        "A100-SXM4-40GB",
        40_960,
        _gbs(1555),
        108,
        1.410,
        aka=("A100", "A100 40GB", "A100 SXM", "A100 SXM4", "A100 SXM 40GB", "A100 40GB SXM"),
    ),
    Card(
        "A100 80GB PCIe",
        81_920,
        _gbs(1935),
        108,
        1.410,
        aka=("A100", "A100 80GB", "A100 PCIe", "A100 PCIe 80GB"),
    ),
    Card(
        "A100-SXM4-80GB",
        81_920,
        _gbs(2039),
        108,
        1.410,
        aka=("A100", "A100 80GB", "A100 SXM", "A100 SXM4", "A100 SXM 80GB", "A100 80GB SXM"),
    ),
    Card("H100 PCIe", 81_559, _gbs(2000), 114, 1.755, aka=("H100", "H100 80GB", "H100 80GB PCIe")),
    Card(
        "H100 80GB HBM3",
        81_559,
        _gbs(3350),
        132,
        1.980,
        aka=("H100", "H100 80GB", "H100 SXM", "H100 SXM5", "H100 SXM 80GB"),
    ),
    Card("H100 NVL", 95_830, _gbs(3900), 132, 1.785, aka=("H100", "H100 94GB")),
    Card("H200", 143_771, _gbs(4800), 132, 1.980, aka=("H200 SXM", "H200 141GB")),
    Card("H200 NVL", 143_771, _gbs(4800), 132, 1.785),
    Card("B200", 183_359, _gbs(8000), 148, None, aka=("B200 SXM", "HGX B200")),
    # Tesla (Pascal, Volta; NVML spells them with "Tesla")
    Card("Tesla P40", _gib(24), _gbs(346), 30, 1.531),
    Card(
        "Tesla P100-PCIE-16GB",
        _gib(16),
        _gbs(732),
        56,
        1.303,
        aka=("P100", "P100 16GB", "P100 PCIe", "P100 16GB PCIe"),
    ),
    Card(
        "Tesla P100-PCIE-12GB",
        _gib(12),
        _gbs(549),
        56,
        1.303,
        aka=("P100", "P100 12GB", "P100 PCIe", "P100 12GB PCIe"),
    ),
    Card(
        "Tesla P100-SXM2-16GB",
        _gib(16),
        _gbs(732),
        56,
        1.480,
        aka=("P100", "P100 16GB", "P100 SXM2", "P100 16GB SXM2"),
    ),
    Card(
        "Tesla V100-PCIE-16GB",
        _gib(16),
        _gbs(900),
        80,
        1.380,
        aka=("V100", "V100 16GB", "V100 PCIe", "V100 16GB PCIe"),
    ),
    Card(
        "Tesla V100-PCIE-32GB",
        _gib(32),
        _gbs(900),
        80,
        1.380,
        aka=("V100", "V100 32GB", "V100 PCIe", "V100 32GB PCIe"),
    ),
    Card(
        "Tesla V100-SXM2-16GB",
        _gib(16),
        _gbs(900),
        80,
        1.530,
        aka=("V100", "V100 16GB", "V100 SXM2", "V100 16GB SXM2"),
    ),
    Card(
        "Tesla V100-SXM2-32GB",
        _gib(32),
        _gbs(900),
        80,
        1.530,
        aka=("V100", "V100 32GB", "V100 SXM2", "V100 32GB SXM2"),
    ),
    Card("Tesla V100S-PCIE-32GB", _gib(32), _gbs(1134), 80, 1.597, aka=("V100S", "V100S PCIe")),
    # AMD Radeon and Instinct (llama.cpp's ROCm and Vulkan builds): no SMs
    Card("Radeon RX 7900 XTX", _gib(24), _gbs(960), aka=("7900 XTX",)),
    Card("Radeon RX 7900 XT", _gib(20), _gbs(800), aka=("7900 XT",)),
    Card("Radeon RX 7900 GRE", _gib(16), _gbs(576), aka=("7900 GRE",)),
    Card("Radeon RX 9070 XT", _gib(16), _gbs(640), aka=("9070 XT",)),
    Card("Radeon Instinct MI50 16GB", _gib(16), _gbs(1024), aka=("MI50", "MI50 16GB")),
    Card("Radeon Instinct MI50 32GB", _gib(32), _gbs(1024), aka=("MI50", "MI50 32GB")),
    Card("Instinct MI100", _gib(32), _gbs(1228.8)),
    Card("Instinct MI210", _gib(64), _gbs(1638.4)),
    Card("Instinct MI300X", _gib(192), _gbs(5300)),
]

#: The cards by their table name.
CARDS: dict[str, Card] = {card.name: card for card in _TABLE}

#: Vendor words a name may start with, in any order: "NVIDIA GeForce", "AMD Radeon Instinct", "Tesla".
_PREFIXES = ("nvidia", "geforce", "tesla", "amd", "radeon", "instinct")


def _key(name: str) -> str:
    """Case, spaces, dashes, vendor prefixes and a bracketed driver note (Vulkan's ``(RADV NAVI31)``)
    do not matter."""
    key = re.sub(r"[^a-z0-9]", "", re.sub(r"\([^)]*\)", "", name.lower()))
    while key.startswith(_PREFIXES):
        key = key.removeprefix(next(p for p in _PREFIXES if key.startswith(p)))
    return key


def _index() -> dict[str, list[Card]]:
    by_key: dict[str, list[Card]] = {}
    for card in _TABLE:
        for key in dict.fromkeys(_key(n) for n in (card.name, *card.aka)):
            by_key.setdefault(key, []).append(card)
    return by_key


_BY_KEY = _index()


class CardError(ValueError):
    """A card name the table cannot turn into one card; the message says what to write instead."""


class UnknownCard(CardError):
    """A name the table does not hold; the message lists the closest names it does."""


class AmbiguousCard(CardError):
    """A name several cards share; the message lists them and how to write each."""


def choices(cards: list[Card]) -> str:
    """``"RTX 4060 Ti 8GB" (8 GiB, 288 GB/s), ...``: what to write, with what tells the cards apart."""
    return ", ".join(f'"{c.name}" ({c.memory}, {c.bandwidth / 1e9:g} GB/s)' for c in cards)


def find_card(name: str, total_mib: int | None = None) -> Card | None:
    """The card ``name`` means (``NVIDIA GeForce RTX 3090``, ``rtx3090``, ``RTX 3090``), or None.

    A name several cards share raises AmbiguousCard, unless ``total_mib`` (the total memory NVML reports)
    is nearest to the memory of exactly one of them (within 10%).
    """
    found = _BY_KEY.get(_key(name))
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    if total_mib is not None:
        nearest = min(abs(c.vram_mib - total_mib) for c in found)
        best = [c for c in found if abs(c.vram_mib - total_mib) == nearest]
        if len(best) == 1 and nearest <= best[0].vram_mib // 10:
            return best[0]
    raise AmbiguousCard(f"{name.strip()!r} names {len(found)} cards: write one of {choices(found)}")


def card(name: str) -> Card:
    """The card ``name`` means; UnknownCard, listing close matches and how to write the GPU by hand, when
    the table does not hold it; AmbiguousCard when several cards share the name."""
    found = find_card(name)
    if found is not None:
        return found
    close = difflib.get_close_matches(_key(name), list(_BY_KEY), n=4, cutoff=0.5)
    names = list(dict.fromkeys(c.name for k in close for c in _BY_KEY[k]))[:4]
    hint = f" (closest: {', '.join(names)})" if names else " (`solve rig new --list` shows the table)"
    raise UnknownCard(f"unknown card {name.strip()!r}{hint}; {BY_HAND}")
