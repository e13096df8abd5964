"""ik_llama.cpp's placement rules, re-implemented from its source: how its split mode layer puts layers
on devices (by bytes, not by count), which expert tensors ``-ncmoe``/``-cmoe`` and llama-bench's
``--n-cpu-moe`` send to the CPU, what ``--fit`` moves, and when a prompt's CPU experts are offloaded.

Read from github.com/ikawrakow/ik_llama.cpp at commit ``8337e4cd3861406fc04e0854b1409cd1b027fbc9``
(2026-08-15); each function names the C++ it follows. Conventions: a device is a position in the
model's device list (the ``-dev`` names in order, else the RPC devices then CUDA0..); ``CPU`` (-1) is
host memory. ``n_layer`` is ``hparams.n_layer``, which *includes* the MTP/NextN layers at the end;
slot ``n_layer`` of a per-layer list is the output layer. Float arithmetic follows the C++ types
(``float`` emulated with numpy.float32 where the rounding can matter).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: The commit of the ik_llama.cpp snapshot these rules were read from.
SNAPSHOT = "8337e4cd3861406fc04e0854b1409cd1b027fbc9"
#: Host memory (the CPU buffer type).
CPU = -1
#: src/llama.cpp, llm_load_tensors: ``constexpr size_t k_default_mem_margin = 1024 * 1024 * 1024``; taken
#: off every GPU's free memory before anything else, with or without ``--fit`` (``--fit-margin MiB`` and
#: ``-gfm GPU,MiB,...`` replace it).
DEFAULT_MEM_MARGIN = 1024**3
#: ggml/CMakeLists.txt ``GGML_CUDA_MIN_BATCH_OFFLOAD "32"``: ggml-cuda.cu cuda_params.offload_batch_size.
MIN_BATCH_OFFLOAD = 32
#: Split modes ik knows (include/llama.h enum llama_split_mode; common/common.cpp ``-sm``).
SPLIT_MODES = ("none", "layer", "attn", "graph")
#: The rule --fit adds for each layer whose experts it sends to the CPU (src/llama.cpp, llm_load_tensors).
FIT_PATTERN = r"blk\.{i}\.(ffn_(up|down|gate|gate_up)_exps\.(weight|scale))"


def roundf(x: float) -> int:
    """C ``roundf`` (halves away from zero) on a float32 value."""
    v = float(np.float32(x))
    return math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)


# ---------------------------------------------------------------------------------------------------
# -ngl
# ---------------------------------------------------------------------------------------------------


def effective_ngl(n_gpu_layers: int | None, n_gpus: int) -> int:
    """``-ngl`` as the loader sees it (src/llama.cpp, llama_model_load_from_file, PR #2209).

    Not given (common.h default -1) or negative: 999 when a GPU exists, else 0; any value with no GPU: 0.
    ``-ngl 0`` also drops every ``-ot`` rule and ``-ncmoe`` (``tensor_buft_overrides = nullptr; ncmoe = 0``).
    Builds before PR #2209 (2026-07-30) defaulted to 0 (everything on the CPU).
    """
    n = -1 if n_gpu_layers is None else n_gpu_layers
    if n < 0:
        return 999 if n_gpus > 0 else 0
    return 0 if n_gpus == 0 else n


def gpu_start(n_layer: int, n_gpu_layers: int) -> int:
    """``i_gpu_start = max(n_layer - n_gpu_layers, 0)`` (llm_load_tensors): layers below it run on the CPU.

    Unlike mainline (``n_layer + 1 - ngl``, the output counted as a slot), ik offloads every repeating
    layer with ``-ngl n_layer`` and puts the output layer on a GPU only when ``ngl > n_layer``.
    """
    return max(n_layer - n_gpu_layers, 0)


# ---------------------------------------------------------------------------------------------------
# Layer split (split mode layer): by bytes, not by layer count
# ---------------------------------------------------------------------------------------------------


def split_weights(
    tensor_split: Sequence[float], free: Sequence[int], margins: Sequence[int] | None = None
) -> list[float]:
    """The per-device weights of the split (llm_load_tensors, ``splits`` before normalising).

    The first ``len(free)`` ``-ts`` values when any is non-zero, else each device's free memory less its
    margin (``device_mem``: 0 when free <= margin). ``margins`` default to DEFAULT_MEM_MARGIN.
    """
    k = len(free)
    ts = [float(x) for x in tensor_split[:k]] + [0.0] * max(0, k - len(tensor_split))
    if any(x != 0.0 for x in ts):
        return ts
    return [float(m) for m in device_mem(free, margins)]


def device_mem(free: Sequence[int], margins: Sequence[int] | None = None) -> list[int]:
    """``device_mem[i]``: free bytes less the margin, 0 when free <= margin (llm_load_tensors)."""
    margins = list(margins) if margins is not None else [DEFAULT_MEM_MARGIN] * len(free)
    return [f - m if f > m else 0 for f, m in zip(free, margins, strict=True)]


def cumulative_splits(weights: Sequence[float]) -> list[float]:
    """``model.splits``: running float32 sums of the weights over their total (one device: ``{1.0f}``)."""
    if len(weights) < 2:
        return [1.0]
    acc = np.float32(0.0)
    sums = []
    for w in weights:
        acc = np.float32(acc + np.float32(w))
        sums.append(acc)
    return [float(np.float32(s / acc)) for s in sums]


def default_layer_devices(
    layer_sizes: Sequence[float], splits: Sequence[float], max_compute: float, n_gpu_layers: int
) -> list[int]:
    """``model.default_layer_device`` (src/llama.cpp, llm_load_tensors), slots 0..n_layer (output last).

    ``layer_sizes`` come from get_layer_sizes (n_layer + 1 values: every tensor of the layer, its KV cache
    at the full context ``-c`` (``n_ctx_train`` when 0), the output slot the output matrix and the logits
    beyond ``max_compute``); ``splits`` are ``cumulative_splits``. Every slot starts on the last device;
    with two or more devices a greedy walk over slots ``i_gpu_start .. n_last-1`` (``n_last`` includes the
    output slot only when ``ngl > n_layer``) gives device ``id`` layers while its running total (one
    ``max_compute`` per device plus the layers so far) stays within ``splits[id] * sum``; the first layer
    that would overshoot still goes to ``id`` when the overshoot is smaller than the room left.
    Slots below ``i_gpu_start`` keep the last device here (their buffers are the CPU's; see layer_placement).
    """
    n_layer = len(layer_sizes) - 1
    k = len(splits)
    dev = [k - 1] * (n_layer + 1)
    if k < 2:
        return dev
    start = gpu_start(n_layer, n_gpu_layers)
    n_last = n_layer + 1 if n_gpu_layers > n_layer else n_layer
    total = float(max_compute) * k
    for i in range(start, n_last):
        total += float(layer_sizes[i])
    last = start
    loaded = np.float32(0.0)
    for d in range(k):
        loaded = np.float32(float(loaded) + float(max_compute))
        split_size = np.float32(float(np.float32(splits[d])) * total)
        il = last
        while il < n_last:
            size = float(layer_sizes[il])
            if float(loaded) + size <= float(split_size):
                dev[il] = d
                loaded = np.float32(float(loaded) + size)
                il += 1
                continue
            room = np.float32(split_size - loaded)  # float - float in float
            if float(loaded) + size - float(split_size) < float(room):
                dev[il] = d
                loaded = np.float32(float(loaded) + size)
                il += 1
            break
        last = il
    return dev


@dataclass(frozen=True)
class LayerPlacement:
    """Where split mode layer puts things: ``layers[i]`` the device of layer i's tensors (CPU below
    ``i_gpu_start``), ``output`` the output layer's, ``default`` the raw default_layer_device list that
    ``-ncmoe`` counts (CPU layers on the last device)."""

    layers: list[int]
    output: int
    default: list[int]


def layer_placement(
    layer_sizes: Sequence[float],
    n_devices: int,
    n_gpu_layers: int,
    splits: Sequence[float] | None = None,
    max_compute: float = 0.0,
) -> LayerPlacement:
    """Layers and output on devices in split mode layer (llm_load_tensors, "assign the repeating layers").

    ``buft_layer[i]`` is the CPU for ``i < i_gpu_start``, else device ``default_layer_device[i]``; the output
    goes to ``default_layer_device[n_layer]`` when ``ngl > n_layer``, else to the CPU. No devices: all CPU.
    """
    n_layer = len(layer_sizes) - 1
    if n_devices == 0 or n_gpu_layers == 0:
        return LayerPlacement([CPU] * n_layer, CPU, [CPU] * (n_layer + 1))
    if splits is None:
        splits = cumulative_splits([1.0] * n_devices)
    default = default_layer_devices(layer_sizes, splits, max_compute, n_gpu_layers)
    start = gpu_start(n_layer, n_gpu_layers)
    layers = [CPU if i < start else default[i] for i in range(n_layer)]
    output = default[n_layer] if n_gpu_layers > n_layer else CPU
    return LayerPlacement(layers, output, default)


# ---------------------------------------------------------------------------------------------------
# -ncmoe / --n-cpu-moe / -cmoe
# ---------------------------------------------------------------------------------------------------

#: The rule one -ncmoe layer gets on the single-device path (create_tensors_helper constructor).
NCMOE_PATTERN_ONE = r"blk\.{i}\.ffn_(up|down|gate|gate_up)_exps\.(weight|scale)"
#: The rule one -ncmoe layer gets on the several-device path (split mode layer, 2+ devices).
NCMOE_PATTERN_MANY = r"blk\.{i}\.(ffn_(up|down|gate|gate_up)_exps\.weight)"
#: llama-bench's ``--n-cpu-moe N`` rule for each of layers 0..N-1 (llama-bench.cpp add_cpu_buft_overrides).
BENCH_NCMOE_PATTERN = r"blk\.{i}\.(ffn_(up|down|gate)_exps\.weight)"


def ncmoe_device_counts(counts: Sequence[int], n_layer: int, n_cpu_moe: int) -> list[int]:
    """How many of each device's layers get CPU rules (create_tensors_helper, split mode layer, PR #1464).

    ``n_override[i] = roundf(counts[i] / n_layer * ncmoe)``; while the total exceeds ncmoe, take one from
    the device (with one to give) whose ``n_override - 1 - n_want`` is largest; while short, add one to the
    device (below its count) whose ``n_override + 1 - n_want`` is smallest (``n_want = counts*ncmoe/n_layer``;
    ties to the lowest device). All in float32.
    """
    f32 = np.float32
    want = [f32(f32(f32(c) * f32(n_cpu_moe)) / f32(n_layer)) for c in counts]
    out = [roundf(f32(f32(c) / f32(n_layer)) * f32(n_cpu_moe)) for c in counts]
    total = sum(out)
    while total > n_cpu_moe:
        best, pick = -1e30, -1
        for i, n in enumerate(out):
            if n == 0:
                continue
            err = float(f32(f32(n - 1) - want[i]))
            if err > best:
                best, pick = err, i
        if pick < 0:
            break
        out[pick] -= 1
        total -= 1
    while total < n_cpu_moe:
        best, pick = 1e30, -1
        for i, n in enumerate(out):
            if n >= counts[i]:
                continue
            err = float(f32(f32(n + 1) - want[i]))
            if err < best:
                best, pick = err, i
        if pick < 0:
            break
        out[pick] += 1
        total += 1
    return out


def ncmoe_path(split_mode: str, n_cpu_moe: int, n_layer: int, n_devices: int) -> str:
    """Which branch of the create_tensors_helper constructor ``-ncmoe`` takes: ``"one"`` (the last N MoE
    layers of the model), ``"many"`` (spread over the devices) or ``"none"`` (no rule at all).

    ``"one"`` for split mode attn/graph, ``ncmoe >= n_layer`` (so every ``-cmoe``, which sets 999) or fewer
    than 2 devices; else ``"many"`` for split mode layer; else (``-sm none`` with 2+ devices) nothing:
    the flag is silently ignored. ``-ncmoe 0`` adds nothing.
    """
    if n_cpu_moe <= 0:
        return "none"
    if split_mode in ("attn", "graph") or n_cpu_moe >= n_layer or n_devices < 2:
        return "one"
    if split_mode == "layer":
        return "many"
    return "none"


def cpu_moe_layers(
    n_layer: int,
    n_cpu_moe: int,
    default_devices: Sequence[int] | None = None,
    n_devices: int = 1,
    split_mode: str = "layer",
    moe_layers: Sequence[int] | None = None,
    nextn_layers: int = 0,
) -> list[int]:
    """The layers whose expert tensors ``-ncmoe N`` (``-cmoe`` = 999) sends to the CPU, in the order ik adds
    their rules (create_tensors_helper constructor, src/llama-load-tensors.cpp).

    One device (or graph/attn, or N >= n_layer): walking down from the last non-MTP layer
    (``n_layer - nextn_layers - 1``), the first N layers that have ``ffn_down_exps`` (``moe_layers``;
    default every layer) — PR #2262; before it (2026-08-07) this path took layers 0..N-1.
    Several devices, split mode layer (PR #1464): ``ncmoe_device_counts`` over each device's count of
    ``default_devices[0:n_layer]`` (CPU layers below ``-ngl`` count on the last device), then walking down
    from layer ``n_layer - 1`` (MTP layers included, MoE or not), each layer whose device still has rules
    left takes one. ``-sm none`` with several devices: none.
    """
    path = ncmoe_path(split_mode, n_cpu_moe, n_layer, n_devices)
    if path == "none":
        return []
    if path == "one":
        moe = set(range(n_layer)) if moe_layers is None else set(moe_layers)
        out: list[int] = []
        for i in range(n_layer - nextn_layers - 1, -1, -1):
            if i in moe:
                out.append(i)
                if len(out) == n_cpu_moe:
                    break
        return out
    if default_devices is None:
        raise ValueError("several devices: give default_devices (default_layer_devices)")
    counts = [0] * n_devices
    for i in range(n_layer):
        d = default_devices[i]
        if not 0 <= d < n_devices:
            raise ValueError(f"Unexpected device configuration (layer {i} on {d})")
        counts[d] += 1
    left = ncmoe_device_counts(counts, n_layer, n_cpu_moe)
    out = []
    for i in range(n_layer - 1, -1, -1):
        d = default_devices[i]
        if left[d] > 0:
            out.append(i)
            left[d] -= 1
    return out


def ncmoe_rules(layers: Sequence[int], path: str) -> list[tuple[str, str]]:
    """The ``(regex, "CPU")`` rules for ``cpu_moe_layers`` as ik writes them for that path."""
    pattern = NCMOE_PATTERN_ONE if path == "one" else NCMOE_PATTERN_MANY
    return [(pattern.format(i=i), "CPU") for i in layers]


def bench_ncmoe_rules(n_cpu_moe: int) -> list[tuple[str, str]]:
    """llama-bench's ``--n-cpu-moe N``: rules for layers 0..N-1 (the *first* N, unlike llama-server), no
    ``gate_up``, buffer CPU; appended to the -ot list where the flag stands (add_cpu_buft_overrides)."""
    return [(BENCH_NCMOE_PATTERN.format(i=i), "CPU") for i in range(n_cpu_moe)]


def tensor_device(name: str, home: int, rules: Sequence[tuple[str, int]]) -> int:
    """create_tensors_helper::get_context_for_tensor: the first rule whose regex ``std::regex_search``-es
    the name sends the tensor to its device; else the tensor stays at ``home``. ik's list is the user's
    ``-ot`` rules in command order, *then* the ``-ncmoe`` rules, so an ``-ot`` rule wins over ``-ncmoe``.
    ``-ncmoe`` counts layers without looking at ``-ot``."""
    for pattern, dev in rules:
        if re.search(pattern, name):
            return dev
    return home


# ---------------------------------------------------------------------------------------------------
# fused up/gate (-fmoe on by default; -no-fmoe) and merged tensors (-muge)
# ---------------------------------------------------------------------------------------------------


def offload_min_batch(
    n_expert: int,
    n_expert_used: int,
    offload_batch_size: int = MIN_BATCH_OFFLOAD,
    per_byte: int = -1,
    bytes_per_weight: float | None = None,
) -> int:
    """The least batch (tokens in the ubatch) for which ggml_backend_cuda_offload_op offloads a
    MUL_MAT_ID / MOE_FUSED_UP_GATE whose weight is in host memory (ggml/src/ggml-cuda.cu, PR #520).

    ``batch >= m and batch * n_expert_used >= m * n_expert``, with ``m`` the ``-cuda offload-batch-size=N``
    value (default GGML_CUDA_MIN_BATCH_OFFLOAD = 32) or, when ``-cuda offload-batch-size-per-byte=P`` is
    given (PR #1813), ``int(P * row_size / ne0)`` (P times the weight's bytes per value).
    """
    m = offload_batch_size
    if per_byte >= 0:
        if bytes_per_weight is None:
            raise ValueError("per_byte needs bytes_per_weight (row_size / ne0 of the weight)")
        m = int(per_byte * bytes_per_weight)
    need = -(-m * n_expert // n_expert_used) if n_expert_used > 0 else m
    return max(m, need)


# ---------------------------------------------------------------------------------------------------
# --fit (PR #1501)
# ---------------------------------------------------------------------------------------------------


class FitError(RuntimeError):
    """ik throws "Unable to auto-fit model" (or refuses --fit with -ot / -ncmoe)."""


@dataclass
class FitResult:
    """Layers whose experts ``--fit`` sends to the CPU (in the order ik adds the rules), and log lines."""

    layers: list[int] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    layer_devices: list[int] | None = None
    gpu_start: int = 0


def fit_check(has_ot: bool, n_cpu_moe: int) -> None:
    """--fit refuses user overrides and -ncmoe/-cmoe (llm_load_tensors), and then forces ``-ngl 999``."""
    if has_ot:
        raise FitError("Manual tensor overrides cannot be used with --fit")
    if n_cpu_moe > 0:
        raise FitError("-ncmoe | --n-cpu-moe cannot be used with --fit")


def fit_layer_mode(
    layer_sizes: Sequence[int],
    expert_bytes: Sequence[int],
    default_devices: Sequence[int],
    device_budget: Sequence[int],
    max_compute: int = 0,
) -> FitResult:
    """--fit, split mode layer, MoE model (llm_load_tensors, ``fit && required_mem > available_mem``).

    Runs only when the total need ``sum(layer_sizes)`` exceeds ``sum(max(budget - max_compute, 0))``
    (``device_budget`` = free less the margin, device_mem). Then for each device: its need is the sum of
    its slots (output included); if over its budget, walk its layers from the last down, subtracting each
    layer's expert bytes (up+gate+down, or gate_up+down) and adding a CPU rule
    ``blk\\.N\\.(ffn_(up|down|gate|gate_up)_exps\\.(weight|scale))`` for each layer with experts, until it
    fits;
    FitError if all its experts are off and it still does not. A device that overflows while the total
    fits is left alone. The context is never shrunk and the layer split is not redone.
    """
    n_layer = len(layer_sizes) - 1
    res = FitResult()
    required = sum(layer_sizes)
    available = sum(b - max_compute for b in device_budget if b > max_compute)
    if required <= available:
        return res
    for d, budget in enumerate(device_budget):
        mem = sum(layer_sizes[i] for i in range(n_layer + 1) if default_devices[i] == d)
        cur, n_override = mem, 0
        if cur > budget:
            for il in range(n_layer - 1, -1, -1):
                if default_devices[il] != d:
                    continue
                if expert_bytes[il] > 0:
                    cur -= expert_bytes[il]
                    res.layers.append(il)
                    res.log.append(f"Adding experts CPU overrides for layer {il} in device {d}")
                    n_override += 1
                if cur <= budget:
                    res.log.append(
                        f"Memory use in device {d} is {cur // 2**20} MiB after adding {n_override} "
                        "overrides, "
                        f"which is less than available memory of {budget // 2**20} MiB"
                    )
                    break
        if cur > budget:
            raise FitError("Unable to auto-fit model")
    return res


def fit_rules(layers: Sequence[int]) -> list[tuple[str, str]]:
    """The ``(regex, "CPU")`` rules ``--fit`` adds for ``fit_layer_mode``'s layers, in its order."""
    return [(FIT_PATTERN.format(i=i), "CPU") for i in layers]
