"""Random problems for the llama.cpp and resident engines, built on factory.random_problem."""

from __future__ import annotations

import dataclasses

import numpy as np

from solver.engines.bandwidth import Speed
from solver.engines.ik_llama.units import IkFields, fuse
from solver.engines.llamacpp.fields import LlamaFields
from solver.problem.problem import Problem
from tests.helpers.factory import random_problem

TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


def _speed(rng: np.random.Generator, k: int) -> Speed:
    """Some GPUs timed by bytes over bandwidth, the others by their layer_ms; a switch cost or none, a
    fixed cost per MoE layer held or none."""
    given = rng.random(k) < 0.3
    return Speed(
        bandwidth=np.where(given, 0.0, rng.choice([5e4, 1e5, 4e5], k)),
        given=given,
        efficiency=0.8,
        overhead_ms=float(rng.choice([0.0, 0.05])),
        switch_ms=float(rng.choice([0.0, 0.08, 2.0])),
        depth=0,
        moe_layer_ms=float(rng.choice([0.0, 0.04])),
    )


def with_engine_fields(p: Problem, **change: object) -> Problem:
    """The problem with some of its engine's fields changed."""
    return dataclasses.replace(p, engine_fields=dataclasses.replace(p.engine_fields, **change))


def random_engine_problem(seed: int, engine: str, **kw) -> Problem:
    """A random rig under ``engine``: llama.cpp gets 1-3 expert tensors per MoE layer of mixed sizes
    (some equal, so ties in the fill order matter); vllm/sglang get per-layer KV bytes per token."""
    p = random_problem(seed, **kw)
    rng = np.random.default_rng(seed + 7_919)
    n = p.n_layers
    experts = rng.integers(0, 9, n)
    experts[rng.random(n) < 0.2] = 0
    replace: dict = {"engine": engine, "experts": experts.astype(np.int64)}
    if engine in ("llama.cpp", "ik_llama.cpp"):
        rows = []
        n_tensors = int(rng.integers(1, 4))
        for t in range(n_tensors):
            for layer in np.flatnonzero(experts):
                size = int(rng.choice([8, 12, 12, 20, 30, 45]))
                rows.append((-size, int(layer), t, (TENSORS[t],)))
        rows.sort(key=lambda r: r[:3])
        rows.sort(key=lambda r: (r[1], r[2]))
        layer = np.array([r[1] for r in rows], dtype=np.int64)
        size = np.array([-r[0] for r in rows], dtype=np.int64)
        ms = 1000.0 * 4 * size / (experts[layer] * 2e4)
        replace["engine_fields"] = LlamaFields(
            unit_layer=layer,
            unit_slot=np.array([r[2] for r in rows], dtype=np.int64),
            unit_bytes=size,
            unit_ms=ms,
            unit_names=[r[3] for r in rows],
            active_experts=4,
            dense_bytes=rng.integers(20, 80, n).astype(np.int64),
            speed=_speed(rng, p.n_gpus),
        )
        replace["free"] = p.free + int(size.sum() * 0.3 / p.n_gpus)
        if engine == "ik_llama.cpp":  # ik's units: a layer's gate and up fused into one
            f = replace["engine_fields"]
            base = {x.name: getattr(f, x.name) for x in dataclasses.fields(f)}
            fused = fuse(
                {k: base[k] for k in ("unit_layer", "unit_slot", "unit_bytes", "unit_ms", "unit_names")}
            )
            replace["engine_fields"] = IkFields(**(base | fused), max_compute=int(rng.integers(0, 30)))
    else:
        replace["kv_per_layer"] = rng.integers(0, 4, n).astype(np.int64)
        replace["free"] = p.free + int((experts * p.expert_bytes).sum() / p.n_gpus)
    return dataclasses.replace(p, **replace)
