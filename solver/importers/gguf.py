"""A model read from a GGUF file's header: exact bytes per layer, never the tensor data.

What llama.cpp does with each number, and so what this module counts:

- ``layers`` = ``{arch}.block_count`` less ``{arch}.nextn_predict_layers``: the next-token-prediction
  (MTP) blocks sit at the end of ``block_count`` (glm4moe, GLM-4.7-Flash's deepseek2, qwen35moe) and
  load only when MTP drafting is used; their ``blk.N.`` tensors are left out, and ``nextn_layers`` says
  how many there are (llama.cpp still counts them as layer slots on the last device).
- Every layer must have tensors, and the layers with routed experts must be llama.cpp's: all of them,
  less the first ``leading_dense_block_count``, and only every ``interleave_moe_layer_step``-th
  (llama4, ernie4_5-moe); each MoE layer has the same expert tensors.
- A layer holding ``ffn_{gate,up,down,gate_up}_exps`` tensors has ``{arch}.expert_count`` routed
  experts (their last GGML dimension must agree); any other layer (``leading_dense_block_count``,
  ``mlp_only_layers``) has 0. ``expert_tensors`` are those tensors (biases and scales included) by
  ``n_bytes``; ``expert_bytes[l]`` is their sum over the layer's experts, rounded up; every other
  ``blk.l.`` tensor is ``dense_bytes[l]``. An older Mixtral conversion's per-expert tensors
  (``blk.N.ffn_gate.E.weight``) count as the ``ffn_gate_exps`` tensor llama.cpp merges them into.
- ``last_stage_bytes`` = ``output.*`` + ``output_norm.*``: llama.cpp puts the output slot on the
  last device. Without ``output.weight`` the embeddings are tied and llama.cpp loads ``token_embd``
  a second time there (``TENSOR_DUPLICATED``), so it counts as the head. ``first_stage_bytes`` is 0:
  the input embeddings stay in host memory.
- ``other_weight_bytes`` = every other tensor of the file (the untied ``token_embd``, the MTP layers,
  ``rope_freqs``): no stage holds them, but they are part of the file's size (llama-bench's
  ``model_size``), which ``solve calibrate`` checks its rows against.
- KV cache per token of a layer, at llama.cpp's cache type (``-ctk``/``-ctv``): one K row and one V
  row, each ``ggml_row_size(type, elements)`` = elements / block x block bytes (f16 2 bytes per
  element; q8_0 34 bytes per 32; q4_0 18 per 32), rounded up to whole blocks.
  GQA: ``head_count_kv`` (scalar or per layer) x ``key_length`` / ``value_length`` (defaults, as in
  llama.cpp: ``embedding_length / head_count``). MLA (deepseek2 files with ``key_length_mla``): one
  K row of ``kv_lora_rank + rope.dimension_count`` and no V (llama.cpp PR 19067 stores the latent
  once; ``key_length`` 576 / ``value_length`` 512 read as GQA would overstate it).
- Sliding-window layers (gpt-oss: every even layer, llama.cpp ``set_swa_pattern(2)``) hold a fixed
  cache whatever the context: llama.cpp sizes it ``GGML_PAD(sliding_window + n_ubatch, 256)`` cells
  (768 at the window 128 and the default ``n_ubatch`` 512, one sequence), written as ``state_bytes``
  with ``kv_bytes_per_token`` 0.
- Chunked-attention layers (llama4: three of every four, llama.cpp ``set_swa_pattern(4)``, unless
  ``attention.sliding_window`` is 0) hold the same fixed cache for a chunk of 8,192 tokens: 8,704 cells.
- Linear-attention layers (qwen3next, qwen35moe: all but every ``full_attention_interval``-th) keep a fixed
  F32 recurrent state (llama.cpp hard-codes F32): ``n_embd_r`` = (conv_kernel - 1) x (inner_size +
  2 x group_count x state_size) conv values plus ``n_embd_s`` = state_size x inner_size, 4 bytes
  each, per sequence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from solver.errors import InputError
from solver.importers.ggmltypes import KV_TYPES, row_bytes
from solver.importers.ggufheader import GGUFFormatError, GGUFHeader, SkippedArray, TensorInfo, read_header
from solver.importers.modelfile import MAX_EXPERTS, MAX_LAYERS, ImportedModel

#: Architectures whose layer kinds this importer knows (``general.architecture``).
ARCHS = (
    *("qwen3moe", "qwen3next", "qwen35moe", "qwen2moe", "deepseek2", "gpt-oss", "glm4moe", "llama"),
    *("llama4", "ernie4_5-moe", "minimax-m2", "olmoe"),
)

#: Routed expert tensor stems, in the order ``expert_tensors`` lists them.
EXPERT_STEMS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps")

#: Tensors of the output slot (the head), counted on the last stage.
HEAD_TENSORS = ("output.weight", "output.bias", "output_norm.weight", "output_norm.bias")

#: The order of ``sources``: the model file's keys as it lists them.
SOURCE_ORDER = (
    "name", "layers", "experts", "active_experts", "expert_bytes", "dense_bytes", "kinds", "state_bytes",
    "kv_bytes_per_token", "first_stage_bytes", "last_stage_bytes", "max_context", "nextn_layers",
    "other_weight_bytes", "expert_tensors",
)  # fmt: skip

#: llama.cpp's default micro-batch and SWA cache padding (llama-kv-cache-iswa.cpp).
DEFAULT_N_UBATCH = 512
SWA_PAD = 256
#: llama4's attention chunk (llama.cpp sets ``n_swa`` 8192 and three chunked layers of every four).
LLAMA4_CHUNK = 8192
LLAMA4_PATTERN = 4

#: Bytes per element of llama.cpp's recurrent (linear-attention) state: F32.
STATE_ELEMENT_BYTES = 4

SHARD_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
BLOCK_TENSOR = re.compile(r"^blk\.(\d+)\.(.+)$")
#: One expert's tensor in an older Mixtral conversion (``blk.N.ffn_gate.E.weight``): llama.cpp merges
#: a layer's into one ``ffn_gate_exps`` tensor when it loads them, so they count as that tensor.
PER_EXPERT_TENSOR = re.compile(r"^(ffn_(?:gate|up|down))\.(\d+)\.weight$")


def read_gguf(path: Path, kv_type: str = "f16") -> ImportedModel:
    """The model in the GGUF file at ``path`` (or the split model whose shard it is), KV at ``kv_type``.

    Raises InputError, naming the file, for anything that is not a supported GGUF model header.
    """
    shown = str(path)
    if kv_type not in KV_TYPES:
        raise InputError(shown, f"unknown KV cache type {kv_type!r} (expected one of {', '.join(KV_TYPES)})")
    headers = _read_shards(path)
    meta = _Meta(headers[0].metadata, shown)
    tensors = [t for header in headers for t in header.tensors]
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        raise InputError(shown, "a tensor name appears twice across the file's shards")
    layers = meta.block_count - meta.nextn
    _check_layers(tensors, layers, meta, shown)
    sources = dict(meta.sources)
    counted = _count_tensors(tensors, layers, meta, shown, sources)
    kinds, kv, state = _attention(meta, layers, shown, sources, kv_type)
    command = f"solve model from-gguf {path.name}" + ("" if kv_type == "f16" else f" --kv-type {kv_type}")
    return ImportedModel(
        kv_type=kv_type,
        name=meta.name or _stem(path),
        arch=meta.arch,
        layers=layers,
        experts=counted.experts,
        active_experts=meta.active_experts,
        expert_bytes=counted.expert_bytes,
        expert_tensors=counted.expert_tensors,
        dense_bytes=counted.dense_bytes,
        kinds=kinds,
        state_bytes=state,
        kv_bytes_per_token=kv,
        first_stage_bytes=0,
        last_stage_bytes=counted.head_bytes,
        other_weight_bytes=counted.other_bytes,
        vocab_size=_vocab(tensors),
        command=command,
        sources={key: sources[key] for key in SOURCE_ORDER if key in sources},
        max_context=meta.context or None,
        nextn_layers=meta.nextn,
    )


def _vocab(tensors: list[TensorInfo]) -> int | None:
    """The vocabulary's size: the rows of the output (or, tied, the embedding) matrix."""
    by_name = {t.name: t for t in tensors}
    for name in ("output.weight", "token_embd.weight"):
        if name in by_name and len(by_name[name].shape) == 2:
            return int(by_name[name].shape[1])
    return None


