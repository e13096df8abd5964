"""The pieces of the engines' exports: the lines, device order, partition variables, llama.cpp's -ts and -ot.

Pure functions, no I/O; each engine assembles its own lines from them (solver.engines) and
solver.engines.shells writes them for the user's shell. Each engine's mapping from these flags to layers and
devices is re-implemented in tests/engine_mapping.py and checked over random plans in
tests/test_export.py; docs/exports.md says why each form is exact.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from solver.files.kvcache import DEFAULT_KV_TYPE

if TYPE_CHECKING:
    pass

# llama.cpp refuses a --tensor-split with llama_max_devices() (16) entries or more (common/arg.cpp).
LLAMA_MAX_SPLITS = 15
# -ngl 999 puts every block and the output slot on the GPUs while n_layer + 1 <= 999.
LLAMA_ALL_LAYERS = 999
# What a tensor name may hold: no regex metacharacter but '.', and no ',' or '=' that -ot splits on.
_NAME = re.compile(r"[A-Za-z0-9_.]+")
#: CUDA_VISIBLE_DEVICES that hides every GPU: CUDA lists the devices before the first invalid index.
NO_DEVICES = "-1"


@dataclass(frozen=True)
class Command:
    """A command to run: ``argv``, with ``env`` set for it on the same line, in the background when
    ``background`` (a server the next lines talk to)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    background: bool = False


@dataclass(frozen=True)
class SetEnv:
    """A variable set for every command after it (``export NAME=VALUE``)."""

    name: str
    value: str


@dataclass(frozen=True)
class Flags:
    """Flags to add to a command the user starts some other way (Strata's ``--layer-split``)."""

    words: tuple[str, ...]


@dataclass(frozen=True)
class Comment:
    """A line for the reader: which machine runs what, what a placeholder stands for."""

    text: str


@dataclass(frozen=True)
class Text:
    """A line to paste into a file as it is (Strata's JSON config line), never a shell's."""

    text: str


Line = Command | SetEnv | Flags | Comment | Text


@dataclass(frozen=True)
class Launch:
    """What an engine's command needs besides the split.

    ``gguf``: the GGUF file llama.cpp loads; ``hf_model``: the checkpoint directory or Hugging Face id
    vLLM and SGLang load (None: a placeholder the export names); ``context``: the KV tokens the plan
    assumed (0: none, which no command can give); ``kv_type``: the KV cache type; ``fit_off``: add
    llama.cpp's ``-fit off`` (builds that have ``--fit`` only); ``n_ubatch`` and ``flash_attn``:
    llama.cpp's ``-ub`` and ``-fa``.
    """

    gguf: str | None = None
    hf_model: str | None = None
    context: int = 0
    kv_type: str = DEFAULT_KV_TYPE
    fit_off: bool = False
    n_ubatch: int = 512
    flash_attn: bool = True


@dataclass(frozen=True)
class Offload:
    """An expert tensor llama.cpp keeps on the CPU: ``blk.{layer}.{tensor}``.

    ``tensor`` is the name after ``blk.N.``: ``ffn_gate_exps`` means ``blk.N.ffn_gate_exps.weight``; a
    name ending in ``.bias`` (or ``.weight``) is taken whole: ``ffn_gate_exps.bias`` is
    ``blk.N.ffn_gate_exps.bias``.
    """

    layer: int
    tensor: str

    @property
    def suffix(self) -> str:
        """The tensor's name after ``blk.N.``, with its ``.weight``/``.bias`` ending."""
        return self.tensor if self.tensor.endswith((".weight", ".bias")) else f"{self.tensor}.weight"

    @property
    def name(self) -> str:
        """The full GGUF tensor name, as llama.cpp matches -ot patterns against it."""
        return f"blk.{self.layer}.{self.suffix}"


def check_export_engine(export: str, plan_engine: str) -> str | None:
    """The one-line error when ``--export`` asks for another engine than the plan's, else None."""
    if export == plan_engine:
        return None
    return f"the plan is for engine {plan_engine}; plan with --engine {export} to get {export}'s flags"


def stage_sizes(cuts: list[int], n_layers: int) -> list[int]:
    """Layers per stage, in pipeline order."""
    return [b - a for a, b in zip([0, *cuts], [*cuts, n_layers])]


