"""Commands that say how many layers each pipeline stage runs: vLLM, SGLang and Strata.

vLLM reads ``VLLM_PP_LAYER_PARTITION`` (layers per stage) with ``-pp``/``--pipeline-parallel-size``,
SGLang ``SGLANG_PP_LAYER_PARTITION`` with ``--pp-size`` (or ``--pipeline-parallel-size``): the
partition must have one entry per stage and sum to the model's layers (``get_pp_indices``); without
it the engine's own even split applies. Stage s runs on CUDA device s, the rig's GPU s unless
CUDA_VISIBLE_DEVICES renumbers them. Strata takes ``--layer-split CUTS`` (the first layer of every
later GPU). Flags are read as argparse reads them (``--flag value`` or ``--flag=value``); the
program's name and its positional words (``vllm serve MODEL``) are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from solver.errors import ArgsError
from solver.problem.problem import Problem, at_context
from solver.problem.scored import Card, Scored

if TYPE_CHECKING:
    from solver.engines.base import Engine


@dataclass(frozen=True)
class StageArgs:
    """What a command says about its stages.

    sizes: layers per stage (None: the engine's default); cuts: Strata's ``--layer-split`` (None: not
    given); stages: the pipeline size given (None: not given); visible: CUDA_VISIBLE_DEVICES; context:
    the longest sequence the command sets (vLLM ``--max-model-len``, SGLang ``--context-length``),
    which the KV cache must hold; ignored: words not modelled.
    """

    sizes: tuple[int, ...] | None = None
    cuts: tuple[int, ...] | None = None
    stages: int | None = None
    visible: tuple[int, ...] | None = None
    context: int | None = None
    ignored: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grammar:
    """One engine's spellings: its partition variable, and its flags by what they set."""

    env: str | None
    flags: dict[str, str]


#: Each engine's words (``pp``: pipeline size; ``tp``: tensor-parallel size; ``ctx``: context; ``cuts``).
GRAMMARS = {
    "vllm": Grammar(
        "VLLM_PP_LAYER_PARTITION",
        {
            "-pp": "pp",
            "--pipeline-parallel-size": "pp",
            "-tp": "tp",
            "--tensor-parallel-size": "tp",
            "--max-model-len": "ctx",
        },
    ),
    "sglang": Grammar(
        "SGLANG_PP_LAYER_PARTITION",
        {
            "--pp-size": "pp",
            "--pp": "pp",
            "--pipeline-parallel-size": "pp",
            "--tp-size": "tp",
            "--tp": "tp",
            "--tensor-parallel-size": "tp",
            "--context-length": "ctx",
        },
    ),
    "strata": Grammar(None, {"--layer-split": "cuts"}),
}


def parse_stage_args(engine: str, words: list[str]) -> StageArgs:
    """Read a vLLM, SGLang or Strata command (``NAME=VALUE`` variables first, ``export`` allowed)."""
    # llama.cpp's flag readers, imported here: its package's import is long, and only a read needs them
    from solver.engines.llamacpp.flags import LLAMA_PLACEMENT
    from solver.engines.llamacpp.values import visible_devices

    grammar = GRAMMARS[engine]
    words = list(words)
    fields: dict = {}
    ignored: list[str] = []
    while words and (words[0] == "export" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0])):
        word = words.pop(0)
        if word == "export":
            continue
        name, _, value = word.partition("=")
        if name == "CUDA_VISIBLE_DEVICES":
            fields["visible"] = visible_devices(value)
        elif name == grammar.env:
            fields["sizes"] = _partition(name, value)
        else:
            ignored.append(word)
    i = 0
    while i < len(words):
        flag, eq, inline = words[i].partition("=") if words[i].startswith("--") else (words[i], "", "")
        i += 1
        what = grammar.flags.get(flag)
        if what is None and flag in LLAMA_PLACEMENT:
            raise ArgsError(f"{flag} is llama.cpp's; score that command with --engine llama.cpp")
        if what is None:
            takes = flag.startswith("-") and not eq and i < len(words) and not words[i].startswith("-")
            ignored.append(f"{words[i - 1]} {words[i]}" if takes else words[i - 1])
            i += 1 if takes else 0
            continue
        if not eq:
            if i >= len(words):
                raise ArgsError(f"{flag}: expected a value")
            inline, i = words[i], i + 1
        _apply(fields, flag, what, inline)
    return StageArgs(ignored=tuple(ignored), **fields)


