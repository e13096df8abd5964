"""llama.cpp: whole expert tensors stay on their layer's GPU or run on the CPU.

The engine's rules live in this package: what a unit is and costs (units), the exact fill of a
stage's room (fill) and the table built from it (table), where llama.cpp puts layers and the memory it
takes by itself (layout), and a command line read (flags, args) and scored (devices, score). A stage
holds the set of its units that makes its time least within its room.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from solver.engines.bandwidth import MOE_LAYER_MS, BytesSpeed, host_read_of
from solver.engines.base import Orders, PlanCell, Required, Resolved, Shape, StageCell, ms
from solver.engines.export import (
    LLAMA_MAX_SPLITS,
    Command,
    context_flag,
    device_order,
    llama_flags,
    placeholder,
    stage_sizes,
)
from solver.engines.export_hosts import llama_rpc_lines
from solver.engines.llamacpp.fields import LlamaFields, LlamaGpuKeys, LlamaKeys
from solver.engines.llamacpp.layout import COMPUTE_BUFFER, HOST_COMPUTE_BUFFER, free_memory_split
from solver.engines.llamacpp.table import LlamaTable, cpu_moe_fill, stage_fill
from solver.engines.llamacpp.tensors import Costs, llama_units
from solver.errors import InputError
from solver.files.kvcache import KV_TYPES
from solver.problem.baselines import Baseline, cuts_of
from solver.problem.placement import NO_PROMPT_JSON, Placement, PromptSpeed, StageFill, bounds_ok, feasible
from solver.problem.problem import Problem, host_room_words
from solver.units import format_size, per_layer

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from solver.engines.export import Launch, Line
    from solver.engines.llamacpp.args import LlamaArgs
    from solver.engines.llamacpp.memory import Flags
    from solver.files.config import ModelConfig, RigConfig
    from solver.problem.scored import Scored


def prompt_tokens(q: Placement) -> str:
    """A placement's prompt tokens/s for a table cell ('-': not predicted)."""
    speed = q.prompt
    return "-" if speed is None or speed.tokens_per_s is None else f"{speed.tokens_per_s:,.1f}"


def ttft(q: Placement) -> str:
    """A placement's time to first token in ms for a table cell ('-': not predicted)."""
    speed = q.prompt
    return "-" if speed is None or speed.ttft_ms is None else f"{speed.ttft_ms:,.0f}"


def ttft_s(q: Placement) -> str:
    """A placement's time to first token in seconds for a narrow table cell ('-': not predicted)."""
    speed = q.prompt
    return "-" if speed is None or speed.ttft_ms is None else f"{speed.ttft_ms / 1000:,.1f}"


#: What stands in for the model file when the model file does not name it.
GGUF_PLACEHOLDER = "your GGUF file (its first shard); a model from `solve model from-gguf` names it"


def _why_not(p: Problem, plan: Placement, n_cpu: int) -> str:
    """Why the free-memory split with ``--n-cpu-moe n_cpu`` (the least that fits every GPU, or every
    layer's experts on the CPU when none does) is no placement: the limit that binds, named."""
    short = [s for s in plan.stages if not s.fits]
    if short:
        s = short[0]
        need = format_size(s.cache_bytes - s.room_bytes)
        return (
            f"does not fit even with every expert on the CPU: GPU {s.gpu} ({s.name}) lacks {need} "
            f"for its layers {s.start}-{s.end - 1}"
        )
    split = f"split by free memory, --n-cpu-moe {n_cpu}"
    room = p.host_room
    if room is not None and plan.host_bytes > room:
        return (
            f"{split} (the least that fits the GPUs) leaves {format_size(plan.host_bytes)} of experts in "
            f"host memory, more than {host_room_words(p)}"
        )
    return f"{split} breaks a GPU's min_layers or max_layers"


