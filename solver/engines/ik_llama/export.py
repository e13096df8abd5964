"""ik_llama.cpp's command for a plan: ``llama-server -m MODEL -c CONTEXT -sm layer -ngl 999 -ts ... -ot
...=CPU``, with ``-ts`` values chosen so that ik's own split lands exactly on the plan's cuts.

ik splits layers greedily by bytes (src/llama.cpp ``llm_load_tensors``; solver.engines.ik_llama.rules
``default_layer_devices``): device d takes slots while its running total (one ``max_compute`` per device
so far plus the slots so far) stays within ``splits[d] * sum``, and takes the next slot too when it
overshoots by less than the room left. Cumulative weights at ``(d + 1) * max_compute + (bytes of the
layers before cut d) + size(first layer after the cut) / 4`` put device d's limit a quarter of the next
layer past its last layer: that layer overshoots by three quarters against a quarter left, so it is not
taken, and every earlier one fits with a quarter to spare, far beyond float32's rounding of the sums.
The export replays its own ``-ts`` through ``layer_placement`` and refuses a command that would land
anywhere else.

Slot sizes are moesplit's count of ``get_layer_sizes`` (solver.engines.ik_llama.units): exact where the
model's bytes are (a model from ``solve model from-gguf``), and a quarter layer of slack where they are not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from solver.engines.export import LLAMA_ALL_LAYERS, LLAMA_MAX_SPLITS, Launch, check_pattern, override_pattern
from solver.engines.ik_llama.rules import cumulative_splits, layer_placement


@dataclass(frozen=True)
class IkLaunch(Launch):
    """What ik's command loads (Launch) and the byte sizes its split is chosen from: ``layer_sizes`` the
    slots of every block and the output (units.layer_sizes), ``max_compute`` the per-device compute
    estimate of ik's greedy."""

    layer_sizes: tuple[int, ...] = ()
    max_compute: int = 0


def split_weights_for(sizes: Sequence[int], cuts: Sequence[int], max_compute: int) -> list[float]:
    """Per-device byte weights whose split puts device d's layers at [cuts[d-1], cuts[d]) with all
    slots on the GPUs (``-ngl 999``); the last device takes the rest and the output."""
    total = max_compute * (len(cuts) + 1) + sum(sizes)
    marks = []
    for d, c in enumerate(cuts):
        if sizes[c] <= 0:
            raise ValueError(f"layer {c} has no bytes: ik_llama.cpp's split cannot end a device before it")
        marks.append((d + 1) * max_compute + sum(sizes[:c]) + sizes[c] / 4)
    marks.append(total)
    return [b - a for a, b in zip([0.0, *marks], marks)]


def ts_values(weights: Sequence[float], sizes: Sequence[int], cuts: Sequence[int]) -> list[str]:
    """The weights written in a unit small enough that rounding to whole numbers moves no mark by more
    than a sixteenth of the quarter margins: bytes over a power of 1024."""
    margin = min((sizes[c] / 4 for c in cuts), default=1.0)
    unit = 1
    while unit * 1024 * 64 <= margin:
        unit *= 1024
    if unit == 1:  # small sizes (a test's): two decimals, float32 reads them within 0.01
        return [f"{w:.2f}".rstrip("0").rstrip(".") for w in weights]
    return [str(round(w / unit)) for w in weights]


def replay(sizes: Sequence[int], ts: Sequence[str], max_compute: int, n_layers: int) -> list[int]:
    """Where ik puts layers 0..n_layers-1 given the ``-ts`` words, as device positions (-ngl 999)."""
    weights = [float(x) for x in ts]
    return layer_placement(sizes, len(ts), LLAMA_ALL_LAYERS, cumulative_splits(weights), max_compute).layers[
        :n_layers
    ]


def split_words(launch: IkLaunch, cuts: list[int], n_layers: int, n_blocks: int) -> list[str]:
    """``-sm layer -ngl 999`` and, for several stages, ``-ts`` that ik's greedy turns into ``cuts``."""
    words = ["-sm", "layer", "-ngl", str(LLAMA_ALL_LAYERS)]
    if not cuts:
        return words
    if len(cuts) + 1 > LLAMA_MAX_SPLITS:
        raise ValueError(
            f"ik_llama.cpp takes at most {LLAMA_MAX_SPLITS} -ts values; the plan has {len(cuts) + 1}"
        )
    sizes = list(launch.layer_sizes)
    if len(sizes) != n_blocks + 1:
        raise ValueError(
            "ik_llama.cpp's export needs the model's layer bytes: plan with --engine ik_llama.cpp"
        )
    ts = ts_values(split_weights_for(sizes, cuts, launch.max_compute), sizes, cuts)
    bounds = [0, *cuts, n_layers]
    want = [d for d in range(len(bounds) - 1) for _ in range(bounds[d], bounds[d + 1])]
    got = replay(sizes, ts, launch.max_compute, n_layers)
    if got != want:
        raise ValueError(f"-ts {','.join(ts)} would not land on the cuts {cuts} (ik's split gives {got})")
    return [*words, "-ts", ",".join(ts)]


def offload_words(offload, names: list[str] | None) -> list[str]:
    """``-ot PATTERN=CPU`` for the expert tensors the plan leaves on the CPU."""
    if not offload:
        return []
    pattern = override_pattern(offload)
    if names is not None:
        check_pattern(pattern, offload, names)
    return ["-ot", f"{pattern}=CPU"]
