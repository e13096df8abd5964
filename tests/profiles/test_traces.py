"""Routing dumps: the reader against a plain Python count, every truncation point, garbled records."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from solver.errors import InputError
from solver.profiles.traces import MAX_K, read_traces, write_trace

RECORD = tuple[int, list[int], list[float]]


def random_records(
    seed: int, n: int, layers: int = 5, experts: int = 9, mixed_k: bool = False
) -> list[RECORD]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 5)) if mixed_k else 3
        ids = rng.choice(experts, k, replace=False).tolist()
        out.append((int(rng.integers(layers)), ids, rng.random(k).tolist()))
    return out


def python_counts(records: list[RECORD]) -> Counter:
    return Counter((layer, e) for layer, ids, _ in records for e in ids)


def read(*paths: Path, experts: np.ndarray | None = None):
    return read_traces([(p, p.name) for p in paths], experts)


def as_counter(routing) -> Counter:
    return Counter(
        {(int(a), int(b)): int(c) for a, b, c in zip(routing.layer, routing.expert, routing.count)}
    )


@pytest.mark.parametrize("mixed_k", [False, True])
def test_counts_match_a_plain_count(tmp_path, mixed_k):
    records = random_records(1, 400, mixed_k=mixed_k)
    write_trace(tmp_path / "a.bin", records)
    routing = read(tmp_path / "a.bin")
    assert as_counter(routing) == python_counts(records)
    assert routing.records == 400
    assert routing.events == sum(len(ids) for _, ids, _ in records)


def test_counts_add_up_over_files(tmp_path):
    a, b = random_records(2, 100), random_records(3, 150, mixed_k=True)
    write_trace(tmp_path / "a.bin", a)
    write_trace(tmp_path / "b.bin", b)
    routing = read(tmp_path / "a.bin", tmp_path / "b.bin")
    assert as_counter(routing) == python_counts(a) + python_counts(b)
    assert (routing.records, routing.files) == (250, 2)


def test_weights_are_not_used(tmp_path):
    one = [(0, [1, 2], [0.9, 0.1]), (0, [2, 3], [0.5, 0.5])]
    two = [(0, [1, 2], [0.01, 0.99]), (0, [2, 3], [1.0, 0.0])]
    write_trace(tmp_path / "one.bin", one)
    write_trace(tmp_path / "two.bin", two)
    assert as_counter(read(tmp_path / "one.bin")) == as_counter(read(tmp_path / "two.bin"))


def test_ranked_by_count_then_layer_then_expert(tmp_path):
    records = [(1, [4], [1.0]), (0, [7], [1.0]), (0, [2], [1.0]), (2, [0], [1.0]), (2, [0], [1.0])]
    write_trace(tmp_path / "t.bin", records)
    p = read(tmp_path / "t.bin").ranked("out.txt")
    assert list(zip(p.layer.tolist(), p.expert.tolist(), p.count.tolist())) == [
        (2, 0, 2),
        (0, 2, 1),
        (0, 7, 1),
        (1, 4, 1),
    ]


def test_an_empty_file_has_no_records(tmp_path):
    (tmp_path / "e.bin").write_bytes(b"")
    routing = read(tmp_path / "e.bin")
    assert routing.records == 0 and len(routing.layer) == 0


def record_starts(records: list[RECORD]) -> list[int]:
    starts, pos = [], 0
    for _, ids, _ in records:
        starts.append(pos)
        pos += 8 + 8 * len(ids)
    return [*starts, pos]


def test_every_truncation_names_the_record_it_cuts(tmp_path):
    records = random_records(4, 6, mixed_k=True)
    write_trace(tmp_path / "full.bin", records)
    raw = (tmp_path / "full.bin").read_bytes()
    starts = record_starts(records)
    for cut in range(len(raw)):
        path = tmp_path / "cut.bin"
        path.write_bytes(raw[:cut])
        if cut in starts:
            assert read(path).records == starts.index(cut)
            continue
        with pytest.raises(InputError) as err:
            read(path)
        record_start = max(s for s in starts if s < cut)
        assert str(err.value).startswith(f"cut.bin: record at byte offset {record_start}: truncated")


def garble(tmp_path: Path, records: list[RECORD], index: int, word: int, value: bytes) -> Path:
    """Overwrite 4 bytes at ``word`` (0 = layer, 1 = k, 2.. = ids then weights) of record ``index``."""
    write_trace(tmp_path / "g.bin", records)
    raw = bytearray((tmp_path / "g.bin").read_bytes())
    at = record_starts(records)[index] + 4 * word
    raw[at : at + 4] = value
    (tmp_path / "g.bin").write_bytes(bytes(raw))
    return tmp_path / "g.bin"


def i32(v: int) -> bytes:
    return np.array([v], "<i4").tobytes()


@pytest.mark.parametrize(
    ("word", "value", "what"),
    [
        (0, i32(-3), "negative layer -3"),
        (1, i32(0), "k = 0"),
        (1, i32(MAX_K + 1), f"k = {MAX_K + 1}"),
        (1, i32(-1), "k = -1"),
        (2, i32(-5), "negative expert id -5"),
        (3, i32(1), "expert ids repeat"),
        (5, np.array([np.nan], "<f4").tobytes(), "not a finite number"),
    ],
)
def test_garbled_records_name_file_and_offset(tmp_path, word, value, what):
    records = [(0, [1, 2, 3], [0.5, 0.3, 0.2])] * 3 + [(1, [1, 2, 3], [0.5, 0.3, 0.2])] * 2
    path = garble(tmp_path, records, 3, word, value)
    with pytest.raises(InputError) as err:
        read(path)
    assert str(err.value).startswith("g.bin: record at byte offset 96: ")
    assert what in str(err.value)


def test_a_huge_k_is_a_truncation_not_a_crash(tmp_path):
    path = garble(tmp_path, random_records(5, 3), 1, 1, i32(1000))
    with pytest.raises(InputError, match=r"g.bin: record at byte offset 32: truncated: k = 1000"):
        read(path)


def test_model_range_is_checked(tmp_path):
    write_trace(tmp_path / "t.bin", [(0, [1], [1.0]), (1, [5], [1.0]), (3, [0], [1.0])])
    with pytest.raises(InputError, match=r"offset 16: expert 5 out of range \(layer 1 has 4 experts\)"):
        read(tmp_path / "t.bin", experts=np.array([8, 4, 8, 8]))
    with pytest.raises(InputError, match=r"offset 32: layer 3 out of range \(the model has 3 layers\)"):
        read(tmp_path / "t.bin", experts=np.array([8, 8, 8]))
    assert read(tmp_path / "t.bin", experts=np.array([8, 8, 8, 8])).records == 3


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"nope\.bin: no such file \(expected a routing trace\)"):
        read(tmp_path / "nope.bin")
