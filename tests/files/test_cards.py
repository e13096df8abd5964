"""The card table: tolerant names, no silent guess between cards that share a name, close matches and the
keys to write by hand for unknown ones, memory bandwidth for every card, free VRAM as documented."""

from __future__ import annotations

import re

import pytest

from solver.files.cards import (
    DRIVER_MIB,
    AmbiguousCard,
    UnknownCard,
    card,
    cards,
    find_card,
    table,
)

GB = 10**9


@pytest.mark.parametrize(
    ("typed", "name"),
    [
        ("RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("rtx4090", "RTX 4090"),
        ("  geforce rtx 3060 ti ", "RTX 3060 Ti"),
        ("rtx 3060 12gb", "RTX 3060 12GB"),
        ("RTX 4060 Ti 16GB", "RTX 4060 Ti 16GB"),
        ("NVIDIA RTX A6000", "RTX A6000"),
        ("nvidia rtx 6000 ada generation", "RTX 6000 Ada Generation"),
        ("RTX 6000 Ada", "RTX 6000 Ada Generation"),
        ("a100 sxm4 80gb", "A100-SXM4-80GB"),
        ("A100 PCIe 80GB", "A100 80GB PCIe"),
        ("H100 SXM", "H100 80GB HBM3"),
        ("L40S", "L40S"),
        ("P40", "Tesla P40"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 Blackwell Max-Q"),
        ("AMD Radeon RX 7900 XTX", "Radeon RX 7900 XTX"),
        ("Radeon RX 7900 XTX (RADV NAVI31)", "Radeon RX 7900 XTX"),  # as llama.cpp's Vulkan build names it
        ("7900 GRE", "Radeon RX 7900 GRE"),
        ("AMD Instinct MI300X", "Instinct MI300X"),
        ("AMD Radeon Instinct MI50 32GB", "Radeon Instinct MI50 32GB"),
    ],
)
def test_names_match_whatever_the_case_spaces_and_prefixes(typed, name):
    assert card(typed).name == name


@pytest.mark.parametrize(
    ("nvml", "name"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100 80GB HBM3"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA B200", "B200"),
        ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-16GB"),
        ("Tesla V100-PCIE-32GB", "Tesla V100-PCIE-32GB"),
        ("Tesla P100-PCIE-12GB", "Tesla P100-PCIE-12GB"),
        ("Tesla P40", "Tesla P40"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell Workstation"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell Server"),
        ("NVIDIA RTX PRO 4000 Blackwell", "RTX PRO 4000 Blackwell"),
    ],
)
def test_nvml_full_names_name_one_card(nvml, name):
    assert card(nvml).name == name


#: Names that several cards share, and the cards each must list.
AMBIGUOUS = {
    "RTX 4060 Ti": ["RTX 4060 Ti 8GB", "RTX 4060 Ti 16GB"],
    "NVIDIA GeForce RTX 4060 Ti": ["RTX 4060 Ti 8GB", "RTX 4060 Ti 16GB"],
    "RTX 5060 Ti": ["RTX 5060 Ti 8GB", "RTX 5060 Ti 16GB"],
    "RTX 3060": ["RTX 3060 12GB", "RTX 3060 8GB"],
    "RTX 3050": ["RTX 3050 8GB", "RTX 3050 6GB"],
    "RTX 2060": ["RTX 2060 6GB", "RTX 2060 12GB"],
    "RTX 3080": ["RTX 3080 10GB", "RTX 3080 12GB"],
    "RTX A2000": ["RTX A2000 6GB", "RTX A2000 12GB"],
    "A100": ["A100-PCIE-40GB", "A100-SXM4-40GB", "A100 80GB PCIe", "A100-SXM4-80GB"],
    "A100 80GB": ["A100 80GB PCIe", "A100-SXM4-80GB"],
    "A100 40GB": ["A100-PCIE-40GB", "A100-SXM4-40GB"],
    "A100 SXM": ["A100-SXM4-40GB", "A100-SXM4-80GB"],
    "H100": ["H100 PCIe", "H100 80GB HBM3", "H100 NVL"],
    "H100 80GB": ["H100 PCIe", "H100 80GB HBM3"],
    "V100": ["Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB", "Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"],
    "V100 32GB": ["Tesla V100-PCIE-32GB", "Tesla V100-SXM2-32GB"],
    "P100": ["Tesla P100-PCIE-16GB", "Tesla P100-PCIE-12GB", "Tesla P100-SXM2-16GB"],
    "MI50": ["Radeon Instinct MI50 16GB", "Radeon Instinct MI50 32GB"],
    "RTX PRO 6000": [
        "RTX PRO 6000 Blackwell Workstation",
        "RTX PRO 6000 Blackwell Max-Q",
        "RTX PRO 6000 Blackwell Server",
    ],
    "RTX PRO 5000 Blackwell": ["RTX PRO 5000 Blackwell 48GB", "RTX PRO 5000 Blackwell 72GB"],
}


def _alike(typed: str) -> bool:
    """Whether every card ``typed`` names has the same memory, bandwidth, SMs and boost clock."""
    rows = [cards()[name] for name in AMBIGUOUS[typed]]
    return len({(c.vram_mib, c.bandwidth, c.sms, c.boost_ghz) for c in rows}) == 1


@pytest.mark.parametrize("typed", [t for t in AMBIGUOUS if not _alike(t)])
def test_a_name_several_cards_share_is_an_error_that_lists_how_to_write_each(typed):
    with pytest.raises(AmbiguousCard) as err:
        card(typed)
    message = str(err.value)
    assert "\n" not in message and message.startswith(
        f"{typed!r} names {len(AMBIGUOUS[typed])} cards that differ in"
    )
    written = re.findall(r'"([^"]+)" \(', message)
    assert written == AMBIGUOUS[typed]
    for name in written:  # each choice, written as the message shows it, names exactly that card
        assert card(name).name == name
    with pytest.raises(AmbiguousCard):  # and find_card, which probe and the rig reader use
        find_card(typed)


@pytest.mark.parametrize("typed", [t for t in AMBIGUOUS if _alike(t)])
def test_a_name_whose_cards_plan_alike_is_taken_as_written(typed):
    found = card(typed)
    first = cards()[AMBIGUOUS[typed][0]]
    assert found.name == typed and (found.vram_mib, found.bandwidth) == (first.vram_mib, first.bandwidth)


def test_the_message_says_what_tells_the_cards_apart():
    with pytest.raises(AmbiguousCard, match=r'"RTX 4060 Ti 16GB" \(16 GiB, 288 GB/s\)'):
        card("RTX 4060 Ti")
    with pytest.raises(AmbiguousCard, match=r'"A100-SXM4-80GB" \(80 GiB, 2039 GB/s\)'):
        card("A100 80GB")


def test_the_total_memory_nvml_reports_picks_the_card():
    assert find_card("NVIDIA GeForce RTX 4060 Ti", 16_380).name == "RTX 4060 Ti 16GB"
    assert find_card("NVIDIA GeForce RTX 4060 Ti", 8_188).name == "RTX 4060 Ti 8GB"
    assert find_card("NVIDIA GeForce RTX 3060", 12_288).name == "RTX 3060 12GB"
    assert find_card("Tesla V100-SXM2-32GB", 32_510).name == "Tesla V100-SXM2-32GB"
    with pytest.raises(AmbiguousCard):  # no memory near either card's
        find_card("RTX 4060 Ti", 4_096)
    with pytest.raises(AmbiguousCard):  # the same memory: the total cannot say which
        find_card("A100 80GB", 81_920)


def test_a_ti_super_or_memory_type_is_its_own_card():
    assert card("RTX 3060 12GB").sms == 28 and card("RTX 3060 Ti").sms == 38
    assert card("RTX 4080").sms == 76 and card("RTX 4080 SUPER").sms == 80
    # the plain name is the launch version; the other memory type has its own name
    assert card("RTX 3060 Ti").bandwidth == 448 * GB and card("RTX 3060 Ti GDDR6X").bandwidth == 608 * GB
    assert card("RTX 4070").bandwidth == 504 * GB and card("RTX 4070 GDDR6").bandwidth == 480 * GB


def test_an_unknown_name_lists_the_closest_and_says_how_to_write_the_gpu_by_hand():
    with pytest.raises(UnknownCard) as err:
        card("RTX 4900")
    message = str(err.value)
    assert message.startswith("unknown card 'RTX 4900' (closest: RTX 4090") and "\n" not in message
    for needed in ("name, free", "mem_bandwidth", "nvidia-smi --query-gpu=memory.total", "spec sheet"):
        assert needed in message
    assert find_card("RTX 3060 Laptop GPU") is None


def test_free_vram_is_the_total_less_the_driver_reserve():
    assert DRIVER_MIB == 700
    assert card("RTX 3090").free_mib == 24 * 1024 - 700
    assert card("RTX 3060 12GB").free_mib == 12 * 1024 - 700


#: The vendor's figures (GB/s) of the cards users asked for, as the module docstring cites them.
VENDOR_GBS = {
    "A100-PCIE-40GB": 1555,
    "A100-SXM4-40GB": 1555,
    "A100 80GB PCIe": 1935,
    "A100-SXM4-80GB": 2039,
    "H100 PCIe": 2000,
    "H100 80GB HBM3": 3350,
    "H100 NVL": 3900,
    "H200": 4800,
    "B200": 8000,
    "RTX PRO 6000 Blackwell Workstation": 1792,
    "RTX PRO 5000 Blackwell 48GB": 1344,
    "RTX PRO 4500 Blackwell": 896,
    "RTX PRO 4000 Blackwell": 672,
    "RTX A1000": 192,
    "RTX A2000 12GB": 288,
    "RTX A4000": 448,
    "Tesla P40": 346,
    "Tesla P100-PCIE-16GB": 732,
    "Tesla P100-PCIE-12GB": 549,
    "Tesla V100-SXM2-32GB": 900,
    "RTX 3090": 936,
    "RTX 4090": 1008,
    "RTX 5070": 672,
    "RTX 5070 Ti": 896,
    "RTX 5080": 960,
    "RTX 5090": 1792,
    "Radeon RX 7900 XTX": 960,
    "Radeon RX 7900 XT": 800,
    "Radeon RX 7900 GRE": 576,
    "Radeon RX 9070 XT": 640,
    "Radeon Instinct MI50 32GB": 1024,
    "Instinct MI100": 1228.8,
    "Instinct MI210": 1638.4,
    "Instinct MI300X": 5300,
}


def test_the_table_covers_the_cards_users_run_with_the_vendors_bandwidth():
    for name, gbs in VENDOR_GBS.items():
        assert cards()[name].bandwidth == round(gbs * GB), name
    for name in ("Radeon RX 7900 XTX", "Instinct MI300X"):  # no SMs: not an NVIDIA card
        assert cards()[name].sms is None and cards()[name].boost_ghz is None


def test_every_card_is_plausible_and_reachable_by_its_own_name():
    assert len({c.name for c in table()}) == len(table()) == len(cards())
    for c in table():
        assert card(c.name) is c, c.name
        assert 4096 <= c.vram_mib <= 200_000 and 150 * GB <= c.bandwidth <= 10_000 * GB, c.name
        assert c.sms is None or 10 <= c.sms <= 200, c.name
        assert c.boost_ghz is None or 1.0 <= c.boost_ghz <= 3.0, c.name
