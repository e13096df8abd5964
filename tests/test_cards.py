"""The card table: tolerant names, close matches for unknown ones, and free VRAM as documented."""

from __future__ import annotations

import pytest

from solver.importers.cards import CARDS, DRIVER_MIB, UnknownCard, card, find_card


@pytest.mark.parametrize(
    ("typed", "name"),
    [
        ("RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("rtx4090", "RTX 4090"),
        ("  geforce rtx 3060 ti ", "RTX 3060 Ti"),
        ("NVIDIA RTX A6000", "RTX A6000"),
        ("nvidia rtx 6000 ada generation", "RTX 6000 Ada Generation"),
        ("RTX 6000 Ada", "RTX 6000 Ada Generation"),
        ("a100 sxm4 80gb", "A100-SXM4-80GB"),
        ("H100", "H100 80GB HBM3"),
        ("L40S", "L40S"),
    ],
)
def test_names_match_whatever_the_case_spaces_and_prefixes(typed, name):
    assert card(typed).name == name


def test_a_ti_or_super_is_its_own_card():
    assert card("RTX 3060").sms == 28 and card("RTX 3060 Ti").sms == 38
    assert card("RTX 4080").sms == 76 and card("RTX 4080 SUPER").sms == 80


def test_an_unknown_name_lists_the_closest_known_ones():
    with pytest.raises(UnknownCard, match=r"unknown card 'RTX 4900'; closest: .*RTX 4090"):
        card("RTX 4900")
    assert find_card("RTX 3060 Laptop GPU") is None


def test_free_vram_is_the_total_less_the_driver_reserve():
    assert DRIVER_MIB == 700
    assert card("RTX 3090").free_mib == 24 * 1024 - 700
    assert card("RTX 3060").free_mib == 12 * 1024 - 700


def test_the_table_covers_the_cards_people_mix():
    for series in ("RTX 2080 Ti", "RTX 3090", "RTX 4090", "RTX 5090", "RTX A4000", "RTX 4000 Ada Generation"):
        assert series in CARDS
    for dc in ("A100-SXM4-80GB", "H100 80GB HBM3", "L40S"):
        assert dc in CARDS
    for c in CARDS.values():
        assert 4096 <= c.vram_mib <= 150_000 and 10 <= c.sms <= 200 and 1.0 <= c.boost_ghz <= 3.0
