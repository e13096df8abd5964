"""Validated rig and model files (docs/reference.md): pydantic models plus YAML-line-aware errors."""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Protocol, TypeVar, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    create_model,
)

from solver.errors import InputError, brief
from solver.files.kvcache import KV_TYPES
from solver.files.yamlfile import YamlDoc, key_name, load_yaml
from solver.units import MAX_CONTEXT, parse_rate, parse_size, per_layer

Size = Annotated[int, BeforeValidator(parse_size)]
Rate = Annotated[int, BeforeValidator(parse_rate)]
Name = Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, (int, float)) else v)]
#: Largest time (ms), clock (GHz) or curve parameter a file may give: far above any real one, and
#: small enough that windows still score in whole units of 1e-6 ms (see solver.solvers.arcs).
REAL_MAX = 1e6
#: Largest count (layers, experts, SMs, layer limits): counts go into int64 arrays and their sums.
COUNT_MAX = 2**31 - 1
#: The engine a rig plans for when it names none.
DEFAULT_ENGINE = "strata"
#: A decimal in exponent form that YAML 1.2 reads as a number but PyYAML (YAML 1.1) as a string: ``1e-3``.
_EXPONENT_FORM = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+")


def _yaml12_float(value: object) -> object:
    """``1e-3`` as YAML 1.2 reads it; anything else unchanged for the strict float check."""
    return float(value) if isinstance(value, str) and _EXPONENT_FORM.fullmatch(value) else value


def _known_engine(name: str, info: ValidationInfo) -> str:
    """The rig's ``engine``, one of the ``engines`` the validation context names."""
    engines = (info.context or {})["engines"]
    if name not in engines:
        raise ValueError(f"unknown engine {brief(name)}; choose one of {', '.join(engines)}")
    return name


EngineName = Annotated[str, AfterValidator(_known_engine)]
PositiveMs = Annotated[float, BeforeValidator(_yaml12_float), Field(gt=0, le=REAL_MAX, allow_inf_nan=False)]
NonNegMs = Annotated[float, BeforeValidator(_yaml12_float), Field(ge=0, le=REAL_MAX, allow_inf_nan=False)]
Share = Annotated[float, BeforeValidator(_yaml12_float), Field(gt=0, le=1, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=1, le=COUNT_MAX)]
Whole = Annotated[int, Field(ge=0, le=COUNT_MAX)]
FilePath = Annotated[str, Field(min_length=1)]


def _known_kv_type(name: str) -> str:
    if name not in KV_TYPES:
        raise ValueError(f"unknown KV cache type {brief(name)}; choose one of {', '.join(KV_TYPES)}")
    return name


def _on_off(value: object) -> object:
    """``on``/``off`` as written, also when YAML 1.1 read them as booleans."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


KvType = Annotated[str, AfterValidator(_known_kv_type)]
OnOff = Annotated[Literal["on", "off"], BeforeValidator(_on_off)]


def _tagged(one: Any, many: Any) -> Any:
    """A value that is either one item or a list/mapping of them, with errors from the right branch."""
    return Annotated[
        Annotated[one, Tag("§one")] | Annotated[many, Tag("§many")],
        Discriminator(lambda v: "§many" if isinstance(v, (list, dict)) else "§one"),
    ]


PerLayerSize = _tagged(Size, list[Size])
PerLayerCount = _tagged(Whole, list[Whole])
PerKindSize = _tagged(Size, dict[str, Size])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CoverCurve(_Strict):
    """``mass[r] = (1 - r/N)^b - (1 - (r+1)/N)^b``: the engine's measured-count curve."""

    kind: Literal["cover"]
    b: PositiveMs = 3.0


class PowerCurve(_Strict):
    """``mass[r] ~ (r+1)^-exponent``: a Zipf law over the global rank."""

    kind: Literal["power"]
    exponent: PositiveMs


class CountsCurve(_Strict):
    """``mass[r] = count[r] / sum(count)``: read off a profile that carries counts."""

    kind: Literal["counts"]


Curve = Annotated[
    Annotated[CoverCurve, Tag("§cover")]
    | Annotated[PowerCurve, Tag("§power")]
    | Annotated[CountsCurve, Tag("§counts")],
    Discriminator(lambda v: f"§{v.get('kind')}" if isinstance(v, dict) else "§none"),
]


class EngineKeys(_Strict):
    """Base of an engine's own keys of a rig file, rig-wide or of each GPU: a subclass beside the engine
    gives their types, bounds and defaults (``Engine.rig_schema``, ``Engine.gpu_schema``). The file keeps
    them flat beside the common keys, and ``check_rig`` validates every engine's with the file, so a key
    of another engine is checked too (a rig planned with ``--engine`` keeps its file). Engines that
    read one key share the model that declares it."""

    model_config = ConfigDict(defer_build=True)  # validated only as part of the joined schema


