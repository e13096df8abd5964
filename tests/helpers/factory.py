"""Random small problems built straight as arrays, for agreement tests and benchmarks."""

from __future__ import annotations

import numpy as np

from solver.engines.strata import StrataFields
from solver.problem.problem import Problem
from solver.profiles.curves import cover_mass


def random_problem(
    seed: int,
    n_layers: int = 8,
    n_gpus: int = 3,
    experts: int = 6,
    order: str = "as-given",
    objective: str = "time",
    tight: float = 0.6,
    twins: bool = False,
) -> Problem:
    """A random rig: per-layer bytes, a shuffled profile over all pairs, GPUs of mixed speed and room."""
    rng = np.random.default_rng(seed)
    layer_bytes = rng.integers(50, 150, n_layers)
    expert_bytes = rng.integers(5, 20, n_layers)
    pairs = np.array([(layer, e) for layer in range(n_layers) for e in range(experts)])
    pairs = pairs[rng.permutation(len(pairs))][: rng.integers(len(pairs) // 2, len(pairs) + 1)]
    need = layer_bytes.sum() + expert_bytes[pairs[:, 0]].sum()
    free = rng.integers(int(need * tight / n_gpus), int(need * (tight + 0.5) / n_gpus) + 2, n_gpus)
    layer_ms = rng.choice([0.5, 0.75, 1.0, 1.25, 2.0], n_gpus)
    min_layers = rng.integers(1, 3, n_gpus)
    max_layers = np.where(rng.random(n_gpus) < 0.3, rng.integers(2, n_layers + 1, n_gpus), n_layers)
    max_layers = np.maximum(max_layers, min_layers)
    if twins and n_gpus >= 2:
        free[1], layer_ms[1], min_layers[1], max_layers[1] = (
            free[0],
            layer_ms[0],
            min_layers[0],
            max_layers[0],
        )
    return Problem(
        rig=f"random-{seed}",
        model="random",
        layer_bytes=layer_bytes.astype(np.int64),
        expert_bytes=expert_bytes.astype(np.int64),
        pair_layer=pairs[:, 0].astype(np.int64),
        pair_bytes=expert_bytes[pairs[:, 0]].astype(np.int64),
        mass=cover_mass(len(pairs), float(rng.choice([1.5, 3.0, 4.0]))),
        free=free.astype(np.int64),
        reserve=rng.integers(0, 10, n_gpus).astype(np.int64),
        layer_ms=layer_ms.astype(np.float64),
        min_layers=min_layers.astype(np.int64),
        max_layers=max_layers.astype(np.int64),
        gpu_names=[f"G{i}" for i in range(n_gpus)],
        stage_bytes=int(rng.integers(0, 20)),
        first_stage_bytes=int(rng.integers(0, 30)),
        last_stage_bytes=int(rng.integers(0, 30)),
        first_stage_min_layers=int(rng.integers(1, 3)),
        engine_fields=StrataFields(miss_ms=float(rng.choice([0.0, 50.0, 190.0]))),
        handoff_ms=float(rng.choice([0.0, 0.5])),
        order=order,
        objective=objective,
    )