def _partition(name: str, value: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in value.split(","))
    except ValueError:
        raise ArgsError(f"{name}={value}: invalid partition string (layers per stage, e.g. 11,13)") from None


def _apply(fields: dict, flag: str, what: str, value: str) -> None:
    """One flag's value: the pipeline size, a tensor-parallel size (only 1 is a layer split), the
    context, or Strata's cut points."""
    from solver.engines.llamacpp.values import stoi

    if what == "cuts":
        fields["cuts"] = _partition(flag, value) if value.strip() else ()
        return
    if not re.fullmatch(r"[0-9]+", value):
        raise ArgsError(f"{flag} {value}: expected a whole number")
    n = stoi(flag, value)
    if what == "pp":
        if n < 1:
            raise ArgsError(f"{flag} {value}: a pipeline has at least 1 stage")
        fields["stages"] = n
    elif what == "tp" and n != 1:
        raise ArgsError(
            f"{flag} {value}: tensor parallelism splits each layer over GPUs; a score places whole layers"
        )
    elif what == "ctx":
        fields["context"] = n


def layers_per_stage(p: Problem, args: StageArgs, default: list[int] | None) -> list[int]:
    """Layers per stage: Strata's cuts, the command's partition (checked as the engine checks it), or
    ``default`` (the engine's own split over the pipeline size; None: the engine has none)."""
    n = p.n_layers
    if args.cuts is not None:
        cuts = list(args.cuts)
        if cuts != sorted(set(cuts)) or any(not 0 < c < n for c in cuts):
            raise ArgsError(f"--layer-split {','.join(map(str, cuts))}: cuts must rise within 1..{n - 1}")
        return [b - a for a, b in zip([0, *cuts], [*cuts, n])]
    stages = args.stages or 1
    if args.sizes is None:
        if default is None:
            raise ArgsError(
                "the command gives no --layer-split CUTS (another engine's command: give --engine)"
            )
        if min(default) < 1:
            raise ArgsError(f"a pipeline of {stages} stages has more stages than the model's {n} layers")
        return default
    sizes = list(args.sizes)
    if len(sizes) != stages:
        raise ArgsError(
            f"partition {','.join(map(str, sizes))} has {len(sizes)} stages, pipeline size {stages}"
        )
    if sum(sizes) != n:
        raise ArgsError(
            f"partition {','.join(map(str, sizes))} sums to {sum(sizes)}, the model has {n} layers"
        )
    if min(sizes) < 1:
        raise ArgsError(f"partition {','.join(map(str, sizes))}: every stage needs a layer")
    return sizes


def score_stages(engine: Engine, p: Problem, args: StageArgs, sizes: list[int]) -> Scored:
    """Stage s on CUDA device s; the placement by ``engine``'s fill, each card's memory from its room."""
    local = [g for g in range(p.n_gpus) if p.hosts[g] == 0]
    if len(local) < p.n_gpus:
        raise ArgsError("the rig spans hosts; a score reads one machine's command")
    cuda = local if args.visible is None else list(args.visible)
    if any(g >= p.n_gpus for g in cuda):
        raise ArgsError(f"CUDA_VISIBLE_DEVICES={','.join(map(str, cuda))}: the rig has GPUs 0-{p.n_gpus - 1}")
    if len(sizes) > len(cuda):
        raise ArgsError(f"{len(sizes)} pipeline stages need {len(sizes)} GPUs; the command sees {len(cuda)}")
    q = p if args.context is None else at_context(p, args.context)
    gpus = cuda[: len(sizes)]
    cuts = [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)]
    plan = engine.evaluate(q, gpus, cuts)
    cards = [
        Card(
            gpu=s.gpu,
            name=s.name,
            layers=(s.start, s.end),
            output=s.end == q.n_layers,
            held=s.held_pairs,
            offloaded=s.visible_pairs - s.held_pairs,
            elsewhere=0,
            guests=0,
            need_bytes=int(q.free[s.gpu] - q.reserve[s.gpu]) - s.room_bytes + s.cache_bytes,
            avail_bytes=int(q.free[s.gpu] - q.reserve[s.gpu]),
        )
        for s in plan.stages
    ]
    notes = [f"not modelled: {' '.join(args.ignored)}"] if args.ignored else []
    return Scored(q, plan, cards, notes=notes)
