"""The proportional baseline at its edges: no split when lo_i > hi_i, and no wrapped cuts."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from solver.engines import build_table
from solver.planning.build import build_arcs
from solver.solvers import plan_arcs
from solver.solvers.proportional import proportional_cuts
from tests.helpers.factory import random_problem


@given(
    st.lists(st.sampled_from([0.25, 0.5, 1.0, 1.5, 3.0]), min_size=1, max_size=12),
    st.integers(1, 20),
    st.integers(1, 6),
)
def test_cuts_follow_the_spec_or_there_is_no_split(layer_ms, n, first):
    k = len(layer_ms)
    cuts = proportional_cuts(layer_ms, n, first)
    if k > 1 and first + (k - 1) > n:  # lo_0 > hi_0: k stages do not fit in n layers with that first stage
        assert cuts is None
        return
    assert cuts is not None and len(cuts) == k - 1
    bounds = [0, *cuts, n]
    assert all(a < b for a, b in pairwise(bounds))
    inv, acc, prev = [1 / t for t in layer_ms], 0.0, None
    for i, c in enumerate(cuts):
        acc += inv[i]
        lo, hi = (first if i == 0 else prev + 1), n - (k - 1 - i)
        x = acc / sum(inv) * n
        assert c == min(max(math.floor(x + 0.5), lo), hi)
        prev = c


def test_plan_arcs_never_wraps_bounds_outside_the_model():
    """Negative or non-increasing bounds are no arc; numpy would read idx[g, 0, -1] as idx[g, 0, L]."""
    p = random_problem(0, n_layers=4, n_gpus=2, experts=3, tight=5.0)
    arcs = build_arcs(p, build_table(p))
    assert (plan_arcs(arcs, (0, 1), (2,)) >= 0).all()
    for cuts in [(-1,), (-3,), (0,), (4,), (5,)]:
        assert plan_arcs(arcs, (0, 1), cuts).tolist() == [-1, -1], cuts


@pytest.mark.parametrize("n_gpus", [3, 5, 9])
def test_no_split_for_more_gpus_than_layers(n_gpus):
    assert proportional_cuts([1.0] * n_gpus, 2, 1) is None
    assert np.all(np.array(proportional_cuts([1.0] * 2, 2, 1)) == [1])
