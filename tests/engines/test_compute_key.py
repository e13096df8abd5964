"""The key the compute buffer's figures are kept by (solver.engines.llamacpp.memory.compute_bytes): two
placements with one key have one figure. Held with runs of alike layers capped at half of
``RUN_CAP``, over the placements of the recorded commands (tests/fixtures/llama-memory.json) and
random ones at their flags: splits over 1-4 devices, -ngl below the layer count, expert tensors of
random layer ranges in host memory, a layer's FFN tensors on another device (fit's extra layer)."""

from __future__ import annotations

import random

import pytest

from solver.engines.llamacpp import memory
from tests.engines.test_llama_memory import QUICK_MODELS, _data, _measured, geometry, parse


def _fresh(g: memory.Geometry, p: memory.Placement, f: memory.Flags) -> tuple[tuple, list[int]]:
    """The key at a cap of ``RUN_CAP // 4`` and the figures computed anew (no kept figure used)."""
    runs = memory._runs(g, memory.effective(f))
    runs.figures.clear()
    figures = memory.compute_bytes(g, p, f)
    cap = memory.RUN_CAP
    try:
        memory.RUN_CAP = max(cap // 2, 1)
        key = runs.key(p.n_devices, memory.pipeline_parallel(g, p), 0, 0, None)
    finally:
        memory.RUN_CAP = cap
    return key, figures


def _random_placements(g: memory.Geometry, rng: random.Random) -> list[memory.Placement]:
    """A random placement and the same with its host range of experts a layer longer or shorter at
    either end and its split moved a little (most of them share its key)."""
    n = rng.randint(1, 4)
    split = [float(rng.randint(4, 9)) for _ in range(n)]
    ngl = -1 if rng.random() < 0.7 else rng.randint(1, g.n_layer_all)
    extra = []
    if rng.random() < 0.3:
        il = rng.randrange(g.n_layer)
        extra.append((rf"blk\.{il}\.ffn_(gate|gate_up|down).*", f"RPC{rng.randrange(n)}"))
    a = rng.randrange(g.n_layer - 2)
    b = rng.randint(a + 2, g.n_layer)
    kinds = rng.choice(("(up|down|gate)", "(gate|up)", "down", "(up|down)"))

    def placement(a: int, b: int, split: list[float]) -> memory.Placement:
        host = [(rf"blk\.({'|'.join(map(str, range(a, b)))})\.ffn_{kinds}_exps", "CPU")] if b > a else []
        return memory.Placement(n, ngl, tuple(split), tuple(extra + host))

    out = [placement(a, b, split)]
    for da, db in ((0, 1), (0, -1), (1, 0), (-1, 0)):
        out.append(placement(max(a + da, 0), min(b + db, g.n_layer), split))
    moved = list(split)
    moved[rng.randrange(n)] += 0.5
    out.append(placement(a, b, moved))
    return out


@pytest.mark.parametrize(
    "key",
    [k if k in QUICK_MODELS else pytest.param(k, marks=pytest.mark.slow) for k in sorted(_data()["models"])],
)
def test_one_key_one_figure(key: str) -> None:
    g = geometry(key)
    rows = [r for r in _measured() if r["model"] == key]
    rng = random.Random(key)
    seen: dict[tuple, list[int]] = {}
    hits = 0
    for row in rng.sample(rows, min(len(rows), 6)):
        recorded, flags = parse(row["args"], row["n_devices"])
        for p in [recorded, *_random_placements(g, rng), *_random_placements(g, rng)]:
            k, figures = _fresh(g, p, flags)
            k = (flags, k)
            hits += k in seen
            assert seen.setdefault(k, figures) == figures, (key, p, flags)
    assert hits >= 6  # the check compared placements, not only distinct keys


def test_kept_figures_are_the_figures() -> None:
    """A figure served from the kept ones is the one computed anew, and a copy the caller may change."""
    g = geometry("qwen3-30b-a3b")
    f = memory.Flags(8192)
    a = memory.Placement(2, overrides=((r"blk\.(3|4|5|6|7|8)\.ffn_up_exps", "CPU"),))
    b = memory.Placement(2, overrides=((r"blk\.(3|4|5|6|7|8|9)\.ffn_up_exps", "CPU"),))
    first = memory.compute_bytes(g, a, f)
    first[0] = -1
    kept_before = len(memory._runs(g, memory.effective(f)).figures)
    kept = memory.compute_bytes(g, b, f)
    assert len(memory._runs(g, memory.effective(f)).figures) == kept_before  # b was served, not computed
    _, fresh = _fresh(g, b, f)
    assert kept == fresh and kept[0] != -1
