"""Files -> one resolved Problem: a rig, its model and profile (or the command line's), checked against
the engine the rig names and combined into plain arrays (solver.problem.problem). The shared arrays are
built here; the engine builds its own fields (``Engine.resolve_fields``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from solver.engines import REGISTRY, Engine, engine_named
from solver.errors import InputError
from solver.files.config import (
    CountsCurve,
    ModelConfig,
    RigConfig,
    check_host_runs,
    load_model,
    load_rig,
    relative_to,
    shown_path,
)
from solver.files.kvcache import scale_per_kind
from solver.files.yamlfile import YamlDoc, load_yaml
from solver.planning.plausible import rate_doubts
from solver.problem.problem import Problem, estimate_layer_ms, kv_per_layer_of, layer_bytes_of
from solver.problem.scales import BYTE_LIMIT, COARSE_TIME_SCALE, COEFF_BUDGET, MASS_SCALE, TABLE_CELLS
from solver.profiles.curves import pair_mass
from solver.profiles.format import Profile, check_against, read_profile
from solver.units import per_layer


@dataclass(frozen=True)
class Overrides:
    """Command-line settings that replace the rig's or model's own."""

    model: Path | None = None
    profile: Path | None = None
    objective: str | None = None
    order: str | None = None
    context: int | None = None
    engine: str | None = None
    idle_gpus: bool = False
    #: The rate a rig without ``host_bandwidth`` starts from (``solve calibrate`` fits it).
    host_bandwidth: int | None = None
    kv_type: str | None = None
    #: llama.cpp's micro-batch, or "auto": plan with each of ``ubatch_candidates``.
    n_ubatch: int | str | None = None
    flash_attn: str | None = None
    #: Tokens of the prompt whose processing llama.cpp plans report (the rig's ``prompt``).
    prompt: int | None = None
    #: Free memory of some GPUs (by rig index) instead of the rig's: what a hint plans again with.
    free: dict[int, int] | None = None
    #: Tokens the ``request`` objective's request generates (the rig's ``generate``).
    generate: int | None = None
    #: llama.cpp: the first stage may leave its first layers on the CPU (the rig's ``cpu_layers``).
    cpu_layers: bool = False


#: The micro-batches ``n_ubatch: auto`` chooses among: llama.cpp's compute graph is sized for a
#: micro-batch and its kernels are tuned for powers of two; below 256 the expert copies of a prompt
#: dominate (every micro-batch copies them), above 8192 the compute buffer takes gigabytes.
UBATCH_CANDIDATES = (256, 512, 1024, 2048, 4096, 8192)
#: What a command other than planning takes ``n_ubatch: auto`` as: llama.cpp's own default.
UBATCH_DEFAULT = 512


def ubatch_candidates(prompt: int, context: int) -> list[int]:
    """The candidates a prompt of ``prompt`` tokens can tell apart: those below the prompt and the
    first at or above it (a larger micro-batch runs the same prompt in one piece, only its compute
    buffer grows), likewise for the context the compute graph is sized at."""
    cap = min(prompt, context) if context > 0 else prompt
    out = [n for n in UBATCH_CANDIDATES if n < cap]
    return out + [n for n in UBATCH_CANDIDATES if n >= cap][:1]


def resolve(
    rig: RigConfig,
    model: ModelConfig,
    profile: Profile | None,
    *,
    context: int,
    rig_name: str,
    model_name: str,
    files: dict[str, str],
    model_file: str,
) -> Problem:
    """Combine validated configs and a profile into a Problem, checking what spans the files."""
    n, k = model.layers, len(rig.gpus)
    by_gpu, by_pair = k * (n + 1) ** 2, (n + 1) * (len(profile) + 1 if profile is not None else 1)
    if max(by_gpu, by_pair) > TABLE_CELLS:
        what = f"{k:,} GPUs" if by_gpu >= by_pair else f"{len(profile):,} ranked pairs"
        raise InputError(
            files.get("rig", rig_name) if by_gpu >= by_pair and k > n else model_file,
            f"{n:,} layers with {what} need a range-walk table of {max(by_gpu, by_pair):,} cells, "
            f"over the {TABLE_CELLS:,} moesplit plans in",
            key="gpus" if by_gpu >= by_pair and k > n else "layers",
        )
    experts = np.array(per_layer(model.experts, n), dtype=np.int64)
    expert_bytes = np.array(per_layer(model.expert_bytes, n), dtype=object)
    if profile is not None:
        _check_profile(profile, model, experts, model_file)
    layer_bytes = layer_bytes_of(model, context)
    pair_layer = profile.layer.astype(np.int64) if profile is not None else np.zeros(0, dtype=np.int64)
    pair_bytes = expert_bytes[pair_layer] if len(pair_layer) else np.zeros(0, dtype=object)
    all_experts = int((experts * expert_bytes).sum())
    total = (
        sum(layer_bytes)
        + max(int(pair_bytes.sum()), all_experts)
        + model.stage_bytes
        + model.first_stage_bytes
    )
    total += model.last_stage_bytes
    if total >= BYTE_LIMIT:
        raise InputError(
            model_file,
            f"the model's sizes add up to {total} bytes at a context of {context}, "
            f"beyond the 2^62 bytes moesplit plans in",
        )
    own = engine_named(rig.engine).resolve_fields(rig, model, experts)
    gpus = rig.gpus
    buffer = [g.buffer if g.buffer is not None else b for g, b in zip(gpus, own.buffers or [0] * len(gpus))]
    layer_ms = own.layer_ms or [
        g.layer_ms if g.layer_ms is not None else estimate_layer_ms(g.sms, g.clock_ghz) for g in gpus
    ]
    p = Problem(
        rig=rig_name,
        model=model_name,
        layer_bytes=np.array(layer_bytes, dtype=np.int64),
        expert_bytes=expert_bytes.astype(np.int64),
        pair_layer=pair_layer,
        pair_bytes=pair_bytes.astype(np.int64),
        mass=pair_mass(model.curve, len(profile), profile.count) if profile is not None else np.zeros(0),
        free=np.array([g.free for g in gpus], dtype=np.int64),
        reserve=np.array([g.reserve for g in gpus], dtype=np.int64) + np.array(buffer, dtype=np.int64),
        buffers=np.array(buffer, dtype=np.int64),
        layer_ms=np.array(layer_ms, dtype=np.float64),
        min_layers=np.array([g.min_layers for g in gpus], dtype=np.int64),
        max_layers=np.array([min(g.max_layers or n, n) for g in gpus], dtype=np.int64),
        gpu_names=[g.name if g.name is not None else f"GPU {i}" for i, g in enumerate(gpus)],
        stage_bytes=model.stage_bytes,
        first_stage_bytes=model.first_stage_bytes if own.first_stage_bytes is None else own.first_stage_bytes,
        last_stage_bytes=model.last_stage_bytes + own.last_stage_extra,
        first_stage_min_layers=rig.first_stage_min_layers,
        handoff_ms=rig.handoff_ms,
        network_handoff_ms=rig.network_handoff_ms,
        idle_gpus=rig.idle_gpus,
        **_hosts(rig),
        order=rig.order,
        objective=rig.objective,
        context=context,
        files=files,
        experts=experts,
        host_memory=rig.host_memory,
        host_reserve=own.host_reserve if rig.host_memory is not None else 0,
        engine=rig.engine,
        engine_fields=own.fields,
        kv_per_layer=np.array(kv_per_layer_of(model), dtype=np.int64),
        kv_type=model.kv_type,
    )
    _check_scales(p, files.get("rig", rig_name))
    return p


def _hosts(rig: RigConfig) -> dict:
    """Host index of each GPU (hosts numbered in order of first appearance) and the host names."""
    names = list(dict.fromkeys(g.host for g in rig.gpus))
    return {
        "gpu_host": np.array([names.index(g.host) for g in rig.gpus], dtype=np.int64),
        "host_names": names,
    }


def _check_profile(profile: Profile, model: ModelConfig, experts: np.ndarray, model_file: str) -> None:
    """A profile the model's experts and curve can use (strata)."""
    check_against(profile, experts)
    if not len(profile):
        # a wrong or truncated file: nothing could be cached and the mass curves are undefined
        raise InputError(profile.file, "ranks no pairs, so no expert could be cached")
    if isinstance(model.curve, CountsCurve):
        if profile.count is None:
            raise InputError(
                model_file,
                f"the counts curve needs a profile with counts; {profile.file} has none",
                key="curve.kind",
            )
        if not profile.count.any():
            raise InputError(profile.file, "every count is 0, so the counts curve has no mass")