K = TypeVar("K", bound=EngineKeys)


def _own(config: BaseModel, schema: type[K]) -> K:
    """The keys ``schema`` declares, as ``config`` holds them (already validated); its defaults for
    those ``config`` lacks (a config built without them)."""
    given = {k: v for k, v in vars(config).items() if k in schema.model_fields}
    return schema.model_construct(_fields_set=set(given) & config.model_fields_set, **given)


class GpuConfig(_Strict):
    """One card: its free VRAM, what to keep free, and its speed per layer. An engine's own GPU keys
    come from its ``gpu_schema`` (``keys``)."""

    model_config = ConfigDict(defer_build=True)  # built once joined with the engines' keys

    name: Name | None = None
    free: Size
    reserve: Size = 0
    layer_ms: PositiveMs | None = None
    sms: Count | None = None
    clock_ghz: PositiveMs | None = None
    min_layers: Count = 1
    max_layers: Count | None = None
    host: Name = "local"
    mem_bandwidth: Rate | None = None
    buffer: Size | None = None

    def keys(self, schema: type[K]) -> K:
        """This GPU's keys of an engine's ``schema``."""
        return _own(self, schema)


class RigConfig(_Strict):
    """A rig file: the GPUs in pipeline order and the run's settings.

    Here are the keys every engine shares (their order is the one an unknown key's hint lists them
    in, before the engines' own). An engine's own keys are its ``rig_schema`` (``EngineKeys``), joined to
    these when a file is read (``check_rig``) and read back through ``keys``.
    """

    model_config = ConfigDict(defer_build=True)  # built once joined with the engines' keys

    name: Name | None = None
    model: FilePath | None = None
    context: Annotated[int, Field(ge=0, le=MAX_CONTEXT)] = 0
    handoff_ms: NonNegMs = 0.0
    first_stage_min_layers: Count = 1
    order: Literal["as-given", "auto"] = "as-given"
    objective: Literal["time", "mass", "throughput", "request"] = "time"
    engine: EngineName = DEFAULT_ENGINE
    host_memory: Size | None = None  # strata, llama.cpp
    network_handoff_ms: NonNegMs | None = None
    idle_gpus: bool = False
    kv_type: KvType | None = None
    gpus: Annotated[list[GpuConfig], Field(min_length=1)]

    def keys(self, schema: type[K]) -> K:
        """The rig-wide keys of an engine's ``schema``."""
        return _own(self, schema)

    def setting(self, key: str) -> Any:
        """One rig-wide key as the file gives it or its default, whichever engine declares it (None
        where none does): for code that reads a key without the engine that owns it."""
        return vars(self).get(key)


class KeyOwner(Protocol):
    """What reading a rig asks of each engine: the schemas of its own rig-wide and per-GPU keys."""

    rig_schema: ClassVar[type[EngineKeys]]
    gpu_schema: ClassVar[type[EngineKeys]]


def _declared(schemas: tuple[type[EngineKeys], ...], common: type[BaseModel]) -> dict[str, Any]:
    """The fields of ``schemas`` for ``create_model``, in order: each key once, declared by one model
    (engines that read one key inherit it) and none of them a common key."""
    fields: dict[str, Any] = {}
    owner: dict[str, type] = {}
    for schema in schemas:
        for key, info in schema.model_fields.items():
            declared = next(c for c in schema.__mro__ if key in inspect.get_annotations(c))
            if key in common.model_fields or owner.setdefault(key, declared) is not declared:
                other = common if key in common.model_fields else owner[key]
                raise TypeError(f"rig key {key!r} of {declared.__name__} is also {other.__name__}'s")
            fields[key] = (info.annotation, info)
    return fields


def rig_schema(engines: Mapping[str, KeyOwner]) -> type[RigConfig]:
    """The whole schema of a rig file planned for one of ``engines``: the common keys, then each
    engine's own, on the rig and on each GPU (in the engines' order; ``GpuConfig`` of
    ``gpus_schema``)."""
    return _joined(
        tuple(dict.fromkeys(e.rig_schema for e in engines.values())),
        tuple(dict.fromkeys(e.gpu_schema for e in engines.values())),
    )