def _compute_buffers(rig: RigConfig, model: ModelConfig) -> dict:
    """llama.cpp's compute buffer on each GPU, as the per-GPU ``buffers`` and the extra bytes of the
    first and last stages: with the model's geometry, the exact figure of each role (``middle`` on every
    GPU, what ``first`` and ``last`` take beyond it on those stages; one GPU: ``only``) in each way
    llama.cpp may run a plan (solver.engines.llamacpp.runclass: pipeline parallelism on with every
    expert tensor held, or off with the op offload of those in host memory), the problem itself
    counting the larger of the two; without it, the allowance ``COMPUTE_BUFFER`` on every GPU and the
    logits of a micro-batch on the last (docs/engines.md, "Memory the engine takes"). The token
    embeddings stay in host RAM. Under a ``host_memory`` limit, ``host_reserve`` is the host's compute
    buffer, the larger of its figures with and without experts there (exact with a geometry,
    ``HOST_COMPUTE_BUFFER`` per 512 tokens of micro-batch without)."""
    from solver.engines.llamacpp import memory as llama_memory
    from solver.engines.llamacpp.runclass import BOUND, class_counts

    weights = model.first_stage_bytes - model.embedding_bytes
    k = len(rig.gpus)
    keys = rig.keys(LlamaKeys)
    g = llama_memory.geometry(model)
    if g is None:
        logits = 4 * keys.n_ubatch * (model.vocab_size or 0)  # float32 logits of a micro-batch
        host = HOST_COMPUTE_BUFFER * keys.n_ubatch // llama_memory.N_UBATCH
        if rig.host_memory is None:
            host = 0
        return {
            "buffers": [COMPUTE_BUFFER] * k,
            "last_stage_extra": logits,
            "first_stage_bytes": weights,
            "host_reserve": host,
        }
    flags = llama_memory.run_flags(rig.context, keys.n_ubatch, keys.flash_attn == "on", model.kv_type)
    stored = llama_memory.stored_bytes(model)
    backend = llama_memory.offload_batch(keys.backend)
    host = llama_memory.host_compute(g, flags, k, backend, stored) if rig.host_memory is not None else 0
    local = [gpu.host == rig.gpus[0].host for gpu in rig.gpus]
    offloads = bool(backend) and _may_offload(rig, flags, stored, host)
    classes = class_counts(g, flags, local, backend, stored, offloads, rig.idle_gpus)
    bound = next(c for c in classes if c.name == BOUND)
    counted = tuple(
        None if gpu.buffer is not None else b for gpu, b in zip(rig.gpus, bound.buffers, strict=True)
    )
    dense = per_layer(model.dense_bytes, model.layers)
    ffn = tuple((name, tuple(per_layer(v, model.layers))) for name, v in (model.ffn_tensors or {}).items())
    return {
        "buffers": list(bound.buffers),
        "last_stage_extra": bound.tail,
        "first_stage_bytes": weights + bound.head,
        "llama_memory": llama_memory.PlanMemory(
            g, flags, counted, bound.head, bound.tail, tuple(dense), ffn, backend, stored
        ),
        "classes": classes,
        "host_reserve": host,
    }


def _may_offload(rig: RigConfig, flags: Flags, stored: tuple, host: int) -> bool:
    """Whether a plan may leave an expert tensor in host memory with a micro-batch the first GPU
    offloads (``CUDA_OFFLOAD_MIN_BATCH`` tokens or more): some expert tensor fits in what
    ``host_memory`` leaves beside the host's compute buffer ``host`` (no limit: any does)."""
    from solver.engines.llamacpp.memory import CUDA_OFFLOAD_MIN_BATCH

    experts = [size for name, size in stored if "_exps" in name]
    if not experts or min(flags.n_ctx, flags.n_ubatch) < CUDA_OFFLOAD_MIN_BATCH:
        return False
    return rig.host_memory is None or rig.host_memory - host >= min(experts)


