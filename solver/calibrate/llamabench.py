"""llama-bench's ``-o json`` (an array of test objects) and ``-o jsonl`` (one object a line) as runs.

A generation row (``n_prompt`` 0, ``n_gen`` > 0) is one decode measurement, a prompt row
(``n_prompt`` > 0, ``n_gen`` 0) one prompt-processing measurement (with its ``n_ubatch``, ``n_batch``
and ``flash_attn``). Its placement comes from
the fields llama-bench prints (tools/llama-bench/llama-bench.cpp, ``test::get_values``):
``n_gpu_layers`` (negative: every layer), ``n_cpu_moe``, ``split_mode``, ``main_gpu``,
``tensor_split`` (``"0.00"`` when unset, else ``"3.00/1.00"``), ``tensor_buft_overrides`` (``"none"``
or ``pattern=BUFT`` entries joined by ``;``), ``devices`` (``"auto"``, ``"none"`` or
``"CUDA0/CUDA1"``), ``type_k``/``type_v``, ``n_gen`` and ``n_depth`` become the llama-bench flags of
that one test, which the scorer reads as llama-bench does (its ``-ncmoe`` rules after its ``-ot``
ones; a KV cache of ``n_gen + n_depth`` tokens; ``n_depth`` tokens in it while decoding). Device and
buffer names of any GPU backend (``ROCm1``, ``Vulkan0``) are read as the rig GPU of that number.
``avg_ts`` is the measured rate and ``stddev_ts`` its spread.

Rows are checked against the rig and model: a ``model_size`` more than 1% away from the model's
total weight bytes is another model (or quant), and ``gpu_info`` or ``devices`` naming another number
of GPUs than the rig's is another machine; both are skipped with a note, the rest used.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from solver.calibrate.measured import GPU_NAME, Run, buffer_name, rate_problem
from solver.errors import InputError, brief
from solver.files.bounded import BENCH_LIMIT, read_bounded
from solver.files.config import ModelConfig
from solver.units import format_size, per_layer

#: The fields every llama-bench row has, whatever its version.
REQUIRED = ("n_prompt", "n_gen", "avg_ts")
#: How far a row's ``model_size`` may be from the model's weight bytes and still be the model.
SIZE_TOLERANCE = 0.01
#: Longest override list the placement column shows.
SHOWN_OVERRIDES = 40
WHAT = "llama-bench -o json or -o jsonl output"


def weight_bytes(model: ModelConfig) -> int:
    """Bytes of all the model's weights, what llama-bench prints as ``model_size`` (every tensor of the
    file): the layers' dense weights, every routed expert (``expert_tensors`` when given, else
    ``experts * expert_bytes``), the first and last stage's extras (embeddings, head) and
    ``other_weight_bytes`` (embeddings in host memory, MTP layers)."""
    n = model.layers
    if model.expert_tensors is not None:
        experts = sum(sum(per_layer(v, n)) for v in model.expert_tensors.values())
    else:
        experts = sum(e * b for e, b in zip(per_layer(model.experts, n), per_layer(model.expert_bytes, n)))
    extras = model.first_stage_bytes + model.last_stage_bytes + model.other_weight_bytes
    return sum(per_layer(model.dense_bytes, n)) + experts + extras


@dataclass(frozen=True)
class Expect:
    """What a row must agree with: the model's total weight bytes and the rig's GPU count."""

    model_bytes: int
    n_gpus: int


class Skip(Exception):
    """A row that cannot be used, and why (one line)."""


def read_bench(
    path: Path,
    shown: str,
    expect: Expect,
    convert: Callable[[dict], dict] | None = None,
    kind: Literal["decode", "prompt"] = "decode",
) -> tuple[list[Run], list[str]]:
    """The generation rows (``kind`` decode) or the prompt rows (``kind`` prompt: ``n_prompt`` > 0,
    ``n_gen`` 0) of a llama-bench output file as runs, and notes on the rows of that kind skipped;
    ``convert`` (the engine's ``bench_row``) first renames another llama-bench's fields to these.

    Raises InputError (naming the file) for a file that is not llama-bench JSON or JSONL.
    """
    text = read_bounded(path, shown, WHAT, BENCH_LIMIT).decode("utf-8", errors="replace")
    runs: list[Run] = []
    notes: list[str] = []
    for where, row in _rows(text, shown):
        row = convert(row) if convert is not None else row
        try:
            n_prompt, n_gen = _whole(row, "n_prompt"), _whole(row, "n_gen")
            if kind == "decode" and n_prompt == 0 and n_gen > 0:
                runs.append(_run(where, row, n_gen, expect))
            elif kind == "prompt" and n_prompt > 0 and n_gen == 0:
                runs.append(_prompt_run(where, row, n_prompt, expect))
        except Skip as why:
            notes.append(f"{where}: {why}: skipped")
    return runs, notes


def _rows(text: str, shown: str) -> list[tuple[str, dict]]:
    """(where, object) for every row of a JSON array or of JSON lines."""
    body = text.strip()
    if not body:
        raise InputError(shown, f"is empty: expected {WHAT}")
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, list):
        rows = [(f"{shown} row {i}", row) for i, row in enumerate(data, 1)]
    elif isinstance(data, dict):
        rows = [(f"{shown} row 1", data)]
    elif data is None:
        rows = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((f"{shown}:{lineno}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise InputError(shown, f"not JSON ({exc.msg}): expected {WHAT}", lineno) from None
    else:
        raise InputError(shown, f"holds {brief(data)}, not test objects: expected {WHAT}")
    if not rows:
        raise InputError(shown, f"holds no rows: expected {WHAT}")
    for where, row in rows:
        if not isinstance(row, dict):
            raise InputError(shown, f"{where} is {brief(row)}, not a test object: expected {WHAT}")
        missing = [key for key in REQUIRED if key not in row]
        if missing:
            raise InputError(shown, f"{where} has no {missing[0]!r}: not {WHAT}")
    return rows


#: Largest whole number a row may give: counts (tokens, layers) are int32 in llama-bench, sizes int64.
MOST = {"model_size": 2**63 - 1}
COUNT_MOST = 2**31 - 1


def _whole(row: dict, key: str, default: int | None = None) -> int:
    value = row.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Skip(f"{key} is {brief(value)}, expected a whole number")
    most = MOST.get(key, COUNT_MOST)
    if abs(value) > most:
        raise Skip(f"{key} is {brief(value)}, larger than llama-bench writes (at most {most:,})")
    return value


def _text(row: dict, key: str, default: str) -> str:
    value = row.get(key, default)
    if not isinstance(value, str):
        raise Skip(f"{key} is {brief(value)}, expected text")
    return value.strip()


def _prompt_run(where: str, row: dict, n_prompt: int, expect: Expect) -> Run:
    """One prompt row as a run: its placement as a generation row's, with llama-bench's ``-p``,
    ``-ub``, ``-b`` and ``-fa`` (the context llama-bench makes holds ``n_prompt + n_depth`` tokens, so
    ``-n`` is written as ``n_prompt``); Skip when it is not of this model or rig."""
    run = _run(where, row, n_prompt, expect)
    ubatch, batch = _whole(row, "n_ubatch", 512), _whole(row, "n_batch", 2048)
    if ubatch < 1 or batch < 1:
        raise Skip(f"n_ubatch {ubatch}, n_batch {batch}: expected 1 or more")
    fa = row.get("flash_attn", -1)
    if isinstance(fa, bool):
        fa = int(fa)
    fa_word = {-1: "auto", 0: "0", 1: "1"}.get(fa) if isinstance(fa, int) else None
    if fa_word is None:
        raise Skip(f"flash_attn is {brief(fa)}, expected true, false, -1, 0 or 1")
    words = (*run.words, "-p", str(n_prompt), "-ub", str(ubatch), "-b", str(batch), "-fa", fa_word)
    shown = f"{run.placement}, pp{n_prompt} ub {min(ubatch, batch, n_prompt)}"
    return dataclasses.replace(run, words=words, placement=shown)


def _run(where: str, row: dict, n_gen: int, expect: Expect) -> Run:
    """One generation row as a run; Skip when it is not of this model or rig."""
    rate = row["avg_ts"]
    wrong = rate_problem(rate)
    if wrong is not None:
        raise Skip(f"avg_ts is {brief(rate)}, {wrong}")
    spread = row.get("stddev_ts", 0.0)
    if isinstance(spread, bool) or not isinstance(spread, (int, float)) or rate_problem(spread) is not None:
        spread = 0.0
    _check_model(row, expect)
    _check_gpu_count(row, expect)
    depth = _whole(row, "n_depth", 0)
    if depth < 0:
        raise Skip(f"n_depth is {depth}, expected 0 or more")
    ngl = _whole(row, "n_gpu_layers", -1)
    ncmoe = _whole(row, "n_cpu_moe", 0)
    split = _text(row, "split_mode", "layer")
    main = _whole(row, "main_gpu", 0)
    shares = _tensor_split(_text(row, "tensor_split", "0.00"))
    overrides = _overrides(_text(row, "tensor_buft_overrides", "none"))
    devices = _devices(_text(row, "devices", "auto"), expect)
    type_k, type_v = _text(row, "type_k", "f16"), _text(row, "type_v", "f16")
    words = ["llama-bench", "-ngl", str(ngl), "-sm", split, "-mg", str(main)]
    shown = [f"ngl {ngl if ngl >= 0 else 'all'}"]
    if shares:
        words += ["-ts", "/".join(shares)]
        shown.append(f"ts {'/'.join(shares)}")
    if overrides:
        listed = ";".join(overrides)
        words += ["-ot", listed]
        cut = listed if len(listed) <= SHOWN_OVERRIDES else listed[: SHOWN_OVERRIDES - 3] + "..."
        shown.append(f"ot {cut}")
    if ncmoe > 0:
        words += ["-ncmoe", str(ncmoe)]
        shown.append(f"ncmoe {ncmoe}")
    if devices:
        words += ["-dev", "/".join(devices)]
        shown.append(f"dev {'/'.join(devices)}")
    if split != "layer":
        shown.append(f"sm {split}")
    if main:
        shown.append(f"mg {main}")
    words += ["-ctk", type_k, "-ctv", type_v, "-n", str(n_gen), "-d", str(depth)]
    if (type_k, type_v) != ("f16", "f16"):
        shown.append(f"kv {type_k}/{type_v}")
    if depth:
        shown.append(f"depth {depth}")
    return Run(where, tuple(words), depth, float(rate), float(max(spread, 0.0)), ", ".join(shown))


def _check_model(row: dict, expect: Expect) -> None:
    """A row whose ``model_size`` is more than SIZE_TOLERANCE from the model's weights is another model."""
    if "model_size" not in row:
        return
    size = _whole(row, "model_size")
    off = abs(size - expect.model_bytes) / max(expect.model_bytes, 1)
    if off > SIZE_TOLERANCE:
        name = row.get("model_type") or row.get("model_filename")
        of = f" ({brief(name)})" if isinstance(name, str) and name else ""
        raise Skip(
            f"model_size {format_size(size)}{of} is {off:.1%} from the model's "
            f"{format_size(expect.model_bytes)} of weights (over {SIZE_TOLERANCE:.0%}): "
            "another model or quant"
        )


def _check_gpu_count(row: dict, expect: Expect) -> None:
    """A row whose llama-bench saw another number of GPUs (``gpu_info``) is of another machine."""
    info = row.get("gpu_info")
    if not isinstance(info, str):
        return
    seen = [part for part in info.split(",") if part.strip()]
    backends = row.get("backends")
    if not seen and isinstance(backends, str) and backends.strip() in ("", "CPU"):
        raise Skip("ran on the CPU only (no GPU backend)")
    if seen and len(seen) != expect.n_gpus:
        raise Skip(
            f"llama-bench saw {len(seen)} GPU{'s' if len(seen) != 1 else ''} ({brief(info)}), "
            f"the rig has {expect.n_gpus}"
        )


def _tensor_split(text: str) -> list[str]:
    """The ``-ts`` shares (empty when llama-bench printed all zeros, i.e. none given)."""
    parts = [p.strip() for p in text.replace(";", "/").split("/")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise Skip(f"tensor_split is {brief(text)}, expected shares like '3.00/1.00'") from None
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise Skip(f"tensor_split is {brief(text)}, expected shares of 0 or more")
    return parts if any(values) else []


def _overrides(text: str) -> list[str]:
    """The ``pattern=BUFT`` entries, buffer names as the scorer reads them (``none`` entries dropped)."""
    if text in ("", "none"):
        return []
    out = []
    for entry in text.split(";"):
        entry = entry.strip()
        if not entry or entry == "none":
            continue
        pattern, eq, buft = entry.partition("=")
        if not eq or not pattern:
            raise Skip(f"tensor_buft_overrides entry {brief(entry)} is not PATTERN=BUFFER")
        out.append(f"{pattern}={buffer_name(buft.strip())}")
    return out


def _devices(text: str, expect: Expect) -> list[str]:
    """The ``-dev`` list (empty for ``auto``); Skip for ``none`` or a device the rig does not have."""
    if text in ("", "auto"):
        return []
    if text == "none":
        raise Skip("ran on no GPU (devices none)")
    out = []
    for name in text.split("/"):
        m = GPU_NAME.match(name.strip())
        if not m:
            raise Skip(f"devices names {brief(name)}, not a GPU like CUDA0")
        if int(m.group(2)) >= expect.n_gpus:
            raise Skip(f"devices names {name.strip()}, but the rig has {expect.n_gpus} GPU(s)")
        out.append(f"CUDA{int(m.group(2))}")
    return out
