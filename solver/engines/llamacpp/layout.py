"""Where llama.cpp puts layers by itself, and the memory it takes besides the weights.

``load_tensors`` gives each layer slot (the output last) a device by the ``--tensor-split`` values, or
without them by each device's free memory; every GPU keeps a compute buffer, and the output device the
logits of a micro-batch (docs/engines.md, "Memory the engine takes").
"""

from __future__ import annotations

import numpy as np

#: The allowance for llama.cpp's compute buffer on each GPU besides the output logits, for a model file
#: without a ``geometry:`` block (graph intermediates at the default n_ubatch 512 with flash attention;
#: docs/engines.md, "Memory the engine takes"); with one, solver.engines.llamacpp.memory computes it.
COMPUTE_BUFFER = 256 * 2**20

#: The allowance for llama.cpp's host compute buffer per 512 tokens of micro-batch, where experts run on
#: the host, for a model file without a ``geometry:`` block (the buffer grows with the micro-batch; with
#: a geometry, solver.engines.llamacpp.memory computes it: docs/engines.md, "Memory the engine takes").
HOST_COMPUTE_BUFFER = 256 * 2**20


def slot_devices(weights: np.ndarray, n_blocks: int, n_gpu_layers: int) -> list[int | None]:
    """``load_tensors``: the device (a position in the model's device list) of slots 0..n_blocks, None
    for the CPU; slot n_blocks is the output layer.

    ``weights`` are the devices' split (the ``--tensor-split`` values, or their free memory), as float32,
    not all zero. ``splits`` is their cumulative float32 sum over its total; with ``i_gpu_start =
    max(n_blocks + 1 - ngl, 0)`` and ``act = min(ngl, n_blocks + 1)``, slot il goes to
    ``upper_bound(splits, float(il - i_gpu_start) / act)``, or to the CPU outside [i_gpu_start,
    i_gpu_start + act).
    """
    if len(weights) == 0:
        return [None] * (n_blocks + 1)
    splits = np.cumsum(np.asarray(weights, dtype=np.float32), dtype=np.float32)
    splits = splits / splits[-1]
    start = max(n_blocks + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_blocks + 1)
    head = min(start, n_blocks + 1)
    x = np.arange(max(min(act, n_blocks + 1 - head), 0), dtype=np.float32) / np.float32(act)  # as float32
    on = np.minimum(np.searchsorted(splits, x, side="right"), len(splits) - 1).tolist()
    return [None] * head + on + [None] * (n_blocks + 1 - head - len(on))


def free_memory_split(free: np.ndarray, n_layers: int, extra_blocks: int = 0) -> list[int]:
    """Layers per device when ``--tensor-split`` is not given: llama.cpp splits by free memory.

    Every slot on the GPUs (``slot_devices`` with all layers offloaded); the file's ``extra_blocks``
    after the planned layers (MTP) and the output slot come last; the counts are the planned layers'.
    """
    n_blocks = n_layers + extra_blocks
    where = slot_devices(free.astype(np.float32), n_blocks, n_blocks + 1)[:n_layers]
    return np.bincount(np.array(where, dtype=np.int64), minlength=len(free)).tolist()