def _check_scales(p: Problem, rig_file: str) -> None:
    """Refuse a rig whose windows cannot be scored in whole units of 1e-6 ms, or held mass in 1e-12,
    without CP-SAT's objective overflowing (solver.solvers.arcs scales every weight to integers)."""
    worst = engine_named(p.engine).worst_window_ms(p)
    if worst * COARSE_TIME_SCALE * p.most_arcs >= COEFF_BUDGET:
        raise _too_long(p, rig_file, worst)
    if p.objective == "mass" and MASS_SCALE * p.most_arcs >= COEFF_BUDGET:
        raise InputError(
            rig_file,
            f"{p.most_arcs:,} (GPU, layer range) choices are too many to score held mass in units of "
            f"1e-12; use objective time",
            key="objective",
        )


def _too_long(p: Problem, rig_file: str, worst: float) -> InputError:
    """The error for windows too long to score, at the key that makes them so: a mistyped rate (``55``
    is 55 bytes per second) by its line, else the largest of the GPU, miss and hand-off times."""
    what = (
        f"a window could take {worst:.4g} ms over {p.most_arcs:,} (GPU, layer range) choices, too much "
        f"to score in whole units of 1e-6 ms"
    )
    try:
        doc: YamlDoc | None = load_yaml(Path(rig_file), rig_file)
    except InputError:
        doc = None
    for doubt in rate_doubts(doc) if doc is not None else []:
        return InputError(doubt.file, f"{doubt.message} ({what})", doubt.line, doubt.key)
    engine = engine_named(p.engine)
    gpu = engine.slowest_gpu_ms(p)
    hop = max(p.handoff_ms, p.network_ms) * p.n_gpus
    if engine.miss_rate_key and engine.miss_total_ms(p) >= max(gpu, hop):
        key = engine.miss_rate_key
        line = doc.line((key,)) if doc is not None else None
        return InputError(rig_file, f"{what}; raise {key}", line, key)
    return InputError(rig_file, f"{what}; lower layer_ms, miss_ms or handoff_ms")


