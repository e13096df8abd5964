"""llama.cpp's fill read literally from its definition, for the tests that hold the table to it."""

from __future__ import annotations

import itertools

import numpy as np

from solver.engines.bandwidth import dense_ms, per_byte_ms


def best_fill_by_brute_force(p, g: int, a: int, b: int) -> tuple[float, list[int]] | None:
    """The fill read literally from its definition: every subset of the range's units, in float ms.

    Least stage time within the room; ties (1e-7 ms) to fewer layers with a unit on the CPU, then fewer
    bytes held, then the lexicographically largest sorted (layer, slot) list on the CPU. Returns the
    stage time and the held units (indices into the problem's unit arrays), None when it cannot run.
    """
    room = p.room(g, a, b)
    if room < 0:
        return None
    per_byte = per_byte_ms(p)[g]
    dense = float(dense_ms(p)[a:b, g].sum())
    units = [u for u in range(len(p.engine_fields.unit_layer)) if a <= p.engine_fields.unit_layer[u] < b]
    remote = len(p.host_names) > 1 and p.hosts[g] != 0  # experts on the main host's CPU: hop there and back
    switch = 2 * p.engine_fields.speed.switch_ms + (2 * p.network_ms if remote else 0.0)
    # a held tensor's part of its layer's fixed MoE time, on a GPU timed by its bytes
    moe = 0.0 if p.engine_fields.speed.given[g] else p.engine_fields.speed.moe_layer_ms
    units_in = np.bincount(p.engine_fields.unit_layer, minlength=p.n_layers)
    best = None
    for r in range(len(units) + 1):
        for held in itertools.combinations(units, r):
            size = sum(int(p.engine_fields.unit_bytes[u]) for u in held)
            if size > room:
                continue
            cpu = [u for u in units if u not in held]
            share = [
                p.engine_fields.active_experts / p.experts_per_layer[p.engine_fields.unit_layer[u]]
                for u in held
            ]
            ms = dense + sum(s * int(p.engine_fields.unit_bytes[u]) * per_byte for s, u in zip(share, held))
            ms += sum(moe / units_in[p.engine_fields.unit_layer[u]] for u in held)
            ms += sum(float(p.engine_fields.unit_ms[u]) for u in cpu) + switch * len(
                {int(p.engine_fields.unit_layer[u]) for u in cpu}
            )
            order = sorted(
                (int(p.engine_fields.unit_layer[u]), int(p.engine_fields.unit_slot[u])) for u in cpu
            )
            key = (
                round(ms, 7),
                len({x[0] for x in order}),
                size,
                [(-x, -y) for x, y in order] + [(-(10**9), 0)],
            )
            if best is None or key < best[0]:
                best = (key, ms, sorted(held))
    return best[1], best[2]
