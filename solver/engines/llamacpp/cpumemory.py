"""Whole layers on the CPU before the first stage (``-ngl``), opt-in with the rig key ``cpu_layers``.

The first stage, on a GPU of the main machine, may leave layers [0, c) wholly on the CPU, as llama.cpp's
``-ngl`` leaves its first layers there: their weights and KV cache in host memory, their time their
dense bytes and their experts' active share at ``host_bandwidth`` (what ``solve score`` prices a layer
``-ngl`` leaves there at), and the first GPU's compute buffer as llama.cpp counts it with those layers
on the CPU (pipeline parallelism off; a GPU backend offloads their matrix products, copying the weights
into the first device's compute buffer, from ``CUDA_OFFLOAD_MIN_BATCH`` tokens on). This module gives
what those buffers are for every c; the table (solver.engines.llamacpp.table) picks each first range's
best c.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from solver.engines.llamacpp import memory
from solver.engines.llamacpp.fields import LlamaKeys

if TYPE_CHECKING:
    from solver.files.config import ModelConfig, RigConfig

#: CPU layers past which the compute buffers no longer change: the buffer is the largest split's
#: intermediates and weight copies, and a run of alike layers counts as at most ``memory.RUN_CAP`` in
#: the figures' key, so a longer run on the CPU gives the same figures while the GPUs keep longer runs
#: too. One GPU left fewer is counted with its own; the first of several left a layer or two may count
#: a few KiB more (tests/engines/test_cpu_layers_memory.py holds the figures of many c to these).
FIGURE_LAYERS = memory.RUN_CAP + 2


@dataclass(frozen=True)
class CpuLayers:
    """The compute buffers with c = 1..L-1 layers on the CPU, each shape (L,) (0 at c = 0): ``first``,
    the first of several devices (its role when a later stage takes the output); ``only``, one device
    that also holds the output; ``host``, the host's (the larger of every expert on a GPU and of every kind of
    expert in host memory too). ``first`` is None on a rig of one GPU, ``only`` on one whose stages
    cannot be one alone (several GPUs, no idle GPUs); all None for a model without a ``geometry:``
    block (the allowance ``COMPUTE_BUFFER`` stays)."""

    first: np.ndarray | None = None
    only: np.ndarray | None = None
    host: np.ndarray | None = None


def cpu_layers_of(rig: RigConfig, model: ModelConfig) -> CpuLayers | None:
    """The rig's CPU-layer figures, or None where ``cpu_layers`` is off."""
    keys = rig.keys(LlamaKeys)
    if not keys.cpu_layers:
        return None
    g = memory.geometry(model)
    if g is None:
        return CpuLayers()
    flags = memory.run_flags(rig.context, keys.n_ubatch, keys.flash_attn == "on", model.kv_type)
    stored = memory.stored_bytes(model)
    offload = memory.offload_batch(keys.backend)
    n = model.layers
    several, alone = len(rig.gpus) > 1, len(rig.gpus) == 1 or rig.idle_gpus
    first, only, host = (np.zeros(n, dtype=np.int64) for _ in range(3))
    for c in range(1, min(n, FIGURE_LAYERS + 1)):
        if several:
            first[c], host[c] = _figures(g, flags, offload, stored, c, 2)
        if alone:
            only[c], alone_host = _figures(g, flags, offload, stored, c, 1)
            host[c] = max(host[c], alone_host)
    for x in (first, only, host):
        x[FIGURE_LAYERS + 1 :] = x[min(n - 1, FIGURE_LAYERS)]
    if alone:  # one GPU left a few layers: its own figures (its split is the plan's)
        for c in range(max(FIGURE_LAYERS + 1, n - memory.RUN_CAP), n):
            only[c], alone_host = _figures(g, flags, offload, stored, c, 1)
            host[c] = max(host[c], alone_host)
    return CpuLayers(first if several else None, only if alone else None, host)


def _figures(
    g: memory.Geometry, flags: memory.Flags, offload: int, stored: tuple, c: int, devices: int
) -> tuple[int, int]:
    """(first device's, host's) compute buffer with layers [0, c) on the CPU and the rest split over
    ``devices`` (the output on the last): the most of every expert on a GPU and, where the first device
    offloads, of each set of expert kinds in host memory too (which a stage's fill may leave there),
    with ``memory.OFFLOAD_MARGIN`` for a mixed placement of them as ``memory.offload_compute`` counts."""
    rest = g.n_layer_all + 1 - c
    slots = [-1] * c + [min(i * devices // rest, devices - 1) for i in range(rest)]
    kinds = memory.expert_kinds(stored)
    rules: list[tuple[tuple[str, str], ...]] = [()]
    for r in range(1, len(kinds) + 1 if offload else 1):
        rules += [((f"\\.({'|'.join(chosen)})\\.", "CPU"),) for chosen in itertools.combinations(kinds, r)]
    weights = dict(stored).get
    device = host = 0
    for overrides in rules:
        p = memory.Placement(devices, overrides=overrides, slots=tuple(slots))
        out = memory.compute_bytes(g, p, flags, offload, weights, 0)
        margin = memory.OFFLOAD_MARGIN if overrides and offload else 0
        device, host = max(device, out[0] + margin), max(host, out[-1])
    return device, host