def device_order(gpus: list[int]) -> tuple[tuple[str, str], ...]:
    """``CUDA_VISIBLE_DEVICES`` as the plan's GPUs in pipeline order, unless the engine's devices
    0..k-1 already are the plan's."""
    if list(gpus) == list(range(len(gpus))):
        return ()
    return (("CUDA_VISIBLE_DEVICES", ",".join(map(str, gpus))),)


def joined(sizes: list[int]) -> str:
    """``c_0,c_1,...``: layers per stage as the engines' partition flags and variables take them."""
    return ",".join(map(str, sizes))


def placeholder(given: str | None, name: str, what: str) -> tuple[str, list[Line]]:
    """The model a command loads, or ``name`` and a comment that says what to put there."""
    if given is not None:
        return given, []
    return name, [Comment(f"{name}: {what}")]


def context_flag(flag: str, context: int) -> tuple[list[str], list[Line]]:
    """``flag CONTEXT``, or nothing and a comment when the plan assumed no KV cache at all."""
    if context > 0:
        return [flag, str(context)], []
    return [], [Comment("the plan holds no KV cache (context 0): plan with --context N, the tokens you need")]


def tensor_split(sizes: list[int], n_blocks: int) -> list[int]:
    """llama.cpp's -ts values: layers per stage, the last one counting the output slot (and extra blocks).

    llama.cpp maps slot il (0..n_block, the output being slot n_block) to the first device whose
    cumulative float32 fraction exceeds il / (n_block + 1); integer counts that sum to n_block + 1 make
    those fractions fall exactly on the stage boundaries (docs/exports.md has the proof).
    """
    return [*sizes[:-1], sizes[-1] + n_blocks - sum(sizes) + 1]


def llama_flags(
    sizes: list[int],
    n_blocks: int,
    offload: list[Offload] | tuple[Offload, ...],
    names: list[str] | None,
    cpu_layers: int = 0,
) -> list[str]:
    """``--split-mode layer -ngl 999 --tensor-split ...`` and, when experts stay on the CPU, one ``-ot``,
    as words. With ``cpu_layers`` c (the first stage's first layers wholly on the CPU), ``-ngl`` is
    ``n_blocks + 1 - c``: llama.cpp offloads the last ``-ngl`` of its ``n_blocks + 1`` slots, so the
    first c stay on the CPU, and ``--tensor-split`` counts the GPU slots alone (the first stage's less
    c), which sum to ``-ngl`` and so fall on the stage boundaries as before."""
    if len(sizes) > LLAMA_MAX_SPLITS:
        raise ValueError(
            f"llama.cpp takes at most {LLAMA_MAX_SPLITS} --tensor-split values; "
            f"this plan has {len(sizes)} stages"
        )
    if n_blocks + 1 > LLAMA_ALL_LAYERS:
        raise ValueError(f"-ngl {LLAMA_ALL_LAYERS} cannot offload {n_blocks} blocks and the output")
    outside = [unit.name for unit in offload if not 0 <= unit.layer < n_blocks]
    if outside:
        raise ValueError(f"tensor {outside[0]} is beyond the model's {n_blocks} blocks")
    if not 0 <= cpu_layers < sizes[0]:
        raise ValueError(f"{cpu_layers} layers on the CPU leave the first stage's {sizes[0]} none")
    ngl = str(n_blocks + 1 - cpu_layers) if cpu_layers else str(LLAMA_ALL_LAYERS)
    words = ["--split-mode", "layer", "-ngl", ngl, "--tensor-split"]
    words.append(joined(tensor_split([sizes[0] - cpu_layers, *sizes[1:]], n_blocks - cpu_layers)))
    if offload:
        pattern = override_pattern(offload)
        if names is not None:
            check_pattern(pattern, offload, names)
        words += ["-ot", f"{pattern}=CPU"]
    return words


