"""How many examples a hypothesis test runs in each test tier.

The quick tier (``python -m pytest -m "not slow"``) runs each hypothesis test on at most
``QUICK_EXAMPLES`` examples; the full suite runs the count the test asks for. conftest.py sets
``quick`` when pytest starts, before it imports the test modules that read it.
"""

from __future__ import annotations

#: Examples per hypothesis test in the quick tier (the full suite runs 40 to 400 per test).
QUICK_EXAMPLES = 15

#: Whether this run is the quick tier.
quick = False


def examples(n: int) -> int:
    """``n`` examples in the full suite, at most ``QUICK_EXAMPLES`` in the quick tier."""
    return min(n, QUICK_EXAMPLES) if quick else n
