"""The metadata keys of a GGUF header the importer reads (``{arch}.block_count``, ``expert_count``, ...),
checked, with where each number came from."""

from __future__ import annotations

from solver.errors import InputError
from solver.importers.ggufheader import SkippedArray
from solver.importers.modelfile import BY_HAND, MAX_EXPERTS, MAX_LAYERS

#: Architectures whose layer kinds this importer knows (``general.architecture``).
ARCHS = (
    *("qwen3moe", "qwen3next", "qwen35moe", "qwen2moe", "deepseek2", "gpt-oss", "glm4moe", "llama"),
    *("llama4", "ernie4_5-moe", "minimax-m2", "olmoe"),
)


class Meta:
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
                f"architecture {arch!r} is not supported (supported: {', '.join(ARCHS)}); {BY_HAND}",
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
