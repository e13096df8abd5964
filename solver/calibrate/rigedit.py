"""Set keys of a rig file in its own text, so every other line and comment stays as the user wrote it.

A top-level key (``host_bandwidth: 61.6 GB/s``) or a GPU's key (``gpus[1].buffer``) that the file
already has is replaced in place, its old line kept below as a ``# was:`` comment; a missing one is
added (top-level keys before ``gpus:``, a GPU's key after its last one, or inside its ``{...}``). The
edited text must load as a rig before anything is written, and it is written atomically
(solver.files.atomicfile): the file is the old one or the new one, never half of either.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from solver.engines import REGISTRY
from solver.errors import InputError
from solver.files.atomicfile import write_atomic
from solver.files.config import RigConfig, check_rig
from solver.files.yamlfile import parse_yaml


@dataclass(frozen=True)
class Edit:
    """Set ``key`` (of GPU ``gpu``, or top-level when None) to the YAML scalar ``value``, with a
    trailing ``# note`` (block style only) when given."""

    key: str
    value: str
    note: str | None = None
    gpu: int | None = None


def write_rig(text: str, edits: list[Edit], out: Path, shown: str) -> RigConfig:
    """Apply ``edits`` to the rig ``text`` and write it to ``out`` atomically; the rig it now holds.

    Raises InputError, writing nothing, when the text cannot be edited in place or does not load after.
    """
    new = edit_text(text, edits, shown)
    try:
        rig = check_rig(parse_yaml(new, shown), REGISTRY)
    except InputError as exc:
        raise InputError(shown, f"not written: the edited rig would not load ({exc})") from None
    write_atomic(out, shown, new)
    return rig


def edit_text(text: str, edits: list[Edit], shown: str) -> str:
    """The rig ``text`` with ``edits`` applied (see the module docstring)."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode) or root.flow_style:
        raise InputError(shown, "is not a block mapping of keys; set the fitted keys by hand")
    starts = _line_starts(text)
    changes: list[tuple[int, int, str]] = []
    for edit in edits:
        if edit.gpu is None:
            changes.append(_set_in_block(text, starts, root, edit, shown, before="gpus"))
            continue
        gpus = _value_of(root, "gpus")
        if not isinstance(gpus, yaml.SequenceNode) or edit.gpu >= len(gpus.value):
            raise InputError(shown, f"gpus[{edit.gpu}]: no such GPU entry to set {edit.key} in")
        item = gpus.value[edit.gpu]
        if not isinstance(item, yaml.MappingNode):
            raise InputError(shown, f"gpus[{edit.gpu}] is not a mapping; set {edit.key} by hand")
        if item.flow_style:
            changes.append(_set_in_flow(root_text=text, item=item, edit=edit))
        else:
            changes.append(_set_in_block(text, starts, item, edit, shown, before=None))
    out = text
    for start, end, replacement in sorted(changes, key=lambda c: (c[0], c[1]), reverse=True):
        out = out[:start] + replacement + out[end:]
    return out


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def _value_of(mapping: yaml.MappingNode, key: str) -> yaml.Node | None:
    for k, v in mapping.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return v
    return None


def _last_line(node: yaml.Node) -> int:
    """The 0-based last line a node's text is on (a block node's end mark is at the next line's start)."""
    end = node.end_mark
    return end.line - 1 if end.column == 0 and end.line > node.start_mark.line else end.line


def _set_in_block(
    text: str, starts: list[int], mapping: yaml.MappingNode, edit: Edit, shown: str, before: str | None
) -> tuple[int, int, str]:
    """Replace or add ``key: value`` in a block mapping, as a whole-line change of ``text``."""
    indent = " " * mapping.value[0][0].start_mark.column if mapping.value else ""
    line = f"{indent}{edit.key}: {edit.value}" + (f"   # {edit.note}" if edit.note else "") + "\n"
    for key, value in mapping.value:
        if not (isinstance(key, yaml.ScalarNode) and key.value == edit.key):
            continue
        first = key.start_mark.line
        if text[starts[first] : key.start_mark.index].strip():
            raise InputError(shown, f"{edit.key}: cannot edit this entry in place; set it by hand", first + 1)
        last = _last_line(value)
        end = starts[last + 1] if last + 1 < len(starts) else len(text)
        old = text[starts[first] : end].splitlines()
        kept = "".join(
            f"{indent}# was: {x[len(indent) :] if x.startswith(indent) else x.strip()}\n" for x in old
        )
        return starts[first], end, line + kept
    target = _value_of(mapping, before) if before else None
    if target is not None:
        key_node = next(k for k, v in mapping.value if v is target)
        at = starts[key_node.start_mark.line]
        return at, at, line
    last = max(_last_line(v) for _, v in mapping.value)
    at = starts[last + 1] if last + 1 < len(starts) else len(text)
    prefix = "" if at == 0 or text[at - 1] == "\n" else "\n"
    return at, at, prefix + line


def _set_in_flow(root_text: str, item: yaml.MappingNode, edit: Edit) -> tuple[int, int, str]:
    """Replace a key's value inside ``{...}``, or add ``, key: value`` before its closing brace."""
    value = _value_of(item, edit.key)
    if value is not None:
        return value.start_mark.index, value.end_mark.index, edit.value
    close = item.end_mark.index - 1
    while close > item.start_mark.index and root_text[close] != "}":
        close -= 1
    return close, close, f", {edit.key}: {edit.value}"
