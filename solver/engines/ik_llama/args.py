"""An ik_llama.cpp command line read as ik_llama.cpp reads it: its own flag spellings and meanings.

llama-server and llama-cli share one parser (common/common.cpp ``gpt_params_find_arg``): a ``--`` word
has ``_`` read as ``-``; there is no ``--flag=value`` form, and an unknown word is an error (``unknown
argument``). What differs from mainline (solver.engines.llamacpp.args): ``-ncmoe N``/``--n-cpu-moe N``
and ``-cmoe`` (999) set one number, the last one given winning, and add no ``-ot`` rules here: the
loader turns the number into rules after the user's ``-ot`` ones (solver.engines.ik_llama.score);
``--fit`` takes no value, ``--fit-margin MiB`` and ``-gfm GPU,MiB,...`` set its margins; fused MoE is on
(``-no-fmoe`` turns it off, ``-fmoe`` is unknown); ``-fa`` requires a value; ``-sm`` takes ``none``,
``layer``, ``attn`` or ``graph``; ``-ngl`` is read by ``std::stoi`` (no ``auto``). Only the
``LLAMA_ARG_*`` variables of ``gpt_params_parse_from_env`` are read.

llama-bench (examples/llama-bench/llama-bench.cpp ``parse_cmd_params``) keeps ``-fmoe 0|1`` and ``-rtr
0|1``, has ``--n-cpu-moe N`` (one number: the *first* N layers, rules appended where the flag stands;
``add_cpu_buft_overrides``) and no ``-ncmoe``, no ``-dev``, no ``-d`` (its depth is ``-gp PP,TG``); its
``-ot`` is one list of rules for every test, ``,`` between them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from solver.engines.ik_llama.rules import SPLIT_MODES, bench_ncmoe_rules
from solver.engines.llamacpp.args import LlamaArgs, rpc_endpoints
from solver.engines.llamacpp.flags import BENCH_FLAGS as MAINLINE_BENCH
from solver.engines.llamacpp.flags import KV_TYPE_BYTES, LLAMA_FLAGS, OTHER_ENGINES
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

#: llama-server / llama-cli flags that place layers and tensors, or that a score reads (common.cpp).
SERVER_FLAGS: dict[str, str] = {
    **LLAMA_FLAGS,  # mainline's spellings, which ik shares (-ncmoe/-cmoe with ik's meaning)
    "--fit": "fit",
    "--fit-margin": "fit_margin",
    "-gfm": "gpu_fit_margin",
    "--gpu-fit-margin": "gpu_fit_margin",
    "-no-fmoe": "no_fmoe",
    "--no-fused-moe": "no_fmoe",
    "-rtr": "rtr",
    "--run-time-repack": "rtr",
}
#: Of those, the flags that take no value.
SERVER_VOID = frozenset(
    {"-cmoe", "--cpu-moe", "--fit", "-no-fmoe", "--no-fused-moe", "-rtr", "--run-time-repack"}
)
#: ik flags a score reads past without modelling them, and whether each takes a value.
SERVER_OTHER: dict[str, bool] = {
    "-fa": True,
    "--flash-attn": True,
    "-no-fa": False,
    "--no-flash-attn": False,
    "-mla": True,
    "--mla-use": True,
    "-amb": True,
    "--attention-max-batch": True,
    "-muge": False,
    "--merge-up-gate-experts": False,
    "-mqkv": False,
    "--merge-qkv": False,
    "-ser": True,
    "--smart-expert-reduction": True,
    "-ger": False,
    "-no-ooae": False,
    "-op": True,
    "-cuda": True,
    "--cuda-params": True,
    "--max-gpu": True,
    "-b": True,
    "--batch-size": True,
    "-ub": True,
    "--ubatch-size": True,
    "-t": True,
    "--threads": True,
    "-m": True,
    "--model": True,
    "--host": True,
    "--port": True,
    "-np": True,
    "--parallel": True,
    "-nkvo": False,
    "--no-kv-offload": False,
    "--no-mmap": False,
    "--mlock": False,
    "-thp": False,
    "--defer-experts": False,
    "-khad": False,
    "-smgs": False,
    "--jinja": False,
    "-v": False,
}
#: Values ``-fa`` takes (common.cpp): it always consumes the next word.
FA_VALUES = ("auto", "on", "off", "1", "0")
#: Mainline spellings ik refuses, and why (common.cpp gpt_params_find_arg; llama-bench parse_cmd_params).
MAINLINE_ONLY: dict[str, str] = {
    "-fmoe": "unknown argument: fused MoE is on by default in ik's llama-server (-no-fmoe turns it off)",
    "--fused-moe": "unknown argument: fused MoE is on by default (-no-fmoe turns it off)",
    "-fit": "unknown argument: ik_llama.cpp's fit is --fit, without a value",
    "-nr": "unknown argument: ik_llama.cpp repacks only with -rtr",
    "--no-repack": "unknown argument: ik_llama.cpp repacks only with -rtr",
    "-nopo": "unknown argument: ik_llama.cpp's offload switches are -op OP,0|1",
}
#: The LLAMA_ARG_* variables ik reads (common.cpp gpt_params_parse_from_env) and the flag each sets.
ENV_FLAGS: dict[str, str] = {
    "LLAMA_ARG_N_GPU_LAYERS": "-ngl",
    "LLAMA_ARG_CTX_SIZE": "-c",
    "LLAMA_ARG_CACHE_TYPE_K": "-ctk",
    "LLAMA_ARG_CACHE_TYPE_V": "-ctv",
}
#: llama-bench flags a score reads: spelling -> meaning (every flag takes a value).
BENCH_FLAGS: dict[str, str] = {
    **{k: v for k, v in MAINLINE_BENCH.items() if v not in ("dev", "ncmoe", "depth")},
    "--n-cpu-moe": "bench_moe",
    "-gp": "gp",
    "-d": "depth",  # not ik's: how solver.calibrate.llamabench writes a JSON row's depth
    "-fmoe": "fmoe",
    "--fused-moe": "fmoe",
    "-rtr": "rtr",
    "--run-time-repack": "rtr",
    "--fit": "fit",
    "--fit-margin": "fit_margin",
}
#: llama-bench's split modes (no attn).
BENCH_SPLIT_MODES = ("none", "layer", "graph")


@dataclass(frozen=True)
class IkArgs(LlamaArgs):
    """What an ik_llama.cpp command says about placement: mainline's fields (solver.engines.llamacpp.args;
    ``overrides`` here are the user's ``-ot`` rules, and llama-bench's ``--n-cpu-moe`` rules where they
    stand), with ``n_cpu_moe`` ik's one ``-ncmoe`` number (999 for ``-cmoe``), ``fit`` for ``--fit``,
    ``fit_margins`` MiB per GPU (None: ``k_default_mem_margin``, 1 GiB), ``fused_moe`` (on unless
    ``-no-fmoe``/``-fmoe 0``), ``repack`` for ``-rtr`` (same bytes, no mmap)."""

    fit: bool = False
    fit_margins: tuple[int | None, ...] | None = None
    fused_moe: bool = True
    repack: bool = False


def parse_ik_args(words: list[str]) -> IkArgs:
    """Read ik_llama.cpp's llama-server, llama-cli or llama-bench words (optionally led by ``NAME=VALUE``
    variables and the program) into IkArgs; ArgsError (one line) for what ik would refuse, or for a
    split mode a score cannot model."""
    words = list(words)
    env: list[tuple[str, str]] = []
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env.append((name, value))
    program = "llama-server"
    notes: list[str] = []
    if words and not words[0].startswith("-"):
        given = os.path.basename(words.pop(0))
        program = "llama-bench" if given.startswith("llama-bench") else given
        if program not in ("llama-server", "llama-cli", "llama-bench", "llama-sweep-bench"):
            notes.append(f"{given}: read as llama-server's flags")
            program = "llama-server"
    r = _State(notes=notes)
    bench = program == "llama-bench"
    for name, value in env:
        if name == "CUDA_VISIBLE_DEVICES":
            r.fields["visible"] = visible_devices(value)
        elif name in ENV_FLAGS and not bench:
            _server(r, ENV_FLAGS[name], value, f"{name}={value}")
        elif name.startswith("LLAMA_ARG_"):
            r.ignored.append(f"{name}={value} (ik_llama.cpp does not read it)")
        else:
            r.ignored.append(f"{name}={value}")
    (_read_bench if bench else _read_server)(r, words)
    for word in r.ignored:
        engine = OTHER_ENGINES.get(word.split("=")[0].split(" ")[0])
        if engine:
            raise ArgsError(f"{word.split(' ')[0]} is {engine}'s; score that command with --engine {engine}")
    if bench:
        r.fields["ctx_size"] = r.fields.pop("gen", 128) + r.fields.get("depth", 0)
        r.fields.setdefault("depth", 0)
    mode = r.fields.get("split_mode", "layer")
    if mode in ("graph", "attn"):
        raise ArgsError(
            f"-sm {mode} splits every layer's matrices, experts included, over the GPUs; not modelled "
            "(a score places whole layers: -sm layer or none)"
        )
    return IkArgs(
        program=program if program != "llama-sweep-bench" else "llama-server",
        overrides=tuple(r.rules),
        ignored=tuple(r.ignored),
        notes=tuple(r.notes),
        **r.fields,
    )


@dataclass
class _State:
    """What one command's words build up: IkArgs fields, the -ot rules in order, what was skipped."""

    fields: dict = field(default_factory=dict)
    rules: list = field(default_factory=list)
    ignored: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def _is_flag(word: str) -> bool:
    return bool(re.match(r"-(-|[A-Za-z])", word))


