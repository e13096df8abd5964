"""What an ik_llama.cpp command does on a rig: mainline's scorer (solver.engines.llamacpp.score: the same
time model, cards and notes) with ik's layout, where layers go and which rules the loader adds.

Layers (split mode layer, src/llama.cpp ``llm_load_tensors``): with two or more devices, ik's greedy
split by bytes (solver.engines.ik_llama.rules ``layer_placement``) over the slot sizes of
``get_layer_sizes`` (solver.engines.ik_llama.units ``layer_sizes``), weighted by the ``-ts`` values or,
without them, each device's free memory less its margin (1 GiB); layers below ``n_layer - ngl`` on the
CPU, the output on a GPU only when ``ngl > n_layer``. ``-ngl`` not given is 999 (builds since
2026-07-30; older ones default to 0). ``-ngl 0`` drops every rule.

Rules, in the order ik searches them (src/llama-load-tensors.cpp ``create_tensors_helper``): the
user's ``-ot`` rules, then ``-ncmoe``'s (``cpu_moe_layers``: the last N MoE layers on one device; on
several, each device's own last layers, spread by ``roundf(count / n_layer * N)``; none with ``-sm none``
on several), so a user rule wins. ``--fit`` (src/llama.cpp, PR 1501's rules): refuses ``-ot`` and
``-ncmoe``, forces ``-ngl 999``, then for each GPU over its budget sends the experts of its last layers to
the CPU (``fit_layer_mode``); it never changes the context or the split.
"""

from __future__ import annotations

import dataclasses

from solver.engines.base import Engine
from solver.engines.ik_llama.args import IkArgs
from solver.engines.ik_llama.rules import (
    CPU,
    DEFAULT_MEM_MARGIN,
    FitError,
    cpu_moe_layers,
    cumulative_splits,
    device_mem,
    fit_layer_mode,
    fit_rules,
    layer_placement,
    ncmoe_path,
    ncmoe_rules,
)
from solver.engines.ik_llama.units import IkFields, expert_sizes, layer_sizes
from solver.engines.llamacpp.devices import Devices, devices_of
from solver.engines.llamacpp.score import score as mainline_score
from solver.errors import ArgsError
from solver.problem.problem import Problem
from solver.problem.scored import Scored

#: ik's -ngl when not given (common.h -1, src/llama.cpp llama_model_load_from_file: 999 with a GPU).
DEFAULT_NGL = 999
#: What a score of a command that places nothing says.
UNASKED = (
    "ik_llama.cpp splits layers by bytes over free memory less 1 GiB and -ngl defaults to 999 (builds "
    "before 2026-07-30: 0, CPU only); nothing fits memory by itself without --fit"
)
MiB = 2**20


def margins_of(args: IkArgs, k: int) -> list[int]:
    """Each device's margin in bytes: ``--fit-margin``/``-gfm`` MiB, else k_default_mem_margin."""
    given = args.fit_margins or ()
    return [DEFAULT_MEM_MARGIN if i >= len(given) or given[i] is None else given[i] * MiB for i in range(k)]


def ik_layout(p: Problem, args: IkArgs, dev: Devices) -> tuple[list[int], int, IkArgs, list[str]]:
    """ik's layers, output and rules for the command (see the module docstring)."""
    f = IkFields.of(p)
    notes: list[str] = []
    n_blocks = p.n_layers + f.nextn_layers
    k = len(dev.model)
    ngl = args.n_gpu_layers
    if args.fit:
        if args.overrides and not args.bench:
            raise ArgsError("--fit: Manual tensor overrides cannot be used with --fit")
        if args.n_cpu_moe:
            raise ArgsError("--fit: -ncmoe | --n-cpu-moe cannot be used with --fit")
        ngl = DEFAULT_NGL
    if ngl is None or ngl < 0:
        ngl = DEFAULT_NGL if k else 0
    if args.n_gpu_layers is None and k:
        notes.append("-ngl not given: 999 (ik_llama.cpp builds before 2026-07-30 default to 0, CPU only)")
    sizes = layer_sizes(p)
    free = [int(p.free[g]) for g in dev.model]
    ts = list(args.tensor_split[:k])
    weights = (
        ts + [0.0] * (k - len(ts)) if any(ts) else [float(x) for x in device_mem(free, margins_of(args, k))]
    )
    if k >= 2 and not any(weights):
        raise ArgsError("no GPU has more free memory than its margin: ik_llama.cpp has nothing to split by")
    splits = cumulative_splits(weights) if k else [1.0]
    where = layer_placement(sizes, k, ngl, splits, f.max_compute)
    layers = [CPU if d == CPU else dev.model[d] for d in where.layers][: p.n_layers]
    output = CPU if where.output == CPU else dev.model[where.output]
    rules = list(args.overrides) if ngl else []
    if ngl == 0 and (args.overrides or args.n_cpu_moe):
        notes.append("-ngl 0 drops every -ot rule and -ncmoe (src/llama.cpp llama_model_load_from_file)")
    n = args.n_cpu_moe if ngl else 0
    if n:
        n_all = len(devices_of(p, dataclasses.replace(args, split_mode="layer")).model)
        path = ncmoe_path(args.split_mode, n, n_blocks, n_all)
        moe = sorted({int(x) for x in f.unit_layer})
        chosen = cpu_moe_layers(n_blocks, n, where.default, n_all, args.split_mode, moe, f.nextn_layers)
        if path == "none":
            notes.append(f"-ncmoe {n} with -sm none on {n_all} devices adds no rule: ik ignores it")
        rules += ncmoe_rules(chosen, path)
    if args.fit and k:
        budget = device_mem(free, margins_of(args, k))
        try:
            res = fit_layer_mode(sizes, expert_sizes(p), where.default, budget, f.max_compute)
        except FitError as exc:
            raise ArgsError(f"--fit: {exc} (ik_llama.cpp moves experts only, never the context)") from None
        rules += fit_rules(res.layers)
        if res.layers:
            notes.append(f"--fit sends the experts of {len(res.layers)} layers to the CPU")
    return layers, output, dataclasses.replace(args, overrides=tuple(rules)), notes


def score(p: Problem, args: IkArgs, engine: Engine) -> Scored:
    """Where the ik command puts every layer and expert tensor, timed as mainline's score does."""
    return mainline_score(p, args, engine, layout=ik_layout, unasked=UNASKED)