class LlamaCpp(BytesSpeed):
    """llama.cpp: expert tensors on their layer's GPU or on the CPU, which runs them."""

    name = "llama.cpp"
    note = "expert tensors on a GPU or, beyond VRAM, on the CPU"
    rig_keys = (
        "host_bandwidth",
        "host_memory",
        "n_ubatch",
        "flash_attn",
        "backend",
        "generate",
        "moe_layer_ms",
        *BytesSpeed.rig_keys,
    )
    rig_schema = LlamaKeys
    gpu_schema = LlamaGpuKeys
    miss_rate_key = "host_bandwidth"
    reads_llama_bench = True
    defaults = ("fit", "free-memory")
    default_searches = True  # --fit's tens of dry runs
    miss_label = "CPU time (experts in host memory)"
    kv_types = tuple(KV_TYPES)
    plans_cpu_layers = True
    columns: ClassVar[list[tuple[str, StageCell]]] = [
        ("experts\non GPU", lambda s: format_size(s.cache_bytes)),
        ("experts\non CPU", lambda s: format_size(s.host_bytes)),
        ("GPU\nms", lambda s: ms(s.compute_ms)),
        ("CPU\nms", lambda s: ms(s.miss_ms - s.switch_ms)),
        ("switch\nms", lambda s: ms(s.switch_ms)),
    ]
    summary: ClassVar[list[tuple[str, PlanCell]]] = [
        ("GPU time", lambda q: f"{sum(s.compute_ms for s in q.stages):.3f} ms"),
        ("CPU time", lambda q: f"{sum(s.miss_ms - s.switch_ms for s in q.stages):.3f} ms"),
        ("switches", lambda q: f"{sum(s.switch_ms for s in q.stages):.3f} ms"),
        ("experts on GPU", lambda q: format_size(sum(s.cache_bytes for s in q.stages))),
        ("experts on CPU", lambda q: format_size(q.host_bytes)),
        ("prompt tokens/s", prompt_tokens),
        ("time to 1st token", lambda q: "-" if ttft(q) == "-" else f"{ttft(q)} ms"),
    ]
    sweep: ClassVar[list[tuple[str, PlanCell]]] = [
        ("experts\non CPU", lambda q: format_size(q.host_bytes)),
        ("prompt\nt/s", prompt_tokens),
        ("TTFT\ns", ttft_s),
    ]
    required = (
        Required("model", "active_experts", "the experts each token uses per MoE layer"),
        Required("rig", "host_bandwidth", "how fast the CPU streams offloaded experts, e.g. '60 GB/s'"),
    )

    def resolve_fields(self, rig: RigConfig, model: ModelConfig, experts: np.ndarray) -> Resolved:
        """The speed model's fields, the units at the rig's ``host_bandwidth``, the model's MTP blocks
        and GGUF file, the micro-batch and flash attention; the compute buffer on every card by its role
        (``_compute_buffers``) and the first stage's weights without the embeddings (they stay in host
        memory); with ``cpu_layers``, the compute buffers with first layers on the CPU
        (solver.engines.llamacpp.cpumemory). A quantised V cache without flash attention is refused, as
        llama.cpp refuses it."""
        from solver.engines.llamacpp import memory as llama_memory
        from solver.engines.llamacpp.cpumemory import cpu_layers_of
        from solver.engines.llamacpp.prompt import prompt_model

        speed, layer_ms = self.speed_fields(rig, model, experts)
        keys = rig.keys(LlamaKeys)
        moe = MOE_LAYER_MS if keys.moe_layer_ms is None else keys.moe_layer_ms
        speed["speed"] = dataclasses.replace(speed["speed"], moe_layer_ms=moe)
        units = llama_units(model, keys.host_bandwidth, experts)
        fa = keys.flash_attn == "on"
        flags = llama_memory.run_flags(rig.context, keys.n_ubatch, fa, model.kv_type)
        why = llama_memory.refusal(None, flags)
        if why:
            raise InputError(
                rig.name or "rig", f"kv_type {model.kv_type} with flash_attn off: llama.cpp's {why}"
            )
        memory = _compute_buffers(rig, model)
        fields = LlamaFields(
            **speed,
            **units,
            host_bandwidth=keys.host_bandwidth,
            nextn_layers=model.nextn_layers,
            gguf=model.gguf,
            n_ubatch=keys.n_ubatch,
            flash_attn=fa,
            llama_memory=memory.get("llama_memory"),
            classes=memory.get("classes", ()),
            prompt=prompt_model(rig, model, experts),
            cpu_layers=cpu_layers_of(rig, model),
        )
        return Resolved(
            fields,
            buffers=memory["buffers"],
            layer_ms=layer_ms,
            first_stage_bytes=memory["first_stage_bytes"],
            last_stage_extra=memory["last_stage_extra"],
            host_reserve=memory["host_reserve"],
        )

    def evaluate(
        self,
        p: Problem,
        gpus: list[int] | tuple[int, ...],
        cuts: list[int] | tuple[int, ...],
        fill: Callable[[Problem, int, int, int], StageFill] | None = None,
    ) -> Placement:
        """The placement (``Engine.evaluate``) with its prompt processing as its export runs it
        (solver.engines.llamacpp.prompt.plan_prompt), so that the plan, the default split and the
        proportional one each report theirs."""
        from solver.engines.llamacpp.prompt import plan_prompt

        plan = super().evaluate(p, gpus, cuts, fill)
        return dataclasses.replace(plan, prompt=plan_prompt(p, plan))

    def prompt_gap(self, p: Problem) -> str | None:
        """None when every GPU's matrix throughput is known (the card table's, or ``matrix_tflops``)."""
        pm = LlamaFields.of(p).prompt
        if pm is None:
            return "the model gives no prompt-processing model"
        unknown = [p.gpu_names[g] for g in np.flatnonzero(pm.flops <= 0)]
        if unknown:
            return f"the matrix throughput of {', '.join(unknown)} is unknown: give its matrix_tflops"
        return None

    def prompt_arc_ms(
        self, p: Problem, g: np.ndarray, a: np.ndarray, b: np.ndarray, host: np.ndarray
    ) -> np.ndarray:
        """Each stage's ms on each micro-batch of the prompt, (arcs, micro-batches): what
        ``PromptModel.time_ms`` adds up for one stage, as ``plan_prompt`` runs the plan (the rig's
        micro-batch, at most the prompt)."""
        pm = LlamaFields.of(p).prompt
        sizes = pm.micro_batches(n_ubatch=min(pm.n_ubatch, pm.prompt))
        starts = pm.depth + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        out = np.empty((len(g), len(sizes)), dtype=np.float64)
        for i, (gi, ai, bi, hi) in enumerate(zip(g.tolist(), a.tolist(), b.tolist(), host.tolist())):
            out[i] = [pm.stage_ms(gi, ai, bi, hi, m, int(pos)) for m, pos in zip(sizes, starts)]
        return out

    def plan_json(self, plan: Placement | None) -> dict:
        """``pp_tokens_per_s``, ``ttft_ms``, ``prompt``, ``n_ubatch`` and ``flash_attn`` (null where
        there is no plan or its prompt speed is unknown)."""
        speed: PromptSpeed | None = plan.prompt if plan is not None else None
        return speed.json() if speed is not None else dict(NO_PROMPT_JSON)

    def launch(self, p: Problem, fit_off: bool = False) -> Launch:
        """The GGUF file, with the context, KV cache type, micro-batch and flash attention."""
        f = LlamaFields.of(p)
        return dataclasses.replace(
            super().launch(p, fit_off), gguf=f.gguf, n_ubatch=f.n_ubatch, flash_attn=f.flash_attn
        )

    def extra_blocks(self, p: Problem) -> int:
        return LlamaFields.of(p).nextn_layers

    def table(self, p: Problem) -> LlamaTable:
        return LlamaTable.build(p)

    def tables(self, ps: Sequence[Problem]) -> list[LlamaTable]:
        return LlamaTable.build_many(ps)

    def stage_fill(self, p: Problem, g: int, a: int, b: int) -> StageFill:
        return stage_fill(p, g, a, b)

    def miss_total_ms(self, p: Problem) -> float:
        """Every unit on the CPU with its layer's switch, and with CPU layers every dense byte there too."""
        c = Costs.of(p)
        f = LlamaFields.of(p)
        dense = 1000.0 * float(host_read_of(p).sum()) / float(f.host_bandwidth or 1) if f.cpu_layers else 0.0
        return float(c.cpu.sum()) + float(c.switch.max(initial=0.0)) * int(c.n_moe[-1]) + dense

    def orders(self, p: Problem) -> Orders | None:
        """One llama.cpp runs at most LLAMA_MAX_SPLITS devices in a layer split: its --tensor-split
        takes fewer values than llama_max_devices() (16). A larger rig is refused, idle GPUs or not (the
        planner does not choose which GPUs to leave out to meet a count)."""
        if p.n_gpus <= LLAMA_MAX_SPLITS:
            return None
        return Orders(
            [],
            f"llama.cpp splits layers over at most {LLAMA_MAX_SPLITS} GPUs (its --tensor-split takes at "
            f"most {LLAMA_MAX_SPLITS} values); the rig lists {p.n_gpus}: list at most {LLAMA_MAX_SPLITS}",
        )

    def plan_classes(self, p: Problem) -> tuple[Problem, ...]:
        """Pipeline parallelism on (every expert tensor held) and off (some in host memory, with the
        op offload): solver.engines.llamacpp.runclass."""
        from solver.engines.llamacpp.runclass import class_problems

        return class_problems(p)

    def as_run(self, p: Problem, plan: Placement) -> tuple[Problem, Placement] | None:
        """Its exported command's own compute buffers (solver.engines.llamacpp.commandmemory.as_run)."""
        from solver.engines.llamacpp.commandmemory import as_run

        return as_run(p, plan)

    def plan_problem(self, scored: Scored, args: LlamaArgs, reload: Callable[..., Problem]) -> Problem:
        """The rig loaded again at the command's own ``-c``, ``-ub``, ``-fa`` and KV type (where K and V
        share one), so that each GPU's compute buffer is counted as a plan counts its own placement
        (the command's figures belong to the command's placement), at llama-bench's ``-d`` depth."""
        from solver.engines.bandwidth import with_constants
        from solver.engines.llamacpp.commandmemory import command_flags

        p = scored.problem
        flags = command_flags(p, args)
        settings: dict = {
            "context": p.context,
            "n_ubatch": flags.n_ubatch,
            "flash_attn": "on" if flags.flash_attn else "off",
        }
        if args.type_k == args.type_v and args.type_k in KV_TYPES:
            settings["kv_type"] = args.type_k
        q = reload(**settings)
        return q if args.depth is None else with_constants(q, depth=args.depth)

    def default_split(self, p: Problem, which: str | None = None) -> Baseline:
        """``fit`` (the default): what ``--fit`` places on the rig, its printed command scored
        (solver.engines.llamacpp.fitdefault); ``free-memory``: what builds before ``--fit`` do, layers
        split by free memory (no ``--tensor-split``) with the smallest ``--n-cpu-moe`` that makes every
        GPU fit."""
        if (which or self.defaults[0]) == "fit":
            from solver.engines.llamacpp.fitdefault import fit_default

            return fit_default(p, self)
        cuts = cuts_of(free_memory_split(p.free, p.n_layers, self.extra_blocks(p)))
        gpus = list(range(p.n_gpus))
        if not bounds_ok(p, cuts):
            return Baseline(
                cuts, False, None, "free-memory", reason="the free-memory split leaves a GPU without layers"
            )

        def placed(n_cpu: int) -> Placement:
            return self.evaluate(p, gpus, cuts, partial(cpu_moe_fill, n_cpu_moe=n_cpu))

        # the GPUs fit from some N on (each more layer's experts on the CPU frees VRAM): bisect for it;
        # host memory only gets tighter with N, so if that N breaks it, every larger one does too
        lo, hi = 0, p.n_layers
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if all(s.fits for s in placed(mid).stages) else (mid + 1, hi)
        plan = placed(lo)
        if feasible(p, plan):
            return Baseline(cuts, True, plan, "free-memory", f"split by free memory, --n-cpu-moe {lo}")
        return Baseline(cuts, False, plan, "free-memory", _why_not(p, plan, lo))

    def stage_json(self, stage) -> dict:
        """The stage's tensors and CPU time; ``cpu_layers`` where it leaves layers wholly on the CPU."""
        return {
            "held_tensors": stage.held_pairs,
            "tensors": stage.visible_pairs,
            "cpu_ms": stage.miss_ms - stage.switch_ms,
            "switch_ms": stage.switch_ms,
            "offload": [{"layer": layer, "tensors": list(names)} for layer, names in stage.offload],
        } | ({"cpu_layers": stage.cpu_layers} if stage.cpu_layers else {})

    def export(self, plan: Shape) -> list[Line]:
        """``llama-server -m MODEL.gguf -c CONTEXT --split-mode layer -ngl 999 --tensor-split ... -ot ...``
        with ``-ub`` (and ``-b`` when it must grow) for a micro-batch other than 512, ``-ctk/-ctv`` and
        ``-fa on`` for a KV cache type other than f16, ``-fa off`` when asked, and ``-fit off`` when asked;
        across hosts, the rpc-server lines first. A plan with layers on the CPU writes ``-ngl`` for them
        (solver.engines.export.llama_flags)."""
        gpus, cuts, n_layers, launch = plan.gpus, plan.cuts, plan.n_layers, plan.launch
        offload, names, extra_blocks, hosts = plan.offload, plan.names, plan.extra_blocks, plan.hosts
        sizes = stage_sizes(cuts, n_layers)
        split = llama_flags(sizes, n_layers + extra_blocks, offload, names, plan.cpu_layers)
        model, notes = placeholder(launch.gguf, "MODEL.gguf", GGUF_PLACEHOLDER)
        from solver.engines.llamacpp.memory import N_BATCH, N_UBATCH

        context, more = context_flag("-c", launch.context)
        tail = []
        if launch.n_ubatch != N_UBATCH:  # -b (2048 by default) must be at least -ub
            tail += ["-b", str(launch.n_ubatch)] if launch.n_ubatch > N_BATCH else []
            tail += ["-ub", str(launch.n_ubatch)]
        if launch.kv_type != self.kv_types[0]:
            tail += ["-ctk", launch.kv_type, "-ctv", launch.kv_type]
        if not launch.flash_attn:
            tail += ["-fa", "off"]
        elif launch.kv_type != self.kv_types[0]:  # a quantised V cache needs flash attention
            tail += ["-fa", "on"]
        tail += ["-fit", "off"] if launch.fit_off else []
        head = ["llama-server", "-m", model, *context]
        if hosts is not None and hosts.spans(gpus):
            lines, env, devices = llama_rpc_lines(hosts, gpus)
            return [*notes, *more, *lines, Command((*head, *devices, *split, *tail), env)]
        return [*notes, *more, Command((*head, *split, *tail), device_order(gpus))]

    def read_command(self, words: list[str]) -> LlamaArgs:
        """llama-server, llama-cli or llama-bench words (solver.engines.llamacpp.args)."""
        from solver.engines.llamacpp.args import parse_llama_args

        return parse_llama_args(words)

    def score(self, p: Problem, args: LlamaArgs) -> Scored:
        """Where the command puts every layer and expert tensor, timed (solver.engines.llamacpp.score),
        with its prompt processing at its own ``-ub``/``-b``/``-p`` (solver.engines.llamacpp.prompt)."""
        from solver.engines.llamacpp.prompt import scored_prompt
        from solver.engines.llamacpp.score import score

        scored = score(p, args, self)
        speed = scored_prompt(scored.problem, scored, args)
        return dataclasses.replace(scored, placement=dataclasses.replace(scored.placement, prompt=speed))