def _read_server(r: _State, words: list[str]) -> None:
    i = 0
    while i < len(words):
        word = words[i]
        flag = word.replace("_", "-") if word.startswith("--") else word
        i += 1
        if flag.startswith("--") and "=" in flag and flag.split("=")[0] in SERVER_FLAGS:
            raise ArgsError(f"{word}: unknown argument (ik_llama.cpp takes '{flag.replace('=', ' ', 1)}')")
        if flag in MAINLINE_ONLY:
            raise ArgsError(f"{flag}: {MAINLINE_ONLY[flag]}")
        if flag in SERVER_FLAGS:
            value = None
            if flag not in SERVER_VOID:
                if i >= len(words):
                    raise ArgsError(f"{flag}: expected a value")
                value = words[i]
                i += 1
            _server(r, flag, value, flag if value is None else f"{flag} {value}")
            continue
        if flag in ("-fa", "--flash-attn"):
            if i >= len(words) or words[i].lower() not in FA_VALUES:
                got = words[i] if i < len(words) else "nothing"
                raise ArgsError(f"{flag} takes auto, on, off, 1 or 0 in ik_llama.cpp; got {got}")
            r.ignored.append(f"{flag} {words[i]}")
            i += 1
            continue
        takes = SERVER_OTHER.get(flag)
        if takes is None:  # a flag the table does not know: with its value unless the next word is a flag
            takes = flag.startswith("-") and i < len(words) and not _is_flag(words[i])
        if takes and i < len(words):
            r.ignored.append(f"{flag} {words[i]}")
            i += 1
        else:
            r.ignored.append(flag)


