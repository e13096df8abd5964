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
exists, what the rules select: solver.engines.llamascore decides that against a rig.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from solver.errors import ArgsError

#: llama.cpp refuses a ``--tensor-split`` of llama_max_devices() (16) values or more.
LLAMA_MAX_DEVICES = 16
#: The expert tensors ``-ncmoe``/``-cmoe`` move (common/common.h, LLM_FFN_EXPS_REGEX).
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
#: Bytes one cached value takes, by ``-ctk``/``-ctv`` type: ggml's block bytes over block values.
KV_TYPE_BYTES: dict[str, tuple[int, int]] = {
    "f32": (4, 1),
    "f16": (2, 1),
    "bf16": (2, 1),
    "q8_0": (34, 32),
    "q4_0": (18, 32),
    "q4_1": (20, 32),
    "iq4_nl": (18, 32),
    "q5_0": (22, 32),
    "q5_1": (24, 32),
}
#: Names of the programs whose flags are read (a path to one counts by its file name).
PROGRAMS = ("llama-server", "llama-cli", "llama-bench", "llama-mtmd-cli", "llama-simple", "server", "main")
#: What ``-sm`` takes; ``row`` and ``tensor`` split each matrix over the GPUs.
SPLIT_MODES = ("none", "layer", "row", "tensor")


@dataclass(frozen=True)
class LlamaArgs:
    """What a llama.cpp command says about placement.

    n_gpu_layers: ``-ngl`` (None: not given; negative: ``auto``/``all``, every layer). tensor_split:
    the ``-ts`` values as float32 (empty: not given). devices: ``-dev`` names (None: every GPU;
    ``("none",)``: no GPU). overrides: every tensor rule ``(pattern, buffer type)`` in the order llama.cpp
    searches them, the ``-ncmoe``/``-cmoe`` rules included (n_cpu_moe and cpu_moe say which flags
    gave them). ctx_size: ``-c`` (None: not given; 0: the model's own). visible: CUDA_VISIBLE_DEVICES.
    rpc: ``--rpc`` endpoints. depth: llama-bench's ``-d`` (None elsewhere). ignored: the flags read but
    not modelled; notes: what the reading assumed, one line each.
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
    ignored: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def bench(self) -> bool:
        """The words are llama-bench's (one test of its lists)."""
        return self.program == "llama-bench"


def moe_rules(n_cpu_moe: int = 0, cpu_moe: bool = False) -> list[tuple[str, str]]:
    """The rules ``--n-cpu-moe N`` (the experts of layers < N) or ``--cpu-moe`` (every expert) add."""
    if cpu_moe:
        return [(FFN_EXPS_REGEX, "CPU")]
    return [(f"blk\\.{i}{FFN_EXPS_REGEX}", "CPU") for i in range(n_cpu_moe)]


def stoi(flag: str, text: str) -> int:
    """``std::stoi``: optional blanks and sign, then digits; what follows them is not read."""
    m = re.match(r"\s*([+-]?\d+)", text)
    if m is None:
        raise ArgsError(f"{flag} {text!r}: not an integer")
    value = int(m.group(1))
    if not -(2**31) <= value < 2**31:
        raise ArgsError(f"{flag} {text!r}: out of range")
    return value


_FLOAT = re.compile(r"\s*([+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan))", re.IGNORECASE)


def stof(flag: str, text: str) -> float:
    """``std::stof`` rounded to float32: the longest decimal number at the start of the word."""
    import numpy as np

    m = _FLOAT.match(text)
    if m is None:
        raise ArgsError(f"{flag} {text!r}: not a number")
    with np.errstate(over="ignore"):
        value = np.float32(float(m.group(1)))
    if not np.isfinite(value) and "inf" not in m.group(1).lower() and "nan" not in m.group(1).lower():
        raise ArgsError(f"{flag} {text!r}: out of range")
    return float(value)


def split_ratios(flag: str, text: str, separators: str) -> tuple[float, ...]:
    """``-ts``: the values between runs of ``separators``, each by ``std::stof``; 16 or more refused."""
    parts = re.split(f"[{re.escape(separators)}]+", text)
    if parts and parts[-1] == "" and len(parts) > 1:  # std::sregex_token_iterator drops an empty tail
        parts = parts[:-1]
    if len(parts) >= LLAMA_MAX_DEVICES:
        raise ArgsError(f"{flag} {text}: got {len(parts)} input configs, but llama.cpp takes at most 15")
    return tuple(stof(flag, p) for p in parts)


