"""An ``-ot`` rule's pattern: whether llama.cpp takes it, and which tensor names it finds
(``std::regex_search``), fast for the rules of one block.

--fit writes a rule per layer (``blk\\.15\\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU``): tens of
patterns that differ only in the block number, each checked and searched over every tensor name in
each of its dry runs. A pattern ``blk\\.N\\.R`` whose rest R is plain (a pattern of its own, so not
starting with a repeat that would take the dot before it, with no ``(?`` construct and no ``|`` outside
its brackets and groups) is the literal ``blk.N.`` followed by R. So it finds a name that holds ``blk``
only at its start exactly where the name starts with ``blk.N.`` (the block number digit for digit) and
R matches right after, in place (``Pattern.match`` at that position: anchors and word boundaries see
the whole name, as in the whole pattern): a match must start at the one ``blk``. R is parsed, checked
and compiled once for every N, the names are put by block once, and a rule matches R against its own
block's names alone; a name that holds ``blk`` elsewhere is searched with the whole pattern, and every
other pattern is searched as it is.
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import Any

#: Python's regular expression parser (``re._parser`` since 3.11, ``sre_parse`` before).
_PARSER: Any = getattr(re, "_parser", None) or importlib.import_module("sre_parse")
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
#: Longest ``-ot`` pattern taken: a user's regular expression is untrusted input, matched against
#: every tensor name, and no real rule is near this long.
MAX_PATTERN = 4096
#: ``blk\.N\.`` and the rest, as the text of a pattern.
_BLOCK_RULE = re.compile(r"blk\\\.([0-9]+)\\\.(.*)", re.DOTALL)


@functools.lru_cache(maxsize=4096)
def pattern_fault(pattern: str) -> tuple[bool, str]:
    """What is wrong with an ``-ot`` pattern: (True, the parser's error) for no regular expression,
    (False, why) for one that can take exponential time, (False, "") for none (kept: fit's dry runs
    repeat their rules). A block's rule is the literal ``blk.N.`` and its rest, which alone can repeat
    a repeat."""
    rule = block_rule(pattern)
    try:
        nested = _nested_repeat(_parsed(rule[1] if rule else pattern))
    except (re.error, RecursionError, OverflowError) as exc:
        return True, str(exc)
    if nested or len(pattern) > MAX_PATTERN:
        return False, "repeats a repeat" if nested else f"is longer than {MAX_PATTERN:,} characters"
    return False, ""


@functools.lru_cache(maxsize=256)
def _parsed(pattern: str) -> Any:
    """The parser's tree of a pattern, kept: a block's rules share their rest."""
    return _PARSER.parse(pattern)


def _children(name: str, av: Any) -> list:
    """The sub-patterns of one parsed item: a group's, each branch's, an assertion's."""
    if name == "SUBPATTERN":
        return [av[-1]]
    if name == "BRANCH":
        return list(av[1])
    if name in ("ASSERT", "ASSERT_NOT"):
        return [av[1]]
    return [av] if name == "ATOMIC_GROUP" else []


def _nested_repeat(parsed: Any, inside: bool = False) -> bool:
    """Whether a parsed pattern repeats (more than once) something that itself repeats: the shape of
    patterns like ``(.*)*z`` whose backtracking takes exponential time on a name that does not match."""
    for op, av in parsed:
        name = str(op)
        if name in _REPEATS:
            many = av[1] is _PARSER.MAXREPEAT or av[1] > 1
            if (many and inside) or _nested_repeat(av[2], inside or many):
                return True
        if any(_nested_repeat(sub, inside) for sub in _children(name, av)):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def block_rule(pattern: str) -> tuple[str, str] | None:
    """(the block number as written, the rest R) of a pattern ``blk\\.N\\.R`` whose R is plain (the
    module docstring); None for any other pattern."""
    m = _BLOCK_RULE.fullmatch(pattern)
    if m is None or _plain_rest(m[2]) is None:
        return None
    return m[1], m[2]


@functools.lru_cache(maxsize=256)
def _plain_rest(rest: str) -> re.Pattern[str] | None:
    """R compiled where it is plain (the module docstring), else None."""
    if "(?" in rest or _bar_on_top(rest):
        return None
    try:
        return re.compile(rest)
    except (re.error, RecursionError, OverflowError):
        return None


def _bar_on_top(text: str) -> bool:
    """Whether a pattern's text has a ``|`` outside brackets and groups (an alternation of the whole),
    read as the parser reads it: a backslash escapes the next character, a ``]`` right after ``[`` or
    ``[^`` is a member."""
    depth, i, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 1
        elif c == "[":
            i += 2 if text[i + 1 : i + 2] == "^" else 1
            i += 1 if text[i : i + 1] == "]" else 0
            while i < n and text[i] != "]":
                i += 2 if text[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
        i += 1
    return False


class Names:
    """Tensor names to search with ``-ot`` patterns, put by block once (the names ``blk.N.<rest>``
    whose rest holds no ``blk``, by N as written; the other names that hold ``blk``), and each
    pattern's matches kept: fit's dry runs search the same rules over the same names."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.by_block: dict[str, list[int]] = {}
        self.others: list[int] = []  # a block's rule can find no name that holds no ``blk``
        for i, name in enumerate(names):
            dot = name.find(".", 4)
            if name.startswith("blk.") and name.find("blk", 1) < 0:
                if dot > 4:
                    self.by_block.setdefault(name[4:dot], []).append(i)
            elif "blk" in name:
                self.others.append(i)
        self.matched: dict[str, tuple[int, ...]] = {}

    def found(self, pattern: str) -> tuple[int, ...]:
        """The positions of the names in which ``re.search(pattern, name)`` finds something, in order."""
        if pattern not in self.matched:
            self.matched[pattern] = self._search(pattern)
        return self.matched[pattern]

    def _search(self, pattern: str) -> tuple[int, ...]:
        names = self.names
        rule = block_rule(pattern)
        if rule is None:
            search = re.compile(pattern).search
            return tuple(i for i, name in enumerate(names) if search(name))
        block, rest = rule
        at, match = len(block) + 5, _plain_rest(rest).match  # type: ignore[union-attr]
        hits = [i for i in self.by_block.get(block, ()) if match(names[i], at)]
        if self.others:
            search = re.compile(pattern).search
            hits = sorted([*hits, *(i for i in self.others if search(names[i]))])
        return tuple(hits)