def _server(r: _State, flag: str, value: str | None, shown: str) -> None:
    """One llama-server flag (or LLAMA_ARG_* variable) as common.cpp's gpt_params_find_arg applies it."""
    what = SERVER_FLAGS[flag]
    f = r.fields
    if what == "ngl":
        f["n_gpu_layers"] = stoi(flag, value)
    elif what == "sm":
        if value not in SPLIT_MODES:
            raise ArgsError(f"{shown}: invalid value (ik_llama.cpp: {', '.join(SPLIT_MODES)})")
        f["split_mode"] = value
    elif what == "ts":
        f["tensor_split"] = split_ratios(flag, value, ",/")
    elif what == "mg":
        f["main_gpu"] = stoi(flag, value)
    elif what == "dev":
        f["devices"] = device_names(flag, value, ",")
    elif what == "ot":
        r.rules += override_rules(flag, value, ",")
    elif what in ("ncmoe", "cmoe"):
        n = 999 if what == "cmoe" else stoi(flag, value)
        if n < 0:
            raise ArgsError(f"{shown}: invalid value")
        f["n_cpu_moe"] = n  # the last one given wins
        f["cpu_moe"] = what == "cmoe"
    elif what == "fit":
        f["fit"] = True
    elif what == "fit_margin":
        k = stoi(flag, value)
        f["fit_margins"] = (k,) * 64
    elif what == "gpu_fit_margin":
        parts = [stoi(flag, x) for x in value.split(",")]
        if len(parts) % 2:
            raise ArgsError(f"{shown}: expected GPU,MiB pairs")
        margins: list[int | None] = list(f.get("fit_margins") or (None,) * 64)
        for g, mib in zip(parts[::2], parts[1::2]):
            if not 0 <= g < len(margins):
                raise ArgsError(f"{shown}: no GPU {g}")
            margins[g] = mib
        f["fit_margins"] = tuple(margins)
    elif what in ("ctx",):
        n = stoi(flag, value)
        if n < 0:
            raise ArgsError(f"{shown}: invalid value")
        f["ctx_size"] = n
    elif what in ("ctk", "ctv"):
        _kv(f, what, value, shown)
    elif what == "rpc":
        f["rpc"] = rpc_endpoints(flag, value)
    elif what == "no_fmoe":
        f["fused_moe"] = False
    elif what == "rtr":
        f["repack"] = True
    elif what in ("batch", "ubatch"):  # the prompt's micro-batch: placement is unchanged
        n = stoi(flag, value)
        if n < 1:
            raise ArgsError(f"{shown}: invalid value")
        f["n_batch" if what == "batch" else "n_ubatch"] = n


