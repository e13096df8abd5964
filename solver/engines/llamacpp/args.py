"""A llama.cpp command line read as llama.cpp reads it: the flags that place layers and tensors.

llama-server and llama-cli share one parser (common/arg.cpp): a flag is matched whole (``--`` flags with
``_`` read as ``-``); integers are read by ``std::stoi`` and split fractions by ``std::stof``, each
reading the longest number at the start of the word; ``-ts`` splits on runs of ``,`` and ``/``; ``-ot``
takes ``PATTERN=BUFT`` rules separated by ``,`` and every ``-ot``, ``-ncmoe`` and ``-cmoe`` appends its
rules to one list in the order given, searched first match first. ``LLAMA_ARG_*`` variables set a
flag's value before the command line does. llama-bench (tools/llama-bench) takes a list of values
per flag (``,`` between values, ranges ``a-b``), ``/`` or ``;`` within a split, ``;`` between ``-ot``
rules, and adds its ``-ncmoe`` rules after its ``-ot`` ones; a score takes one value per flag.

The reading stops at what a command says. Which rig GPU a device name means, whether a buffer type
exists, what the rules select: solver.engines.llamacpp.devices decides that against a rig.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from solver.engines.llamacpp.flags import (
    BENCH_FLAGS,
    ENV_FLAGS,
    FLASH_MEANS,
    FLASH_VALUES,
    KV_TYPE_BYTES,
    LLAMA_FLAGS,
    OTHER_ENGINES,
    PROGRAMS,
    SPLIT_MODES,
    VOID_FLAGS,
    moe_rules,
)
from solver.engines.llamacpp.values import (
    device_names,
    int_list,
    one_value,
    override_rules,
    split_ratios,
    stoi,
    visible_devices,
)
from solver.errors import ArgsError


@dataclass(frozen=True)
class LlamaArgs:
    """What a llama.cpp command says about placement.

    n_gpu_layers: ``-ngl`` (None: not given; negative: ``auto``/``all``, every layer). tensor_split:
    the ``-ts`` values as float32 (empty: not given). devices: ``-dev`` names (None: every GPU;
    ``("none",)``: no GPU). overrides: every tensor rule ``(pattern, buffer type)`` in the order llama.cpp
    searches them, the ``-ncmoe``/``-cmoe`` rules included (n_cpu_moe and cpu_moe say which flags
    gave them). ctx_size: ``-c`` (None: not given; 0: the model's own). visible: CUDA_VISIBLE_DEVICES.
    rpc: ``--rpc`` endpoints. depth: llama-bench's ``-d`` (None elsewhere). n_batch, n_ubatch: ``-b``,
    ``-ub`` (None: not given); flash_attn: ``-fa`` as ``on``, ``off`` or ``auto`` (None: not given).
    ignored: the flags read but not modelled; notes: what the reading assumed, one line each.
    """

    program: str = "llama-server"
    n_gpu_layers: int | None = None
    split_mode: str = "layer"
    tensor_split: tuple[float, ...] = ()
    main_gpu: int = 0
    devices: tuple[str, ...] | None = None
    overrides: tuple[tuple[str, str], ...] = ()
    n_cpu_moe: int = 0
    cpu_moe: bool = False
    ctx_size: int | None = None
    type_k: str = "f16"
    type_v: str = "f16"
    visible: tuple[int, ...] | None = None
    rpc: tuple[str, ...] = ()
    depth: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    flash_attn: str | None = None
    ignored: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def bench(self) -> bool:
        """The words are llama-bench's (one test of its lists)."""
        return self.program == "llama-bench"


@dataclass
class _Reader:
    """The state one command's words build up: fields of LlamaArgs, the rules in order, what was skipped."""

    fields: dict = field(default_factory=dict)
    rules: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)


def _program(word: str) -> str | None:
    """The program a leading word names (a path counts by its file name), or None for a flag."""
    if word.startswith("-"):
        return None
    return os.path.basename(word)