@functools.cache
def _joined(
    rig_keys: tuple[type[EngineKeys], ...], gpu_keys: tuple[type[EngineKeys], ...]
) -> type[RigConfig]:
    """``RigConfig`` and its ``GpuConfig`` with the fields of ``rig_keys`` and ``gpu_keys``."""
    gpu = create_model("GpuConfig", __base__=GpuConfig, **_declared(gpu_keys, GpuConfig))
    gpus = RigConfig.model_fields["gpus"]
    return create_model(
        "RigConfig",
        __base__=RigConfig,
        gpus=(Annotated[(list[gpu], *gpus.metadata)], ...),
        **_declared(rig_keys, RigConfig),
    )


def gpus_schema(schema: type[RigConfig]) -> type[GpuConfig]:
    """The GPU entries' schema of a rig schema (``rig_schema``)."""
    return get_args(schema.model_fields["gpus"].annotation)[0]


class GeometryConfig(_Strict):
    """A model's ``geometry:`` block: the widths llama.cpp's compute graph is built from (the GGUF
    header's keys; docs/engines.md, "Memory the engine takes"). The model's ``layers``, ``experts``,
    ``active_experts``, ``vocab_size`` and ``nextn_layers`` complete it. Per-layer values are one value
    or a list of ``layers``; ``head_kv`` is 0 on a recurrent (linear-attention) layer and ``n_ff`` is the
    dense FFN's width (ignored on MoE layers)."""

    arch: Name
    n_embd: Count
    n_head: Count
    head_kv: PerLayerCount
    head_k: Count
    head_v: Count
    n_rot: Whole = 0
    n_ff: PerLayerCount = 0
    n_ff_exp: Whole = 0
    n_ff_shexp: Whole = 0
    swa_window: Whole = 0
    swa_layers: list[Whole] = []
    kv_lora_rank: Whole = 0
    q_lora_rank: Whole = 0
    head_k_mla: Whole = 0
    head_v_mla: Whole = 0
    ssm_conv: Whole = 0
    ssm_state: Whole = 0
    ssm_groups: Whole = 0
    ssm_dt_rank: Whole = 0
    ssm_inner: Whole = 0
    expert_gating: Literal["softmax", "sigmoid", "softmax_weight"] = "softmax"
    expert_weights_norm: bool = False
    expert_weights_scale: NonNegMs = 0.0
    expert_groups: Whole = 0
    expert_groups_used: Whole = 0
    qk_norm: bool = False
    attn_bias: bool = False
    expert_probs_bias: bool = False


class ModelConfig(_Strict):
    """A model file: layer geometry, byte sizes and the routing curve."""

    name: Name | None = None
    layers: Count
    experts: PerLayerCount
    expert_bytes: PerLayerSize
    profile: FilePath | None = None
    dense_bytes: PerLayerSize = 0
    kinds: Annotated[list[Name], Field(min_length=1)] | None = None
    state_bytes: PerKindSize = 0
    kv_bytes_per_token: PerKindSize = 0
    stage_bytes: Size = 0
    first_stage_bytes: Size = 0
    last_stage_bytes: Size = 0
    curve: Curve = CoverCurve(kind="cover", b=3.0)
    active_experts: Count | None = None
    expert_tensors: dict[str, PerLayerSize] | None = None
    ffn_tensors: dict[str, PerLayerSize] | None = None
    max_context: Count | None = None
    nextn_layers: Whole = 0
    kv_type: KvType = "f16"
    gguf: FilePath | None = None
    hf_model: FilePath | None = None
    vocab_size: Count | None = None
    embedding_bytes: Size = 0
    other_weight_bytes: Size = 0
    geometry: GeometryConfig | None = None
    expert_bits: PositiveMs | None = None
    dense_bits: PositiveMs | None = None


_MESSAGES = {"missing": "missing (required)"}

M = TypeVar("M", bound=BaseModel)


def _explain(err: dict) -> str:
    kind = err["type"]
    if kind in _MESSAGES:
        return _MESSAGES[kind]
    if kind == "union_tag_invalid":
        tags = ", ".join(t.strip("'§") for t in err["ctx"]["expected_tags"].split(", "))
        got = err["input"].get("kind") if isinstance(err["input"], dict) else err["input"]
        return f"kind must be one of {tags}; got {brief(got)}"
    msg = err["msg"].removeprefix("Value error, ")
    if kind.endswith("_type") or kind in (
        "greater_than",
        "greater_than_equal",
        "less_than_equal",
        "too_short",
        "string_too_short",
        "finite_number",
    ):
        msg = f"{msg[0].lower()}{msg[1:]}, got {brief(err['input'])}"
    return msg


_TAGS = {"§one", "§many", "§cover", "§power", "§counts"}


