"""The key the compute buffer's figures are kept by (solver.engines.llamacpp.memory.compute_bytes): two
placements with one key have one figure. Held with runs of alike layers capped at half of
``RUN_CAP``, over the placements of the recorded commands (tests/fixtures/llama-memory.json) and
random ones at their flags: splits over 1-4 devices, -ngl below the layer count, expert tensors of
random layer ranges in host memory, a layer's FFN tensors on another device (fit's extra layer).
And the figures themselves: a placement's graph simulated with its long repetitions of alike slices
cut gives every backend's figure of the whole graph."""

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
        key, _ = runs.key(p.n_devices, memory.pipeline_parallel(g, p), 0, 0, None)
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
    b = memory.Placement(2, overrides=((r"blk\.(3|4|5|6|7|8|9|10|11|12|13|14)\.ffn_up_exps", "CPU"),))
    first = memory.compute_bytes(g, a, f)
    first[0] = -1
    kept_before = len(memory._runs(g, memory.effective(f)).figures)
    kept = memory.compute_bytes(g, b, f)
    assert len(memory._runs(g, memory.effective(f)).figures) == kept_before  # b was served, not computed
    _, fresh = _fresh(g, b, f)
    assert kept == fresh and kept[0] != -1


#: The models whose cut graphs the quick tier checks: every architecture (the others run in the full
#: suite).
CUT_MODELS = {
    "deepseek-v2-lite",
    "glm-4.5-air",
    "gpt-oss-20b",
    "llama-4-scout",
    "mixtral-8x7b",
    "qwen3-30b-a3b",
    "qwen3-next-80b-a3b",
}


def _stored(g: memory.Geometry, rng: random.Random, pattern: str) -> dict[str, int]:
    """Stored bytes of every routed expert tensor: llama-quantize's Q4_K_M (``ffn_down_exps`` at Q6_K
    on the first and last eighth of the layers and every third between, the rest Q4_K) or random per
    layer among three sizes."""
    out = {}
    n8 = g.n_layer // 8
    for name, ne in memory.weight_shapes(g).items():
        if "_exps.weight" not in name:
            continue
        il = int(name.split(".")[1])
        more = il < n8 or il >= 7 * g.n_layer // 8 or (il - n8) % 3 == 2
        weights = ne[0] * ne[1] * ne[2]
        if pattern == "q4_k_m":
            q6 = "ffn_down" in name and more
            out[name] = weights // 256 * (210 if q6 else 144)
        else:
            out[name] = weights // 256 * rng.choice((144, 176, 210))
    return out


def _splits(g: memory.Geometry, rng: random.Random) -> list[memory.Placement]:
    """Every layer on 1-4 devices split at random (some devices given none), no override (pipeline
    parallelism on over several): runs of alike layers of either parity, ending at another device's
    layers or at the output layer's."""
    out = [memory.Placement(1)]
    for n in (2, 3, 4):
        out.append(memory.Placement(n, -1, (float(g.n_layer_all), *(0.0,) * (n - 2), 1.0)))  # output alone
        split = [float(rng.randint(4, 9))] + [float(rng.randint(0, 3)) for _ in range(n - 1)]
        out.append(memory.Placement(n, -1, tuple(split)))
        out.append(memory.Placement(n, -1, tuple(float(rng.randint(1, 9)) for _ in range(n))))
    return out


@pytest.mark.parametrize(
    "key",
    [k if k in CUT_MODELS else pytest.param(k, marks=pytest.mark.slow) for k in sorted(_data()["models"])],
)
def test_the_cut_graph_gives_the_whole_graphs_figures(key: str) -> None:
    """Simulating a placement's kept slices (long repetitions of alike slices cut) gives every
    backend's figure of the whole graph: over eight recorded commands' placements and flags, and at
    two of their flags random placements and random splits with pipeline parallelism; without and
    with an op offload (from a random device, the expert tensors' stored bytes of a Q4_K_M GGUF or
    random per layer). The cut drops slices in a quarter of them at least."""
    g = geometry(key)
    rows = [r for r in _measured() if r["model"] == key]
    rng = random.Random(key)
    sampled = rng.sample(rows, min(len(rows), 8))
    cuts = checks = 0
    for i, row in enumerate(sampled):
        recorded, flags = parse(row["args"], row["n_devices"])
        runs = memory._runs(g, memory.effective(flags))
        more = [*_random_placements(g, rng), *_splits(g, rng)] if i < 2 else []
        for p in [recorded, *more]:
            memory._place(runs.unplaced, g, p)
            copies = memory.ggmlalloc.MAX_COPIES if memory.pipeline_parallel(g, p) else 1
            for pattern in ("", "q4_k_m", "random"):
                stored = _stored(g, rng, pattern).get if pattern else None
                be = memory.ggmlalloc.rpc_backends(p.n_devices)
                if stored is not None:
                    be.offload_min_batch, be.offload_from = 32, rng.randrange(p.n_devices)
                kept = runs.kept(stored)
                whole = runs.simulate(list(range(len(runs.shapes))), be, copies, stored)
                assert runs.simulate(kept, be, copies, stored) == whole, (key, p, flags, pattern)
                cuts += len(kept) < len(runs.shapes)
                checks += 1
    assert cuts >= checks // 4


#: Placements like --fit's dry runs whose figures depend on where the allocator's cycle stands when a
#: repetition ends: DeepSeek-V2-Lite's MLA layers with the output alone on the last device (a cycle of
#: two slices), gpt-oss-120b's pairs of sliding-window and full layers with a layer's FFN on the next
#: device and the last twelve layers' experts in host memory (six slices).
CYCLES = {
    "deepseek-v2-lite": (memory.Placement(3, 28, (27.0, 0.0, 1.0)), memory.Flags(32768)),
    "gpt-oss-120b": (
        memory.Placement(
            2,
            overrides=(
                (r"blk\.11\.ffn_(gate|up|gate_up|down).*", "RPC1"),
                *((rf"blk\.{il}\.ffn_(up|down|gate_up|gate)_(ch|)exps", "CPU") for il in range(24, 36)),
            ),
            slots=(0,) * 12 + (1,) * 25,
        ),
        memory.Flags(65536),
    ),
}


@pytest.mark.parametrize("key", sorted(CYCLES))
def test_a_cut_keeps_the_allocators_cycle(key: str) -> None:
    """The cut of these placements drops slices and still gives the whole graph's figures."""
    g = geometry(key)
    p, flags = CYCLES[key]
    runs = memory._runs(g, memory.effective(flags))
    memory._place(runs.unplaced, g, p)
    copies = memory.ggmlalloc.MAX_COPIES if memory.pipeline_parallel(g, p) else 1
    be = memory.ggmlalloc.rpc_backends(p.n_devices)
    kept = runs.kept(None)
    assert len(kept) < len(runs.shapes)
    whole = runs.simulate(list(range(len(runs.shapes))), be, copies, None)
    assert runs.simulate(kept, be, copies, None) == whole