def parse_llama_args(words: list[str]) -> LlamaArgs:
    """Read llama-server, llama-cli or llama-bench words (optionally led by ``NAME=VALUE`` variables and
    the program's name or path) into LlamaArgs; ArgsError (one line) for what llama.cpp would refuse."""
    words = list(words)
    r = _Reader()
    env: list[tuple[str, str]] = []
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env.append((name, value))
    program = "llama-server"
    if words and not words[0].startswith("-"):
        given = _program(words.pop(0)) or ""
        program = "llama-bench" if given.startswith("llama-bench") else given
        if given not in PROGRAMS and not given.startswith("llama-bench"):
            r.notes.append(f"{given}: read as llama-server's flags")
    bench = program == "llama-bench"
    for name, value in env:
        if name == "CUDA_VISIBLE_DEVICES":
            r.fields["visible"] = visible_devices(value)
        elif name in ENV_FLAGS and not bench:
            _server_flag(r, ENV_FLAGS[name], value, f"{name}={value}")
        elif name == "LLAMA_ARG_CPU_MOE" and not bench:
            if value.lower() in ("1", "true", "on", "enabled", "yes"):
                _server_flag(r, "-cmoe", None, f"{name}={value}")
        else:
            r.ignored.append(f"{name}={value}")
    (_read_bench if bench else _read_server)(r, words)
    for word in r.ignored:
        engine = OTHER_ENGINES.get(word.split("=")[0].split(" ")[0])
        if engine:
            raise ArgsError(f"{word.split(' ')[0]} is {engine}'s; score that command with --engine {engine}")
    rules = list(r.rules)
    if bench and r.fields.get("n_cpu_moe"):
        rules += moe_rules(r.fields["n_cpu_moe"])
    if bench:
        r.fields["ctx_size"] = r.fields.pop("gen", 128) + r.fields.get("depth", 0)
        r.fields.setdefault("depth", 0)
    return LlamaArgs(
        program="llama-bench" if bench else (program if program in PROGRAMS else "llama-server"),
        overrides=tuple(rules),
        ignored=tuple(r.ignored),
        notes=tuple(r.notes),
        **r.fields,
    )


def _split_equals(word: str, known: dict[str, str]) -> tuple[str, str | None]:
    """``--flag=value``: the flag and its value when the flag is one we read, else the word whole."""
    if word.startswith("--") and "=" in word:
        flag, _, value = word.partition("=")
        if flag.replace("_", "-") in known:
            return flag, value
    return word, None


def _read_server(r: _Reader, words: list[str]) -> None:
    i = 0
    while i < len(words):
        word, inline = _split_equals(words[i], LLAMA_FLAGS)
        flag = word.replace("_", "-") if word.startswith("--") else word
        i += 1
        if inline is not None:
            r.notes.append(f"{words[i - 1]}: llama.cpp itself wants '{flag} {inline}'; read so")
        if flag in LLAMA_FLAGS:
            if LLAMA_FLAGS[flag] == "cmoe":
                _server_flag(r, flag, None, flag)
                continue
            if inline is None:
                if i >= len(words):
                    raise ArgsError(f"{flag}: expected a value")
                inline = words[i]
                i += 1
            _server_flag(r, flag, inline, f"{flag} {inline}")
            continue
        if flag in ("-fa", "--flash-attn"):  # a value on newer builds, none (on) on older ones
            given = i < len(words) and words[i].lower() in FLASH_VALUES
            r.fields["flash_attn"] = FLASH_MEANS[words[i].lower()] if given else "on"
            i += given
            continue
        i = _skip(r, flag, words, i)


def _skip(r: _Reader, flag: str, words: list[str], i: int) -> int:
    """Step over a flag the score does not model (with its value, where it takes one); say so."""
    if not flag.startswith("-"):
        r.ignored.append(flag)
        return i
    takes = flag not in VOID_FLAGS and i < len(words) and not _is_flag(words[i])
    if flag in ("-fa", "--flash-attn"):
        takes = i < len(words) and words[i].lower() in FLASH_VALUES
    if takes:
        r.ignored.append(f"{flag} {words[i]}")
        return i + 1
    r.ignored.append(flag)
    return i


def _is_flag(word: str) -> bool:
    """A word that starts a flag: ``-`` then a letter or ``-`` (``-1`` is a value)."""
    return bool(re.match(r"-(-|[A-Za-z])", word))