def _run_kv_type(
    model: ModelConfig,
    model_doc: YamlDoc,
    rig: RigConfig,
    rig_doc: YamlDoc,
    override: str | None,
    engine: Engine,
) -> ModelConfig:
    """The model with its KV bytes at the type the run uses: ``--kv-type``, else the rig's ``kv_type``,
    else the model's own; an engine that cannot run that type is an input error at the key that set it."""
    kv = override or rig.kv_type or model.kv_type
    if kv not in engine.kv_types:
        what = f"engine {engine.name} runs its KV cache at {', '.join(engine.kv_types)} only"
        if override:
            raise InputError(rig_doc.file, f"--kv-type {kv}: {what}")
        doc = rig_doc if rig.kv_type else model_doc
        hint = "" if rig.kv_type else f"; set kv_type: {engine.kv_types[0]} in the rig"
        raise doc.error(("kv_type",), f"{kv}: {what}{hint}")
    per_token = scale_per_kind(model.kv_bytes_per_token, model.kv_type, kv)
    return model.model_copy(update={"kv_bytes_per_token": per_token, "kv_type": kv})


def _launch_paths(model: ModelConfig, model_path: Path) -> ModelConfig:
    """The model's ``gguf`` file as a path from the working directory (it is named relative to the model
    file), and its ``hf_model`` likewise when that is a directory there (else a Hugging Face id)."""
    update = {}
    if model.gguf is not None:
        update["gguf"] = shown_path(relative_to(model_path, model.gguf).resolve())
    if model.hf_model is not None and relative_to(model_path, model.hf_model).is_dir():
        update["hf_model"] = shown_path(relative_to(model_path, model.hf_model).resolve())
    return model.model_copy(update=update) if update else model


def _referenced(override: Path | None, named: str | None, holder: Path, doc: YamlDoc, key: str) -> Path:
    """The file ``key`` names, relative to the file holding it, unless the command line gives one."""
    if override is not None:
        return override
    if named is not None:
        return relative_to(holder, named)
    raise doc.error((key,), f"missing (required, or give --{key})")


def load_problem(rig_path: Path, overrides: Overrides | None = None) -> Problem:
    """Read a rig, its model and profile (or the overrides) into a Problem; ``n_ubatch: auto`` as
    llama.cpp's default micro-batch (``load_problems`` plans each candidate)."""
    return next(load_problems(rig_path, overrides, auto=False)[1])


