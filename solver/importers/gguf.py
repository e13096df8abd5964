"""``solve model from-gguf``: a model read from a GGUF file's header, exact bytes per layer, never the
tensor data; the numbers are what llama.cpp does with them.

- ``layers`` = ``{arch}.block_count`` less ``{arch}.nextn_predict_layers``: the next-token-prediction
  (MTP) blocks sit at the end of ``block_count`` (glm4moe, GLM-4.7-Flash's deepseek2, qwen35moe) and
  load only when MTP drafting is used; their ``blk.N.`` tensors are left out, and ``nextn_layers`` says
  how many there are (llama.cpp still counts them as layer slots on the last device).
- How the tensors map to layers, experts and stages: ``solver.importers.gguftensors``; the KV cache
  and fixed state of each layer: ``solver.importers.ggufattention``.
"""

from __future__ import annotations

from pathlib import Path

from solver.errors import InputError
from solver.importers.ggmltypes import check_kv_type
from solver.importers.ggufattention import attention
from solver.importers.ggufgeometry import gguf_geometry
from solver.importers.ggufheader import TensorInfo
from solver.importers.ggufmeta import Meta
from solver.importers.ggufshards import file_stem, first_shard, read_shards
from solver.importers.gguftensors import check_layers, count_tensors
from solver.importers.modelfile import ImportedModel

#: The entry points ``solve model from-gguf`` calls: the file llama.cpp loads, and the model in it.
__all__ = ["first_shard", "read_gguf"]

#: The order of ``sources``: the model file's keys as it lists them.
SOURCE_ORDER = (
    "name", "layers", "experts", "active_experts", "expert_bytes", "dense_bytes", "kinds", "state_bytes",
    "kv_bytes_per_token", "first_stage_bytes", "last_stage_bytes", "max_context", "nextn_layers",
    "other_weight_bytes", "expert_tensors", "ffn_tensors",
)  # fmt: skip


def read_gguf(path: Path, kv_type: str = "f16") -> ImportedModel:
    """The model in the GGUF file at ``path`` (or the split model whose shard it is), KV at ``kv_type``.

    Raises InputError, naming the file, for anything that is not a supported GGUF model header.
    """
    shown = str(path)
    check_kv_type(shown, kv_type)
    headers = read_shards(path)
    meta = Meta(headers[0].metadata, shown)
    tensors = [t for header in headers for t in header.tensors]
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        raise InputError(shown, "a tensor name appears twice across the file's shards")
    layers = meta.block_count - meta.nextn
    check_layers(tensors, layers, meta, shown)
    sources = dict(meta.sources)
    counted = count_tensors(tensors, layers, meta, shown, sources)
    kinds, kv, state = attention(meta, layers, shown, sources, kv_type)
    command = f"solve model from-gguf {path.name}" + ("" if kv_type == "f16" else f" --kv-type {kv_type}")
    return ImportedModel(
        kv_type=kv_type,
        name=meta.name or file_stem(path),
        arch=meta.arch,
        layers=layers,
        experts=counted.experts,
        active_experts=meta.active_experts,
        expert_bytes=counted.expert_bytes,
        expert_tensors=counted.expert_tensors,
        dense_bytes=counted.dense_bytes,
        ffn_tensors=counted.ffn_tensors,
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
        geometry=gguf_geometry(meta, layers, set(names)),
    )


def _vocab(tensors: list[TensorInfo]) -> int | None:
    """The vocabulary's size: the rows of the output (or, tied, the embedding) matrix."""
    by_name = {t.name: t for t in tensors}
    for name in ("output.weight", "token_embd.weight"):
        if name in by_name and len(by_name[name].shape) == 2:
            return int(by_name[name].shape[1])
    return None