def _check_layers(tensors: list[TensorInfo], layers: int, meta: _Meta, shown: str) -> None:
    """Every layer has tensors, and routed experts sit in the layers llama.cpp builds them in.

    Runs before anything per layer is built, so a ``block_count`` the tensors cannot back costs only a
    pass over the tensors.
    """
    present: dict[int, set[str]] = {}
    for t in tensors:
        match = BLOCK_TENSOR.match(t.name)
        if match:
            il, rest = int(match[1]), match[2]
            stem = rest.split(".", 1)[0]
            single = PER_EXPERT_TENSOR.match(rest)
            present.setdefault(il, set()).add(f"{single[1]}_exps" if single else stem)
    count = meta.key("block_count")
    for il in range(layers):
        if il not in present:
            have = f"{len(present)} layer(s) of tensors" if present else "no blk.N tensors"
            raise InputError(
                shown, f"{count} {meta.block_count} but layer {il} has no tensors (the file has {have})"
            )
    if not any(stem in EXPERT_STEMS for il in range(layers) for stem in present[il]):
        raise InputError(shown, "no routed expert tensors (blk.N.ffn_*_exps): not a mixture-of-experts model")
    first_moe: tuple[int, set[str]] | None = None
    for il in range(layers):
        stems = {stem for stem in present[il] if stem in EXPERT_STEMS}
        expected = il >= meta.leading_dense and (il + 1) % meta.moe_step == 0
        if expected and not stems:
            raise InputError(
                shown, f"layer {il} has no routed expert tensors (blk.{il}.ffn_*_exps), but {_moe_rule(meta)}"
            )
        if stems and not expected:
            raise InputError(shown, f"layer {il} has routed expert tensors, but {_moe_rule(meta)}")
        if not stems and not present[il] & {"ffn_down", "ffn_gate", "ffn_up"}:
            raise InputError(shown, f"layer {il} has no feed-forward tensors (blk.{il}.ffn_*)")
        if stems and first_moe is None:
            first_moe = (il, stems)
        elif stems and first_moe is not None and stems != first_moe[1]:
            other, theirs = first_moe
            raise InputError(
                shown,
                f"layer {il} has expert tensors {', '.join(sorted(stems))} but layer {other} has"
                f" {', '.join(sorted(theirs))}",
            )