def override_rules(flag: str, text: str, separator: str) -> list[tuple[str, str]]:
    """``-ot``: ``PATTERN=BUFT`` rules between ``separator``s, each split at its first ``=``."""
    rules = []
    for rule in text.split(separator):
        if separator == ";" and rule == "":
            continue
        pattern, eq, buft = rule.partition("=")
        if not eq:
            raise ArgsError(f"{flag} {text}: rule {rule!r} has no '=BUFFER_TYPE' (e.g. 'exps=CPU')")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ArgsError(f"{flag} {text}: {pattern!r} is not a regular expression ({exc})") from None
        rules.append((pattern, buft))
    return rules


def device_names(flag: str, text: str, separator: str) -> tuple[str, ...]:
    """``-dev``: device names (``CUDA0``, ``RPC1``; ``none`` for no GPU)."""
    names = tuple(n.strip() for n in text.split(separator))
    if not names or any(not n for n in names):
        raise ArgsError(f"{flag} {text!r}: no devices specified")
    if "none" in names and len(names) > 1:
        raise ArgsError(f"{flag} {text}: 'none' means no GPU and stands alone")
    return names


def visible_devices(text: str) -> tuple[int, ...]:
    """CUDA_VISIBLE_DEVICES as GPU indices; a UUID or a repeated index is refused."""
    if text.strip() == "":
        return ()
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"\d+", part):
            raise ArgsError(
                f"CUDA_VISIBLE_DEVICES={text}: {part!r} is not a GPU index (name GPUs by rig index)"
            )
        if int(part) in out:
            raise ArgsError(f"CUDA_VISIBLE_DEVICES={text}: GPU {part} is listed twice")
        out.append(int(part))
    return tuple(out)


def int_list(flag: str, text: str, negative: bool = False) -> list[int]:
    """llama-bench's ``parse_int_range``: ``a``, ``a-b``, ``a-b+s``, ``a-b*m``, comma separated."""
    sign = "-?" if negative else ""
    item = re.compile(rf"({sign}\d+)(?:-(\d+)(?:([+*])(\d+))?)?(?:,|$)")
    out: list[int] = []
    pos = 0
    while pos < len(text):
        m = item.match(text, pos)
        if m is None or m.end() == pos:
            raise ArgsError(f"{flag} {text}: invalid range format")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        op, step = m.group(3) or "+", int(m.group(4)) if m.group(4) else 1
        i = first
        while i <= last:
            out.append(i)
            nxt = i + step if op == "+" else i * step
            if nxt <= i:
                raise ArgsError(f"{flag} {text}: invalid range")
            i = nxt
        pos = m.end()
    if not out:
        raise ArgsError(f"{flag} {text!r}: no value")
    return out


def _one(flag: str, text: str, values: list) -> object:
    """The single value of a llama-bench list: a score is one test."""
    if len(values) != 1:
        raise ArgsError(
            f"{flag} {text}: llama-bench runs one test per value; a score takes one value (score each one)"
        )
    return values[0]


@dataclass
class _Reader:
    """The state one command's words build up: fields of LlamaArgs, the rules in order, what was skipped."""

    fields: dict = field(default_factory=dict)
    rules: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)


