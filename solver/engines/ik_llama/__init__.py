"""ik_llama.cpp: llama.cpp's engine (solver.engines.llamacpp) with ik's own placement rules.

What is the same is imported: the time model, the exact fill (solver.engines.llamacpp.fill) and its
table, the memory a stage takes, the scorer's cards and notes. What differs lives here, read from
github.com/ikawrakow/ik_llama.cpp at 8337e4cd (rules: the rules with their sources):

- units (units): a layer's gate and up experts are one unit, as ik runs them as one fused op;
- the layer split (rules.layer_placement): by bytes, with free memory less 1 GiB as the default
  weights; ``-ngl N`` leaves layers below ``n_layer - N`` on the CPU, the output on a GPU only when
  ``N > n_layer``;
- ``-ncmoe`` (rules.cpu_moe_layers): the last N MoE layers on one device, each device's own last
  layers on several, after the user's ``-ot`` rules; llama-bench's ``--n-cpu-moe`` the first N;
- ``--fit`` (rules.fit_layer_mode): MoE experts only, 1 GiB margin, never the context;
- the command (args, score), its export (export: ``-ts`` that ik's greedy turns into the plan's cuts)
  and llama-bench's JSON fields (bench).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from solver.engines.base import Orders, Resolved, Shape
from solver.engines.export import Command, context_flag, device_order, placeholder
from solver.engines.ik_llama.export import IkLaunch, offload_words, split_words
from solver.engines.ik_llama.rules import MIN_BATCH_OFFLOAD, offload_min_batch
from solver.engines.ik_llama.units import IkFields, ik_units, layer_sizes
from solver.engines.llamacpp import GGUF_PLACEHOLDER, LlamaCpp
from solver.engines.llamacpp.fields import LlamaKeys
from solver.errors import ArgsError
from solver.problem.baselines import Baseline
from solver.problem.placement import Placement, feasible
from solver.problem.problem import Problem
from solver.units import format_size

if TYPE_CHECKING:
    from solver.engines.export import Line
    from solver.engines.ik_llama.args import IkArgs
    from solver.files.config import ModelConfig, RigConfig
    from solver.problem.scored import Scored

#: The least prompt batch for which ik offloads a CPU-resident MoE weight to the GPU: ``32 * experts /
#: active`` (ggml/src/ggml-cuda.cu ``ggml_backend_cuda_offload_op``; GGML_CUDA_MIN_BATCH_OFFLOAD 32), for
#: when moesplit models prompt processing (rules.offload_min_batch).
PROMPT_OFFLOAD_MIN_BATCH = MIN_BATCH_OFFLOAD


class IkLlama(LlamaCpp):
    """ik_llama.cpp: mainline's units and time model with ik's fused up/gate, byte split, -ncmoe and fit."""

    name = "ik_llama.cpp"
    note = "expert tensors (up and gate fused) on a GPU or, beyond VRAM, on the CPU; ik's byte split"
    defaults = ("fit", "free-memory")
    #: ik's -ngl leaves the output on the CPU unless every layer is offloaded and its -ts is a byte
    #: greedy: whole CPU layers are planned for mainline only.
    plans_cpu_layers = False

    def resolve_fields(self, rig: RigConfig, model: ModelConfig, experts: np.ndarray) -> Resolved:
        """mainline's fields with ik's fused units and the logits the output slot weighs."""
        base = super().resolve_fields(rig, model, experts)
        keys = rig.keys(LlamaKeys)
        fields = IkFields(
            **{f.name: getattr(base.fields, f.name) for f in dataclasses.fields(base.fields)},
            logits_bytes=4 * keys.n_ubatch * (model.vocab_size or 0),
        )
        fields = dataclasses.replace(fields, **ik_units(model, keys.host_bandwidth, experts))
        if fields.prompt is not None:  # ik offloads a CPU expert weight from 32 x experts / active tokens
            most = int(np.max(experts)) if len(experts) else 0
            batch = offload_min_batch(most, int(model.active_experts or 1), PROMPT_OFFLOAD_MIN_BATCH)
            fields = dataclasses.replace(fields, prompt=dataclasses.replace(fields.prompt, min_batch=batch))
        return dataclasses.replace(base, fields=fields)

    def prompt_offload_batch(self, p: Problem) -> int:
        """The least ubatch whose CPU experts ik offloads for prompt processing."""
        f = IkFields.of(p)
        experts = int(p.experts.max()) if p.experts is not None and len(p.experts) else 0
        return offload_min_batch(experts, int(f.active_experts or 1), PROMPT_OFFLOAD_MIN_BATCH)

    def launch(self, p: Problem, fit_off: bool = False) -> IkLaunch:
        """The GGUF, context and KV type, and the slot sizes ik's split weighs (ik has no ``-fit off``:
        its fit is opt-in)."""
        base = super().launch(p, False)
        f = IkFields.of(p)
        fields = {x.name: getattr(base, x.name) for x in dataclasses.fields(base)}
        return IkLaunch(**fields, layer_sizes=tuple(layer_sizes(p)), max_compute=f.max_compute)

    def orders(self, p: Problem) -> Orders | None:
        """mainline's device limit, and one host: ik's device order over rpc-servers is not modelled, so
        a rig over several hosts is refused here rather than planned for an export that cannot say it."""
        if len(set(p.hosts.tolist())) > 1:
            return Orders([], "ik_llama.cpp over several hosts (--rpc) is not planned; list one host's GPUs")
        return super().orders(p)

    def export(self, plan: Shape) -> list[Line]:
        """``llama-server -m MODEL.gguf -c CONTEXT -sm layer -ngl 999 -ts ... -ot ...=CPU`` (ik's spellings;
        ``-ctk/-ctv`` for a quantised KV cache, flash attention being on by default); ValueError for a
        plan across hosts (not modelled) or one whose cuts ik's split cannot land on."""
        launch = (
            plan.launch if isinstance(plan.launch, IkLaunch) else IkLaunch(**vars(plan.launch or IkLaunch()))
        )
        if plan.hosts is not None and plan.hosts.spans(plan.gpus):
            raise ValueError("ik_llama.cpp's export across hosts (--rpc) is not modelled")
        n_blocks = plan.n_layers + plan.extra_blocks
        split = split_words(launch, list(plan.cuts), plan.n_layers, n_blocks)
        model, notes = placeholder(launch.gguf, "MODEL.gguf", GGUF_PLACEHOLDER)
        context, more = context_flag("-c", launch.context)
        tail = ["-ctk", launch.kv_type, "-ctv", launch.kv_type] if launch.kv_type != self.kv_types[0] else []
        words = (
            "llama-server",
            "-m",
            model,
            *context,
            *split,
            *offload_words(plan.offload, plan.names),
            *tail,
        )
        return [*notes, *more, Command(words, device_order(plan.gpus))]

    def as_run(self, p: Problem, plan: Placement) -> tuple[Problem, Placement] | None:
        """None: ik's own command is not read back to count its buffers (the plan keeps its bound)."""
        return None

    def read_command(self, words: list[str]) -> IkArgs:
        """ik's llama-server, llama-cli or llama-bench words (solver.engines.ik_llama.args)."""
        from solver.engines.ik_llama.args import parse_ik_args

        return parse_ik_args(words)

    def score(self, p: Problem, args: IkArgs) -> Scored:
        """Where the ik command puts every layer and expert tensor, timed (solver.engines.ik_llama.score)."""
        from solver.engines.ik_llama.score import score

        return score(p, args, self)

    def bench_row(self, row: dict) -> dict:
        from solver.engines.ik_llama.bench import bench_row

        return bench_row(row)

    def default_split(self, p: Problem, which: str | None = None) -> Baseline:
        """``fit``: ``llama-server --fit`` (builds since 2026-03-25; opt-in), scored; ``free-memory``: no
        placement flag, layers split by bytes over free memory less 1 GiB, with the smallest ``-ncmoe``
        (ik's: each GPU's last layers) that makes every GPU fit."""
        from solver.engines.ik_llama.args import parse_ik_args
        from solver.engines.ik_llama.score import score

        if (which or self.defaults[0]) == "fit":
            words = ["--fit", "-c", str(p.context)]
            try:
                s = score(p, parse_ik_args(words), self)
            except ArgsError as exc:
                return Baseline([], False, None, "fit", reason=f"ik_llama.cpp's --fit gives up: {exc}")
            return self._baseline(
                p, s, "fit", words, "what --fit chooses (ik: experts of each GPU's last layers)"
            )

        def placed(n: int) -> Scored:
            return score(p, parse_ik_args(["-c", str(p.context), "-ncmoe", str(n)]), self)

        lo, hi = 0, p.n_layers
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if placed(mid).fits else (mid + 1, hi)
        words = ["-c", str(p.context), "-ncmoe", str(lo)]
        return self._baseline(
            p, placed(lo), "free-memory", words, f"split by bytes over free memory, -ncmoe {lo}"
        )

    def _baseline(self, p: Problem, s: Scored, name: str, words: list[str], note: str) -> Baseline:
        plan = s.placement
        if not plan.stages:
            return Baseline([], False, None, name, note, reason="no layer on a GPU", command=words)
        if not s.fits:
            short = next(c for c in s.cards if not c.fits)
            why = f"{' '.join(words)} does not fit {short.name}: it lacks {format_size(short.shortfall)}"
            return Baseline(plan.cuts, False, plan, name, note, reason=why, command=words)
        ok = feasible(p, plan) if len(plan.stages) == p.n_gpus else True
        why = None if ok else "breaks host_memory or a GPU's min_layers or max_layers"
        return Baseline(plan.cuts, ok, plan, name, note, reason=why, command=words)