def _moe_rule(meta: _Meta) -> str:
    """Which layers llama.cpp builds routed experts in, for a message."""
    where = "every layer"
    if meta.moe_step > 1:
        step = f"{meta.key('interleave_moe_layer_step')} {meta.moe_step}"
        where = f"the last layer of every {meta.moe_step} ({step})"
    if meta.leading_dense:
        where += f" from layer {meta.leading_dense} on ({meta.key('leading_dense_block_count')})"
    return f"llama.cpp builds them in {where} of a {meta.arch} model"


def _stem(path: Path) -> str:
    """The file name without ``.gguf`` and any ``-0000k-of-0000n`` shard suffix."""
    match = SHARD_NAME.match(path.name)
    return match["stem"] if match else path.stem


def _header(path: Path) -> GGUFHeader:
    """One file's header; every failure is an InputError naming the file."""
    shown = str(path)
    try:
        header = read_header(path)
    except FileNotFoundError:
        raise InputError(shown, "no such file (expected a GGUF file)") from None
    except IsADirectoryError:
        raise InputError(shown, "is a directory, expected a GGUF file") from None
    except OSError as exc:
        raise InputError(shown, f"cannot read: {exc.strerror}") from None
    except GGUFFormatError as exc:
        raise InputError(shown, str(exc)) from None
    for t in header.tensors:
        end = header.data_offset + t.offset + t.n_bytes
        if end > header.file_size:
            raise InputError(
                shown,
                f"truncated file: tensor {t.name} ends at byte {end},"
                f" past the end of the file ({header.file_size} bytes)",
            )
    return header


