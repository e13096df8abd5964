import pytest

from solver.units import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (12, 12),
        ("512 B", 512),
        ("1 KB", 1000),
        ("1 KiB", 1024),
        ("11.2 GiB", int(11.2 * 2**30)),  # 12025908428.8 -> rounded down
        ("1.95 MiB", 2044723),  # 2044723.2 rounded down
        ("0.29 KB", 290),  # exact decimal arithmetic, not 289.99999
        ("1e3 MB", 10**9),
        ("2TB", 2 * 10**12),
        ("0", 0),
        ("5." + "9" * 30 + " B", 5),  # more digits than Decimal's default 28: still rounded down
        ("8589934591.999999999999999999999999 GiB", 2**63 - 1),  # (2^33 - 1) GiB + (2^30 - 1) B
        ("1e-9999999 GiB", 0),
        ("0.0000000000000000000001 TiB", 0),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775807 B", 2**63 - 1),
    ],
)
def test_sizes_round_down_exactly(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "bad", ["twelve", "12 GB extra", "12 gib", "-1 GiB", -5, 1.5, True, None, [1], "1 PiB", 2**63]
)
def test_bad_sizes_are_refused(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


@pytest.mark.parametrize(
    "huge", ["1e999999 B", "1e9999999 B", "1e999999 GiB", "9223372036854775808 B", "8 EiB"]
)
def test_huge_exponents_are_refused_at_once(huge):
    """A size with a huge exponent is refused without building the number (building it takes 30 s, or
    raises decimal.Overflow, a traceback)."""
    import time

    t0 = time.perf_counter()
    with pytest.raises(ValueError):
        parse_size(huge)
    assert time.perf_counter() - t0 < 5  # a hang guard, not a speed claim


def test_format_size():
    assert format_size(512) == "512 B"
    assert format_size(700 * 2**20) == "700.0 MiB"
    assert format_size(int(11.2 * 2**30)) == "11.20 GiB"
    assert format_size(-(2**30)) == "-1.00 GiB"