# llama-server / llama-cli: flag spellings -> what they set.
LLAMA_FLAGS: dict[str, str] = {
    "-ngl": "ngl",
    "--gpu-layers": "ngl",
    "--n-gpu-layers": "ngl",
    "-sm": "sm",
    "--split-mode": "sm",
    "-ts": "ts",
    "--tensor-split": "ts",
    "-mg": "mg",
    "--main-gpu": "mg",
    "-dev": "dev",
    "--device": "dev",
    "-ot": "ot",
    "--override-tensor": "ot",
    "-ncmoe": "ncmoe",
    "--n-cpu-moe": "ncmoe",
    "-cmoe": "cmoe",
    "--cpu-moe": "cmoe",
    "-c": "ctx",
    "--ctx-size": "ctx",
    "-ctk": "ctk",
    "--cache-type-k": "ctk",
    "-ctv": "ctv",
    "--cache-type-v": "ctv",
    "--rpc": "rpc",
}
#: The flags that place layers and tensors: llama.cpp's own, in no other engine's command.
LLAMA_PLACEMENT = frozenset(
    f for f, what in LLAMA_FLAGS.items() if what in ("ngl", "ts", "ot", "ncmoe", "cmoe", "sm")
)
# Words that set another engine's layer split: a command for that engine, not llama.cpp.
OTHER_ENGINES: dict[str, str] = {
    "VLLM_PP_LAYER_PARTITION": "vllm",
    "-pp": "vllm",
    "--pipeline-parallel-size": "vllm",
    "SGLANG_PP_LAYER_PARTITION": "sglang",
    "--pp-size": "sglang",
    "--layer-split": "strata",
}
# llama-bench: its own spellings.
_BENCH_FLAGS: dict[str, str] = {
    "-ngl": "ngl",
    "--n-gpu-layers": "ngl",
    "-sm": "sm",
    "--split-mode": "sm",
    "-ts": "ts",
    "--tensor-split": "ts",
    "-mg": "mg",
    "--main-gpu": "mg",
    "-dev": "dev",
    "--device": "dev",
    "-ot": "ot",
    "--override-tensor": "ot",
    "-ncmoe": "ncmoe",
    "--n-cpu-moe": "ncmoe",
    "-ctk": "ctk",
    "--cache-type-k": "ctk",
    "-ctv": "ctv",
    "--cache-type-v": "ctv",
    "-rpc": "rpc",
    "--rpc": "rpc",
    "-d": "depth",
    "--n-depth": "depth",
    "-n": "gen",
    "--n-gen": "gen",
}
# Environment variables llama-server reads as flag values (common/arg.cpp set_env).
_ENV_FLAGS: dict[str, str] = {
    "LLAMA_ARG_N_GPU_LAYERS": "-ngl",
    "LLAMA_ARG_SPLIT_MODE": "-sm",
    "LLAMA_ARG_TENSOR_SPLIT": "-ts",
    "LLAMA_ARG_MAIN_GPU": "-mg",
    "LLAMA_ARG_DEVICE": "-dev",
    "LLAMA_ARG_N_CPU_MOE": "-ncmoe",
    "LLAMA_ARG_CTX_SIZE": "-c",
    "LLAMA_ARG_CACHE_TYPE_K": "-ctk",
    "LLAMA_ARG_CACHE_TYPE_V": "-ctv",
}
# Flags of llama-server/llama-cli/llama-bench that take no value (any other unknown flag is taken
# with the word after it, unless that word is itself a flag).
_VOID_FLAGS = frozenset(
    [
        "--jinja",
        "--no-jinja",
        "--mlock",
        "--no-mmap",
        "--mmap",
        "-nkvo",
        "--no-kv-offload",
        "-kvo",
        "--kv-offload",
        "-cb",
        "--cont-batching",
        "-nocb",
        "--no-cont-batching",
        "--metrics",
        "--slots",
        "--no-slots",
        "--props",
        "--embedding",
        "--embeddings",
        "--reranking",
        "--rerank",
        "-v",
        "--verbose",
        "--log-disable",
        "--no-warmup",
        "--warmup",
        "--swa-full",
        "--check-tensors",
        "-nopo",
        "--no-op-offload",
        "-nr",
        "--no-repack",
        "--repack",
        "--no-host",
        "-kvu",
        "--kv-unified",
        "-no-kvu",
        "--no-kv-unified",
        "--webui",
        "--no-webui",
        "-sp",
        "--special",
        "-cnv",
        "--conversation",
        "-no-cnv",
        "--no-conversation",
        "-i",
        "--interactive",
        "-if",
        "--interactive-first",
        "-st",
        "--single-turn",
        "--verbose-prompt",
        "--no-display-prompt",
        "-co",
        "--color",
        "-e",
        "--escape",
        "--no-escape",
        "--offline",
        "--list-devices",
        "--context-shift",
        "--no-context-shift",
        "-dio",
        "--direct-io",
        "-ndio",
        "--no-direct-io",
        "--no-perf",
        "--perf",
        "--cache-prompt",
        "--no-cache-prompt",
        "--log-prefix",
        "--log-timestamps",
        "--log-colors",
        "--mmproj-offload",
        "--no-mmproj-offload",
        "--no-mmproj",
        "--progress",
        "--ignore-eos",
        "--simple-io",
        "--version",
        "-h",
        "--help",
        "--usage",
        "--completion-bash",
        "--no-prefill-assistant",
        "--lora-init-without-apply",
        "--clear-idle",
        "--no-clear-idle",
        "--spm-infill",
        "-fa-off",
        "--flash-attn-off",
    ]
)
# What -fa (and its long form) may take: newer builds a value, older builds none.
_FLASH_VALUES = frozenset(
    {"on", "off", "auto", "1", "0", "true", "false", "enabled", "disabled", "yes", "no"}
)


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
        elif name in _ENV_FLAGS and not bench:
            _server_flag(r, _ENV_FLAGS[name], value, f"{name}={value}")
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
        i = _skip(r, flag, words, i)