def first_shard(path: Path) -> Path:
    """The file llama.cpp loads for the model ``path`` belongs to: its first shard (itself if unsplit).

    A split model (``split.count`` > 1) is named ``STEM-00001-of-0000N.gguf`` (llama.cpp's
    ``llama_split_path``); given its first shard, llama.cpp finds the others.
    """
    match = SHARD_NAME.match(path.name)
    if match and int(match["no"]) != 1:
        return path.with_name(f"{match['stem']}-00001-of-{match['count']}.gguf")
    return path


def _read_shards(path: Path) -> list[GGUFHeader]:
    """The headers of every shard of the model ``path`` belongs to, the first shard first; given any
    of its shards, all of them are read."""
    shown = str(path)
    match = SHARD_NAME.match(path.name)
    path = first_shard(path)
    first = _header(path)
    count = first.metadata.get("split.count", 1)
    if not isinstance(count, int) or count < 1:
        raise InputError(shown, f"split.count is {count!r}, expected a positive integer")
    if count == 1:
        return [first]
    if not match:
        raise InputError(shown, f"split.count is {count} but the name is not STEM-00001-of-{count:05d}.gguf")
    if count != int(match["count"]):
        raise InputError(shown, f"split.count is {count} but the file name says {match['count']} shards")
    expected = first.metadata.get("split.tensors.count")
    headers = [first]
    for no in range(2, count + 1):
        shard = path.with_name(f"{match['stem']}-{no:05d}-of-{count:05d}.gguf")
        if not shard.exists():
            raise InputError(shown, f"shard {shard.name} of this {count}-shard model is missing")
        header = _header(shard)
        if header.metadata.get("split.no") != no - 1 or header.metadata.get("split.count") != count:
            raise InputError(str(shard), f"split.no/split.count do not make it shard {no} of {count}")
        _same_model(first, header)
        headers.append(header)
    total = sum(len(h.tensors) for h in headers)
    if expected is not None and expected != total:
        raise InputError(shown, f"split.tensors.count is {expected}; the {count} shards hold {total} tensors")
    return headers


def _same_model(first: GGUFHeader, shard: GGUFHeader) -> None:
    """A later shard belongs to the first shard's model: the same split.tensors.count, no other
    architecture or name, and each layer tensor shaped as the same tensor of the first shard's layers.

    llama.cpp's gguf-split writes only the split.* keys into later shards, so the shapes are what tells
    another model's shard apart (another quantization of the same model looks the same).
    """
    shown = str(shard.path)
    for key in ("split.tensors.count", "general.architecture", "general.name"):
        theirs = shard.metadata.get(key)
        ours = first.metadata.get(key)
        if theirs is not None and theirs != ours:
            raise InputError(
                shown, f"{key} is {theirs!r} but {first.path.name} says {ours!r}: another model's shard"
            )
    shapes: dict[str, tuple[int, ...]] = {}
    for t in first.tensors:
        match = BLOCK_TENSOR.match(t.name)
        shapes.setdefault(match[2] if match else t.name, t.shape)
    for t in shard.tensors:
        match = BLOCK_TENSOR.match(t.name)
        ours_shape = shapes.get(match[2] if match else t.name)
        if ours_shape is not None and ours_shape != t.shape:
            raise InputError(
                shown,
                f"tensor {t.name} has shape {list(t.shape)}, but {first.path.name} has {list(ours_shape)}"
                " for the same tensor of its layers: another model's shard",
            )