def load_problems(
    rig_path: Path, overrides: Overrides | None = None, auto: bool = True
) -> tuple[bool, Iterator[Problem]]:
    """Read a rig, its model and profile (or the overrides) into Problems: whether ``n_ubatch`` is
    auto, and the problems, resolved as they are taken: one, or with ``n_ubatch: auto`` (and ``auto``)
    one for each of ``ubatch_candidates`` ascending, the files read once."""
    ov = overrides or Overrides()
    rig, rig_doc = load_rig(rig_path, REGISTRY)
    model_path = _referenced(ov.model, rig.model, rig_path, rig_doc, "model")
    model, model_doc = load_model(model_path)
    update = {k: v for k, v in (("objective", ov.objective), ("order", ov.order), ("engine", ov.engine)) if v}
    if ov.idle_gpus:
        update["idle_gpus"] = True
    if ov.cpu_layers:
        update["cpu_layers"] = True
    if ov.host_bandwidth is not None and rig.setting("host_bandwidth") is None:
        update["host_bandwidth"] = ov.host_bandwidth
    for key in ("context", "n_ubatch", "flash_attn", "prompt", "generate"):  # the engine's memory, prompt
        if getattr(ov, key) is not None:
            update[key] = getattr(ov, key)
    if ov.free:
        given = ov.free
        update["gpus"] = [
            g.model_copy(update={"free": given[i]}) if i in given else g for i, g in enumerate(rig.gpus)
        ]
    if update:
        rig = rig.model_copy(update=update)
    check_host_runs(rig, rig_doc)
    files = {"rig": rig_doc.file, "model": model_doc.file}
    engine = engine_named(rig.engine)
    engine.check_gpus(rig, rig_doc)
    if rig.setting("cpu_layers"):
        _check_cpu_layers(rig, rig_doc, ov, engine)
    for need in engine.required:
        doc, holder = (rig_doc, rig) if need.file == "rig" else (model_doc, model)
        if getattr(holder, need.key) is None and (need.when is None or need.when(rig)):
            raise doc.error((need.key,), f"missing (engine {engine.name} needs {need.what})")
    model = _run_kv_type(model, model_doc, rig, rig_doc, ov.kv_type, engine)
    model = _launch_paths(model, model_path)
    profile = None
    if engine.profile:  # the other engines hold whole tensors or everything: no profile
        profile_path = _referenced(ov.profile, model.profile, model_path, model_doc, "profile")
        profile = read_profile(profile_path, shown_path(profile_path))
        files["profile"] = profile.file
    context = rig.context if ov.context is None else ov.context
    if rig.objective == "request":
        _check_request(rig, rig_doc, context, ov)
    ubatches = [rig.n_ubatch]
    if rig.n_ubatch == "auto":
        if "n_ubatch" not in engine.rig_keys:
            raise _setting_error(rig_doc, ov, f"the {engine.name} engine has no micro-batch", key="n_ubatch")
        ubatches = ubatch_candidates(rig.prompt, context) if auto else [UBATCH_DEFAULT]
    names = (rig.name or rig_path.stem, model.name or model_path.stem)
    problems = _resolved(rig, model, profile, ubatches, context, names, files, model_doc, rig_doc, ov, engine)
    return rig.n_ubatch == "auto" and auto, problems


def _resolved(
    rig: RigConfig,
    model: ModelConfig,
    profile: Profile | None,
    ubatches: list,
    context: int,
    names: tuple[str, str],
    files: dict[str, str],
    model_doc: YamlDoc,
    rig_doc: YamlDoc,
    ov: Overrides,
    engine: Engine,
) -> Iterator[Problem]:
    """The problem at each micro-batch, resolved when taken."""
    for n in ubatches:
        p = resolve(
            rig.model_copy(update={"n_ubatch": n}),
            model,
            profile,
            context=context,
            rig_name=names[0],
            model_name=names[1],
            files=files,
            model_file=model_doc.file,
        )
        if rig.objective == "request":
            gap = engine.prompt_gap(p)
            if gap:
                raise _setting_error(rig_doc, ov, f"objective request times the prompt, but {gap}")
            p = replace(p, generate=rig.generate)
        yield p


#: The command-line option that sets each rig key these errors name.
_OPTIONS = {"objective": "--objective", "context": "--context", "n_ubatch": "--ubatch"}


def _setting_error(doc: YamlDoc, ov: Overrides, message: str, key: str = "objective") -> InputError:
    """An error of a setting: at the rig's key, or the option's when the command line set it."""
    if getattr(ov, key, None) is not None:
        return InputError(doc.file, f"{_OPTIONS[key]}: {message}")
    return doc.error((key,), message)


def _check_cpu_layers(rig: RigConfig, doc: YamlDoc, ov: Overrides, engine: Engine) -> None:
    """Whole layers on the CPU are planned for an engine that plans them, under a decode objective:
    else an error at the rig's ``cpu_layers`` key, or the option's when the command line set it."""
    why = None
    if not engine.plans_cpu_layers:
        why = (
            f"the {engine.name} engine plans every layer on a GPU; whole layers on the CPU are planned "
            "for mainline llama.cpp (engine: llama.cpp)"
        )
    elif rig.objective == "request":
        why = "the request objective does not price layers on the CPU in its prompt; plan with objective time"
    if why is None:
        return
    if ov.cpu_layers:
        raise InputError(doc.file, f"--cpu-layers: {why}")
    raise doc.error(("cpu_layers",), why)


def _check_request(rig: RigConfig, doc: YamlDoc, context: int, ov: Overrides) -> None:
    """The request objective needs the tokens it generates, and a context that holds the request."""
    if rig.generate is None:
        raise _setting_error(doc, ov, "objective request needs the tokens it generates: give --generate N")
    if context < rig.prompt + rig.generate:
        raise _setting_error(
            doc,
            ov,
            f"a request of {rig.prompt:,} prompt and {rig.generate:,} generated tokens needs a context of "
            f"at least {rig.prompt + rig.generate:,}; the plan's is {context:,} (give --context)",
            key="context",
        )