def _server_flag(r: _Reader, flag: str, value: str | None, shown: str) -> None:
    """One llama-server flag (or LLAMA_ARG_* variable) applied as common/arg.cpp's handler does."""
    what = LLAMA_FLAGS[flag]
    f = r.fields
    label = flag if shown.startswith("-") else shown.partition("=")[0]  # a LLAMA_ARG_* variable by name
    if what == "ngl":
        f["n_gpu_layers"] = -1 if value == "auto" else -2 if value == "all" else stoi(label, value)
    elif what == "sm":
        if value not in SPLIT_MODES:
            raise ArgsError(f"{shown}: invalid value (none, layer or row)")
        f["split_mode"] = value
    elif what == "ts":
        f["tensor_split"] = split_ratios(label, value, ",/")
    elif what == "mg":
        f["main_gpu"] = stoi(label, value)
    elif what == "dev":
        f["devices"] = device_names(label, value, ",")
    elif what == "ot":
        r.rules += override_rules(label, value, ",")
    elif what == "ncmoe":
        n = stoi(label, value)
        if n < 0:
            raise ArgsError(f"{shown}: invalid value: a count of layers, 0 or more")
        f["n_cpu_moe"] = max(f.get("n_cpu_moe", 0), n)
        r.rules += moe_rules(n)
    elif what == "cmoe":
        f["cpu_moe"] = True
        r.rules += moe_rules(cpu_moe=True)
    elif what == "ctx":
        n = stoi(label, value)
        if n < 0:
            raise ArgsError(f"{shown}: invalid value: a context of tokens, 0 or more (0: the model's own)")
        f["ctx_size"] = n
    elif what in ("ctk", "ctv"):
        if value not in KV_TYPE_BYTES:
            raise ArgsError(f"{shown}: unsupported cache type (one of {', '.join(KV_TYPE_BYTES)})")
        f["type_k" if what == "ctk" else "type_v"] = value
    elif what == "rpc":
        f["rpc"] = rpc_endpoints(label, value)
    elif what in ("batch", "ubatch"):
        n = stoi(label, value)
        if n < 1:
            raise ArgsError(f"{shown}: invalid value")
        f["n_batch" if what == "batch" else "n_ubatch"] = n


def rpc_endpoints(flag: str, value: str) -> tuple[str, ...]:
    """``--rpc host:port,...``."""
    out = tuple(e.strip() for e in value.split(","))
    if not out or any(not e for e in out):
        raise ArgsError(f"{flag} {value!r}: no RPC servers specified")
    return out


def _read_bench(r: _Reader, words: list[str]) -> None:
    i = 0
    while i < len(words):
        flag = words[i].replace("_", "-") if words[i].startswith("--") else words[i]
        i += 1
        if flag not in BENCH_FLAGS:
            i = _skip(r, flag, words, i)
            continue
        if i >= len(words):
            raise ArgsError(f"{flag}: expected a value")
        value = words[i]
        i += 1
        what = BENCH_FLAGS[flag]
        r.seen[what] = r.seen.get(what, 0) + 1
        if r.seen[what] > 1:
            raise ArgsError(f"{flag} given twice: llama-bench runs one test per value; a score takes one")
        _bench_flag(r, flag, what, value)


def _bench_flag(r: _Reader, flag: str, what: str, value: str) -> None:
    """One llama-bench flag: a list, of which a score takes its one value."""
    f = r.fields
    if what in ("ngl", "mg", "depth", "gen", "ncmoe"):
        n = one_value(flag, value, int_list(flag, value, negative=what in ("ngl", "mg")))
        key = {"ngl": "n_gpu_layers", "mg": "main_gpu", "depth": "depth", "gen": "gen", "ncmoe": "n_cpu_moe"}
        f[key[what]] = n
    elif what == "sm":
        mode = one_value(flag, value, value.split(","))
        if mode not in SPLIT_MODES:
            raise ArgsError(f"{flag} {value}: invalid value (none, layer, row or tensor)")
        f["split_mode"] = mode
    elif what == "ts":
        f["tensor_split"] = split_ratios(flag, one_value(flag, value, value.split(",")), ";/")
    elif what == "ot":
        group = one_value(flag, value, value.split(","))
        r.rules += override_rules(flag, group, ";") if group else []
    elif what == "dev":
        combo = one_value(flag, value, value.split(",")).strip()
        if combo != "auto":
            f["devices"] = device_names(flag, combo, "/")
    elif what in ("ctk", "ctv"):
        kind = one_value(flag, value, value.split(","))
        if kind not in KV_TYPE_BYTES:
            raise ArgsError(f"{flag} {value}: unsupported cache type (one of {', '.join(KV_TYPE_BYTES)})")
        f["type_k" if what == "ctk" else "type_v"] = kind
    elif what == "rpc":
        f["rpc"] = rpc_endpoints(flag, value)
    elif what in ("batch", "ubatch"):
        n = one_value(flag, value, int_list(flag, value, negative=False))
        if n < 1:
            raise ArgsError(f"{flag} {value}: invalid value")
        f["n_batch" if what == "batch" else "n_ubatch"] = n
    elif what == "fa":
        on = one_value(flag, value, value.split(",")).strip().lower()
        if on not in FLASH_MEANS:
            raise ArgsError(f"{flag} {value}: invalid value (0 or 1)")
        f["flash_attn"] = FLASH_MEANS[on]