def override_pattern(offload: list[Offload] | tuple[Offload, ...]) -> str:
    """One anchored regex that matches exactly the offloaded tensors' names.

    Layers sharing a tensor set form one alternative (``blk\\.(3|17)\\.ffn_(gate|up)_exps\\.weight``),
    or tensors sharing a layer set do, whichever is shorter. Only a portable subset of regex syntax is
    used (escaped dots, groups, alternation, ``?``, digit classes, ``^`` and ``$``), so Python's ``re`` and
    the ECMAScript ``std::regex`` llama.cpp searches with agree on it.
    """
    by_layer: dict[int, set[str]] = defaultdict(set)
    for unit in offload:
        if not _NAME.fullmatch(unit.tensor):
            raise ValueError(f"cannot name tensor {unit.name!r} in an -ot pattern")
        by_layer[unit.layer].add(unit.suffix)
    by_tensors: dict[frozenset[str], set[int]] = defaultdict(set)
    for layer, suffixes in by_layer.items():
        by_tensors[frozenset(suffixes)].add(layer)
    by_layers: dict[frozenset[int], set[str]] = defaultdict(set)
    for suffix in {s for suffixes in by_layer.values() for s in suffixes}:
        by_layers[frozenset(layer for layer, s in by_layer.items() if suffix in s)].add(suffix)
    groups = min(
        [(layers, tensors) for tensors, layers in by_tensors.items()],
        [(layers, tensors) for layers, tensors in by_layers.items()],
        key=lambda g: len(_render(g)),
    )
    return _render(groups)


def _render(groups: list[tuple[set[int] | frozenset[int], set[str] | frozenset[str]]]) -> str:
    parts = sorted(f"{_numbers(layers)}\\.{_strings(tensors)}" for layers, tensors in groups)
    return f"^blk\\.{_alternation(parts)}$"


def _alternation(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"({'|'.join(parts)})"


def _strings(strings: set[str] | frozenset[str]) -> str:
    """An exact regex for a set of names: their common prefix and suffix around an alternation."""
    words = sorted(strings)
    head = _common_prefix(words)
    room = min(len(w) for w in words) - len(head)
    tail = _common_prefix([w[::-1] for w in words])[:room][::-1]
    middles = sorted({w[len(head) : len(w) - len(tail)] for w in words})
    alternatives = [m.replace(".", "\\.") for m in middles if m]
    if len(alternatives) == len(middles) == 1:
        middle = alternatives[0]
    elif alternatives:  # "" among the middles makes the group optional
        middle = f"({'|'.join(alternatives)})" + ("?" if "" in middles else "")
    else:
        middle = ""
    return head.replace(".", "\\.") + middle + tail.replace(".", "\\.")


def _common_prefix(words: list[str]) -> str:
    first, last = min(words), max(words)
    n = 0
    while n < len(first) and first[n] == last[n]:
        n += 1
    return first[:n]


def _numbers(numbers: set[int] | frozenset[int]) -> str:
    """An exact regex for a set of non-negative integers written in decimal, with digit classes.

    Numbers that differ only in their last digit share a class (``1[0-9]``); then those with the same
    class that differ only in the digit before share a class too (``[1-3][0-9]``).
    """
    last: dict[tuple[int, str], set[str]] = defaultdict(set)
    for n in numbers:
        s = str(n)
        last[(len(s), s[:-1])].add(s[-1])
    second: dict[tuple[int, str, str], set[str]] = defaultdict(set)
    parts = []  # (smallest number matched, pattern)
    for (width, head), digits in last.items():
        if width == 1:
            parts.append((int(min(digits)), _digits(digits)))
        else:
            second[(width, head[:-1], _digits(digits))].add(head[-1])
    for (_, head, cls), firsts in second.items():
        parts.append((int(head + min(firsts) + cls.strip("[")[0]), head + _digits(firsts) + cls))
    return _alternation([pattern for _, pattern in sorted(parts)])


def _digits(digits: set[str]) -> str:
    """A digit, or a class of digits written with ranges: ``[0-35]``."""
    if len(digits) == 1:
        return next(iter(digits))
    values = sorted(int(d) for d in digits)
    runs: list[list[int]] = []
    for v in values:
        if runs and runs[-1][-1] == v - 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    body = "".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else "".join(map(str, r)) for r in runs)
    return f"[{body}]"


def check_pattern(pattern: str, offload: list[Offload] | tuple[Offload, ...], names: list[str]) -> None:
    """Raise ValueError unless ``pattern`` selects exactly the offloaded tensors among ``names``."""
    wanted = {unit.name for unit in offload}
    missing = sorted(wanted - set(names))
    if missing:
        raise ValueError(f"the model has no tensor {missing[0]}")
    regex = re.compile(pattern)
    extra = sorted(n for n in names if regex.search(n) and n not in wanted)
    lost = sorted(n for n in wanted if not regex.search(n))
    if extra or lost:
        raise ValueError(f"-ot pattern {pattern} selects {extra[:3]} and misses {lost[:3]}")
