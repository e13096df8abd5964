"""Read a YAML file into plain Python values plus the line of every key, for precise errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from solver.errors import InputError

KeyPath = tuple[str | int, ...]


def key_name(path: KeyPath) -> str:
    """``('gpus', 1, 'free')`` -> ``gpus[1].free``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass
class YamlDoc:
    """A parsed YAML mapping, where it came from, and the 1-based line of each key path."""

    data: dict
    file: str
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line(self, path: KeyPath) -> int | None:
        """Line of the nearest enclosing key that has one."""
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None

    def error(self, path: KeyPath, message: str) -> InputError:
        """An InputError pointing at ``path`` in this file."""
        return InputError(self.file, message, self.line(path), key_name(path) or None)


def _convert(node: Node, path: KeyPath, lines: dict[KeyPath, int], file: str) -> object:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, MappingNode):
        out: dict = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise InputError(file, "a mapping key must be a plain word", key_node.start_mark.line + 1)
            key = SafeConstructor().construct_object(key_node)
            if not isinstance(key, str):
                key = str(key)
            child = (*path, key)
            if key in out:
                raise InputError(file, "duplicate key", key_node.start_mark.line + 1, key_name(child))
            lines[child] = key_node.start_mark.line + 1
            out[key] = _convert(value_node, child, lines, file)
        return out
    if isinstance(node, SequenceNode):
        return [_convert(item, (*path, i), lines, file) for i, item in enumerate(node.value)]
    return SafeConstructor().construct_object(node)


def load_yaml(path: Path, shown: str) -> YamlDoc:
    """Parse ``path`` (named ``shown`` in messages) into a YamlDoc; any problem is an InputError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(shown, "no such file") from None
    except IsADirectoryError:
        raise InputError(shown, "is a directory, expected a YAML file") from None
    except OSError as exc:
        raise InputError(shown, f"cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            shown, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise InputError(shown, f"YAML syntax error: {exc.problem or exc.context}", line) from None
    except yaml.YAMLError as exc:
        raise InputError(shown, f"YAML error: {exc}") from None
    if len(nodes) != 1 or nodes[0] is None:
        raise InputError(shown, "expected one YAML document holding a mapping" if nodes else "is empty")
    root = nodes[0]
    if not isinstance(root, MappingNode):
        raise InputError(shown, "expected a mapping of keys at the top level", root.start_mark.line + 1)
    lines: dict[KeyPath, int] = {}
    try:
        data = _convert(root, (), lines, shown)
    except ConstructorError as exc:
        mark = exc.problem_mark
        raise InputError(shown, f"bad value: {exc.problem}", mark.line + 1 if mark else None) from None
    except (ValueError, OverflowError) as exc:
        raise InputError(shown, f"bad value: {exc}") from None
    assert isinstance(data, dict)
    return YamlDoc(data=data, file=shown, lines=lines)
