"""``-ot`` patterns (solver.engines.llamacpp.otrules): which names a pattern finds is what
``re.search`` finds, and what is wrong with one is what the parser of the whole pattern says, for the
rules of one block (the fast path) and every pattern that only looks like one."""

from __future__ import annotations

import random
import re

import pytest

from solver.engines.llamacpp import otrules
from solver.engines.llamacpp.otrules import MAX_PATTERN, Names, block_rule, pattern_fault

#: Rests of ``blk\.N\.`` that the fast path takes, and ones it must leave to the whole pattern.
RESTS = [
    r"ffn_(up|down|gate_up|gate)_(ch|)exps",
    r"ffn_(gate|gate_up|down).*",
    r"ffn_down.*",
    r"ffn_(gate|up|gate_up|down).*",
    r"attn_.*",
    r"ffn_[a-z]+_exps\.weight",
    r"ffn_[|]_exps",
    r"ffn_\|",
    r"[]|x]",
    r"[^]|]",
    r"(a|b)(c|)",
    r"a|b",  # the whole pattern is (blk\.N\.a)|(b): b anywhere
    r"f|ffn_up",
    r"ffn|",
    r"|ffn",
    r"^ffn",
    r"ffn_up$",
    r"\bffn",
    r"ffn\B",
    r"*ffn",
    r"+ffn",
    r"?ffn",
    r"{2}ffn",
    r"(?i)FFN_UP",
    r"(?:ffn)_up",
    r"(?<=\.)ffn",
    r"(?=ffn)ffn",
    r"(ffn)\1",
    r"(.*)*z",
    r"(a+)+",
    r"ffn_(up",
    r"ffn_up)",
    r"[ffn",
    r"\\",
    r"ffn_up_exps\.",
    r".*",
    r"",
    r"blk\.1\.ffn",
    r"\d+\.ffn",
    r"ffn.*blk",
]
#: Tensor names to search: blocks whose numbers share digits, names with ``blk`` elsewhere or nowhere.
_SUFFIXES = [
    *("ffn_up_exps.weight", "ffn_gate_exps.weight", "ffn_down_exps.weight", "ffn_gate_up_exps.weight"),
    *("ffn_up_chexps.weight", "ffn_down_exps.bias", "ffn_gate_exps.scale", "attn_q.weight", "ffn_up.weight"),
    *("ffn_|_exps", "x", "ffnffn", "|", "]", "a", "b", "c", "ab", "FFN_UP", "ffn_down_exps.blk.1.ffn", "z"),
]
NAMES = (
    *(f"blk.{b}.{t}" for b in (0, 1, 2, 10, 11, 15, 21, 93, 115) for t in _SUFFIXES),
    "token_embd.weight",
    "output.weight",
    "blk1.ffn_up",
    "xblk.1.ffn_up_exps.weight",
    "blk.1",
    "blk.",
    "",
    "b",
    "blk.01.ffn_up_exps.weight",
)


def _reference_fault(pattern: str) -> tuple[bool, str]:
    """What is wrong with a pattern, from the parser's tree of the whole of it."""
    try:
        nested = otrules._nested_repeat(otrules._PARSER.parse(pattern))
    except (re.error, RecursionError, OverflowError) as exc:
        return True, str(exc)
    if nested or len(pattern) > MAX_PATTERN:
        return False, "repeats a repeat" if nested else f"is longer than {MAX_PATTERN:,} characters"
    return False, ""


def _searched(pattern: str, names: tuple[str, ...]) -> tuple[int, ...] | None:
    """What ``re.search`` finds in each name; None for no pattern, or one that repeats a repeat (its
    backtracking can take exponential time: the product refuses it)."""
    if _reference_fault(pattern) != (False, ""):
        return None
    return tuple(i for i, n in enumerate(names) if re.search(pattern, n))


@pytest.mark.parametrize("block", ["0", "1", "11", "15", "01", "115"])
@pytest.mark.parametrize("rest", RESTS)
def test_a_blocks_rule_finds_what_re_search_finds(block, rest):
    pattern = rf"blk\.{block}\.{rest}"
    want = _searched(pattern, NAMES)
    assert pattern_fault(pattern) == _reference_fault(pattern)
    if want is not None:
        assert Names(NAMES).found(pattern) == want


@pytest.mark.parametrize("pattern", RESTS)
def test_any_other_pattern_finds_what_re_search_finds(pattern):
    assert pattern_fault(pattern) == _reference_fault(pattern)
    want = _searched(pattern, NAMES)
    if want is not None:
        assert Names(NAMES).found(pattern) == want


def test_the_fast_path_takes_fits_rules_and_leaves_the_rest():
    assert block_rule(r"blk\.15\.ffn_(up|down|gate_up|gate)_(ch|)exps") == (
        "15",
        r"ffn_(up|down|gate_up|gate)_(ch|)exps",
    )
    assert block_rule(r"blk\.29\.ffn_(gate|gate_up|down).*") == ("29", r"ffn_(gate|gate_up|down).*")
    for rest in (r"a|b", r"*ffn", r"(?i)ffn", r"(?<=\.)ffn", r"(a|b", r"[]|x]|y"):
        assert block_rule(rf"blk\.1\.{rest}") is None, rest
    for rest in (r"^ffn", r"ffn_up$", r"\bffn", r""):  # matched in place: anchors see the whole name
        assert block_rule(rf"blk\.1\.{rest}") == ("1", rest), rest
    assert block_rule(r"blk\.1\.[]|x]") is not None  # the bar is a member of the brackets
    assert block_rule(r"\.ffn_(up|down)_exps") is None


def test_random_patterns_find_what_re_search_finds():
    """Random rests over a small alphabet of the parser's tokens, after ``blk\\.N\\.`` and alone."""
    rng = random.Random(7)
    tokens = ["ffn", "_", "up", "exps", ".", r"\.", "*", "+", "?", "|", "(", ")", "[", "]", "^", "$",
              r"\|", r"\b", "{1,2}", "a", "b", "1", r"\d", "(?:", "blk"]  # fmt: skip
    for _ in range(3000):
        rest = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 7)))
        for pattern in (rf"blk\.{rng.choice(['1', '11', '2'])}\.{rest}", rest):
            assert pattern_fault(pattern) == _reference_fault(pattern), pattern
            want = _searched(pattern, NAMES)
            if want is not None:
                assert Names(NAMES).found(pattern) == want, pattern
