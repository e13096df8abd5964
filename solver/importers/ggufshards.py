"""The headers of a GGUF model's files: one file, or every shard of a split model, checked to be one model.

A split model (``split.count`` > 1) is named ``STEM-00001-of-0000N.gguf`` (llama.cpp's
``llama_split_path``); given any of its shards, all of them are read.
"""

from __future__ import annotations

import re
from pathlib import Path

from solver.errors import InputError
from solver.importers.ggufheader import GGUFFormatError, GGUFHeader, read_header
from solver.importers.gguftensors import BLOCK_TENSOR

SHARD_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def file_stem(path: Path) -> str:
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


def read_shards(path: Path) -> list[GGUFHeader]:
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
