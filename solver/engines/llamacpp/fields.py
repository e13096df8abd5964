"""llama.cpp's own problem fields: its units (expert tensors), the rate the CPU runs those it keeps at,
the blocks after the planned layers and the GGUF file its command loads; and its own keys of a rig
file they are built from. The speed model's fields and keys it shares with vLLM and SGLang come first
(solver.engines.bandwidth.BytesFields, BytesKeys)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Discriminator, Tag

from solver.engines.bandwidth import BytesFields, BytesKeys
from solver.files.config import Count, EngineKeys, NonNegMs, OnOff, PositiveMs, Rate, Share

#: ``n_ubatch``: a micro-batch of tokens, or ``auto`` (chosen with the placement); errors name the
#: branch the value is on.
UbatchKey = Annotated[
    Annotated[Count, Tag("§one")] | Annotated[Literal["auto"], Tag("§many")],
    Discriminator(lambda v: "§many" if v == "auto" else "§one"),
]


class LlamaKeys(BytesKeys):
    """llama.cpp's rig keys beyond the speed model's: the rate the CPU streams host memory at, the
    micro-batch (``-ub``, or ``auto``: planned with the placement) and flash attention (``-fa``) the run
    uses, the backend its GPUs run (``rpc`` never offloads an op to a GPU), the prompt tokens its prompt
    figures are for, the tokens the request objective generates, the shares of matrix throughput and
    PCIe rate prompt processing reaches (None: the defaults of solver.engines.llamacpp.prompt), a
    GPU's fixed time per MoE layer whose experts it runs (None: solver.engines.bandwidth.MOE_LAYER_MS),
    and whether the first stage may leave its first layers wholly on the CPU (``-ngl``; off: every
    layer on a GPU)."""

    host_bandwidth: Rate | None = None
    n_ubatch: UbatchKey = 512
    flash_attn: OnOff = "on"
    backend: Literal["cuda", "rocm", "vulkan", "metal", "sycl", "rpc"] = "cuda"
    prompt: Count = 2048
    generate: Count | None = None
    matrix_efficiency: Share | None = None
    pcie_efficiency: Share | None = None
    moe_layer_ms: NonNegMs | None = None
    cpu_layers: bool = False


class LlamaGpuKeys(EngineKeys):
    """llama.cpp's keys of each GPU, for prompt processing: the rate copies over its host link reach
    and its dense FP16 matrix TFLOPS (None: the card table's)."""

    pcie_bandwidth: Rate | None = None
    matrix_tflops: PositiveMs | None = None


@dataclass(frozen=True)
class LlamaFields(BytesFields):
    """What llama.cpp's arithmetic and export read besides the shared arrays.

    unit_* (U,)     the units by layer, then the model's tensor order (solver.engines.llamacpp.tensors):
                    layer, bytes, CPU ms per token, tensor names; unit_slot the unit's position among
                    its layer's tensors
    host_bandwidth  bytes/s the CPU streams the experts kept in host memory at (what unit_ms is at)
    nextn_layers    blocks the GGUF holds after the planned layers (MTP), placed on the last device
                    with the output
    gguf            the GGUF file the command loads, a path from the working directory (None: unknown)
    n_ubatch, flash_attn  the micro-batch (``-ub``) and flash attention (``-fa``) the plan assumes
    llama_memory    what the compute buffers were counted from (solver.engines.llamacpp.memory
                    PlanMemory; None: the model file has no ``geometry:`` block, an allowance)
    classes         what each way llama.cpp may run a plan counts (solver.engines.llamacpp.runclass
                    Counts: pipeline parallelism on or off); empty in a class's own problem
    prompt          the prompt-processing constants (solver.engines.llamacpp.prompt.PromptModel)
    cpu_layers      what whole layers on the CPU before the first stage cost it
                    (solver.engines.llamacpp.cpumemory.CpuLayers; None: every layer on a GPU)
    """

    unit_layer: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    unit_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    unit_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    unit_names: list[tuple[str, ...]] = field(default_factory=list)
    unit_slot: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    host_bandwidth: float | None = None
    nextn_layers: int = 0
    gguf: str | None = None
    n_ubatch: int = 512
    flash_attn: bool = True
    llama_memory: object | None = None
    classes: tuple = ()
    prompt: Any = None
    cpu_layers: Any = None

    def at_host_bandwidth(self, rate: float) -> LlamaFields:
        """The units' CPU times at ``rate`` (a problem without a CPU rate keeps its own)."""
        if not self.host_bandwidth:
            return self
        return dataclasses.replace(
            self, unit_ms=self.unit_ms * (self.host_bandwidth / rate), host_bandwidth=rate
        )