def _skip(r: _Reader, flag: str, words: list[str], i: int) -> int:
    """Step over a flag the score does not model (with its value, where it takes one); say so."""
    if not flag.startswith("-"):
        r.ignored.append(flag)
        return i
    takes = flag not in _VOID_FLAGS and i < len(words) and not _is_flag(words[i])
    if flag in ("-fa", "--flash-attn"):
        takes = i < len(words) and words[i].lower() in _FLASH_VALUES
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
    if what == "ngl":
        f["n_gpu_layers"] = -1 if value == "auto" else -2 if value == "all" else stoi(flag, value)
    elif what == "sm":
        if value not in SPLIT_MODES:
            raise ArgsError(f"{shown}: invalid value (none, layer or row)")
        f["split_mode"] = value
    elif what == "ts":
        f["tensor_split"] = split_ratios(flag, value, ",/")
    elif what == "mg":
        f["main_gpu"] = stoi(flag, value)
    elif what == "dev":
        f["devices"] = device_names(flag, value, ",")
    elif what == "ot":
        r.rules += override_rules(flag, value, ",")
    elif what == "ncmoe":
        n = stoi(flag, value)
        if n < 0:
            raise ArgsError(f"{shown}: invalid value")
        f["n_cpu_moe"] = max(f.get("n_cpu_moe", 0), n)
        r.rules += moe_rules(n)
    elif what == "cmoe":
        f["cpu_moe"] = True
        r.rules += moe_rules(cpu_moe=True)
    elif what == "ctx":
        n = stoi(flag, value)
        if n < 0:
            raise ArgsError(f"{shown}: invalid value")
        f["ctx_size"] = n
    elif what in ("ctk", "ctv"):
        if value not in KV_TYPE_BYTES:
            raise ArgsError(f"{shown}: unsupported cache type (one of {', '.join(KV_TYPE_BYTES)})")
        f["type_k" if what == "ctk" else "type_v"] = value
    elif what == "rpc":
        f["rpc"] = _endpoints(flag, value)


def _endpoints(flag: str, value: str) -> tuple[str, ...]:
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
        if flag not in _BENCH_FLAGS:
            i = _skip(r, flag, words, i)
            continue
        if i >= len(words):
            raise ArgsError(f"{flag}: expected a value")
        value = words[i]
        i += 1
        what = _BENCH_FLAGS[flag]
        r.seen[what] = r.seen.get(what, 0) + 1
        if r.seen[what] > 1:
            raise ArgsError(f"{flag} given twice: llama-bench runs one test per value; a score takes one")
        _bench_flag(r, flag, what, value)


def _bench_flag(r: _Reader, flag: str, what: str, value: str) -> None:
    """One llama-bench flag: a list, of which a score takes its one value."""
    f = r.fields
    if what in ("ngl", "mg", "depth", "gen", "ncmoe"):
        n = _one(flag, value, int_list(flag, value, negative=what in ("ngl", "mg")))
        key = {"ngl": "n_gpu_layers", "mg": "main_gpu", "depth": "depth", "gen": "gen", "ncmoe": "n_cpu_moe"}
        f[key[what]] = n
    elif what == "sm":
        mode = _one(flag, value, value.split(","))
        if mode not in SPLIT_MODES:
            raise ArgsError(f"{flag} {value}: invalid value (none, layer, row or tensor)")
        f["split_mode"] = mode
    elif what == "ts":
        f["tensor_split"] = split_ratios(flag, _one(flag, value, value.split(",")), ";/")
    elif what == "ot":
        group = _one(flag, value, value.split(","))
        r.rules += override_rules(flag, group, ";") if group else []
    elif what == "dev":
        combo = _one(flag, value, value.split(",")).strip()
        if combo != "auto":
            f["devices"] = device_names(flag, combo, "/")
    elif what in ("ctk", "ctv"):
        kind = _one(flag, value, value.split(","))
        if kind not in KV_TYPE_BYTES:
            raise ArgsError(f"{flag} {value}: unsupported cache type (one of {', '.join(KV_TYPE_BYTES)})")
        f["type_k" if what == "ctk" else "type_v"] = kind
    elif what == "rpc":
        f["rpc"] = _endpoints(flag, value)