def _kv(f: dict, what: str, value: str, shown: str) -> None:
    if value in ("q6_0", "q8_KV"):
        raise ArgsError(f"{shown}: ik_llama.cpp's {value} cache is not modelled (score f16, q8_0, q4_0 ...)")
    if value not in KV_TYPE_BYTES:
        raise ArgsError(f"{shown}: unsupported cache type (one of {', '.join(KV_TYPE_BYTES)}, q6_0, q8_KV)")
    f["type_k" if what == "ctk" else "type_v"] = value


def _read_bench(r: _State, words: list[str]) -> None:
    i = 0
    seen: set[str] = set()
    while i < len(words):
        flag = words[i].replace("_", "-") if words[i].startswith("--") else words[i]
        i += 1
        if flag in ("-ncmoe", "-dev", "--device", "--n-depth"):  # mainline llama-bench's, not ik's
            raise ArgsError(f"{flag}: unknown argument to ik_llama.cpp's llama-bench")
        if flag not in BENCH_FLAGS:
            takes = i < len(words) and not _is_flag(words[i])
            r.ignored.append(f"{flag} {words[i]}" if takes else flag)
            i += 1 if takes else 0
            continue
        if i >= len(words):
            raise ArgsError(f"{flag}: expected a value")
        value = words[i]
        i += 1
        what = BENCH_FLAGS[flag]
        if what in seen and what != "ot":
            raise ArgsError(f"{flag} given twice: llama-bench runs one test per value; a score takes one")
        seen.add(what)
        _bench(r, flag, what, value)


def _bench(r: _State, flag: str, what: str, value: str) -> None:
    """One llama-bench flag: a list of which a score takes its one value."""
    f = r.fields
    if what in ("ngl", "mg", "gen", "depth", "bench_moe", "fmoe", "rtr", "fit"):
        n = one_value(flag, value, int_list(flag, value, negative=what in ("ngl", "mg")))
        if what == "bench_moe":
            r.rules += bench_ncmoe_rules(n)  # the first N layers, in command order
        elif what in ("fmoe", "rtr", "fit"):
            f[{"fmoe": "fused_moe", "rtr": "repack", "fit": "fit"}[what]] = bool(n)
        else:
            f[{"ngl": "n_gpu_layers", "mg": "main_gpu", "gen": "gen", "depth": "depth"}[what]] = n
    elif what == "gp":
        m = re.fullmatch(r"(\d+),(\d+)", value)
        if m is None:
            raise ArgsError(f"{flag} {value}: expected PP,TG")
        f["depth"], f["gen"] = int(m.group(1)), int(m.group(2))
    elif what == "sm":
        mode = one_value(flag, value, value.split(","))
        if mode not in BENCH_SPLIT_MODES:
            raise ArgsError(f"{flag} {value}: invalid value (none, layer or graph)")
        f["split_mode"] = mode
    elif what == "ts":
        f["tensor_split"] = split_ratios(flag, one_value(flag, value, value.split(",")), ";/")
    elif what == "ot":
        # ik's llama-bench: one list for every test, ',' between rules; a ';' list (how moesplit writes a
        # JSON row's rules, solver.calibrate.llamabench) is read alike, as no ik rule holds either
        for part in re.split("[,;]", value):
            if part:
                r.rules += override_rules(flag, part, ",")
    elif what in ("ctk", "ctv"):
        _kv(f, what, one_value(flag, value, value.split(",")), f"{flag} {value}")
    elif what == "fit_margin":
        f["fit_margins"] = (one_value(flag, value, int_list(flag, value)),) * 64
    elif what == "rpc":
        f["rpc"] = rpc_endpoints(flag, value)
