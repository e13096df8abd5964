"""The memory llama.cpp allocates per device for one command, computed the way llama.cpp counts it.

For a model's ``Geometry`` (the ``geometry:`` block of a model file), a ``Placement`` (devices,
``-ngl``, ``-ts``, ``-ot``) and ``Flags`` (``-c -b -ub -fa -ctk -ctv``), ``estimate`` gives per device
and for the host the two terms of ``llama-fit-params --fit-print on`` that are not weights:

* **context**: the KV cache (``src/llama-kv-cache.cpp``, ``llama_kv_cache``: per attention layer
  ``n_embd_k_gqa`` x cells of ``type_k`` plus the same for V, on the layer's device; cells are ``n_ctx``
  padded to 256; sliding-window layers hold ``min(n_ctx, n_swa + n_ubatch)`` padded to 256,
  ``llama_kv_cache_iswa``) and the recurrent state (``src/llama-memory-recurrent.cpp``: conv and SSM
  state rows of one sequence, f32). Exact.
* **compute**: the high-water mark of each backend's compute buffer when llama.cpp reserves its
  worst-case graph (``src/llama-context.cpp``, ``llama_context::sched_reserve``: ``n_tokens =
  min(n_ctx, n_ubatch)``, one sequence, every token an output). The graph is rebuilt op by op
  (``build_graph``, after ``src/models/<arch>.cpp`` and ``src/llama-graph.cpp``) and handed to
  ``ggmlalloc``, a port of ggml's scheduler and allocator, so this is derived, not fitted.

The weights are not counted here: the model file's byte fields give them (docs/engines.md, "Memory
the engine takes"). The graph needs only the weights' names and shapes, which ``weight_shapes`` derives
from the geometry: a weight's type changes neither the ops' result shapes (every MUL_MAT and GET_ROWS
result is f32) nor where the scheduler puts them (a weight pulls its ops to its buffer's backend, whatever
its type), so the compute buffer does not depend on the weights' types.

The devices are modelled as llama.cpp's CPU-backed RPC devices (what the engine tests run): they
support every op, report async compute and events (so with every layer offloaded, no tensor override
and more than one device the scheduler keeps 4 copies of each split input: pipeline parallelism), and
never offload an op whose weights sit in host memory. docs/engines.md says how a CUDA build differs.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import gc
import itertools
import math
import operator
import re
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from solver.engines.llamacpp import ggmlalloc
from solver.engines.llamacpp.ggmlalloc import Graph, Tensor, row_size
from solver.engines.llamacpp.otrules import Names
from solver.errors import InputError
from solver.units import per_layer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from solver.files.config import ModelConfig

#: The CPU buffer's alignment (``TENSOR_ALIGNMENT``, and so a CPU RPC server's).
ALIGNMENT = 32
#: llama.cpp's defaults for ``-b`` and ``-ub`` (``common/common.h``, ``common_params``).
N_BATCH = 2048
N_UBATCH = 512


# ---- inputs -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Geometry:
    """What the graph and the cache need to know about a model (the keys llama.cpp's loader reads).

    ``n_layer`` counts the trunk layers; ``n_layer_nextn`` more (MTP) layers follow them in the file and
    in the layer numbering (they take a layer slot but are not loaded). Per-layer tuples have ``n_layer``
    entries. ``head_kv[il]`` is 0 for a recurrent layer; ``swa[il]`` marks sliding-window layers (window
    ``n_swa``). ``moe_layers[il]`` marks layers with routed experts; the others run a dense FFN of width
    ``n_ff[il]``. MLA models give ``kv_lora_rank`` (the K cache row is ``kv_lora_rank + n_rot``, V is a
    view of it), ``q_lora_rank`` (0: one Q projection) and the decompressed head sizes
    ``head_k_mla``/``head_v_mla``. Gated DeltaNet layers use the ``ssm_*`` sizes. ``qk_norm``: Q and K
    are RMS-normed per head; ``attn_bias``: Q, K and V have biases; ``expert_probs_bias``: the router
    adds a selection bias (``exp_probs_b``)."""

    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    head_kv: tuple[int, ...]
    head_k: int
    head_v: int
    n_rot: int
    n_vocab: int
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_ff_shexp: int
    n_ff: tuple[int, ...]
    moe_layers: tuple[bool, ...]
    n_layer_nextn: int = 0
    n_swa: int = 0
    swa: tuple[bool, ...] = ()
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    head_k_mla: int = 0
    head_v_mla: int = 0
    ssm_conv: int = 0
    ssm_state: int = 0
    ssm_groups: int = 0
    ssm_dt_rank: int = 0
    ssm_inner: int = 0
    expert_gating: str = "softmax"  # softmax | sigmoid | softmax_weight
    expert_weights_norm: bool = False
    expert_weights_scale: float = 0.0
    n_expert_groups: int = 0
    n_group_used: int = 0
    qk_norm: bool = False
    attn_bias: bool = False
    expert_probs_bias: bool = False

    @property
    def n_layer_all(self) -> int:
        return self.n_layer + self.n_layer_nextn

    def is_recurrent(self, il: int) -> bool:
        return il < self.n_layer and self.head_kv[il] == 0

    def is_swa(self, il: int) -> bool:
        return bool(self.swa) and il < len(self.swa) and self.swa[il]


def _layers(value: int | list[int], n: int, key: str) -> tuple[int, ...]:
    if isinstance(value, list):
        if len(value) != n:
            raise InputError("model", f"geometry: {key} has {len(value)} values for {n} layers")
        return tuple(value)
    return (value,) * n


def geometry(model: ModelConfig) -> Geometry | None:
    """The geometry of a model file, from its ``geometry:`` block and its ``layers``, ``experts``,
    ``active_experts``, ``vocab_size`` and ``nextn_layers``; None when it has no block (a hand-written
    model: the engine then counts an allowance for the compute buffer)."""
    b, n = model.geometry, model.layers
    if b is None:
        return None
    if model.vocab_size is None or model.active_experts is None:
        raise InputError("model", "a model with a geometry block needs vocab_size and active_experts")
    experts = _layers(model.experts, n, "experts")
    if any(il >= n for il in b.swa_layers):
        raise InputError("model", f"geometry: swa_layers names a layer beyond the {n} layers")
    return Geometry(
        arch=b.arch, n_layer=n, n_embd=b.n_embd, n_head=b.n_head, head_kv=_layers(b.head_kv, n, "head_kv"),
        head_k=b.head_k, head_v=b.head_v, n_rot=b.n_rot, n_vocab=model.vocab_size, n_expert=max(experts),
        n_expert_used=model.active_experts, n_ff_exp=b.n_ff_exp, n_ff_shexp=b.n_ff_shexp,
        n_ff=_layers(b.n_ff, n, "n_ff"), moe_layers=tuple(e > 0 for e in experts),
        n_layer_nextn=model.nextn_layers, n_swa=b.swa_window,
        swa=tuple(il in set(b.swa_layers) for il in range(n)) if b.swa_layers else (),
        kv_lora_rank=b.kv_lora_rank, q_lora_rank=b.q_lora_rank, head_k_mla=b.head_k_mla,
        head_v_mla=b.head_v_mla, ssm_conv=b.ssm_conv, ssm_state=b.ssm_state, ssm_groups=b.ssm_groups,
        ssm_dt_rank=b.ssm_dt_rank, ssm_inner=b.ssm_inner, expert_gating=b.expert_gating,
        expert_weights_norm=b.expert_weights_norm, expert_weights_scale=b.expert_weights_scale,
        n_expert_groups=b.expert_groups, n_group_used=b.expert_groups_used, qk_norm=b.qk_norm,
        attn_bias=b.attn_bias, expert_probs_bias=b.expert_probs_bias,
    )  # fmt: skip


@dataclass(frozen=True)
class Placement:
    """Where a command puts the model: ``n_devices`` GPUs, ``n_gpu_layers`` (``-ngl``, -1 for all),
    ``tensor_split`` (``-ts``, None for an even split) and the ``-ot PATTERN=TARGET`` overrides in order
    (the first pattern that ``re.search`` matches wins), TARGET being ``CPU`` or a device ``RPCi``.
    ``slots``, when given, is the device of every layer slot (the output last; -1 the CPU) as the command
    puts them, instead of ``-ngl`` and ``-ts``."""

    n_devices: int
    n_gpu_layers: int = -1
    tensor_split: tuple[float, ...] | None = None
    overrides: tuple[tuple[str, str], ...] = ()
    slots: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Flags:
    """Context flags: ``-c``, ``-b``, ``-ub``, ``-fa`` (True/False), ``-ctk``, ``-ctv``."""

    n_ctx: int
    n_batch: int = N_BATCH
    n_ubatch: int = N_UBATCH
    flash_attn: bool = True
    type_k: str = "f16"
    type_v: str = "f16"


def effective(f: Flags) -> Flags:
    """The batch sizes ``llama_context`` actually uses: ``n_batch`` is capped by the (unpadded)
    context, ``n_ubatch`` by ``n_batch``."""
    n_batch = min(f.n_ctx, f.n_batch)
    return Flags(f.n_ctx, n_batch, min(n_batch, f.n_ubatch), f.flash_attn, f.type_k, f.type_v)


@dataclass
class Usage:
    """Bytes of one device (or the host) besides its weights, as llama.cpp counts them."""

    context: int = 0
    compute: int = 0


@dataclass
class Estimate:
    """Per-device usage in llama.cpp's device order, the host's, and whether pipeline parallelism
    (4 copies of every split input) is on."""

    devices: list[Usage]
    host: Usage
    pipeline_parallel: bool = False


# ---- placement ------------------------------------------------------------------------------------------


def layer_devices(g: Geometry, p: Placement) -> list[int]:
    """The device of layers ``0..n_layer_all`` (the last entry is the output layer); -1 is the CPU.

    ``llama_model::load_tensors`` (``src/llama-model.cpp``): the last ``n_gpu_layers`` of the
    ``n_layer_all + 1`` layers are offloaded; offloaded layer ``i`` goes to the first device whose
    cumulative split fraction exceeds ``i / n_offloaded`` (float32 compares)."""
    if p.slots is not None:
        return list(p.slots)
    n = g.n_layer_all
    ngl = n + 1 if p.n_gpu_layers < 0 else p.n_gpu_layers
    split = list(p.tensor_split) if p.tensor_split else [1.0] * p.n_devices
    split += [0.0] * (p.n_devices - len(split))
    total = sum(split)
    bounds, acc = [], 0.0
    for s in split:
        acc += s
        bounds.append(_f32(acc / total))
    start = max(n + 1 - ngl, 0)
    act = min(ngl, n + 1)
    out = []
    for il in range(n + 1):
        if il < start or il - start >= act:
            out.append(-1)
            continue
        x = _f32((il - start) / act)
        out.append(next((d for d, b in enumerate(bounds) if x < b), p.n_devices - 1))
    return out


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


_LAYER_RE = re.compile(r"^blk\.(\d+)\.")
#: ``_weight_slots``' layer of the input embedding and of the output layer's weights.
_EMBEDDING, _OUTPUT = -1, -2


def weight_shapes(g: Geometry) -> dict[str, tuple[int, ...]]:
    """The weights llama.cpp's loader creates for the trunk (``llama_model::load_tensors``), by GGUF
    name, with their GGML shapes; the NextN/MTP layers are left out (``load_mtp`` is off by default, so
    their tensors are skipped). A tied head (no ``output.weight`` in the file) is a duplicate of the
    embedding placed with the output layer, so the output weight is always listed."""
    h, w = g.n_embd, {}
    w["token_embd.weight"] = (h, g.n_vocab)
    w["output_norm.weight"] = (h,)
    w["output.weight"] = (h, g.n_vocab)
    for il in range(g.n_layer):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = (h,)
        if g.arch == "qwen3next":
            _qwen3next_weights(g, il, w)
            continue
        if g.kv_lora_rank:
            _mla_weights(g, il, w)
        else:
            q, kv = g.n_head * g.head_k, g.head_kv[il] * g.head_k
            w[p + "attn_q.weight"], w[p + "attn_k.weight"] = (h, q), (h, kv)
            w[p + "attn_v.weight"] = (h, g.head_kv[il] * g.head_v)
            w[p + "attn_output.weight"] = (g.n_head * g.head_v, h)
            if g.attn_bias:
                w[p + "attn_q.bias"], w[p + "attn_k.bias"] = (q,), (kv,)
                w[p + "attn_v.bias"] = (g.head_kv[il] * g.head_v,)
            if g.qk_norm:
                w[p + "attn_q_norm.weight"], w[p + "attn_k_norm.weight"] = (g.head_k,), (g.head_k,)
            if g.arch == "gpt-oss":
                w[p + "attn_output.bias"], w[p + "attn_sinks.weight"] = (h,), (g.n_head,)
        post = "post_attention_norm" if g.arch in ("gpt-oss", "glm4moe") else "ffn_norm"
        w[f"{p}{post}.weight"] = (h,)
        if not g.moe_layers[il]:
            _mlp_weights(w, p, h, g.n_ff[il])
            continue
        _expert_weights(g, il, w)
        if g.n_ff_shexp:
            _mlp_weights(w, p, h, g.n_ff_shexp, "_shexp")
    return w


def _mlp_weights(w: dict[str, tuple[int, ...]], p: str, h: int, width: int, suffix: str = "") -> None:
    w[f"{p}ffn_gate{suffix}.weight"] = (h, width)
    w[f"{p}ffn_up{suffix}.weight"] = (h, width)
    w[f"{p}ffn_down{suffix}.weight"] = (width, h)


def _expert_weights(g: Geometry, il: int, w: dict[str, tuple[int, ...]]) -> None:
    """The router (with gpt-oss's bias, or the selection bias) and the stacked expert matrices (with
    gpt-oss's per-expert biases)."""
    p, h, e, width = f"blk.{il}.", g.n_embd, g.n_expert, g.n_ff_exp
    w[p + "ffn_gate_inp.weight"] = (h, e)
    if g.expert_probs_bias:
        w[p + "exp_probs_b.bias"] = (e,)
    w[p + "ffn_gate_exps.weight"] = (h, width, e)
    w[p + "ffn_up_exps.weight"] = (h, width, e)
    w[p + "ffn_down_exps.weight"] = (width, h, e)
    if g.arch == "gpt-oss":
        w[p + "ffn_gate_inp.bias"] = (e,)
        w[p + "ffn_gate_exps.bias"] = (width, e)
        w[p + "ffn_up_exps.bias"] = (width, e)
        w[p + "ffn_down_exps.bias"] = (h, e)


def _mla_weights(g: Geometry, il: int, w: dict[str, tuple[int, ...]]) -> None:
    """DeepSeek's multi-head latent attention (``LLM_ARCH_DEEPSEEK2``): Q through a low-rank pair when
    ``q_lora_rank`` is set, the compressed KV projection and the per-head ``k_b``/``v_b`` matrices."""
    p, h, nh = f"blk.{il}.", g.n_embd, g.n_head
    if g.q_lora_rank:
        w[p + "attn_q_a_norm.weight"] = (g.q_lora_rank,)
        w[p + "attn_q_a.weight"] = (h, g.q_lora_rank)
        w[p + "attn_q_b.weight"] = (g.q_lora_rank, nh * g.head_k_mla)
    else:
        w[p + "attn_q.weight"] = (h, nh * g.head_k_mla)
    w[p + "attn_kv_a_norm.weight"] = (g.kv_lora_rank,)
    w[p + "attn_kv_a_mqa.weight"] = (h, g.kv_lora_rank + g.n_rot)
    w[p + "attn_k_b.weight"] = (g.head_k_mla - g.n_rot, g.kv_lora_rank, nh)
    w[p + "attn_v_b.weight"] = (g.kv_lora_rank, g.head_v_mla, nh)
    w[p + "attn_output.weight"] = (nh * g.head_v_mla, h)


def _qwen3next_weights(g: Geometry, il: int, w: dict[str, tuple[int, ...]]) -> None:
    """Qwen3-Next: a gated full-attention layer (Q doubled for the gate) or a Gated DeltaNet layer, then
    routed experts and a sigmoid-gated shared expert in every layer."""
    p, h = f"blk.{il}.", g.n_embd
    w[p + "post_attention_norm.weight"] = (h,)
    if g.is_recurrent(il):
        channels = 2 * g.ssm_groups * g.ssm_state + g.ssm_inner
        w[p + "attn_qkv.weight"] = (h, channels)
        w[p + "attn_gate.weight"] = (h, g.ssm_inner)
        w[p + "ssm_conv1d.weight"] = (g.ssm_conv, channels)
        w[p + "ssm_dt.bias"] = (g.ssm_dt_rank,)
        w[p + "ssm_a"] = (g.ssm_dt_rank,)
        w[p + "ssm_ba.weight"] = (h, 2 * g.ssm_dt_rank)
        w[p + "ssm_norm.weight"] = (g.ssm_state,)
        w[p + "ssm_out.weight"] = (g.ssm_inner, h)
    else:
        w[p + "attn_q.weight"] = (h, 2 * g.n_head * g.head_k)
        w[p + "attn_k.weight"] = (h, g.head_kv[il] * g.head_k)
        w[p + "attn_v.weight"] = (h, g.head_kv[il] * g.head_v)
        w[p + "attn_output.weight"] = (g.n_head * g.head_v, h)
        w[p + "attn_q_norm.weight"], w[p + "attn_k_norm.weight"] = (g.head_k,), (g.head_k,)
    _expert_weights(g, il, w)
    w[p + "ffn_gate_inp_shexp.weight"] = (h,)
    _mlp_weights(w, p, h, g.n_ff_shexp, "_shexp")


@functools.lru_cache(maxsize=8)
def _weight_slots(g: Geometry) -> tuple[tuple[str, int], ...]:
    """Each weight's name and the layer whose device it follows (``_OUTPUT``: the output layer, the last
    slot; ``_EMBEDDING``: the input embedding, which stays on the CPU)."""
    out = []
    for name in weight_shapes(g):
        m = _LAYER_RE.match(name)
        out.append((name, _EMBEDDING if name == "token_embd.weight" else int(m[1]) if m else _OUTPUT))
    return tuple(out)


def _matching(g: Geometry, pattern: str) -> tuple[str, ...]:
    """The weights an ``-ot`` pattern selects (``std::regex_search``); a --fit run repeats its patterns
    over tens of placements, so each is matched once."""
    names = _weight_index(g)
    return tuple(names.names[i] for i in names.found(pattern))


@functools.lru_cache(maxsize=8)
def _weight_index(g: Geometry) -> Names:
    """The weights' names, to search with ``-ot`` patterns."""
    return Names(_weight_names(g))


@functools.lru_cache(maxsize=8)
def _weight_names(g: Geometry) -> tuple[str, ...]:
    """The weights' names, in ``_weight_slots``' order."""
    return tuple(name for name, _ in _weight_slots(g))


def weight_buffers(g: Geometry, p: Placement) -> dict[str, str]:
    """The buffer each weight is loaded into, ``RPCi`` or ``CPU``: an ``-ot`` override's target
    (``llama-model-loader.cpp``: the first pattern ``std::regex_search`` matches), else its layer's
    device; the input embedding always stays on the CPU."""
    slots = _slot_buffers(layer_devices(g, p))
    out = {name: slots[layer] for name, layer in _weight_slots(g)}
    for name, target in _overridden(g, p):
        out[name] = target
    return out


def _slot_buffers(devs: list[int]) -> list[str]:
    """The buffer of each layer slot's weights (``layer_devices``' order), indexed by ``_weight_slots``'
    layers: the output layer's last but one (``_OUTPUT``), the CPU last (``_EMBEDDING``)."""
    names = ["CPU" if d == -1 else f"RPC{d}" for d in devs]
    return [*names, names[-1], "CPU"]


def _overridden(g: Geometry, p: Placement) -> Iterator[tuple[str, str]]:
    """Each weight an ``-ot`` override moves, with its target: the first pattern that matches it."""
    seen: set[str] = set()
    for pattern, target in p.overrides:
        for name in _matching(g, pattern):
            if name not in seen:
                seen.add(name)
                yield name, target


def _pad(n: int, a: int = ALIGNMENT) -> int:
    return (n + a - 1) // a * a


# ---- context ------------------------------------------------------------------------------------------


def kv_cells(n_ctx: int) -> int:
    """``llama_context``: n_ctx padded to 256 (one sequence)."""
    return (n_ctx + 255) // 256 * 256


def swa_cells(g: Geometry, f: Flags) -> int:
    """``llama_kv_cache_iswa``: the sliding-window cache holds ``n_swa + n_ubatch`` cells padded to
    256, never more than the full cache."""
    n = kv_cells(f.n_ctx)
    return min(n, (g.n_swa + f.n_ubatch + 255) // 256 * 256)


def kv_row_k(g: Geometry, il: int) -> int:
    """Elements of one K cache cell of layer ``il``: the MLA latent, or heads x head size."""
    return g.kv_lora_rank + g.n_rot if g.kv_lora_rank else g.head_kv[il] * g.head_k


def kv_row_v(g: Geometry, il: int) -> int:
    """Elements of one V cache cell: none for MLA, whose V is a view of the K cache."""
    return 0 if g.kv_lora_rank else g.head_kv[il] * g.head_v


def context_bytes(g: Geometry, p: Placement, f: Flags) -> dict[int, int]:
    """KV cache and recurrent state bytes per device (-1 is the CPU)."""
    f = effective(f)
    devs = layer_devices(g, p)
    out: dict[int, int] = {}
    for il in range(g.n_layer):
        dev = devs[il]
        if g.is_recurrent(il):
            n = _pad(recurrent_r_bytes(g)) + _pad(recurrent_s_bytes(g))
        else:
            cells = swa_cells(g, f) if g.is_swa(il) else kv_cells(f.n_ctx)
            n = _pad(row_size(f.type_k, kv_row_k(g, il)) * cells)
            if kv_row_v(g, il):
                n += _pad(row_size(f.type_v, kv_row_v(g, il)) * cells)
        out[dev] = out.get(dev, 0) + n
    return out


def recurrent_r_bytes(g: Geometry) -> int:
    """Conv state of one Gated DeltaNet layer: ``(d_conv - 1)`` columns of the conv channels, f32."""
    conv_dim = 2 * g.ssm_groups * g.ssm_state + g.ssm_inner
    return (g.ssm_conv - 1) * conv_dim * 4


def recurrent_s_bytes(g: Geometry) -> int:
    """Delta-rule state of one layer: a ``state x state`` matrix per value head, f32."""
    return g.ssm_state * g.ssm_state * g.ssm_dt_rank * 4


# ---- compute graph -----------------------------------------------------------------------------------


@dataclass
class _Ctx:
    """What the graph builders share: the graph, the weights by name, and the reservation's sizes."""

    g: Geometry
    f: Flags
    graph: Graph
    w: dict[str, Tensor]
    cache: dict[str, Tensor]
    n_tokens: int
    n_outputs: int
    n_kv: int
    n_kv_swa: int
    inputs: dict[str, Tensor] = field(default_factory=dict)

    def expand(self, t: Tensor) -> Tensor:
        self.graph.expand(t)
        return t


def _make_weights(g: Geometry, graph: Graph) -> dict[str, Tensor]:
    """The weights as pre-allocated graph tensors (their type does not matter here), in the CPU buffer
    until ``_place`` puts them where a placement does."""
    return {name: graph.weight("f32", ne, "CPU", name) for name, ne in weight_shapes(g).items()}


def _make_cache(g: Geometry, f: Flags, graph: Graph) -> dict[str, Tensor]:
    """Each layer's KV cache (or recurrent state) tensors, keyed by kind and layer (``k12``), in the CPU
    buffer until ``_place`` puts them on their layer's device."""
    out = {}
    buf = "CPU"
    for il in range(g.n_layer):
        if g.is_recurrent(il):
            out[f"r{il}"] = graph.cache("f32", (recurrent_r_bytes(g) // 4, 1), buf, f"cache_r_l{il}")
            out[f"s{il}"] = graph.cache("f32", (recurrent_s_bytes(g) // 4, 1), buf, f"cache_s_l{il}")
            continue
        cells = swa_cells(g, f) if g.is_swa(il) else kv_cells(f.n_ctx)
        out[f"k{il}"] = graph.cache(f.type_k, (kv_row_k(g, il), cells), buf, f"cache_k_l{il}")
        if kv_row_v(g, il):
            out[f"v{il}"] = graph.cache(f.type_v, (kv_row_v(g, il), cells), buf, f"cache_v_l{il}")
    return out


def _inp_embd(c: _Ctx) -> Tensor:
    """``build_inp_embd``: token rows, the embeddings input and the mixed-batch branch, selected."""
    gr, g, n = c.graph, c.g, c.n_tokens
    tokens = gr.input("i32", (n,), "inp_tokens")
    embd_in = gr.input("f32", (g.n_embd, n), "inp_embd")
    tok = c.w["token_embd.weight"]
    inps = [gr.get_rows(tok, tokens), embd_in]
    mixed_tokens = gr.input("i32", (n,), "inp_mixed_tokens")
    mixed_slots = gr.input("i64", (n,), "inp_mixed_slots")
    mixed_embd = gr.input("f32", (g.n_embd, n), "inp_mixed_embd")
    dup = gr.op("DUP", "f32", mixed_embd.ne, mixed_embd)
    inps.append(gr.set_rows(dup, gr.get_rows(tok, mixed_tokens), mixed_slots))
    for t in inps:
        gr.expand(t)
    inps[0].name = "embd"
    return inps[0]


def _norm(c: _Ctx, x: Tensor, w: Tensor | None, rms: bool = True) -> Tensor:
    gr = c.graph
    y = gr.unary("RMS_NORM" if rms else "NORM", x)
    return gr.op("MUL", y.type, y.ne, y, w) if w is not None else y


def _mm(c: _Ctx, name: str, x: Tensor, bias: bool = True) -> Tensor:
    """``build_lora_mm`` plus the bias ``NAME.bias`` when the model has one."""
    gr = c.graph
    y = gr.mul_mat(c.w[name + ".weight"], x)
    b = c.w.get(name + ".bias") if bias else None
    return gr.op("ADD", y.type, y.ne, y, b) if b is not None else y


@dataclass
class _AttnInputs:
    """The attention inputs of one cache (full or sliding window)."""

    k_idxs: Tensor
    v_idxs: Tensor
    mask: Tensor
    k_rot: Tensor | None
    v_rot: Tensor | None
    n_kv: int


def _attn_inputs(c: _Ctx, n_kv: int, v_gqa_max: int, suffix: str = "") -> _AttnInputs:
    """``build_attn_inp_kv``: cell indices for K and V (per element for a transposed V), the mask
    (f16 with flash attention, f32 without) and the Hadamard rotations of quantized caches."""
    gr, f, n = c.graph, c.f, c.n_tokens
    k_idxs = gr.input("i64", (n,), "attn_inp_k_idxs" + suffix)
    v_idxs = gr.input("i64", (n if f.flash_attn else n * v_gqa_max,), "attn_inp_v_idxs" + suffix)
    mask = gr.input("f16" if f.flash_attn else "f32", (n_kv, n, 1, 1), "attn_inp_kq_mask" + suffix)
    rot_k = _rot_size(c.g, f.type_k, c.g.head_k)
    rot_v = _rot_size(c.g, f.type_v, c.g.head_v, grow=False)
    k_rot = gr.input("f32", (rot_k, rot_k), "attn_inp_k_rot") if rot_k else None
    v_rot = gr.input("f32", (rot_v, rot_v), "attn_inp_v_rot") if rot_v else None
    return _AttnInputs(k_idxs, v_idxs, mask, k_rot, v_rot, n_kv)


def _rot_size(g: Geometry, cache_type: str, head: int, grow: bool = True) -> int:
    """``llama_kv_cache``: a quantized cache rotates heads with a Hadamard matrix of 64 (K: doubled
    while it divides the head size) when the head size is a multiple of 64."""
    if ggmlalloc.TYPES[cache_type][0] == 1 or head % 64 or g.kv_lora_rank:
        return 0
    n = 64
    while grow and head % (2 * n) == 0:
        n *= 2
    return n


def _hadamard(c: _Ctx, x: Tensor, rot: Tensor) -> Tensor:
    gr = c.graph
    n = rot.ne[0]
    r = gr.reshape(x, n, x.nelements // n) if x.is_contiguous() else gr.cont(x, n, x.nelements // n)
    y = gr.mul_mat(rot, r)
    return gr.reshape(y, *x.ne)


def _attention(
    c: _Ctx,
    il: int,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    inp: _AttnInputs,
    sinks: Tensor | None = None,
    wo: str | None = None,
) -> Tensor:
    """``build_attn`` with a KV cache: store K and V, attend over all ``n_kv`` cells (flash attention,
    or KQ, softmax and KQV), then the output projection."""
    gr, f, g = c.graph, c.f, c.g
    if inp.k_rot is not None:
        q = _hadamard(c, q, inp.k_rot)
        k = _hadamard(c, k, inp.k_rot)
    if inp.v_rot is not None:
        v = _hadamard(c, v, inp.v_rot)
    # build_attn expands Q, V, K; its sliding-window variant (llm_graph_input_attn_kv_iswa) Q, K, V
    for t in (q, k, v) if any(g.swa) else (q, v, k):
        c.expand(t)
    kc, vc = c.cache[f"k{il}"], c.cache[f"v{il}"]
    n_kv, hkv, dk, dv = inp.n_kv, g.head_kv[il], g.head_k, g.head_v
    # cpy_k / cpy_v
    k2 = gr.view_nd(k, (dk * hkv, k.ne[2]), (k.nb[2],))
    c.expand(gr.set_rows(kc, k2, inp.k_idxs))
    if f.flash_attn:
        v2 = gr.view_nd(v, (dv * hkv, v.ne[2]), (v.nb[2],))
        c.expand(gr.set_rows(vc, v2, inp.v_idxs))
    else:
        v2 = gr.reshape(v, dv * hkv, v.ne[2]) if v.is_contiguous() else gr.cont(v, dv * hkv, v.ne[2])
        vview = gr.reshape(vc, 1, vc.nelements)
        v2 = gr.reshape(v2, 1, v2.nelements)
        c.expand(gr.set_rows(vview, v2, inp.v_idxs))
    cells = kc.ne[1]
    kv = gr.view_nd(kc, (dk, hkv, n_kv, 1), (row_size(kc.type, dk), kc.nb[1], kc.nb[1] * cells))
    if f.flash_attn:
        vv = gr.view_nd(vc, (dv, hkv, n_kv, 1), (row_size(vc.type, dv), vc.nb[1], vc.nb[1] * cells))
    else:
        vv = gr.view_nd(
            vc,
            (n_kv, hkv, dv, 1),
            (row_size(vc.type, cells * dv), row_size(vc.type, cells), row_size(vc.type, cells * dv * hkv)),
        )
    cur = _mha(c, q, kv, vv, inp.mask, sinks)
    if inp.v_rot is not None:
        cur = _hadamard(c, cur, inp.v_rot)
    if wo is not None:
        cur = _mm(c, wo, cur)
    return cur


def _heads_major(gr: Graph, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``build_attn_mha``'s first step: Q as a 4-d view, then Q, K and V permuted to heads-major."""
    q = gr.view_nd(q, (q.ne[0], q.ne[1], q.ne[2], 1), (q.nb[1], q.nb[2], q.nb[2] * q.ne[2]))
    return gr.permute(q, 0, 2, 1, 3), gr.permute(k, 0, 2, 1, 3), gr.permute(v, 0, 2, 1, 3)


def _mha(c: _Ctx, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, sinks: Tensor | None) -> Tensor:
    """``build_attn_mha``: permute to heads-major; flash attention (f16 K/V) or the explicit
    ``KQ = K^T Q`` (f32, ``n_kv x n_tokens x n_head``), softmax in place, ``V KQ``."""
    gr, f = c.graph, c.f
    q, k, v = _heads_major(gr, q, k, v)
    if f.flash_attn:
        cur = gr.flash_attn_ext(q, k, v, mask, sinks)
        cur = gr.reshape(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
    else:
        kq = gr.mul_mat(k, q)
        kq = gr.soft_max_ext(kq, mask, sinks)
        kqv = gr.mul_mat(v, kq)
        cur = gr.permute(kqv, 0, 2, 1, 3)
        cur = gr.cont(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
    c.expand(cur)
    return cur


def _moe(c: _Ctx, il: int, x: Tensor, gating: str) -> Tensor:
    """``build_moe_ffn``: router logits, gating probabilities, top-k selection and weights (optionally
    normalised and scaled), then the selected experts' up/gate/down as MUL_MAT_ID over
    ``n_ff_exp x n_expert_used x n_tokens``, weighted and summed over the ``n_expert_used`` views."""
    gr, g = c.graph, c.g
    n, k = x.ne[1], g.n_expert_used
    pre = f"blk.{il}."
    logits = _mm(c, pre + "ffn_gate_inp", x)
    if gating == "softmax":
        probs = gr.unary("SOFT_MAX", logits)
    elif gating == "sigmoid":
        probs = gr.op("UNARY", logits.type, logits.ne, logits)
    else:
        probs = logits
    selection = probs
    bias = c.w.get(pre + "exp_probs_b.bias")
    if bias is not None:
        selection = gr.op("ADD", probs.type, probs.ne, probs, bias)
    if g.arch == "llama4":
        selection = logits
    if g.n_expert_groups > 1:
        selection = _group_mask(c, selection)
    selected = gr.argsort_top_k(selection, k)
    probs3 = gr.reshape(probs, 1, g.n_expert, n)
    weights = gr.get_rows(probs3, selected)
    if gating == "softmax_weight":
        w2 = gr.reshape(weights, k, n)
        w2 = gr.unary("SOFT_MAX", w2)
        weights = gr.reshape(w2, 1, k, n)
    if g.expert_weights_norm:
        w2 = gr.reshape(weights, k, n)
        s = gr.sum_rows(w2)
        s = gr.unary("CLAMP", s)
        w2 = gr.op("DIV", w2.type, w2.ne, w2, s)
        weights = gr.reshape(w2, 1, k, n)
    if g.expert_weights_scale not in (0.0, 1.0):
        weights = gr.unary("SCALE", weights)
    c.expand(weights)
    cur = gr.reshape(x, g.n_embd, 1, n)
    if g.arch == "llama4":
        rep = gr.repeat_4d(cur, g.n_embd, k, n, 1)
        cur = gr.op("MUL", rep.type, rep.ne, rep, weights)
    up = gr.mul_mat_id(c.w[pre + "ffn_up_exps.weight"], cur, selected)
    up_b = c.w.get(pre + "ffn_up_exps.bias")
    if up_b is not None:
        up = gr.op("ADD_ID", up.type, up.ne, up, up_b, selected)
    gate = gr.mul_mat_id(c.w[pre + "ffn_gate_exps.weight"], cur, selected)
    gate_b = c.w.get(pre + "ffn_gate_exps.bias")
    if gate_b is not None:
        gate = gr.op("ADD_ID", gate.type, gate.ne, gate, gate_b, selected)
    cur = gr.glu(gate, up)
    experts = gr.mul_mat_id(c.w[pre + "ffn_down_exps.weight"], cur, selected)
    down_b = c.w.get(pre + "ffn_down_exps.bias")
    if down_b is not None:
        experts = gr.op("ADD_ID", experts.type, experts.ne, experts, down_b, selected)
    if g.arch != "llama4":
        experts = gr.op("MUL", experts.type, experts.ne, experts, weights)
    c.expand(experts)
    views = [gr.view_nd(experts, (g.n_embd, n), (experts.nb[2],), i * experts.nb[1]) for i in range(k)]
    for v in views:
        c.expand(v)
    out = views[0]
    for v in views[1:]:
        out = gr.op("ADD", out.type, (out.ne[0], out.ne[1]), out, v)
        c.expand(out)
    if k == 1:
        out = gr.cont(out)
    return out


def _group_mask(c: _Ctx, sel: Tensor) -> Tensor:
    """DeepSeek-V3 group-limited routing: score each expert group by its top two, keep the best
    ``n_group_used`` groups and mask the others' experts to -inf before the top-k."""
    gr, g = c.graph, c.g
    n = sel.ne[1]
    per = g.n_expert // g.n_expert_groups
    groups = gr.reshape(sel, per, g.n_expert_groups, n)
    top2 = gr.argsort_top_k(groups, 2)
    scores = gr.get_rows(gr.reshape(groups, 1, per, g.n_expert_groups, n), top2)
    scores = gr.sum_rows(gr.reshape(scores, scores.ne[1], scores.ne[2], scores.ne[3]))
    scores = gr.reshape(scores, scores.ne[1], scores.ne[2])
    keep = gr.argsort_top_k(scores, g.n_group_used)
    kept = gr.get_rows(groups, keep)
    filled = gr.unary("FILL", groups)
    masked = gr.set_rows(filled, kept, keep)
    return gr.reshape(masked, g.n_expert, n)


def _ffn(c: _Ctx, x: Tensor, pre: str, suffix: str = "") -> Tensor:
    """``build_ffn`` with a gate: up, gate, SwiGLU (fused split), down."""
    gr = c.graph
    up = _mm(c, f"{pre}ffn_up{suffix}", x)
    gate = _mm(c, f"{pre}ffn_gate{suffix}", x)
    cur = gr.glu(gate, up)
    return _mm(c, f"{pre}ffn_down{suffix}", cur)


def _qkv(c: _Ctx, il: int, x: Tensor, q_width: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``build_qkv`` with separate projections (biases when present), reshaped to heads."""
    gr, g, n = c.graph, c.g, x.ne[1]
    pre = f"blk.{il}."
    q = _mm(c, pre + "attn_q", x)
    k = _mm(c, pre + "attn_k", x)
    v = _mm(c, pre + "attn_v", x)
    q = gr.reshape(q, g.head_k, (q_width or g.head_k * g.n_head) // g.head_k, n)
    k = gr.reshape(k, g.head_k, g.head_kv[il], n)
    v = gr.reshape(v, g.head_v, g.head_kv[il], n)
    return q, k, v


def _gqa_layer(c: _Ctx, il: int, x: Tensor, inp: _AttnInputs, out_ids: Tensor | None) -> Tensor:
    """One attention + FFN block of the GQA architectures (qwen3moe, llama/mixtral, llama4, gpt-oss,
    glm4moe): pre-norm, Q/K/V (q/k norms where the model has them), RoPE, attention, residual,
    post-norm, dense or MoE FFN (plus a shared expert where present), residual."""
    gr, g = c.graph, c.g
    pre = f"blk.{il}."
    cur = _norm(c, x, c.w[pre + "attn_norm.weight"])
    if g.kv_lora_rank:
        return _ffn_block(c, il, x, _mla_attention(c, il, cur, inp), out_ids)
    q, k, v = _qkv(c, il, cur)
    if g.arch == "llama4":
        q, k = _llama4_qk(c, il, q, k)
    else:
        if pre + "attn_q_norm.weight" in c.w:
            q = _norm(c, q, c.w[pre + "attn_q_norm.weight"])
        q = gr.unary("ROPE", q, c.inputs["pos"], c.w.get("rope_freqs.weight"))
        if pre + "attn_k_norm.weight" in c.w:
            k = _norm(c, k, c.w[pre + "attn_k_norm.weight"])
        k = gr.unary("ROPE", k, c.inputs["pos"], c.w.get("rope_freqs.weight"))
    sinks = c.w.get(pre + "attn_sinks.weight")
    cur = _attention(c, il, q, k, v, inp, sinks, pre + "attn_output")
    return _ffn_block(c, il, x, cur, out_ids)


def _ffn_block(c: _Ctx, il: int, x: Tensor, cur: Tensor, out_ids: Tensor | None) -> Tensor:
    """Attention residual, post-attention norm, dense or MoE FFN (plus the shared expert), residual."""
    gr, g = c.graph, c.g
    pre = f"blk.{il}."
    inp_sa = x
    if out_ids is not None and not _late_out_ids(g):
        cur = gr.get_rows(cur, out_ids)
        inp_sa = gr.get_rows(inp_sa, out_ids)
    ffn_inp = gr.op("ADD", cur.type, cur.ne, cur, inp_sa)
    post = pre + ("post_attention_norm.weight" if g.arch in ("gpt-oss", "glm4moe") else "ffn_norm.weight")
    cur = _norm(c, ffn_inp, c.w[post])
    if g.moe_layers[il]:
        moe = _moe(c, il, cur, g.expert_gating)
        if pre + "ffn_up_shexp.weight" in c.w:
            sh = _ffn(c, cur, pre, "_shexp")
            moe = gr.op("ADD", moe.type, moe.ne, moe, sh)
        cur = moe
    else:
        cur = _ffn(c, cur, pre)
    cur = gr.op("ADD", cur.type, cur.ne, cur, ffn_inp)
    return cur


def _mla_attention(c: _Ctx, il: int, x: Tensor, inp: _AttnInputs) -> Tensor:
    """DeepSeek-V2/V3 multi-head latent attention (``models/deepseek2.cpp`` with ``is_mla``): Q through
    its low-rank pair, the compressed KV row ``kv_lora_rank + rope`` (RoPE on its last ``n_rot``), the
    no-RoPE half of Q absorbed into the latent space by ``attn_k_b``; the cache holds only K and V is
    its first ``kv_lora_rank`` columns; ``attn_v_b`` decompresses the attention output."""
    gr, g, n = c.graph, c.g, x.ne[1]
    pre = f"blk.{il}."
    nh, dk, rope, rank = g.n_head, g.head_k_mla, g.n_rot, g.kv_lora_rank
    nope = dk - rope
    if pre + "attn_q_a.weight" in c.w:
        q = gr.mul_mat(c.w[pre + "attn_q_a.weight"], x)
        q = _norm(c, q, c.w[pre + "attn_q_a_norm.weight"])
        q = gr.mul_mat(c.w[pre + "attn_q_b.weight"], q)
    else:
        q = gr.mul_mat(c.w[pre + "attn_q.weight"], x)
    q = gr.reshape(q, dk, nh, n)
    kv_pe = gr.mul_mat(c.w[pre + "attn_kv_a_mqa.weight"], x)
    row = row_size(kv_pe.type, rank + rope)
    kv_cmpr = gr.view_nd(kv_pe, (rank, n), (row,))
    k_pe = gr.view_nd(kv_pe, (rope, 1, n), (row, row), row_size(kv_pe.type, rank))
    k_pe = gr.unary("ROPE", k_pe, c.inputs["pos"], None)
    kv_cmpr = _norm(c, kv_cmpr, c.w[pre + "attn_kv_a_norm.weight"])
    q_nope = gr.view_nd(q, (nope, nh, n), (q.nb[1], q.nb[2]))
    q_pe = gr.view_nd(q, (rope, nh, n), (q.nb[1], q.nb[2]), row_size(q.type, nope))
    q_pe = gr.unary("ROPE", q_pe, c.inputs["pos"], None)
    q_nope = gr.permute(q_nope, 0, 2, 1, 3)
    q_abs = gr.mul_mat(c.w[pre + "attn_k_b.weight"], q_nope)
    q_abs = gr.permute(q_abs, 0, 2, 1, 3)
    qcur = gr.concat(q_abs, q_pe, 0)
    kv_cmpr = gr.reshape(kv_cmpr, rank, 1, n)
    kcur = gr.concat(kv_cmpr, k_pe, 0)
    vcur = kv_cmpr
    c.expand(qcur)
    c.expand(vcur)
    c.expand(kcur)
    kc = c.cache[f"k{il}"]
    k2 = gr.view_nd(kcur, (kcur.ne[0], n), (kcur.nb[2],))
    c.expand(gr.set_rows(kc, k2, inp.k_idxs))
    cells = kc.ne[1]
    k = gr.view_nd(kc, (rank + rope, 1, inp.n_kv, 1), (kc.nb[1], kc.nb[1], kc.nb[1] * cells))
    v = gr.view_nd(k, (rank, k.ne[1], k.ne[2], k.ne[3]), k.nb[1:])
    cur = _mha_mla(c, qcur, k, v, inp.mask, c.w[pre + "attn_v_b.weight"])
    return _mm(c, pre + "attn_output", cur)


def _mha_mla(c: _Ctx, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, v_mla: Tensor) -> Tensor:
    """``build_attn_mha`` with ``v_mla``: V is not transposed (a view of K), so without flash
    attention it is made contiguous transposed; the output is decompressed by ``v_mla``."""
    gr, f = c.graph, c.f
    q, k, v = _heads_major(gr, q, k, v)
    if f.flash_attn:
        cur = gr.flash_attn_ext(q, k, v, mask, None)
        cur = gr.permute(cur, 0, 2, 1, 3)
        cur = gr.mul_mat(v_mla, cur)
        cur = gr.permute(cur, 0, 2, 1, 3)
        cur = gr.cont(cur)
        cur = gr.reshape(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
    else:
        kq = gr.mul_mat(k, q)
        kq = gr.soft_max_ext(kq, mask, None)
        v = gr.cont(gr.transpose(v))
        kqv = gr.mul_mat(v, kq)
        kqv = gr.mul_mat(v_mla, kqv)
        cur = gr.permute(kqv, 0, 2, 1, 3)
        cur = gr.cont(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
    c.expand(cur)
    return cur


def _rs(c: _Ctx, s: Tensor, size: int) -> Tensor:
    """``build_rs`` for one sequence over the full recurrent memory (one cell): clear the zero state
    in place, gather the states through ``s_copy`` and write back the (here empty) extra states."""
    gr = c.graph
    states = gr.reshape(s, size, s.ne[1])
    zero = gr.view_nd(states, (size,), ())
    c.expand(gr.view_tensor(zero, "SCALE", [zero]))
    states_all = gr.get_rows(states, c.inputs["s_copy"])
    out = gr.view_nd(states_all, (size, 1), (states_all.nb[1],))
    c.expand(out)
    extra = gr.view_nd(states_all, (size, 0), (states_all.nb[1],), states_all.nb[1])
    c.expand(gr.cpy(extra, gr.view_nd(s, (size, 0), (s.nb[1],), s.nb[1])))
    return out


def _delta_net_attention(c: _Ctx, il: int, x: Tensor) -> Tensor:
    """Qwen3-Next's Gated DeltaNet layer (``models/qwen3next.cpp`` ``build_layer_attn_linear`` and
    ``delta-net-base.cpp``): fused QKV and Z projections, beta/alpha gates, the causal conv over the
    conv state, L2-normalised Q/K repeated to the value heads, the fused ``GATED_DELTA_NET`` op (the
    RPC device claims it, so the chunked fallback is never built), the state written back, and the
    gated RMS norm before the output projection."""
    gr, g, n = c.graph, c.g, x.ne[1]
    pre = f"blk.{il}."
    dk, nk, nv = g.ssm_state, g.ssm_groups, g.ssm_dt_rank
    dv = g.ssm_inner // nv
    channels = g.ssm_inner + 2 * nk * dk
    qkv = gr.mul_mat(c.w[pre + "attn_qkv.weight"], x)
    qkv = gr.reshape(qkv, qkv.ne[0], n, 1)
    z = gr.mul_mat(c.w[pre + "attn_gate.weight"], x)
    ba = gr.mul_mat(c.w[pre + "ssm_ba.weight"], x)
    ba = gr.reshape(ba, 2 * nv // nk, nk, n, 1)
    b = gr.view_nd(ba, (nv // nk, nk, n, 1), ba.nb[1:])
    a = gr.view_nd(ba, (nv // nk, nk, n, 1), ba.nb[1:], row_size("f32", nv // nk))
    beta = gr.unary("UNARY", gr.cont(b))
    alpha = gr.cont(a, nv, n, 1)
    alpha = gr.op("ADD", alpha.type, alpha.ne, alpha, c.w[pre + "ssm_dt.bias"])
    alpha = gr.unary("UNARY", alpha)
    gate = gr.op("MUL", alpha.type, alpha.ne, alpha, c.w[pre + "ssm_a"])
    beta = gr.reshape(beta, 1, nv, n, 1)
    gate = gr.reshape(gate, 1, nv, n, 1)
    conv_all, ssm_all = c.cache[f"r{il}"], c.cache[f"s{il}"]
    conv_states = _rs(c, conv_all, conv_all.ne[0])
    conv_states = gr.reshape(conv_states, g.ssm_conv - 1, channels, 1)
    conv_input = gr.concat(conv_states, gr.transpose(qkv), 0)
    last = gr.view_nd(conv_input, (g.ssm_conv - 1, channels, 1), conv_input.nb[1:3], row_size("f32", n))
    c.expand(gr.cpy(last, gr.view_nd(conv_all, (conv_all.ne[0], 1), (conv_all.nb[1],))))
    state = _rs(c, ssm_all, ssm_all.ne[0])
    state = gr.reshape(state, dv, dv, nv, 1)
    conv = gr.op("SSM_CONV", "f32", (channels, n, 1), conv_input, c.w[pre + "ssm_conv1d.weight"])
    conv = gr.unary("UNARY", conv)
    nb1 = row_size("f32", channels)
    q = gr.view_nd(conv, (dk, nk, n, 1), (row_size("f32", dk), nb1, nb1 * n))
    k = gr.view_nd(conv, (dk, nk, n, 1), (row_size("f32", dk), nb1, nb1 * n), row_size("f32", dk * nk))
    v = gr.view_nd(conv, (dv, nv, n, 1), (row_size("f32", dv), nb1, nb1 * n), row_size("f32", 2 * dk * nk))
    q = gr.unary("SCALE", gr.unary("RMS_NORM", q))
    k = gr.unary("SCALE", gr.unary("RMS_NORM", k))
    if nk != nv:
        rep = nv // nk
        q = gr.reshape(gr.repeat_4d(gr.reshape(q, dk, 1, nk, n), dk, rep, nk, n), dk, nv, n, 1)
        k = gr.reshape(gr.repeat_4d(gr.reshape(k, dk, 1, nk, n), dk, rep, nk, n), dk, nv, n, 1)
    res = gr.op("GATED_DELTA_NET", "f32", (dv * nv, n + dv, 1, 1), q, k, v, gate, beta, state)
    out = gr.view_nd(
        res, (dv, nv, n, 1), (row_size("f32", dv), row_size("f32", dv * nv), row_size("f32", dv * nv * n))
    )
    new_state = gr.view_nd(
        res,
        (dv, dv, nv, 1),
        (row_size("f32", dv), row_size("f32", dv * dv), row_size("f32", dv * dv * nv)),
        row_size("f32", dv * nv * n),
    )
    c.expand(gr.cpy(new_state, gr.view_nd(ssm_all, (ssm_all.ne[0], 1), (ssm_all.nb[1],))))
    z2 = gr.reshape(z, dv, nv, n, 1)
    normed = _norm(c, out, c.w[pre + "ssm_norm.weight"])
    cur = gr.op("MUL", normed.type, normed.ne, normed, gr.unary("UNARY", z2))
    cur = gr.reshape(cur, dv * nv, n, 1)
    cur = gr.mul_mat(c.w[pre + "ssm_out.weight"], cur)
    return gr.reshape(cur, g.n_embd, n)


def _gated_attention(c: _Ctx, il: int, x: Tensor, inp: _AttnInputs) -> Tensor:
    """Qwen3-Next's full-attention layer: Q projected at twice the width, its second half a sigmoid
    gate on the attention output; q/k norms and RoPE; no output projection inside ``build_attn``."""
    gr, g, n = c.graph, c.g, x.ne[1]
    pre = f"blk.{il}."
    d, nh, nkv = g.head_k, g.n_head, g.head_kv[il]
    qf = gr.mul_mat(c.w[pre + "attn_q.weight"], x)
    k = gr.mul_mat(c.w[pre + "attn_k.weight"], x)
    v = gr.mul_mat(c.w[pre + "attn_v.weight"], x)
    qf = gr.reshape(qf, 2 * d, nh, n, 1)
    q = gr.view_nd(qf, (d, nh, n, 1), qf.nb[1:])
    gate = gr.view_nd(qf, (d, nh, n, 1), qf.nb[1:], row_size("f32", d))
    k = gr.reshape(k, d, nkv, n)
    v = gr.reshape(v, d, nkv, n)
    q = _norm(c, q, c.w[pre + "attn_q_norm.weight"])
    k = _norm(c, k, c.w[pre + "attn_k_norm.weight"])
    q = gr.unary("ROPE", q, c.inputs["pos"], None)
    k = gr.unary("ROPE", k, c.inputs["pos"], None)
    cur = _attention(c, il, q, k, v, inp, None, None)
    gate = gr.unary("UNARY", gr.cont(gate, d * nh, n))
    cur = gr.op("MUL", cur.type, cur.ne, cur, gate)
    return gr.mul_mat(c.w[pre + "attn_output.weight"], cur)


def _qwen3next_layer(c: _Ctx, il: int, x: Tensor, inp: _AttnInputs, out_ids: Tensor | None) -> Tensor:
    """One Qwen3-Next block: attention (gated full or DeltaNet), residual, post-norm, MoE with a
    sigmoid-gated shared expert, residual."""
    gr = c.graph
    pre = f"blk.{il}."
    cur = _norm(c, x, c.w[pre + "attn_norm.weight"])
    c.expand(cur)
    recurrent = c.g.is_recurrent(il)
    cur = _delta_net_attention(c, il, cur) if recurrent else _gated_attention(c, il, cur, inp)
    cur = gr.op("ADD", cur.type, cur.ne, cur, x)
    residual = cur
    cur = _norm(c, cur, c.w[pre + "post_attention_norm.weight"])
    moe = _moe(c, il, cur, "softmax")
    sh = _ffn(c, cur, pre, "_shexp")
    sg = gr.unary("UNARY", gr.mul_mat(c.w[pre + "ffn_gate_inp_shexp.weight"], cur))
    sh = gr.op("MUL", sh.type, sh.ne, sh, sg)
    cur = gr.op("ADD", moe.type, moe.ne, moe, sh)
    return gr.op("ADD", cur.type, cur.ne, cur, residual)


def _llama4_qk(c: _Ctx, il: int, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """Llama 4: every 4th layer skips RoPE and scales Q by the temperature input; the others rotate
    and L2-normalise Q and K (weightless RMS norm)."""
    gr = c.graph
    if (il + 1) % 4 == 0:
        return gr.op("MUL", q.type, q.ne, q, c.inputs["attn_scale"]), k
    q = gr.unary("ROPE", q, c.inputs["pos"], None)
    k = gr.unary("ROPE", k, c.inputs["pos"], None)
    return gr.unary("RMS_NORM", q), gr.unary("RMS_NORM", k)


def _late_out_ids(g: Geometry) -> bool:
    """Architectures that keep every token through the last layer (its output is the MTP hidden
    state ``t_h_nextn``, a graph output) and drop the non-output rows only before the head."""
    return g.arch in ("gpt-oss", "qwen3next")


@dataclass(frozen=True)
class _Unplaced:
    """A reservation graph and its pre-allocated tensors, whose buffers ``_place`` sets."""

    graph: Graph
    weights: dict[str, Tensor]
    cache: dict[str, Tensor]


@functools.lru_cache(maxsize=16)
def build_graph(g: Geometry, f: Flags) -> _Unplaced:
    """The worst-case graph ``sched_reserve`` sizes: ``n_tokens = min(n_ctx, n_ubatch)`` tokens, all
    of them outputs (``n_outputs_max = n_batch``), attention over every cache cell.

    Its ops and shapes do not depend on where the weights are (only the scheduler's choices do), so
    one graph of the geometry and flags serves every placement; it is kept for the next one (a --fit
    run sizes tens of placements), each of which sets its tensors' buffers (``_place``)."""
    f = effective(f)
    graph = Graph()
    n_tokens = min(kv_cells(f.n_ctx), f.n_ubatch)
    weights, cache = _make_weights(g, graph), _make_cache(g, f, graph)
    c = _Ctx(
        g, f, graph, weights, cache,
        n_tokens, min(n_tokens, f.n_batch), kv_cells(f.n_ctx), swa_cells(g, f),
    )  # fmt: skip
    x = _inp_embd(c)
    c.inputs["s_copy"] = graph.input("i32", (1,), "rs_s_copy")
    c.inputs["pos"] = graph.input("i32", (n_tokens,), "inp_pos")
    if g.arch == "llama4":
        c.inputs["attn_scale"] = graph.input("f32", (1, 1, n_tokens), "inp_attn_scale")
    v_max = max(g.head_kv[il] * g.head_v for il in range(g.n_layer))
    full = _attn_inputs(c, c.n_kv, v_max)
    swa = _attn_inputs(c, c.n_kv_swa, v_max, "_swa") if any(g.swa) else None
    out_ids = graph.input("i32", (c.n_outputs,), "out_ids")
    for il in range(g.n_layer):
        inp = swa if (swa is not None and g.is_swa(il)) else full
        layer = _qwen3next_layer if g.arch == "qwen3next" else _gqa_layer
        x = layer(c, il, x, inp, out_ids if il == g.n_layer - 1 else None)
        graph.expand(x)
    if g.arch == "gpt-oss":
        x.flags_output = True  # t_h_nextn
        x = graph.get_rows(x, out_ids)
    cur = _norm(c, x, c.w["output_norm.weight"])
    cur.flags_output = True
    if g.arch == "qwen3next":
        cur = graph.get_rows(cur, out_ids)
        cur.flags_output = True
    logits = graph.mul_mat(c.w["output.weight"], cur)
    logits.flags_output = True
    graph.expand(logits)
    return _Unplaced(graph, weights, cache)


def _place(u: _Unplaced, g: Geometry, p: Placement) -> None:
    """Put the graph's weights and caches in the buffers placement ``p`` gives them (``weight_buffers``,
    without the dictionary of names)."""
    slots = _slot_buffers(layer_devices(g, p))
    weights = u.weights
    for name, layer in _weight_slots(g):
        weights[name].buffer = slots[layer]
    for name, target in _overridden(g, p):
        weights[name].buffer = target
    for key, t in u.cache.items():
        t.buffer = slots[int(key[1:])]


def pipeline_parallel(g: Geometry, p: Placement) -> bool:
    """``llama_context::llama_context``: pipeline parallelism when there are several devices, every
    layer and the KV cache are offloaded and no tensor is overridden (and the devices report async
    compute and events, as RPC and CUDA devices do)."""
    if p.slots is not None:
        return p.n_devices > 1 and -1 not in p.slots and not p.overrides
    ngl = g.n_layer_all + 1 if p.n_gpu_layers < 0 else p.n_gpu_layers
    return p.n_devices > 1 and ngl > g.n_layer_all and not p.overrides


#: The batch from which a CUDA device runs an op whose weight is in host memory (``ggml-cuda.cu``
#: ``op_offload_min_batch_size``, ``GGML_OP_OFFLOAD_MIN_BATCH``), copying the weight into its compute buffer.
CUDA_OFFLOAD_MIN_BATCH = 32


def compute_bytes(
    g: Geometry,
    p: Placement,
    f: Flags,
    offload_min_batch: int = 0,
    weight_bytes: Callable[[str], int | None] | None = None,
    offload_from: int = 0,
) -> list[int]:
    """Compute buffer bytes per backend (the devices in order, then the CPU). ``offload_min_batch``
    models a GPU build's op offload (``CUDA_OFFLOAD_MIN_BATCH``) on device ``offload_from`` (the first
    local GPU: the devices before it are remote), whose weight copies take the bytes ``weight_bytes``
    gives (a weight's stored bytes by name); 0, the CPU-backed RPC devices', never offloads.

    A --fit run sizes tens of placements that differ only in how many layers alike a device runs, so
    the figures are kept by the placement's ``_Runs.key`` and computed once per key."""
    with _collector_paused():
        return _compute_bytes(g, p, f, offload_min_batch, weight_bytes, offload_from)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the duration: building and simulating a graph makes
    tens of thousands of tensors and allocator records, which would set off collections that walk
    every live object of the process, while the records die with the simulation by reference count."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _compute_bytes(
    g: Geometry,
    p: Placement,
    f: Flags,
    offload_min_batch: int,
    weight_bytes: Callable[[str], int | None] | None,
    offload_from: int,
) -> list[int]:
    """``compute_bytes`` with the collector paused."""
    runs = _runs(g, effective(f))
    _place(runs.unplaced, g, p)
    pipeline = pipeline_parallel(g, p)
    typed = weight_bytes if offload_min_batch else None
    key, kept = runs.key(p.n_devices, pipeline, offload_min_batch, offload_from, typed)
    figures = runs.figures.get(key)
    if figures is None:
        be = dataclasses.replace(
            ggmlalloc.rpc_backends(p.n_devices),
            offload_min_batch=offload_min_batch,
            offload_from=offload_from,
        )
        figures = runs.figures[key] = runs.simulate(kept, be, ggmlalloc.MAX_COPIES if pipeline else 1, typed)
    return list(figures)


#: Slices of a repetition of alike blocks (the same ops over weights and caches in the same buffers,
#: the same stored bytes where an op offload copies them) a simulation keeps at least (two blocks at
#: least): the allocator's state settles into its cycle within a block or two, so a longer repetition
#: is cut (``_cut``), and placements that differ only beyond it share one figure
#: (tests/engines/test_compute_key.py holds the cut graph to the whole one over every architecture,
#: recorded commands and random placements, and the key to one figure at half the cap).
RUN_CAP = 4
#: Slices whose multiple a cut drops: over alike blocks the allocator's state cycles (its free list,
#: the residual stream in two or three places), every second slice over alike MLA layers, every sixth
#: over gpt-oss's pairs of sliding-window and full layers, so the slices left decide the state the
#: next slice meets, and a cut keeps their count the same modulo each cycle.
PHASE = 6
#: The longest block looked for: Q4_K_M's Q6_K tensors every third layer, Qwen3-Next's attention
#: every fourth, and the two together.
MAX_PERIOD = 12


@dataclass(frozen=True)
class _Runs:
    """A reservation graph cut into slices (slice k is ``nodes[starts[k]:starts[k + 1]]``), each
    starting at the first op that reads a weight of a later layer than the slice before: each slice's
    ``shape`` (equal ids: the same ops, shapes and strides over the same kinds of sources, the layer
    number aside), the pre-allocated tensors it reads (``reads``, weights marked), the ids of each
    (shape, where it reads) seen (``tokens``, filled by ``kept``) and the figures computed so far by
    key."""

    unplaced: _Unplaced
    starts: tuple[int, ...]
    shapes: tuple[int, ...]
    reads: tuple[tuple[Tensor, ...], ...]
    links: tuple[tuple[tuple[Tensor, int, int, int], ...], ...]
    outputs: tuple[bool, ...]
    inputs: tuple[Tensor, ...]
    figures: dict[tuple, tuple[int, ...]] = field(default_factory=dict)
    ids: dict[tuple, int] = field(default_factory=dict)
    tokens: list[int] = field(default_factory=list)

    def key(
        self,
        n_devices: int,
        pipeline: bool,
        offload_min_batch: int,
        offload_from: int,
        typed: Callable[[str], int | None] | None,
    ) -> tuple[tuple, list[int]]:
        """What the compute buffer of the graph as now placed depends on: the devices, pipeline
        parallelism, the op offload (from which batch, on which device) and the ids of the slices a
        simulation keeps; and those slices (``kept``)."""
        kept = self.kept(typed)
        return (
            n_devices,
            pipeline,
            offload_min_batch,
            offload_from,
            tuple(self.tokens[k] for k in kept),
        ), kept

    def kept(self, typed: Callable[[str], int | None] | None) -> list[int]:
        """The slices a simulation of the graph as now placed keeps (``_cut``), after setting
        ``tokens``, each slice's id of its shape and where it reads: the buffers of what it reads and,
        with an op offload (``typed``: the weights' stored bytes), the stored bytes of what it reads
        from host memory (only a host weight is copied to the device that offloads its op)."""
        ids, tokens = self.ids, self.tokens
        tokens.clear()
        buffer = operator.attrgetter("buffer")
        for shape, reads in zip(self.shapes, self.reads):
            where = tuple(map(buffer, reads))
            if typed is not None and "CPU" in where:
                where += tuple(typed(t.name) for t in reads if t.weights and t.buffer == "CPU")
            tokens.append(ids.setdefault((shape, where), len(ids)))
        return _cut(tokens, RUN_CAP)

    def simulate(
        self,
        kept: list[int],
        be: ggmlalloc.Backends,
        n_copies: int,
        typed: Callable[[str], int | None] | None,
    ) -> tuple[int, ...]:
        """Each backend's compute buffer from scheduling and allocating the graph's ``kept`` slices
        (``_Cut``; the whole graph where a cut slice is read other than by the next kept slice)."""
        cut = _Cut.of(self, kept)
        graph = cut.graph if cut is not None else self.unplaced.graph
        try:
            sched = ggmlalloc.schedule(graph, be, n_copies, typed)
            try:
                return tuple(ggmlalloc.allocate(sched, len(be.names), ALIGNMENT))
            finally:
                sched.restore()
        finally:
            if cut is not None:
                cut.restore()


def _cut(tokens: list[int], cap: int) -> list[int]:
    """The slices kept of a sequence of slice ids: from each slice on, the shortest block (up to
    ``MAX_PERIOD`` slices) that repeats, with a slice after the repetition, drops the most repeats that
    are a multiple of ``PHASE`` slices and leave ``max(cap // length, 2)`` repeats at least; any other
    slice is kept."""
    n, out, i = len(tokens), [], 0
    while i < n:
        found = _repetition(tokens, i, cap)
        if found is None:
            out.append(i)
            i += 1
            continue
        period, keep, reps = found
        out.extend(range(i, i + keep * period))
        i += reps * period
    return out


def _repetition(tokens: list[int], i: int, cap: int) -> tuple[int, int, int] | None:
    """The shortest block from slice ``i`` whose repeats ``_cut`` cuts: (length, repeats kept,
    repeats), or None."""
    n = len(tokens)
    for period in range(1, MAX_PERIOD + 1):
        least, unit = max(cap // period, 2), PHASE // math.gcd(PHASE, period)
        if i + (least + unit) * period >= n:
            return None
        block = tokens[i : i + period]
        reps = 1
        while i + (reps + 1) * period < n and tokens[i + reps * period : i + (reps + 1) * period] == block:
            reps += 1
        drop = (reps - least) // unit * unit
        if drop > 0:
            return period, reps - drop, reps
    return None


@dataclass
class _Cut:
    """The graph of a ``_Runs``' kept slices: the first slice kept after dropped ones reads the last
    slice kept before them where it read the last dropped one (the same shape, so the same offsets),
    which ``restore`` undoes; leafs are the graph's inputs and the pre-allocated tensors the kept
    slices read."""

    graph: Graph
    undo: list[tuple[Tensor, int, Tensor | None]]

    @classmethod
    def of(cls, runs: _Runs, kept: list[int]) -> _Cut | None:
        """The cut graph, or None when it is the whole graph or a dropped node is read otherwise (an
        output, a slice's read of an earlier one than its last)."""
        starts, nodes = runs.starts, runs.unplaced.graph.nodes
        if len(kept) == len(starts) - 1:
            return None
        keep = set(kept)
        if any(runs.outputs[k] for k in range(len(starts) - 1) if k not in keep):
            return None
        cut = cls(Graph(), [])
        previous = -1
        for k in kept:
            shift = starts[previous] - starts[k - 1] if k != previous + 1 else None
            for t, j, i, source in runs.links[k]:
                if source in keep:
                    continue
                if shift is None or source != k - 1:  # only the slice before may stand in
                    cut.restore()
                    return None
                cut._point(t, j, nodes[i + shift])
            cut.graph.nodes.extend(nodes[starts[k] : starts[k + 1]])
            previous = k
        held = {id(t): t for k in kept for t in runs.reads[k]}
        cut.graph.leafs = [*runs.inputs, *held.values()]
        return cut

    def _point(self, t: Tensor, j: int, s: Tensor) -> None:
        """Make ``s`` source ``j`` of ``t`` (-1: its view source)."""
        if j < 0:
            self.undo.append((t, j, t.view_src))
            t.view_src = s
        else:
            self.undo.append((t, j, t.src[j]))
            t.src[j] = s

    def restore(self) -> None:
        """The graph's tensors as they were."""
        for t, j, s in reversed(self.undo):
            if j < 0:
                t.view_src = s
            else:
                t.src[j] = s
        self.undo.clear()


_LAYER_OF_NAME = re.compile(r"^(?:blk\.|cache_[a-z]+_l)(\d+)")


def _layer_of(t: Tensor) -> int:
    """The layer a pre-allocated tensor (a weight or a cache) belongs to, or -1."""
    return _layer_of_name(t.name) if t.buffer is not None else -1


@functools.lru_cache(maxsize=65536)
def _layer_of_name(name: str) -> int:
    m = _LAYER_OF_NAME.match(name)
    return int(m[1]) if m else -1


@functools.lru_cache(maxsize=16)
def _runs(g: Geometry, f: Flags) -> _Runs:
    """The reservation graph of ``g`` at effective flags ``f`` cut into slices (see ``_Runs``)."""
    unplaced = build_graph(g, f)
    nodes = unplaced.graph.nodes
    starts, current = [0], -1
    for i, t in enumerate(nodes):
        read = max((_layer_of(s) for s in t.src if s is not None and s.weights), default=-1)
        if read > current:
            current = read
            if i:
                starts.append(i)
    starts.append(len(nodes))
    index = {id(t): i for i, t in enumerate(nodes)}
    index |= {id(t): ("leaf", i) for i, t in enumerate(unplaced.graph.leafs)}
    ids: dict[tuple, int] = {}
    shapes, reads, links, outputs = [], [], [], []
    for k in range(len(starts) - 1):
        ops, held = _slice(nodes, starts[k], starts[k + 1], starts[max(k - 1, 0)], index)
        shapes.append(ids.setdefault(ops, len(ids)))
        reads.append(held)
        links.append(tuple(_links(nodes, starts, k, index)))
        outputs.append(any(t.flags_output for t in nodes[starts[k] : starts[k + 1]]))
    inputs = tuple(t for t in unplaced.graph.leafs if t.buffer is None)
    return _Runs(unplaced, tuple(starts), tuple(shapes), tuple(reads), tuple(links), tuple(outputs), inputs)


def _links(
    nodes: list[Tensor], starts: list[int], k: int, index: dict[int, int | tuple[str, int]]
) -> Iterator[tuple[Tensor, int, int, int]]:
    """Slice ``k``'s reads of other slices' nodes: (node, source index (-1: the view source), the
    source's node index, its slice)."""
    for t in nodes[starts[k] : starts[k + 1]]:
        for j, s in ((-1, t.view_src), *enumerate(t.src)):
            i = index.get(id(s)) if s is not None else None
            if isinstance(i, int) and not starts[k] <= i < starts[k + 1]:
                yield t, j, i, bisect.bisect_right(starts, i) - 1


def _slice(
    nodes: list[Tensor], s0: int, s1: int, before: int, index: dict[int, int | tuple[str, int]]
) -> tuple[tuple, tuple[Tensor, ...]]:
    """Nodes ``s0:s1`` as a shape (ops, types, shapes, strides, flags, and each source: a weight or
    cache by its name with the layer relative to the slice's, a node of this slice or the one before
    (from ``before``) by its offset, any other node or leaf by its index) and the pre-allocated
    tensors they read."""
    base = max((_layer_of(s) for t in nodes[s0:s1] for s in t.src if s is not None), default=-1)
    held: list[Tensor] = []

    def source(s: Tensor | None) -> tuple | None:
        if s is None:
            return None
        if s.buffer is not None:
            held.append(s)
            n = _layer_of(s)
            name = s.name.replace(str(n), "#", 1) if n >= 0 else s.name
            return ("w" if s.weights else "c", name, n - base if n >= 0 else None)
        i = index[id(s)]
        if isinstance(i, tuple):
            return i
        return ("node", i - s0) if i >= before else ("at", i)

    ops = tuple(
        (t.op, t.type, t.ne, t.nb, t.view_offs, t.flags_input, t.flags_output, source(t.view_src),
         tuple(source(s) for s in t.src))
        for t in nodes[s0:s1]
    )  # fmt: skip
    return ops, tuple(held)


def offload_batch(backend: str) -> int:
    """The batch from which the first device of a rig's ``backend`` offloads an op whose weight is in
    host memory: 32 on llama.cpp's GPU backends (``offload_op``: CUDA and ROCm/HIP, which is CUDA's code,
    Vulkan, Metal for matrix products, SYCL); 0, never, on ``rpc`` (devices over ``--rpc``)."""
    return 0 if backend == "rpc" else CUDA_OFFLOAD_MIN_BATCH


def stored_bytes(model: ModelConfig) -> tuple[tuple[str, int], ...]:
    """Each routed expert tensor's and FFN tensor's stored bytes, by the weight's name in the graph
    (``blk.N.ffn_up_exps.weight``), from the model file: what an op offload copies. Without
    ``expert_tensors``, a layer's ``expert_bytes`` of all experts shared evenly by its three tensors."""
    n = model.layers
    if model.expert_tensors is None:
        each = zip(per_layer(model.expert_bytes, n), per_layer(model.experts, n), strict=True)
        share = [-(-int(b) * int(e) // 3) for b, e in each]
        tensors = dict.fromkeys(("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"), share)
    else:
        tensors = {k: per_layer(v, n) for k, v in model.expert_tensors.items()}
    tensors |= {k: per_layer(v, n) for k, v in (model.ffn_tensors or {}).items()}
    out = {
        f"blk.{il}.{name}" + ("" if name.endswith((".bias", ".scale")) else ".weight"): int(per[il])
        for name, per in tensors.items()
        for il in range(n)
        if per[il]
    }
    return tuple(out.items())


def quantized(cache_type: str) -> bool:
    """A block-quantized cache type (q8_0, q4_0, ...), as opposed to f16/bf16/f32."""
    return ggmlalloc.TYPES[cache_type][0] > 1


def refusal(g: Geometry | None, f: Flags) -> str | None:
    """Why ``llama_init_from_model`` (``src/llama-context.cpp``) would refuse these flags, or None: a
    quantized V cache needs flash attention; MLA caches need one type for K and V; with flash attention
    a quantized cache's block must divide the head size. Without a geometry only the first is known."""
    if quantized(f.type_v) and not f.flash_attn:
        return "quantized V cache requires flash_attn to be enabled"
    if g is None:
        return None
    if g.kv_lora_rank and f.type_k != f.type_v:
        return f"model does not support different K ({f.type_k}) and V ({f.type_v}) cache types"
    if f.flash_attn:
        for t, head in ((f.type_k, g.head_k), (f.type_v, g.head_v)):
            if quantized(t) and head % ggmlalloc.TYPES[t][0]:
                return f"cache type {t} does not divide the head size {head}"
    return None


def estimate(
    g: Geometry, p: Placement, f: Flags, offload_min_batch: int = 0, stored: tuple[tuple[str, int], ...] = ()
) -> Estimate:
    """Context and compute bytes per device and for the host, as fit-print reports them
    (``offload_min_batch`` and ``stored``, the weights' bytes, as ``compute_bytes`` takes them). Raises
    ``ValueError`` for flags llama.cpp refuses (``refusal``)."""
    why = refusal(g, f)
    if why:
        raise ValueError(why)
    f = effective(f)
    ctx = context_bytes(g, p, f)
    comp = compute_bytes(g, p, f, offload_min_batch, dict(stored).get)
    devices = [Usage(ctx.get(d, 0), comp[d]) for d in range(p.n_devices)]
    return Estimate(devices, Usage(ctx.get(-1, 0), comp[-1]), pipeline_parallel(g, p))


def run_flags(context: int, n_ubatch: int, flash_attn: bool, kv_type: str) -> Flags:
    """The flags of moesplit's own command: ``-c context -ub n_ubatch -fa``, one KV type for K and V, and
    ``-b`` at llama.cpp's default unless the micro-batch needs more (the export then writes ``-b``)."""
    return Flags(max(context, 1), max(N_BATCH, n_ubatch), n_ubatch, flash_attn, kv_type, kv_type)


@dataclass(frozen=True)
class Roles:
    """A device's compute buffer by its role in a layer split: ``first`` (the input layers), ``middle``,
    ``last`` (the output layer: logits and the final norm are graph outputs, never freed) and ``only``
    (one device runs everything, with no pipeline parallelism; None where it is not counted: no plan of
    the rig runs on one device alone)."""

    first: int
    middle: int
    last: int
    only: int | None

    def most(self, other: Roles) -> Roles:
        """Each role's larger figure of the two (``only`` None where either is)."""
        only = None if self.only is None or other.only is None else max(self.only, other.only)
        return Roles(
            max(self.first, other.first), max(self.middle, other.middle), max(self.last, other.last), only
        )


#: An override that matches no weight: the placement of no override, with pipeline parallelism off.
_NO_PIPELINE = (("^$", "CPU"),)
#: The override that puts every routed expert tensor in host memory, as an export's ``-ot ...=CPU`` does.
_EXPERTS_ON_HOST = (("_exps", "CPU"),)


@functools.lru_cache(maxsize=128)
def pipeline_roles(g: Geometry, f: Flags, pipeline: bool) -> Roles:
    """The compute buffer of each role at flags ``f`` with pipeline parallelism on (no override: a plan
    that holds every expert tensor on the GPUs) or off (any override), from three devices split evenly
    and from one.

    A device's buffer depends on the widths and flags and on its role, not on how many layers it runs
    (the buffer is the largest layer's intermediates plus the split inputs; tests/engines checks it
    against other splits), so three devices give every role of any split."""
    three = compute_bytes(g, Placement(3, overrides=() if pipeline else _NO_PIPELINE), f)
    only = compute_bytes(g, Placement(1), f)
    return Roles(three[0], three[1], three[2], only[0])


def role_compute(g: Geometry, f: Flags) -> Roles:
    """Each role's larger figure with pipeline parallelism on and off: what a plan counts when it does
    not know whether it leaves an expert tensor in host memory."""
    return pipeline_roles(g, f, True).most(pipeline_roles(g, f, False))


#: What ``offload_compute`` adds to the most a uniform placement of expert tensors takes: a mixed one
#: over an uneven split took up to 0.76 MiB more (tests/engines/test_llama_offload_plans.py).
OFFLOAD_MARGIN = 8 * 2**20


def expert_kinds(stored: tuple[tuple[str, int], ...]) -> tuple[str, ...]:
    """The routed expert tensors of a layer by kind (``ffn_down_exps``, ...), in the weights' order."""
    return tuple(dict.fromkeys(name.split(".")[2] for name, _ in stored if "_exps" in name))


#: Each role's device among three split evenly, or one alone (``only``).
ROLE_DEVICE = {"first": (3, 0), "middle": (3, 1), "last": (3, 2), "only": (1, 0)}


@functools.lru_cache(maxsize=64)
def host_tensor_compute(
    g: Geometry, f: Flags, offload_min_batch: int, stored: tuple[tuple[str, int], ...], n: int, device: int
) -> tuple[int, ...]:
    """The most each of ``n`` devices split evenly takes with any kinds of expert tensor in host memory
    in every layer (``ffn_down_exps``, each subset of the kinds), device ``device`` offloading their
    products (``compute_bytes``; ``offload_min_batch`` 0: none does; ``stored``: the weights' bytes).
    A tensor in host memory changes the other devices' buffers too: the products' results come back to
    them as split inputs."""
    kinds = expert_kinds(stored)
    most = [0] * n
    for r in range(1, len(kinds) + 1):
        for chosen in itertools.combinations(kinds, r):
            p = Placement(n, overrides=((f"\\.({'|'.join(chosen)})\\.", "CPU"),))
            got = compute_bytes(g, p, f, offload_min_batch, dict(stored).get, device)
            most = [max(m, x) for m, x in zip(most, got[:n], strict=True)]
    return tuple(most)


@functools.lru_cache(maxsize=64)
def last_layer_host_compute(g: Geometry, f: Flags, stored: tuple[tuple[str, int], ...]) -> int:
    """The most the last of three devices takes with some kinds of the final layer's expert tensors,
    and no other, in host memory and no device offloading them: the CPU's result then arrives as a split
    input of the output's split, which the allocator cannot always place in memory freed before (with
    every layer's there it can): 64 MiB more than either for GLM-4.5-Air at ``-c 32768``."""
    kinds = expert_kinds(stored)
    last = g.n_layer - 1
    most = 0
    for r in range(1, len(kinds) + 1):
        for chosen in itertools.combinations(kinds, r):
            p = Placement(3, overrides=((f"^blk\\.{last}\\.({'|'.join(chosen)})\\.", "CPU"),))
            most = max(most, compute_bytes(g, p, f)[2])
    return most


def offload_compute(
    g: Geometry, f: Flags, offload_min_batch: int, stored: tuple[tuple[str, int], ...], role: str
) -> int:
    """A bound on the compute buffer of the device that offloads (``compute_bytes``; ``stored``: the
    weights' bytes, ``stored_bytes``) in ``role`` (a ``Roles`` field) with expert tensors in host memory:
    that device runs every host expert's matrix products, copying each weight into its compute buffer,
    and receives the activations they need from the other devices. A plan does not know yet which
    tensors it leaves there, so it counts the most any kinds of them in every layer take (every layer's
    ``ffn_down_exps`` alone takes more than all three: the gate and up products then come from the
    other devices as split inputs); the buffer is the largest split's, not a sum over layers, so the
    uniform placements bound the mixed ones but for the few split inputs an uneven split moves (under
    1 MiB measured over random ones, tests/engines), which ``OFFLOAD_MARGIN`` covers."""
    n, device = ROLE_DEVICE[role]
    return host_tensor_compute(g, f, offload_min_batch, stored, n, device)[device] + OFFLOAD_MARGIN


@functools.lru_cache(maxsize=16)
def host_compute(
    g: Geometry, f: Flags, n_gpus: int, offload_min_batch: int = 0, stored: tuple[tuple[str, int], ...] = ()
) -> int:
    """The host's compute buffer a plan counts over ``n_gpus`` devices: the larger of its two cases.
    With expert tensors on the host, the CPU backend holds a layer's MoE intermediates (unless the
    first device offloads them: ``offload_min_batch``, ``stored`` as ``role_compute`` takes them) and no
    pipeline-parallel copies, which an override turns off; the figure for every expert there bounds
    the figure for some (the buffer is the largest split's intermediates, not a sum over layers), and
    two devices bound any larger split. With every expert on a GPU, no override: with more than one
    device the scheduler keeps pipeline-parallel copies of the host's split inputs (the token
    embeddings' rows), a different figure, which one and two devices bound."""
    k = min(max(n_gpus, 1), 2)
    weights = dict(stored).get
    on_host = compute_bytes(g, Placement(k, overrides=_EXPERTS_ON_HOST), f, offload_min_batch, weights)[-1]
    on_gpus = max(compute_bytes(g, Placement(n), f)[-1] for n in range(1, k + 1))
    return max(on_host, on_gpus)


@dataclass(frozen=True)
class PlanMemory:
    """What a plan counted for llama.cpp's compute buffers: the geometry and flags, each GPU's
    ``buffer`` (None where the rig's ``buffer:`` key replaced it), and what the first and last stages
    count beyond it; a score takes them off again and counts the command's exact figures. ``dense`` is
    each layer's weights alone (the model file's ``dense_bytes``): a problem's ``layer_bytes`` adds the
    layer's state (a sliding-window cache counted as fixed state) and KV cache, which llama.cpp counts as
    context, not weights (the exact --fit dry run, solver.engines.llamacpp.fitdefault, needs them apart).
    ``ffn`` is the model file's ``ffn_tensors``, (name, bytes per layer): the part of ``dense`` that an
    ``-ot`` rule such as ``blk\\.N\\.ffn_down.*`` moves with the layer's experts. ``offload_min_batch``
    and ``stored`` are the rig's op offload and the weights' bytes (``compute_bytes``)."""

    geometry: Geometry
    flags: Flags
    buffers: tuple[int | None, ...]
    first_extra: int
    last_extra: int
    dense: tuple[int, ...] = ()
    ffn: tuple[tuple[str, tuple[int, ...]], ...] = ()
    offload_min_batch: int = 0
    stored: tuple[tuple[str, int], ...] = ()
