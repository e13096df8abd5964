"""What a profile says about routing: coverage, the share of routing in its top pairs, per-layer skew."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.profiles.format import Profile
from solver.profiles.synth import counts_curve

#: The top fractions of pairs ``solve profile show`` and ``synth`` report.
TOP_FRACTIONS = (0.10, 0.25, 0.50)
#: Hit rates measured with Strata on the RTX 3060 / 3060 / 5060 Ti / 5060 Ti box running Qwen3-Next-80B-A3B
#: (docs/reference.md, "Where the defaults come from"): (fraction of pairs held, measured hit rate as text).
SEED_POINTS = ((0.236, "69.2%"), (0.59, "89.8-92.2%"))
#: The shape (layers, experts per layer) of those measurements: only a profile of this shape is compared.
SEED_SHAPE = (48, 512)
#: How the comparison is labelled wherever it is shown.
SEED_LABEL = "measured, Qwen3-Next on the 3060/5060 Ti box"


def is_seed_shape(layers: int, experts: list[int]) -> bool:
    """Whether a profile has the shape of the box's measured model, so its measured rates are comparable."""
    return (layers, set(experts)) == (SEED_SHAPE[0], {SEED_SHAPE[1]})


@dataclass(frozen=True)
class LayerSkew:
    """Per covered layer with routing: the share of its routing in its top ``fraction`` of experts."""

    fraction: float
    layer: np.ndarray
    share: np.ndarray

    def at(self, q: str) -> tuple[int, float]:
        """``(layer, share)`` of the layer at ``min``, ``median`` (the lower middle) or ``max``."""
        order = np.argsort(self.share, kind="stable")
        i = {"min": 0, "median": (len(order) - 1) // 2, "max": len(order) - 1}[q]
        return int(self.layer[order[i]]), float(self.share[order[i]])


def top_shares(count: np.ndarray, fractions: tuple[float, ...] = TOP_FRACTIONS) -> list[float]:
    """Share of all routing held by the top ``f`` of pairs, ranked by count, for each f."""
    return counts_curve(count, list(fractions))


def layer_skew(profile: Profile, experts: np.ndarray | None = None, fraction: float = 0.10) -> LayerSkew:
    """For each layer with routing, the share of its routing in its ``fraction`` hottest experts.

    The top is ``max(1, round(fraction * E))`` experts, where E is the layer's expert count in the
    model when ``experts`` is given (unranked experts count as 0), else its number of ranked pairs.
    """
    assert profile.count is not None
    layers, shares = [], []
    for layer in np.unique(profile.layer):
        c = np.sort(profile.count[profile.layer == layer])[::-1]
        total = int(c.sum())
        if total == 0:
            continue
        n = int(experts[layer]) if experts is not None and layer < len(experts) else len(c)
        top = max(1, round(fraction * n))
        layers.append(int(layer))
        shares.append(int(c[:top].sum()) / total)
    return LayerSkew(fraction, np.array(layers, np.int64), np.array(shares, np.float64))


def layer_ranges(layers: np.ndarray) -> str:
    """``0-3, 5, 7-47``: sorted distinct layers as inclusive runs."""
    if len(layers) == 0:
        return "none"
    runs, start, prev = [], int(layers[0]), int(layers[0])
    for x in (int(v) for v in layers[1:]):
        if x != prev + 1:
            runs.append((start, prev))
            start = x
        prev = x
    runs.append((start, prev))
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
