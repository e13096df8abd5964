"""``slot_devices``, llama.cpp's ``load_tensors`` slot mapping, against the statement-by-statement port in
tests/helpers/engine_mapping.py over random splits, block counts and ``-ngl`` values (the CPU slots
before the GPU ones, float32 division slot by slot, the upper bound into the cumulative split)."""

from __future__ import annotations

import random

import numpy as np

from solver.engines.llamacpp.layout import slot_devices
from tests.helpers.engine_mapping import llama_slot_devices


def test_slot_devices_map_every_slot_as_load_tensors_does():
    rng = random.Random(11)
    for _ in range(3000):
        k = rng.randint(1, 8)
        shares = [0.0, rng.random() * 100, rng.randint(0, 100), 1e-30]
        split = [np.float32(rng.choice(shares)) for _ in range(k)]
        if not any(split):
            split[rng.randrange(k)] = np.float32(1)
        n_blocks = rng.randint(0, 200)
        ngl = rng.randint(-3, n_blocks + 3)  # below 0: every slot on the CPU
        want = llama_slot_devices(split, n_blocks, ngl, k)
        assert slot_devices(np.array(split, dtype=np.float32), n_blocks, ngl) == want, (split, n_blocks, ngl)
