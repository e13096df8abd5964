"""A Hugging Face ``config.json`` read for the importer: its keys checked, with errors that name the file
and the key, and the checkpoint an engine would load beside it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from solver.errors import InputError
from solver.files.bounded import CONFIG_LIMIT, read_bounded
from solver.files.config import COUNT_MAX, shown_path
from solver.importers.ggmltypes import KV_TYPES, row_bytes
from solver.importers.modelfile import MAX_EXPERTS

#: Widths and head counts every layer divides by or multiplies by: 0 is no model.
NOT_ZERO = frozenset({"hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"})


class Config:
    """The model's config (``text_config`` unwrapped), with errors that name the file and key."""

    def __init__(self, data: dict[str, Any], shown: str, kv_type: str = "f16"):
        self.shown = shown
        text = data.get("text_config")
        self.data = text if isinstance(text, dict) and text else data
        self.type = str(self.data.get("model_type") or data.get("model_type") or "")
        self.top_type = str(data.get("model_type") or "")
        self.kv_name = kv_type
        self.kv_type = KV_TYPES[kv_type]

    def kv_text(self) -> str:
        """The cache type as the header says it: ``q8_0 KV cache (34 B per 32 values)``."""
        kind = self.kv_type
        per = "value" if kind.block == 1 else f"{kind.block} values"
        return f"{self.kv_name} KV cache ({kind.size} B per {per})"

    def has(self, key: str) -> bool:
        """Whether the config sets ``key`` (a null counts as unset)."""
        return self.data.get(key) is not None

    def int(self, key: str, default: int | None = None) -> int:
        """A whole number >= 0 up to COUNT_MAX; required when ``default`` is None."""
        value = self.get(key, default)
        if value is None:
            raise InputError(self.shown, f"missing (a {self.type} config needs it)", key=key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(self.shown, f"expected a whole number >= 0, got {value!r}", key=key)
        if value > COUNT_MAX:
            raise InputError(self.shown, f"{value} is above the limit of {COUNT_MAX:,}", key=key)
        if value == 0 and key in NOT_ZERO:
            raise InputError(self.shown, "expected at least 1, got 0 (a model has some)", key=key)
        return value

    def flag(self, key: str, default: bool, fallback: dict[str, Any] | None = None) -> bool:
        """A true/false setting (``tie_word_embeddings``), from ``fallback`` (the outer config) when
        unset here; text such as ``"false"`` is refused, as Python would read it as true."""
        value = self.data.get(key, (fallback or {}).get(key, default))
        value = default if value is None else value
        if not isinstance(value, bool):
            raise InputError(self.shown, f"expected true or false, got {value!r}", key=key)
        return value

    def positive(self, key: str, default: int | None = None) -> int:
        """A whole number >= 1 (a step, a count that divides)."""
        value = self.int(key, default)
        if value == 0:
            raise InputError(self.shown, "expected at least 1, got 0", key=key)
        return value

    def experts(self, key: str) -> int:
        """The routed expert count: 1..MAX_EXPERTS."""
        value = self.int(key)
        if value == 0:
            raise InputError(self.shown, "0 routed experts: not a mixture-of-experts model", key=key)
        if value > MAX_EXPERTS:
            raise InputError(self.shown, f"{value} experts is above the limit of {MAX_EXPERTS:,}", key=key)
        return value

    def layer_list(self, key: str, n: int) -> set[int]:
        """A list of layer indices (``mlp_only_layers``, ``moe_layers``), each in 0..n-1."""
        value = self.get(key, [])
        if not isinstance(value, list):
            raise InputError(self.shown, f"expected a list of layer numbers, got {value!r}", key=key)
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < n:
                raise InputError(
                    self.shown, f"{item!r} is not a layer of this {n}-layer model (0..{n - 1})", key=key
                )
        return set(value)

    def per_layer_list(self, key: str, n: int, allowed: tuple[Any, ...]) -> list[Any] | None:
        """A list with one entry per layer from ``allowed`` (``layer_types``), or None when absent."""
        value = self.get(key)
        if value is None or value == []:
            return None
        if not isinstance(value, list) or len(value) < n:
            got = f"{len(value)} entries" if isinstance(value, list) else repr(value)
            raise InputError(
                self.shown, f"expected a list of {n} entries (one per layer), got {got}", key=key
            )
        for item in value[:n]:
            if item not in allowed:
                known = ", ".join(repr(a) for a in allowed)
                raise InputError(self.shown, f"{item!r} is not one of {known}", key=key)
        return list(value[:n])

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, ``default`` when unset or null."""
        value = self.data.get(key)
        return default if value is None else value

    def kv_row(self, elements: int) -> int:
        """Bytes of one KV cache row of ``elements`` values at the cache type."""
        return row_bytes(self.kv_type, elements)


def load_config(path: Path) -> tuple[dict[str, Any], str]:
    """The JSON object in ``path`` and the path as messages show it."""
    shown = shown_path(path)
    raw = read_bounded(path, shown, "a Hugging Face config.json", CONFIG_LIMIT)
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InputError(shown, f"not a JSON file: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(shown, "expected a JSON object (a Hugging Face config.json)")
    return data, shown


#: A file of Hugging Face's cache: models--ORG--NAME/snapshots/REVISION/config.json.
_HF_CACHE = re.compile(r"models--(?P<org>[^/\\]+?)--(?P<name>[^/\\]+)$")


def checkpoint_of(config_path: Path) -> str | Path | None:
    """What vLLM and SGLang would load for this config: the Hugging Face id when the file is in Hugging
    Face's cache, the folder when it holds the weights (``*.safetensors``), else None (not known)."""
    folder = config_path.resolve().parent
    if folder.parent.name == "snapshots":
        cached = _HF_CACHE.match(folder.parent.parent.name)
        if cached:
            return f"{cached['org']}/{cached['name']}"
    return folder if any(folder.glob("*.safetensors")) else None