class _Meta:
    """The metadata keys this importer reads, checked, with where each number came from."""

    def __init__(self, metadata: dict[str, object], shown: str):
        self.metadata = metadata
        self.shown = shown
        self.sources: dict[str, str] = {}
        arch = metadata.get("general.architecture")
        if arch is None:
            raise InputError(shown, "missing metadata key general.architecture")
        if arch not in ARCHS:
            raise InputError(
                shown,
                f"architecture {arch!r} is not supported (supported: {', '.join(ARCHS)}); for another"
                " model write the model file by hand (docs/reference.md, 'The model file')",
            )
        self.arch = str(arch)
        name = metadata.get("general.name")
        self.name = name if isinstance(name, str) else ""
        self.sources["name"] = "general.name" if self.name else "the file name (no general.name)"
        self.block_count = self.int("block_count")
        if self.block_count > MAX_LAYERS:
            raise InputError(
                shown,
                f"{self.key('block_count')} {self.block_count} is above the limit of {MAX_LAYERS:,} layers",
            )
        self.nextn = self.int("nextn_predict_layers", 0)
        if not 0 <= self.nextn < self.block_count:
            raise InputError(shown, f"{self.key('nextn_predict_layers')} {self.nextn} leaves no layers")
        self.expert_count = self.int("expert_count", 0)
        if self.expert_count == 0:
            raise InputError(shown, f"no {self.key('expert_count')}: not a mixture-of-experts model")
        if self.expert_count > MAX_EXPERTS:
            raise InputError(
                shown,
                f"{self.key('expert_count')} {self.expert_count} is above the limit of {MAX_EXPERTS:,}",
            )
        self.active_experts = self.int("expert_used_count")
        if not 0 < self.active_experts <= self.expert_count:
            used = f"{self.key('expert_used_count')} {self.active_experts}"
            raise InputError(shown, f"{used} is not in 1..{self.expert_count}")
        self.leading_dense = self.int("leading_dense_block_count", 0)
        self.moe_step = max(self.int("interleave_moe_layer_step", 1), 1)
        layers = f"{self.key('block_count')} {self.block_count}"
        if self.nextn:
            layers += f" less {self.key('nextn_predict_layers')} {self.nextn} (MTP layers, not loaded)"
            self.sources["nextn_layers"] = (
                f"{self.key('nextn_predict_layers')}: blocks after the layers, layer slots to llama.cpp"
            )
        self.sources["layers"] = layers
        self.sources["active_experts"] = f"{self.key('expert_used_count')} {self.active_experts}"
        self.context = self.int("context_length", 0)
        if self.context:
            self.sources["max_context"] = f"{self.key('context_length')} {self.context}"

    def key(self, suffix: str) -> str:
        """The full metadata key ``{arch}.{suffix}``."""
        return f"{self.arch}.{suffix}"

    def int(self, suffix: str, default: int | None = None) -> int:
        """A non-negative integer key; required when ``default`` is None."""
        key = self.key(suffix)
        value = self.metadata.get(key)
        if value is None:
            if default is None:
                raise InputError(self.shown, f"missing metadata key {key}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(self.shown, f"{key} is {value!r}, expected a non-negative integer")
        return value

    def per_layer(self, suffix: str, layers: int, default: int | None = None) -> list[int]:
        """A key that is one integer or an array with one per block (``head_count_kv``)."""
        key = self.key(suffix)
        value = self.metadata.get(key)
        if isinstance(value, list):
            if len(value) < layers or not all(isinstance(v, int) and v >= 0 for v in value):
                raise InputError(self.shown, f"{key} is not {layers} or more non-negative integers")
            return [int(v) for v in value[:layers]]
        if isinstance(value, SkippedArray):
            raise InputError(self.shown, f"{key} has {value.count} values, too many to be per layer")
        return [self.int(suffix, default)] * layers


@dataclass
class _Counted:
    """Bytes per layer from the tensor infos, and which tensors each layer has."""

    experts: list[int]
    expert_bytes: list[int]
    expert_tensors: dict[str, list[int]]
    dense_bytes: list[int]
    head_bytes: int
    other_bytes: int


def _expert_key_order(key: str) -> tuple[int, str]:
    stem, _, suffix = key.partition(".")
    return (EXPERT_STEMS.index(stem), suffix)


def _count_tensors(
    tensors: list[TensorInfo], layers: int, meta: _Meta, shown: str, sources: dict[str, str]
) -> _Counted:
    """Split every tensor's bytes into experts, dense layer weights, the head, and what is not counted."""
    dense = [0] * layers
    expert_tensors: dict[str, list[int]] = {}
    moe = [False] * layers
    per_expert: list[dict[str, set[int]]] = [{} for _ in range(layers)]
    head = {}
    other: dict[str, int] = {}
    dropped = 0
    by_name = {t.name: t for t in tensors}
    for t in tensors:
        match = BLOCK_TENSOR.match(t.name)
        if not match:
            if t.name in HEAD_TENSORS:
                head[t.name] = t.n_bytes
            else:
                other[t.name] = t.n_bytes
            continue
        il, rest = int(match[1]), match[2]
        if il >= meta.block_count:
            raise InputError(shown, f"tensor {t.name} is past {meta.key('block_count')} {meta.block_count}")
        if il >= layers:
            dropped += t.n_bytes
            continue
        stem = rest.split(".", 1)[0]
        single = PER_EXPERT_TENSOR.match(rest)
        if single:
            moe[il] = True
            per_expert[il].setdefault(single[1], set()).add(int(single[2]))
            expert_tensors.setdefault(f"{single[1]}_exps", [0] * layers)[il] += t.n_bytes
            continue
        if stem not in EXPERT_STEMS:
            dense[il] += t.n_bytes
            continue
        if not t.shape or t.shape[-1] != meta.expert_count:
            want = f"{meta.expert_count} experts in its last dimension"
            raise InputError(shown, f"tensor {t.name} has shape {list(t.shape)}, not {want}")
        moe[il] = True
        key = rest.removesuffix(".weight")
        expert_tensors.setdefault(key, [0] * layers)[il] += t.n_bytes
    for il, stems in enumerate(per_expert):
        for stem, ids in stems.items():
            if len(ids) != meta.expert_count or min(ids) != 0 or max(ids) != meta.expert_count - 1:
                have = f"{stem}.E tensors for {len(ids)} of {meta.expert_count} experts"
                raise InputError(shown, f"layer {il} has {have}")
    experts = [meta.expert_count if moe[il] else 0 for il in range(layers)]
    expert_bytes = [
        -(-sum(column[il] for column in expert_tensors.values()) // experts[il]) if experts[il] else 0
        for il in range(layers)
    ]
    dense_layers = [il for il in range(layers) if not moe[il]]
    sources["experts"] = (
        f"{meta.key('expert_count')} {meta.expert_count} in each layer with ffn_*_exps tensors"
        + (f"; 0 in the {len(dense_layers)} without ({_ranges(dense_layers)})" if dense_layers else "")
        + (f"; {meta.key('leading_dense_block_count')} {meta.leading_dense}" if meta.leading_dense else "")
    )
    sources["expert_tensors"] = "n_bytes of blk.N.ffn_{gate,up,down,gate_up}_exps (ggml type and shape)"
    if any(per_expert):
        sources["expert_tensors"] += "; per-expert blk.N.ffn_{gate,up,down}.E summed (an older conversion)"
    sources["expert_bytes"] = "a layer's expert tensors over its experts, rounded up to a whole byte"
    sources["dense_bytes"] = "n_bytes of every other blk.N tensor (attention, router, shared experts, norms)"
    if dropped:
        sources["dense_bytes"] += f"; the MTP layers' {dropped} bytes are left out"
    if "output.weight" in by_name:
        sources["last_stage_bytes"] = (
            "output.weight + output_norm.weight (llama.cpp's output is on the last GPU)"
        )
    elif "token_embd.weight" in by_name:
        head["token_embd.weight"] = other.pop("token_embd.weight")
        sources["last_stage_bytes"] = (
            "token_embd.weight (tied embeddings: no output.weight, llama.cpp loads token_embd again as"
            " the head) + output_norm.weight"
        )
    else:
        raise InputError(shown, "no output.weight and no token_embd.weight: the model has no head")
    sources["first_stage_bytes"] = "0: llama.cpp keeps the token embeddings in host memory"
    if other or dropped:
        parts = [*sorted(other)] + ([f"the MTP layers' {dropped} bytes"] if dropped else [])
        sources["other_weight_bytes"] = (
            "weights no stage holds, counted only in the file's size: " + ", ".join(parts)
        )
    expert_tensors = {k: expert_tensors[k] for k in sorted(expert_tensors, key=_expert_key_order)}
    return _Counted(
        experts, expert_bytes, expert_tensors, dense, sum(head.values()), sum(other.values()) + dropped
    )


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 7]`` as ``layers 0-2, 7``."""
    parts: list[str] = []
    start = prev = indices[0]
    for i in [*indices[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return "layers " + ", ".join(parts)


def _row_bytes(elements: int, kv_type: str) -> int:
    """llama.cpp's bytes for one cache row of ``elements`` values (ggml_row_size), whole blocks."""
    return row_bytes(KV_TYPES[kv_type], elements)


def _attention(
    meta: _Meta, layers: int, shown: str, sources: dict[str, str], kv_type: str
) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """Each layer's kind, and the KV bytes per token and fixed state bytes of each kind."""
    per_token = [0] * layers
    fixed = [0] * layers
    base = ["full"] * layers
    if meta.arch == "deepseek2" and meta.key("attention.key_length_mla") in meta.metadata:
        rank, rope = meta.int("attention.kv_lora_rank"), meta.int("rope.dimension_count")
        per_token = [_row_bytes(rank + rope, kv_type)] * layers
        kv_text = (
            f"MLA: one {kv_type} row of {meta.key('attention.kv_lora_rank')} {rank} + "
            f"{meta.key('rope.dimension_count')} {rope} per token and layer, no V row (llama.cpp PR 19067)"
        )
    else:
        per_token, kv_text = _gqa(meta, layers, kv_type)
        if meta.arch == "deepseek2":
            mla = meta.key("attention.key_length_mla")
            kv_text += f" (no {mla}: an older conversion llama.cpp runs without MLA)"
    state_text = ""
    if meta.arch == "gpt-oss":
        window = meta.int("attention.sliding_window")
        cells = -(-(window + DEFAULT_N_UBATCH) // SWA_PAD) * SWA_PAD
        for il in range(0, layers, 2):
            base[il], fixed[il], per_token[il] = "sliding", cells * per_token[il], 0
        state_text = (
            f"sliding (even layers): llama.cpp's SWA cache of GGML_PAD("
            f"{meta.key('attention.sliding_window')} {window} + n_ubatch {DEFAULT_N_UBATCH}, {SWA_PAD})"
            f" = {cells} cells x the KV per token, one sequence"
        )
    elif meta.arch == "llama4" and meta.metadata.get(meta.key("attention.sliding_window")) != 0:
        cells = -(-(LLAMA4_CHUNK + DEFAULT_N_UBATCH) // SWA_PAD) * SWA_PAD
        for il in range(layers):
            if il % LLAMA4_PATTERN < LLAMA4_PATTERN - 1:
                base[il], fixed[il], per_token[il] = "chunked", cells * per_token[il], 0
        state_text = (
            f"chunked (three of every {LLAMA4_PATTERN} layers): llama.cpp's chunked-attention cache of"
            f" GGML_PAD(chunk {LLAMA4_CHUNK} + n_ubatch {DEFAULT_N_UBATCH}, {SWA_PAD}) = {cells} cells"
            " x the KV per token, one sequence"
        )
    elif meta.arch in ("qwen3next", "qwen35moe"):
        interval = meta.int("full_attention_interval")
        if interval == 0:
            raise InputError(shown, f"{meta.key('full_attention_interval')} is 0")
        conv, d_state = meta.int("ssm.conv_kernel"), meta.int("ssm.state_size")
        groups, inner = meta.int("ssm.group_count"), meta.int("ssm.inner_size")
        heads = meta.int("ssm.time_step_rank")
        n_embd_r = max(conv - 1, 0) * (inner + 2 * groups * d_state)
        n_embd_s = d_state * inner
        for il in range(layers):
            if (il + 1) % interval:
                base[il], fixed[il], per_token[il] = "linear", STATE_ELEMENT_BYTES * (n_embd_r + n_embd_s), 0
        state_text = (
            f"linear (all but every {interval}th layer, {meta.key('full_attention_interval')}):"
            f" F32 recurrent state (conv_kernel {conv} - 1) x (inner_size {inner}"
            f" + 2 x group_count {groups} x state_size {d_state}) + state_size x inner_size"
            f" ({heads} heads, time_step_rank) = {n_embd_r + n_embd_s} values"
            f" x {STATE_ELEMENT_BYTES} bytes, one sequence"
        )
    kinds, kv, state = _name_kinds(base, per_token, fixed)
    sources["kinds"] = ", ".join(sorted(set(kinds)))
    sources["kv_bytes_per_token"] = kv_text
    sources["state_bytes"] = state_text or "0: no fixed per-layer state"
    return kinds, kv, state


def _gqa(meta: _Meta, layers: int, kv_type: str) -> tuple[list[int], str]:
    """GQA KV bytes per token of each layer: head_count_kv x (key_length + value_length) values."""
    heads = meta.int("attention.head_count")
    width = meta.int("embedding_length")
    default_head = width // heads if heads else None
    heads_kv = meta.per_layer("attention.head_count_kv", layers, heads)
    key_len = meta.int("attention.key_length", default_head)
    value_len = meta.int("attention.value_length", default_head)
    per_token = [_row_bytes(h * key_len, kv_type) + _row_bytes(h * value_len, kv_type) for h in heads_kv]
    shown_heads = heads_kv[0] if len(set(heads_kv)) == 1 else "per layer"
    lengths = (
        f"{meta.key('attention.key_length')} {key_len} + value_length {value_len}"
        if meta.key("attention.key_length") in meta.metadata
        else f"{key_len} + {value_len} (embedding_length / head_count, as llama.cpp defaults)"
    )
    heads_key = meta.key("attention.head_count_kv")
    return per_token, f"GQA {kv_type}: {heads_key} {shown_heads} x ({lengths}) per token"


def _name_kinds(
    base: list[str], per_token: list[int], fixed: list[int]
) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """Kind names per layer: the base kind, numbered when its layers differ in KV or state bytes."""
    variants: dict[str, list[tuple[int, int]]] = {}
    for kind, kv, state in zip(base, per_token, fixed, strict=True):
        seen = variants.setdefault(kind, [])
        if (kv, state) not in seen:
            seen.append((kv, state))
    kinds: list[str] = []
    kv_by_kind: dict[str, int] = {}
    state_by_kind: dict[str, int] = {}
    for kind, kv, state in zip(base, per_token, fixed, strict=True):
        seen = variants[kind]
        name = kind if len(seen) == 1 else f"{kind}{seen.index((kv, state)) + 1}"
        kinds.append(name)
        kv_by_kind[name], state_by_kind[name] = kv, state
    return kinds, kv_by_kind, state_by_kind
