"""Engine flags that realise a plan: Strata, vLLM and llama.cpp."""

from __future__ import annotations

import json

ENGINES = ("strata", "vllm", "llama.cpp")


def engine_flags(engine: str, gpus: list[int], cuts: list[int], n_layers: int) -> list[str]:
    """Lines to paste: the engine's flag for the split, and the device order when it changed."""
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, n_layers])]
    joined = ",".join(map(str, sizes))
    reordered = list(gpus) != sorted(gpus)
    devices = [f"CUDA_VISIBLE_DEVICES={','.join(map(str, gpus))}"] if reordered else []
    if engine == "strata":
        config = json.dumps({"layer_split": cuts})[1:-1]
        if not cuts:  # one stage: an empty --layer-split would be a broken flag
            return [*devices, "# one GPU runs every layer: no --layer-split needed", config]
        return [*devices, f"--layer-split {','.join(map(str, cuts))}", config]
    if engine == "vllm":
        return [*devices, f"VLLM_PP_LAYER_PARTITION={joined}"]
    if engine == "llama.cpp":
        return [*devices, f"--split-mode layer --tensor-split {joined}"]
    raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