def _key_path(loc: tuple) -> tuple:
    """An error location without the union tags pydantic puts right after a field name.

    A user's key that happens to read like a tag is kept: it follows an index, a tag or nothing.
    """
    return tuple(
        part
        for i, part in enumerate(loc)
        if not (part in _TAGS and i > 0 and isinstance(loc[i - 1], str) and loc[i - 1] not in _TAGS)
    )


def _models_in(annotation: Any, tag: str | None) -> list[type[BaseModel]]:
    """The schema classes an annotation can hold; in a tagged union, only the member tagged ``tag``."""
    if get_origin(annotation) is Annotated:
        inner, *meta = get_args(annotation)
        tags = [m.tag for m in meta if isinstance(m, Tag)]
        return [] if tag is not None and tags and tag not in tags else _models_in(inner, tag)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg, tag)]


def _keys_at(schema: type[BaseModel], loc: tuple) -> list[str]:
    """The keys the schema allows in the mapping at ``loc`` (pydantic's location, union tags included)."""
    models: list[type[BaseModel]] = [schema]
    for i, part in enumerate(loc):
        if not isinstance(part, str) or part in _TAGS:
            continue  # a list index, or a union tag (used by the step before it)
        tag = loc[i + 1] if i + 1 < len(loc) and loc[i + 1] in _TAGS else None
        models = [
            m2
            for m in models
            if part in m.model_fields
            for m2 in _models_in(m.model_fields[part].annotation, tag)
        ]
    return list(dict.fromkeys(k for m in models for k in m.model_fields))


def _unknown_key(schema: type[BaseModel], loc: tuple) -> str:
    """``unknown key 'fre' (did you mean 'free'?)``, or the keys allowed there when none is close."""
    key, known = loc[-1], _keys_at(schema, loc[:-1])
    close = difflib.get_close_matches(str(key), known, n=1) if isinstance(key, str) else []
    hint = f"did you mean {close[0]!r}?" if close else f"expected one of: {', '.join(known)}"
    return f"unknown key {brief(key)} ({hint})"


def validate(doc: YamlDoc, schema: type[M], context: dict | None = None) -> M:
    """Validate a YAML document against ``schema`` (``context``: what its validators are given); the
    first error becomes an InputError.

    Unknown keys come first: a typo in a required key (``fre:``) is the unknown key, not a missing one.
    """
    try:
        return schema.model_validate(doc.data, context=context)
    except ValidationError as exc:
        errors = exc.errors()
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        loc = _key_path(err["loc"])
        if err["type"] == "extra_forbidden":
            raise InputError(
                doc.file, _unknown_key(schema, err["loc"]), doc.line(loc), key_name(loc[:-1]) or None
            ) from None
        raise doc.error(loc, _explain(err)) from None


def shown_path(path: Path) -> str:
    """How a path is named in messages: relative to the working directory when it can be."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def relative_to(doc_file: Path, ref: str) -> Path:
    """A path named inside a file is relative to that file."""
    p = Path(ref).expanduser()
    return p if p.is_absolute() else doc_file.parent / p


def load_rig(path: Path, engines: Mapping[str, KeyOwner]) -> tuple[RigConfig, YamlDoc]:
    """Read and validate a rig file (``check_rig``)."""
    doc = load_yaml(path, shown_path(path))
    return check_rig(doc, engines), doc


def check_rig(doc: YamlDoc, engines: Mapping[str, KeyOwner]) -> RigConfig:
    """A parsed rig document validated, with the cross-field rules pydantic cannot say. ``engines``:
    the engines its ``engine`` key may name, each with its own keys (solver.engines.REGISTRY, which
    sits above this module); every engine's keys are checked, whichever the rig names."""
    rig = validate(doc, rig_schema(engines), {"engines": list(engines)})
    for i, gpu in enumerate(rig.gpus):
        has_est = gpu.sms is not None or gpu.clock_ghz is not None
        if gpu.layer_ms is not None and has_est:
            raise doc.error(("gpus", i, "layer_ms"), "give layer_ms or sms and clock_ghz, not both")
        if has_est and (gpu.sms is None or gpu.clock_ghz is None):
            key = "sms" if gpu.sms is None else "clock_ghz"
            raise doc.error(("gpus", i, key), "missing (required)")
        if gpu.max_layers is not None and gpu.max_layers < gpu.min_layers:
            raise doc.error(("gpus", i, "max_layers"), f"is below min_layers ({gpu.min_layers})")
    bad = host_problem([gpu.host if "host" in gpu.model_fields_set else None for gpu in rig.gpus])
    if bad is not None:
        raise doc.error(("gpus", bad[0], "host"), bad[1])
    return rig


