"""Prompt processing under llama.cpp: how long a prompt of ``prompt`` tokens takes, micro-batch by
micro-batch, on a plan's stages.

llama.cpp splits a prompt into micro-batches of ``n_ubatch`` tokens (``-ub``, 512 by default) and runs
each through every stage. Per micro-batch of ``m`` tokens a GPU stage costs:

* **compute**: the FLOPs of its layers' active weights, ``2 * m`` per weight a token uses (the dense
  weights, and ``active_experts`` of the layer's experts: counted from the model's ``geometry`` where it
  has one, else from the bytes at ``dense_bits`` / ``expert_bits``), plus attention, ``2 * n_head *
  (head_k + head_v)`` per key a token attends to, at the card's matrix throughput (``tflops`` of the
  card table, or the GPU's ``matrix_tflops``) times ``matrix_efficiency`` (the rig's, else the share a
  dense model's prompt reached on the card, else MATRIX_EFFICIENCY). With flash attention a
  token attends to the keys up to its own (the kernels stop at the last unmasked key of their tile), a
  sliding-window layer to at most its window plus the micro-batch; without, to the whole cache view. An
  expert matrix sees only ``m * active / experts`` tokens, and runs at ``EXPERT_EFFICIENCY * t / (t +
  EXPERT_HALF_TOKENS)`` of that rate with ``t`` tokens;
* **copies**: each expert tensor kept in host memory is copied to the stage's GPU over PCIe once per
  micro-batch and computed there when ``m >= min_batch`` (ggml-cuda's ``ggml_backend_cuda_device_
  offload_op``: ``GGML_OP_OFFLOAD_MIN_BATCH`` = 32 tokens; an engine with its own threshold gives
  ``min_batch``): the bytes of the experts the micro-batch routes to, ``1 - (1 - active / experts) **
  m`` of them (the scheduler copies only the used experts), over ``pcie_bandwidth``. A smaller
  micro-batch computes them on the CPU at ``cpu_flops``.

The stages overlap micro-batches (pipeline parallelism) only when llama.cpp turns it on: several GPUs,
every layer and the KV cache on GPUs and no tensor override (``src/llama-context.cpp``), so a plan that
keeps every expert on its GPUs; otherwise the stages' times add. ``ttft_ms`` is the time of the whole
prompt: the first token comes out of the last micro-batch's logits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from solver.engines.llamacpp.fields import LlamaFields, LlamaGpuKeys, LlamaKeys
from solver.files.cards import DRIVER_MIB, find_card
from solver.problem.placement import PromptSpeed
from solver.problem.problem import kv_per_layer_of
from solver.units import per_layer

if TYPE_CHECKING:
    from solver.files.config import GpuConfig, ModelConfig, RigConfig

#: ggml-cuda's GGML_OP_OFFLOAD_MIN_BATCH: a weight in host memory is copied to the GPU for a batch of at
#: least this many tokens, else the CPU computes with it.
OFFLOAD_MIN_BATCH = 32
#: Share of the card's dense FP16 matrix throughput prompt processing reaches on a card the card table
#: gives no share of its own: llama-bench pp512 of Llama 3 8B fully on one GPU, 2 x 6.98 B matrix
#: weights x tokens/s over the card's figure: RTX 4090 Q4_0 10,359 t/s (0.44 of 330 TFLOPS, llama.cpp
#: PR #7676), RTX 3090 Q6_K 3,491 t/s (pp2048, 0.34 of 142 TFLOPS, PR #7860).
MATRIX_EFFICIENCY = 0.4
#: Share of the dense rate the MoE block reaches per expert FLOP once each expert sees enough tokens:
#: the router, the sort of the tokens by expert, the activations gathered and quantized per expert, the
#: products by id and the weighted sum cost more than a dense layer's one product per weight. Fitted
#: (least squares of the log error) to the two public rows of gpt-oss-20b fully on one RTX 3090 in
#: llama.cpp PR #20586 (-ub 256 and 512, pp512: 3,086 and 4,739 t/s), with the card's dense share from
#: the same table (Gemma 2B Q4_0, 0.43); none of the measured prompt runs the fidelity table scores.
EXPERT_EFFICIENCY = 0.45
#: Tokens per expert at which an expert matrix runs at half the dense rate: llama.cpp PR #26977's
#: Qwen3-30B-A3B rows (128 experts, 8 active) gain 1.50x from 4 to 8 and 1.66x from 8 to 16 tokens per
#: expert, what t / (t + 16) gives (1.67x, 1.50x).
EXPERT_HALF_TOKENS = 16.0
#: Share of the PCIe link's rate a host-to-device copy reaches: 12.2 GB/s of Gen3 x16's 15.75 on a
#: P100 (gearshifft PR #82), 13.1 GB/s on an RTX 2080 Ti (Helixer issue #22), 26.3 GB/s of Gen4 x16's
#: 31.5 between A6000s (nvbandwidth issue #50).
PCIE_EFFICIENCY = 0.8
#: FLOP/s of the CPU computing experts of a micro-batch under ``min_batch`` tokens: 8 cores x 2 AVX2
#: FMA units x 8 float lanes x 2 FLOPs x 4 GHz, a desktop's peak.
CPU_FLOPS = 1.0e12
#: Weight bits a model file without ``expert_bits`` / ``dense_bits`` is taken at (Q4_K).
DEFAULT_BITS = 4.5
#: Query heads per KV head taken where the model gives no geometry (Qwen3-30B-A3B, gpt-oss and
#: Qwen3.5/3.6 all have 8).
DEFAULT_GQA = 8


@dataclass(frozen=True)
class PromptModel:
    """What the prompt time reads, resolved from the rig and model.

    flops (k,)      FLOP/s each GPU reaches (throughput x efficiency; 0: unknown)
    pcie (k,)       bytes/s each GPU's host copies reach (0: unknown)
    dense (L,)      FLOPs per token of each layer's dense weights
    expert (L,)     FLOPs per token of each layer's active experts
    attention (L,)  FLOPs per token per key attended (0 for layers without a KV cache)
    tokens_share (L,)  active / experts of each layer (the share of a micro-batch an expert sees)
    expert_bytes (L,)  bytes of each layer's experts, all of them
    window (L,)     sliding-window length of each layer (0: full attention)
    pcie_given (k,) the rig gives the GPU's ``pcie_bandwidth`` (the rate copies reach: no
                    ``pcie_efficiency`` applies to it)
    efficiency, pcie_efficiency: the matrix share (the mean of the GPUs') and the PCIe efficiency
                    ``flops`` and ``pcie`` hold: where calibration starts
    dense_bytes (L,) bytes of each layer's weights besides its experts (what a layer wholly on the CPU
                    copies to the GPU; None: unknown, none copied)
    """

    flops: np.ndarray
    pcie: np.ndarray
    dense: np.ndarray
    expert: np.ndarray
    attention: np.ndarray
    tokens_share: np.ndarray
    expert_bytes: np.ndarray
    prompt: int = 2048
    n_ubatch: int = 512
    flash_attn: bool = True
    min_batch: int = OFFLOAD_MIN_BATCH
    cpu_flops: float = CPU_FLOPS
    depth: int = 0
    window: np.ndarray | None = None
    pcie_given: np.ndarray | None = None
    efficiency: float = MATRIX_EFFICIENCY
    pcie_efficiency: float = PCIE_EFFICIENCY
    dense_bytes: np.ndarray | None = None

    @property
    def known(self) -> bool:
        """Every GPU's matrix throughput is known (else no prompt speed is predicted)."""
        return bool(np.all(self.flops > 0))

    def micro_batches(self, prompt: int | None = None, n_ubatch: int | None = None) -> list[int]:
        """The micro-batch sizes of a prompt, in order."""
        p, n = prompt or self.prompt, n_ubatch or self.n_ubatch
        return [n] * (p // n) + ([p % n] if p % n else [])

    def keys_flops(self, a: int, b: int, m: int, pos: int) -> float:
        """Attention FLOPs of layers [a, b) over a micro-batch of ``m`` tokens after ``pos`` cached ones:
        with flash attention each token attends to the keys up to its own (on average ``pos + (m + 1) /
        2``), a sliding-window layer to at most its window of the cache; without, to the whole view."""
        new = (m + 1) / 2 if self.flash_attn else float(m)
        att = self.attention[a:b]
        if self.window is None:
            return m * (pos + new) * float(att.sum())
        win = self.window[a:b]
        keys = np.where(win > 0, np.minimum(pos, win), pos) + new
        return m * float(np.sum(att * keys))

    def copied_share(self, a: int, b: int, m: int) -> float:
        """Share of the expert bytes of layers [a, b) a micro-batch of ``m`` tokens routes to (uniform
        routing): llama.cpp's scheduler copies only the experts some token of the micro-batch uses."""
        eb = self.expert_bytes[a:b]
        total = float(eb.sum())
        if total <= 0:
            return 1.0
        used = 1.0 - (1.0 - np.clip(self.tokens_share[a:b], 0.0, 1.0)) ** m
        return float(np.sum(eb * used)) / total

    def expert_work(self, a: int, b: int, m: int) -> float:
        """The dense-rate FLOPs the experts of layers [a, b) cost a GPU on a micro-batch of ``m`` tokens:
        each expert matrix sees ``m * active / experts`` of them, at the MoE block's share of the rate."""
        t = m * self.tokens_share[a:b]
        sat = EXPERT_EFFICIENCY * np.where(t > 0, t / (t + EXPERT_HALF_TOKENS), 1.0)
        return float(np.sum(self.expert[a:b] * m / sat))

    def stage_ms(self, g: int, a: int, b: int, host_bytes: int, m: int, pos: int) -> float:
        """ms GPU g takes for layers [a, b) on a micro-batch of ``m`` tokens after ``pos`` in the cache,
        with ``host_bytes`` of their experts in host memory."""
        expert = self.expert_work(a, b, m)
        work = m * float(self.dense[a:b].sum()) + self.keys_flops(a, b, m, pos)
        ms = 0.0
        if host_bytes:
            if m >= self.min_batch:
                copied = host_bytes * self.copied_share(a, b, m)
                ms += 1000.0 * copied / max(float(self.pcie[g]), 1.0)
            else:  # the CPU computes the experts in host memory, the GPU the rest
                host = min(1.0, host_bytes / max(float(self.expert_bytes[a:b].sum()), 1.0))
                ms += 1000.0 * host * m * float(self.expert[a:b].sum()) / self.cpu_flops
                expert *= 1.0 - host
        return ms + 1000.0 * (work + expert) / float(self.flops[g])

    def cpu_layers_ms(self, g: int, c: int, m: int, pos: int) -> float:
        """ms layers [0, c), wholly on the CPU, take on a micro-batch of ``m`` tokens after ``pos`` in the
        cache. From ``min_batch`` tokens GPU g (llama.cpp's first device) runs their matrix products,
        their weights copied over PCIe once per micro-batch as expert tensors in host memory are (the
        dense ones whole, of the experts those the micro-batch routes to); attention, over their KV cache
        in host memory, stays on the CPU at ``cpu_flops``, and so does all of a smaller micro-batch."""
        if c <= 0:
            return 0.0
        attention = self.keys_flops(0, c, m, pos)
        if m < self.min_batch:
            work = m * float(self.dense[:c].sum() + self.expert[:c].sum()) + attention
            return 1000.0 * work / self.cpu_flops
        gpu = m * float(self.dense[:c].sum()) + self.expert_work(0, c, m)
        dense = float(self.dense_bytes[:c].sum()) if self.dense_bytes is not None else 0.0
        copied = dense + float(self.expert_bytes[:c].sum()) * self.copied_share(0, c, m)
        pcie = max(float(self.pcie[g]), 1.0)
        return 1000.0 * (copied / pcie + gpu / float(self.flops[g]) + attention / self.cpu_flops)

    def time_ms(
        self,
        stages: list[tuple[int, int, int, int]],
        pipeline: bool,
        prompt: int | None = None,
        n_ubatch: int | None = None,
        cpu: tuple[int, int] = (0, 0),
    ) -> float:
        """ms the prompt takes on ``stages`` ((gpu, start, end, host bytes) in order): the micro-batches
        one after another through the stages, overlapped across stages when ``pipeline``; ``cpu``
        (gpu, c): layers [0, c) wholly on the CPU before them, offloading to that GPU
        (``cpu_layers_ms``)."""
        sizes = self.micro_batches(prompt, n_ubatch)
        pos = self.depth
        times = []
        for m in sizes:
            times.append([self.stage_ms(g, a, b, h, m, pos) for g, a, b, h in stages])
            if cpu[1]:
                times[-1].insert(0, self.cpu_layers_ms(*cpu, m, pos))
            pos += m
        if not pipeline:
            return float(sum(sum(row) for row in times))
        done = [0.0] * len(stages)
        for row in times:  # finish[s][j] = max(finish[s-1][j], finish[s][j-1]) + t[s][j]
            prev = 0.0
            for s, t in enumerate(row):
                done[s] = max(done[s], prev) + t
                prev = done[s]
        return float(done[-1]) if done else 0.0


def prompt_speed(
    pm: PromptModel,
    stages: list[tuple[int, int, int, int]],
    pipeline: bool,
    n_ubatch: int | None = None,
    cpu: tuple[int, int] = (0, 0),
) -> PromptSpeed:
    """The prompt speed of ``stages`` (see ``PromptModel.time_ms``, ``cpu`` as it takes it); its figures
    None when a GPU's matrix throughput is unknown or there are no GPU stages (the run's settings are
    still given)."""
    n = n_ubatch or pm.n_ubatch
    if not pm.known or not stages:
        return PromptSpeed(None, None, pm.prompt, n, pipeline, pm.flash_attn)
    ms = pm.time_ms(stages, pipeline, n_ubatch=n, cpu=cpu)
    return PromptSpeed(1000.0 * pm.prompt / ms, ms, pm.prompt, n, pipeline, pm.flash_attn)


def _card(gpu: GpuConfig):
    """The card table's row for the GPU (None when unknown or ambiguous)."""
    if gpu.name is None:
        return None
    try:
        return find_card(gpu.name, total_mib=gpu.free // 2**20 + DRIVER_MIB)
    except ValueError:
        return None


def gpu_tflops(gpu: GpuConfig) -> float | None:
    """The GPU's dense FP16 matrix TFLOPS: its rig entry's, else the card table's."""
    given = gpu.keys(LlamaGpuKeys).matrix_tflops
    if given is not None:
        return given
    card = _card(gpu)
    return card.tflops if card is not None else None


def gpu_matrix_efficiency(gpu: GpuConfig) -> float:
    """The share of the GPU's matrix throughput prompt processing reaches by default: the card table's
    measured share, else MATRIX_EFFICIENCY."""
    card = _card(gpu)
    share = card.matrix_efficiency if card is not None else None
    return MATRIX_EFFICIENCY if share is None else share


def gpu_pcie(gpu: GpuConfig) -> float | None:
    """Bytes/s of the GPU's host link: its rig entry's ``pcie_bandwidth`` (the rate copies reach), else
    the card table's link rate (PCIE_EFFICIENCY is applied to that one only)."""
    given = gpu.keys(LlamaGpuKeys).pcie_bandwidth
    if given is not None:
        return float(given)
    card = _card(gpu)
    return float(card.pcie_bandwidth) if card is not None and card.pcie_bandwidth else None


def _layers(value, n: int) -> np.ndarray:
    return np.asarray(per_layer(value, n), dtype=np.float64)


def geometry_flops(model: ModelConfig, experts: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """FLOPs per token of each layer's dense weights and active experts, attention FLOPs per key and
    each layer's sliding window, counted from the model's ``geometry`` (the weights' shapes); None
    without one, or for a model with layers it does not spell out (MLA, recurrent layers), whose
    FLOPs then come from the bytes."""
    g = model.geometry
    if g is None or g.kv_lora_rank or g.ssm_inner:
        return None
    n = model.layers
    head_kv = _layers(g.head_kv, n)
    if np.any(head_kv <= 0):
        return None
    e = np.asarray(experts, dtype=np.float64)
    active = float(model.active_experts or 0)
    attn_w = (
        g.n_embd * (g.n_head * g.head_k + head_kv * (g.head_k + g.head_v)) + g.n_head * g.head_v * g.n_embd
    )
    moe = e > 0
    ffn = np.where(moe, g.n_embd * (3 * g.n_ff_shexp + e), 3.0 * g.n_embd * _layers(g.n_ff, n))
    dense = 2.0 * (attn_w + ffn)
    expert = np.where(moe, 2.0 * active * 3 * g.n_embd * g.n_ff_exp, 0.0)
    attention = np.full(n, 2.0 * g.n_head * (g.head_k + g.head_v))
    window = np.zeros(n)
    if g.swa_window:
        window[[i for i in g.swa_layers if i < n]] = g.swa_window
    return dense, expert, attention, window


def prompt_model(rig: RigConfig, model: ModelConfig, experts: np.ndarray) -> PromptModel:
    """The rig's and model's prompt constants (the module docstring); ``experts`` (L,) routed experts
    per layer."""
    keys = rig.keys(LlamaKeys)
    shares = np.array(
        [
            gpu_matrix_efficiency(g) if keys.matrix_efficiency is None else keys.matrix_efficiency
            for g in rig.gpus
        ],
        dtype=np.float64,
    )
    # the one share calibration starts from and writes back (every GPU's, for a rig of one kind of card)
    eff = float(shares.mean()) if len(shares) else MATRIX_EFFICIENCY
    pcie_eff = PCIE_EFFICIENCY if keys.pcie_efficiency is None else keys.pcie_efficiency
    flops = np.array([(gpu_tflops(g) or 0.0) * 1e12 for g in rig.gpus], dtype=np.float64) * shares
    pcie = []
    for g in rig.gpus:
        rate = gpu_pcie(g) or 0.0
        pcie.append(rate if g.keys(LlamaGpuKeys).pcie_bandwidth is not None else rate * pcie_eff)
    n = model.layers
    e = np.asarray(experts, dtype=np.float64)
    expert_bytes = _layers(model.expert_bytes, n) * e
    active = float(model.active_experts or 0)
    share = np.where(e > 0, active / np.maximum(e, 1), 0.0)
    shapes = geometry_flops(model, e)
    if shapes is not None:
        dense, expert, attention, window = shapes
    else:
        expert_bits = model.expert_bits or DEFAULT_BITS
        dense_bits = model.dense_bits or DEFAULT_BITS
        dense = 2.0 * _layers(model.dense_bytes or 0, n) * 8.0 / dense_bits
        expert = 2.0 * expert_bytes * share * 8.0 / expert_bits
        kv_layer = np.asarray(kv_per_layer_of(model), dtype=np.float64)
        # an f16 cache holds head_kv * (head_k + head_v) * 2 bytes per token; queries are DEFAULT_GQA x
        # the KV heads, so 2 * n_head * (head_k + head_v) FLOPs per key is DEFAULT_GQA * kv
        attention = DEFAULT_GQA * kv_layer
        window = None
    return PromptModel(
        flops=flops,
        pcie=np.array(pcie, dtype=np.float64),
        dense=dense,
        expert=expert,
        attention=attention,
        tokens_share=share,
        expert_bytes=expert_bytes,
        prompt=keys.prompt,
        n_ubatch=keys.n_ubatch,
        flash_attn=keys.flash_attn == "on",
        depth=keys.depth,
        window=window,
        pcie_given=np.array([g.keys(LlamaGpuKeys).pcie_bandwidth is not None for g in rig.gpus]),
        efficiency=eff,
        pcie_efficiency=pcie_eff,
        dense_bytes=_layers(model.dense_bytes or 0, n),
    )


def with_run(pm: PromptModel, **change) -> PromptModel:
    """The model with some settings changed (``prompt``, ``n_ubatch``, ``depth``, ``min_batch``)."""
    return replace(pm, **change)


def _flag(ignored: tuple[str, ...], names: tuple[str, ...]) -> int | None:
    """The integer value of the last of ``names`` among a command's words left unmodelled."""
    value = None
    for w in ignored:
        head, _, rest = w.partition(" ")
        if head in names and rest.strip().lstrip("-").isdigit():
            value = int(rest.strip())
    return value


def scored_prompt(
    q, scored, args, depth: int | None = None, pm: PromptModel | None = None
) -> PromptSpeed | None:
    """The prompt speed of a scored llama.cpp command: its stages, its ``-ub``/``-b`` (the micro-batch is
    the smaller) and llama-bench's ``-p`` for the prompt, at ``depth`` tokens already in the cache
    (default: llama-bench's ``-d``, else the rig's); pipeline parallelism only with several GPU stages,
    no layer and no expert tensor in host memory. ``pm`` replaces the problem's prompt model (other
    constants, as calibration tries them). None without a prompt model."""
    pm = LlamaFields.of(q).prompt if pm is None else pm
    if pm is None:
        return None
    ubatch = args.n_ubatch or pm.n_ubatch
    batch = args.n_batch or 2048
    prompt = _flag(args.ignored, ("-p", "--n-prompt")) or pm.prompt
    if depth is None:
        depth = args.depth if args.depth is not None else pm.depth
    stages = [(s.gpu, s.start, s.end, s.host_bytes) for s in scored.placement.stages]
    on_cpu = scored.cpu_layers[1] > scored.cpu_layers[0]
    pipeline = len(stages) > 1 and not on_cpu and not any(h for *_, h in stages)
    flash = pm.flash_attn if args.flash_attn is None else args.flash_attn != "off"
    run = replace(pm, prompt=prompt, depth=depth, n_ubatch=min(ubatch, batch, prompt), flash_attn=flash)
    cpu = (stages[0][0], scored.cpu_layers[1]) if on_cpu and stages else (0, 0)
    return prompt_speed(run, stages, pipeline, cpu=cpu)


def plan_prompt(p, plan) -> PromptSpeed | None:
    """The prompt speed of a plan's placement on problem ``p`` as its export runs it: the rig's
    ``n_ubatch`` (at most the prompt), every layer on its GPU but the first stage's ``cpu_layers``, so
    the stages pipeline when no expert and no layer is in host memory (None without a prompt model)."""
    f = LlamaFields.of(p)
    pm = f.prompt
    if pm is None or plan is None:
        return None
    stages = [(s.gpu, s.start, s.end, s.host_bytes) for s in plan.stages]
    cpu = (0, 0)
    if stages and plan.stages[0].cpu_layers:
        s, c = plan.stages[0], plan.stages[0].cpu_layers
        experts = int(f.unit_bytes[(f.unit_layer >= c) & (f.unit_layer < s.end)].sum()) - s.cache_bytes
        stages[0], cpu = (s.gpu, c, s.end, experts), (s.gpu, c)
    pipeline = len(stages) > 1 and not cpu[1] and not any(h for *_, h in stages)
    return prompt_speed(replace(pm, n_ubatch=min(pm.n_ubatch, pm.prompt)), stages, pipeline, cpu=cpu)
