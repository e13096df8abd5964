"""Read a YAML file into plain Python values plus the line of every key, for precise errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from solver.errors import InputError
from solver.files.bounded import YAML_LIMIT, read_bounded

KeyPath = tuple[str | int, ...]


def key_name(path: KeyPath) -> str:
    """``('gpus', 1, 'free')`` -> ``gpus[1].free``; a key that is empty, padded or unprintable is quoted."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        plain = part if part and part.isprintable() and part.strip() == part else repr(part)
        out += f".{plain}" if out else plain
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


#: Values a file may hold once aliases are expanded: far above any rig or model (a 1,000-layer model
#: with four per-layer lists holds about 4,000), far below what makes parsing slow (an alias bomb).
MAX_VALUES = 100_000
#: Nesting depth of lists and mappings; rigs and models nest three deep.
MAX_DEPTH = 32
MERGE_TAG = "tag:yaml.org,2002:merge"


class _Converter:
    """Node graph -> plain values and key lines, refusing alias cycles, alias bombs and deep nesting."""

    def __init__(self, file: str):
        self.file = file
        self.lines: dict[KeyPath, int] = {}
        self.count = 0
        self.open: set[int] = set()

    def fail(self, node: Node, message: str, path: KeyPath) -> InputError:
        return InputError(self.file, message, node.start_mark.line + 1, key_name(path) or None)

    def convert(self, node: Node, path: KeyPath, lines: dict[KeyPath, int]) -> object:
        """The value of ``node`` at ``path``; key lines go to ``lines``."""
        self.count += 1
        if self.count > MAX_VALUES:
            raise self.fail(node, f"holds over {MAX_VALUES:,} values once its aliases are expanded", ())
        if len(path) > MAX_DEPTH:
            raise self.fail(node, f"nested more than {MAX_DEPTH} levels deep", path)
        lines.setdefault(path, node.start_mark.line + 1)
        if not isinstance(node, (MappingNode, SequenceNode)):
            return SafeConstructor().construct_object(node)
        if id(node) in self.open:
            raise self.fail(node, "an alias refers to the value that contains it", path)
        self.open.add(id(node))
        if isinstance(node, SequenceNode):
            out: object = [self.convert(item, (*path, i), lines) for i, item in enumerate(node.value)]
        else:
            out = self.mapping(node, path, lines)
        self.open.discard(id(node))
        return out

    def mapping(self, node: MappingNode, path: KeyPath, lines: dict[KeyPath, int]) -> dict:
        """A mapping's own keys, then keys merged in with ``<<`` that it does not set itself."""
        out: dict = {}
        merges = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise self.fail(key_node, "a mapping key must be a plain word", path)
            if key_node.tag == MERGE_TAG:
                merges.append((key_node, value_node))
                continue
            key = SafeConstructor().construct_object(key_node)
            key = key if isinstance(key, str) else str(key)
            child = (*path, key)
            if key in out:
                raise self.fail(key_node, "duplicate key", child)
            lines[child] = key_node.start_mark.line + 1
            out[key] = self.convert(value_node, child, lines)
        for key_node, value_node in merges:
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, MappingNode):
                    raise self.fail(key_node, "a merge (<<) takes a mapping or a list of mappings", path)
                merged = self.convert(source, path, {})
                assert isinstance(merged, dict)
                for key, value in merged.items():
                    if key not in out:
                        out[key] = value
                        lines[(*path, key)] = key_node.start_mark.line + 1
        return out


def load_yaml(path: Path, shown: str) -> YamlDoc:
    """Parse ``path`` (named ``shown`` in messages) into a YamlDoc; any problem is an InputError."""
    raw = read_bounded(path, shown, "a YAML file", YAML_LIMIT)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            shown, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    return parse_yaml(text, shown)


def parse_yaml(text: str, shown: str) -> YamlDoc:
    """Parse YAML text (named ``shown`` in messages) into a YamlDoc; any problem is an InputError."""
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except RecursionError:
        raise InputError(shown, f"nested more than {MAX_DEPTH} levels deep") from None
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
    conv = _Converter(shown)
    try:
        data = conv.convert(root, (), conv.lines)
    except ConstructorError as exc:
        mark = exc.problem_mark
        raise InputError(shown, f"bad value: {exc.problem}", mark.line + 1 if mark else None) from None
    except (ValueError, OverflowError) as exc:
        raise InputError(shown, f"bad value: {exc}") from None
    assert isinstance(data, dict)
    return YamlDoc(data=data, file=shown, lines=conv.lines)
