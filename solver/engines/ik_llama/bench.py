"""ik_llama.cpp's ``llama-bench -o json`` rows in mainline's field names (examples/llama-bench/
llama-bench.cpp ``test::get_fields``/``get_values``), for solver.calibrate.llamabench.

ik names the rules ``override_tensor`` (``PAT=BUFT`` joined by ``,``, ``""`` when none) where mainline
has ``tensor_buft_overrides`` (``;``, ``"none"``); it prints no ``n_cpu_moe`` (llama-bench's
``--n-cpu-moe`` rules are already among the overrides), no ``devices`` and no ``n_depth``: a ``-gp PP,TG``
row is labelled ``test`` ``tgTG@ppPP`` with ``n_prompt`` PP, of which only the generation is timed. Its
own fields (``fused_moe``, ``repack``, ``mla_attn``, ...) pass through unread.
"""

from __future__ import annotations

import re

_GP = re.compile(r"tg(\d+)@pp(\d+)")


def bench_row(row: dict) -> dict:
    """One ik row as mainline's: ``tensor_buft_overrides`` from ``override_tensor`` (ik's ``-ot`` cannot
    hold a ``,`` inside a rule, so splitting on it is exact), ``n_cpu_moe`` 0, ``devices`` auto, and a
    ``tgN@ppM`` row as ``n_prompt`` 0 at ``n_depth`` M. A row that already has mainline's fields (a
    mainline llama-bench's) is returned as it is."""
    if "override_tensor" not in row and "fused_moe" not in row:
        return row
    out = {k: v for k, v in row.items() if k != "override_tensor"}
    rules = [r for r in str(row.get("override_tensor", "")).split(",") if r]
    out["tensor_buft_overrides"] = ";".join(rules) if rules else "none"
    out.setdefault("n_cpu_moe", 0)
    out.setdefault("devices", "auto")
    m = _GP.fullmatch(str(row.get("test", "")))
    if m:
        out["n_depth"] = int(m.group(2))
        out["n_prompt"] = 0
    else:
        out.setdefault("n_depth", 0)
    return out