_ALL_OR_NONE = "give every GPU a host, or none (all on one machine)"


def host_problem(hosts: list[str | None]) -> tuple[int, str] | None:
    """The first GPU whose host breaks the rules, and why; None when they hold.

    ``hosts`` is each GPU's host as written (None: left out). A name must not be blank; every GPU names
    its host or none does (a rig half of which forgot ``host:`` would put that half on a machine
    ``local`` the others never meant); and two names that differ only in case or surrounding spaces
    are one machine misspelt, not two.
    """
    for i, host in enumerate(hosts):
        if host is not None and not host.strip():
            return i, "is empty; name the machine, or leave host out on every GPU"
    named = [i for i, host in enumerate(hosts) if host is not None]
    if named and len(named) < len(hosts):
        if hosts[0] is None:
            return named[0], f"{brief(hosts[named[0]])}, but GPU 0 names no host: {_ALL_OR_NONE}"
        i = hosts.index(None)
        return i, f"missing, but GPU 0 names host {brief(hosts[0])}: {_ALL_OR_NONE}"
    seen: dict[str, int] = {}
    for i, host in enumerate(hosts):
        if host is None:
            continue
        first = seen.setdefault(host.strip().casefold(), i)
        if hosts[first] != host:
            return i, (
                f"{brief(host)} differs from host {brief(hosts[first])} of GPU {first} only in case or "
                "spaces; spell one machine one way"
            )
    return None


def check_host_runs(rig: RigConfig, doc: YamlDoc) -> None:
    """With the order as given, each host's GPUs must be listed together: the pipeline visits every
    host once. An interleaved list is an error naming the GPUs."""
    if rig.order != "as-given":
        return
    seen: dict[str, int] = {}
    for i, gpu in enumerate(rig.gpus):
        last = seen.get(gpu.host)
        if last is not None and last != i - 1:
            between = rig.gpus[i - 1]
            raise doc.error(
                ("gpus", i, "host"),
                f"GPU {i} is on host {gpu.host!r} like GPU {last}, but GPU {i - 1} between them is on "
                f"{between.host!r}: with the order as given each host's GPUs must be listed together "
                f"(or use order: auto)",
            )
        seen[gpu.host] = i


def load_model(path: Path) -> tuple[ModelConfig, YamlDoc]:
    """Read and validate a model file, checking per-layer lists and kind names."""
    doc = load_yaml(path, shown_path(path))
    model = validate(doc, ModelConfig)
    for key in ("experts", "expert_bytes", "dense_bytes"):
        value = getattr(model, key)
        if isinstance(value, list) and len(value) != model.layers:
            raise doc.error((key,), f"has {len(value)} entries; expected one per layer ({model.layers})")
    experts = model.experts if isinstance(model.experts, list) else [model.experts] * model.layers
    for name, value in (model.expert_tensors or {}).items():
        if isinstance(value, list) and len(value) != model.layers:
            raise doc.error(
                ("expert_tensors", name), f"has {len(value)} entries; expected one per layer ({model.layers})"
            )
        sizes = value if isinstance(value, list) else [value] * model.layers
        dense = [i for i, (e, b) in enumerate(zip(experts, sizes)) if b and not e]
        if dense:
            raise doc.error(("expert_tensors", name), f"has bytes in layer {dense[0]}, which has 0 experts")
    ffn = [0] * model.layers
    for name, value in (model.ffn_tensors or {}).items():
        if isinstance(value, list) and len(value) != model.layers:
            raise doc.error(
                ("ffn_tensors", name), f"has {len(value)} entries; expected one per layer ({model.layers})"
            )
        ffn = [a + b for a, b in zip(ffn, per_layer(value, model.layers))]
    over = [i for i, (f, d) in enumerate(zip(ffn, per_layer(model.dense_bytes, model.layers))) if f > d]
    if over:
        raise doc.error(
            ("ffn_tensors",), f"add up to more than layer {over[0]}'s dense_bytes, which hold them"
        )
    if isinstance(model.kinds, list) and len(model.kinds) > model.layers:
        raise doc.error(("kinds",), f"has {len(model.kinds)} entries, more than the {model.layers} layers")
    kinds = set(model.kinds) if model.kinds else {"default"}
    for key in ("state_bytes", "kv_bytes_per_token"):
        value = getattr(model, key)
        if isinstance(value, dict):
            for kind in value:
                if kind not in kinds:
                    known = ", ".join(sorted(kinds))
                    raise doc.error((key, kind), f"unknown layer kind (the model's kinds: {known})")
    return model, doc
