"""``--plot FILE``: the plan and what the engine does unasked side by side, and the mass curve.

Per GPU a stacked bar splits the card's free VRAM into reserve, layers (dense weights, session state
and KV cache of the stage's layers), stage buffers, experts held and room left unused, so a card with
stranded VRAM stands out; beside it a thin stacked bar on the right-hand axis shows the stage's time
per token: its GPU time, then the time of what it does not hold (llama.cpp: the CPU's work on experts
left in host memory; strata: misses) and llama.cpp's device switches, so a card that is full but slow
(or fast but idle) shows too. The plan is set beside the engine's own default (the proportional split
for strata). For an engine with a routing profile (strata) a third panel draws the mass curve: the
cumulative mass of the ranked pairs, hottest first; each plan's point (pairs held, mass held) sits on
or below it, because each stage caches only its own layers' pairs. The file's extension picks the
format (PNG, SVG or PDF). matplotlib (``moesplit[plot]``) is imported here, lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from solver.engines import engine_of
from solver.errors import InputError
from solver.files.atomicfile import atomic_open
from solver.planning.planner import Result
from solver.problem.placement import Placement, Stage
from solver.problem.problem import Problem
from solver.report.contexts import Point, depth_note, model_limit, short_context

#: Binary units for the VRAM axis, largest first; the plot uses the largest that fits the biggest card.
UNITS = (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10), ("B", 1.0))
#: (label, colour, hatch) of the bar segments, bottom to top: the Okabe-Ito colour-blind-safe palette,
#: so that reserve (dark grey, hatched) and buffers (pink) never read as one block.
SEGMENTS = (
    ("reserve", "#555555", "xx"),
    ("layers: dense + state + KV", "#0072B2", ""),
    ("stage buffers", "#CC79A7", ""),
    ("experts held", "#009E73", ""),
    ("room left unused", "#F0E442", ""),
)
#: (label, colour) of the time bar's segments, bottom to top: GPU time, the time of what the stage does
#: not hold (solver.engines: Engine.miss_label), device switches.
TIME_COLOURS = ("#E69F00", "#D55E00", "#999999")
TIME_TEXT = "#8a5a00"
PLAN_COLOUR, BASE_COLOUR, OVER_COLOUR = "#1e88e5", "#e53935", "#D55E00"
#: File extensions --plot accepts, and the matplotlib format each writes.
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
#: Bar geometry per stage: the VRAM bar left of the tick, the compute bar right of it.
MEM_X, MEM_W, CPU_X, CPU_W = -0.14, 0.56, 0.29, 0.2


def check_plot_file(path: Path, shown: str) -> str:
    """The format of ``path`` by its extension (refused unless .png, .svg or .pdf), checked before
    planning, as is matplotlib (the optional extra): an InputError naming the file otherwise."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        got = f"'{path.suffix}'" if path.suffix else "no extension"
        raise InputError(shown, f"--plot writes .png, .svg or .pdf (chosen by the extension), got {got}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(
            shown, "--plot needs matplotlib, which is not installed: pip install 'moesplit[plot]'"
        ) from None
    return fmt


def stage_bytes(p: Problem, plan: Placement) -> np.ndarray:
    """Bytes per stage (rows, pipeline order) of each segment in SEGMENTS order; negative room is 0."""
    rows = []
    for s in plan.stages:
        buffers = (
            p.stage_bytes
            + (p.first_stage_bytes if s.start == 0 else 0)
            + (p.last_stage_bytes if s.end == p.n_layers else 0)
        )
        unused = max(s.room_bytes, 0) - s.cache_bytes
        layers = int(p.layer_bytes[s.start : s.end].sum())
        rows.append([int(p.reserve[s.gpu]), layers, buffers, s.cache_bytes, unused])
    return np.array(rows, dtype=np.int64)


def vram_unit(p: Problem) -> tuple[str, float]:
    """The largest binary unit in which the biggest card's free VRAM is at least 1."""
    biggest = float(p.free.max(initial=1))
    return next(((name, size) for name, size in UNITS if biggest >= size), UNITS[-1])


def held_label(p: Problem, s: Stage) -> str:
    """What a stage's bar says it holds: the routed mass (strata) or the share of its experts' bytes."""
    if engine_of(p).profile:
        return f"{s.held_mass:.1%}\nof mass"
    total = s.cache_bytes + s.host_bytes
    return f"{s.cache_bytes / total:.0%} of its\nexperts" if total else "no experts"


def _bars(ax: Any, p: Problem, plan: Placement | None, title: str) -> Any:
    """The VRAM bars on ``ax`` and the compute bars on a twin right-hand axis, which it returns."""
    ax.set_title(title, fontsize=10, loc="left")
    if plan is None:
        ax.text(0.5, 0.5, "no placement", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return None
    unit, size = vram_unit(p)
    parts = stage_bytes(p, plan) / size
    x = np.arange(len(plan.stages))
    mem = x + MEM_X
    bottom = np.zeros(len(x))
    for (label, colour, hatch), col in zip(SEGMENTS, parts.T):
        ax.bar(
            mem,
            col,
            MEM_W,
            bottom=bottom,
            color=colour,
            label=label,
            hatch=hatch,
            edgecolor="white",
            linewidth=0.5,
        )
        bottom += col
    for i, s in enumerate(plan.stages):
        free = p.free[s.gpu] / size
        half = MEM_W / 2 + 0.03
        ax.hlines(
            free,
            mem[i] - half,
            mem[i] + half,
            color="black",
            linewidth=1.5,
            label="free VRAM" if i == 0 else None,
        )
        if s.room_bytes < 0:
            ax.bar(
                mem[i], bottom[i] - free, MEM_W, bottom=free, fill=False, hatch="///", edgecolor=OVER_COLOUR
            )
            ax.text(
                mem[i],
                bottom[i],
                f"over by\n{-s.room_bytes / size:.2f} {unit}",
                ha="center",
                va="bottom",
                color=OVER_COLOUR,
                fontsize=8,
                fontweight="bold",
            )
        else:
            ax.text(mem[i], free, held_label(p, s), ha="center", va="bottom", fontsize=8)
    many = len(x) > 6
    labels = [f"GPU {s.gpu}: {s.name}\nlayers {s.start}-{s.end - 1}" for s in plan.stages]
    ax.set_xticks(
        x, labels, fontsize=7 if many else 8, rotation=45 if many else 0, ha="right" if many else "center"
    )
    ax.set_xlim(-0.6, len(x) - 0.4)
    ax.set_ylabel(f"VRAM ({unit})")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    twin = ax.twinx()
    bottom = np.zeros(len(x))
    for (label, times), colour in zip(stage_times(p, plan), TIME_COLOURS):
        if any(times):
            twin.bar(x + CPU_X, times, CPU_W, bottom=bottom, color=colour, label=f"{label} (ms, right axis)")
        bottom += times
    for i, ms in enumerate(bottom):
        twin.text(x[i] + CPU_X, ms, f"{ms:.1f}", ha="center", va="bottom", fontsize=7, color=TIME_TEXT)
    twin.set_ylabel("time per token (ms)", color=TIME_TEXT)
    twin.tick_params(axis="y", colors=TIME_TEXT)
    return twin


def stage_times(p: Problem, plan: Placement) -> list[tuple[str, np.ndarray]]:
    """Each stage's time per token in parts, by TIME_COLOURS: GPU time, what it does not hold, switches."""
    gpu = np.array([s.compute_ms for s in plan.stages])
    switch = np.array([s.switch_ms for s in plan.stages])
    rest = np.array([s.miss_ms for s in plan.stages]) - switch
    return [("GPU time", gpu), (engine_of(p).miss_label, rest), ("device switches", switch)]


def _curve(ax: Any, p: Problem, marks: list[tuple[str, Placement, str]]) -> None:
    mass = np.sort(p.mass)[::-1]
    n = len(mass)
    x = np.arange(n + 1) / max(n, 1) * 100
    y = np.concatenate([[0.0], np.cumsum(mass)]) * 100
    ax.plot(x, y, color="black", linewidth=1.5, label="hottest pairs first (the best any cache can do)")
    for (label, plan, colour), marker, size in zip(marks, "oX", (11, 8)):
        fx, fy = plan.held_pairs / max(n, 1) * 100, plan.held_mass * 100
        ax.plot([fx, fx], [0, fy], color=colour, linestyle=":", linewidth=1)
        ax.plot([0, fx], [fy, fy], color=colour, linestyle=":", linewidth=1)
        ax.plot(
            fx,
            fy,
            marker,
            color=colour,
            markersize=size,
            linestyle="none",
            label=f"{label}: {plan.held_pairs:,} pairs ({fx:.1f}%) hold {fy:.2f}%",
        )
    ax.set_xlim(-1, 101)
    ax.set_ylim(0, 102)
    ax.set_xlabel("pairs held (% of the profile's ranked pairs)")
    ax.set_ylabel("routed mass held (%)")
    ax.set_title("mass curve", fontsize=10, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)


def _summary(p: Problem, plan: Placement | None, fits: bool = True) -> str:
    if plan is None:
        return "no placement"
    cuts = ",".join(map(str, plan.cuts)) or "none"
    order = "" if plan.gpus == sorted(plan.gpus) else f", GPU order {','.join(map(str, plan.gpus))}"
    held = f", {plan.held_mass:.2%} held" if engine_of(p).profile else ""
    tail = "" if fits else ", DOES NOT FIT"
    speed = prompt_speed_of(plan)
    pp = f", prompt {speed:,.0f} tokens/s" if speed is not None else ""
    return f"cuts {cuts}{order}: {plan.window_ms:.2f} ms ({plan.tokens_per_s:.1f} tokens/s{pp}){held}{tail}"


def _layout(k: int, curve: bool) -> tuple[list[list[str]], list[float], tuple[float, float]]:
    """The panels (plan, default, and the mass curve when drawn), their widths and the figure's size."""
    bar_w = max(4.0, 1.1 * k + 1.5)
    if k <= 6:  # one row: plan | default | curve
        if curve:
            return [["plan", "base", "curve"]], [bar_w, bar_w, 6.5], (2 * bar_w + 6.5, 6.2)
        return [["plan", "base"]], [bar_w, bar_w], (max(2 * bar_w, 12.0), 6.4)
    if curve:  # many GPUs: plan over default, curve beside them
        return [["plan", "curve"], ["base", "curve"]], [bar_w, 7.0], (bar_w + 7.0, 10.5)
    return [["plan"], ["base"]], [bar_w], (max(bar_w, 12.0), 10.5)


def plot_result(r: Result, path: Path, shown: str) -> None:
    """Draw ``r`` and write it atomically to ``path``, in the format its extension names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p, plan, compared = r.problem, r.plan, r.compared
    base = compared.plan
    curve = engine_of(p).profile
    mosaic, ratios, size = _layout(p.n_gpus, curve)
    fig, axes = plt.subplot_mosaic(mosaic, figsize=size, width_ratios=ratios, layout="constrained")
    what = compared.name if not compared.note else f"{compared.name}: {compared.note}"
    twins = [
        _bars(axes["plan"], p, plan, f"plan ({r.solution.name}, {r.status})\n{_summary(p, plan)}"),
        _bars(axes["base"], p, base, f"{what}\n{_summary(p, base, compared.feasible)}"),
    ]
    top = max(axes["plan"].get_ylim()[1], axes["base"].get_ylim()[1]) * 1.08
    for name in ("plan", "base"):
        axes[name].set_ylim(0, top)
    shown_twins = [t for t in twins if t is not None]
    ms_top = max((t.get_ylim()[1] for t in shown_twins), default=1.0) * 1.12
    for t in shown_twins:  # one ms scale for both panels, so their time bars compare
        t.set_ylim(0, ms_top)
    if curve:
        marks = [
            (m, pl, c) for m, pl, c in (("plan", plan, PLAN_COLOUR), (compared.name, base, BASE_COLOUR)) if pl
        ]
        _curve(axes["curve"], p, marks)
    handles, labels = [], []
    for ax in [axes["plan"], axes["base"], *shown_twins]:  # each label once, whichever panel has it
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    fig.legend(
        handles, labels, loc="outside lower center", ncol=min(len(labels), 4), fontsize=8, frameon=False
    )
    windows = f"plan {plan.window_ms:.2f} ms" if plan else "no feasible plan"
    if base is not None:
        windows += f" vs {compared.name} {base.window_ms:.2f} ms" + (
            "" if compared.feasible else " (does not fit)"
        )
    fig.suptitle(
        f"{p.rig}: {p.model}, {p.n_layers} layers on {p.n_gpus} GPU{'s' if p.n_gpus > 1 else ''}, "
        f"context {p.context:,}\npredicted time per token: {windows}",
        fontsize=11,
    )
    _save(fig, plt, path, shown)


def _save(fig: Any, plt: Any, path: Path, shown: str) -> None:
    """Write the figure atomically in the format the extension names, with no date in it (the same plan
    gives the same file), and close it."""
    fmt = check_plot_file(path, shown)
    metadata = {"png": {}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    try:
        with atomic_open(path, shown, binary=True) as f:
            fig.savefig(f, format=fmt, dpi=110, metadata=metadata)
    except ValueError as exc:
        raise InputError(shown, f"cannot draw the plot: {exc}") from None
    finally:
        plt.close(fig)


def prompt_speed_of(plan: Placement | None) -> float | None:
    """A placement's predicted prompt tokens/s (None: not modelled, unknown, or no placement)."""
    return plan.prompt.tokens_per_s if plan is not None and plan.prompt is not None else None


def _sweep_lines(ax: Any, points: list[Point], value: Any, default: str) -> None:
    """One line per KV cache type of ``value(placement)`` against context: the plan solid, the
    engine's default dashed (where it fits and has a value)."""
    colours = (PLAN_COLOUR, BASE_COLOUR, "#009E73")
    kv_types = list(dict.fromkeys(pt.kv_type for pt in points))
    for kv, colour in zip(kv_types, colours):
        mine = [pt for pt in points if pt.kv_type == kv]
        planned = [(pt.context, value(pt.result.plan)) for pt in mine if pt.result.plan]
        base = [
            (pt.context, value(pt.result.compared.plan))
            for pt in mine
            if pt.result.compared.plan is not None and pt.result.compared.feasible
        ]
        planned = [(c, v) for c, v in planned if v is not None]
        base = [(c, v) for c, v in base if v is not None]
        if planned:
            ax.plot(*zip(*planned), "o-", color=colour, label=f"plan, {kv} KV cache")
        if base:
            ax.plot(*zip(*base), "x--", color=colour, alpha=0.7, label=f"{default}, {kv} KV cache")


def _context_axis(ax: Any, points: list[Point], xlabel: str) -> None:
    """Contexts on the x axis (log 2 when they span more than a factor 2), max_context shaded."""
    contexts = sorted({pt.context for pt in points if pt.context > 0})
    limit = model_limit(points)
    if limit.tokens is not None and contexts and contexts[-1] > limit.tokens:
        ax.axvspan(limit.tokens, contexts[-1] * 1.1, color="#D55E00", alpha=0.12, lw=0)
        ax.axvline(limit.tokens, color="#D55E00", lw=1, ls=":")
        label = f" beyond max_context ({short_context(limit.tokens)})"
        ax.text(limit.tokens, 0.02, label, transform=ax.get_xaxis_transform(), fontsize=8, color="#D55E00")
    if contexts and contexts[-1] > 2 * contexts[0]:
        ax.set_xscale("log", base=2)
    ax.set_xticks(contexts, [short_context(c) for c in contexts])
    ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_sweep(points: list[Point], path: Path, shown: str) -> None:
    """Tokens per second against context, one line per KV cache type: the plan solid, the engine's
    default dashed (where it fits); for an engine that models prompt processing (llama.cpp) a second
    panel beside it draws the prompt's tokens/s the same way. Written atomically to ``path`` in the
    format its extension names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = points[0].result.problem
    default = points[0].result.compared.name
    prompt = any(prompt_speed_of(pt.result.plan) is not None for pt in points)
    if prompt:
        fig, (ax, pp) = plt.subplots(1, 2, figsize=(14.0, 5.0), layout="constrained")
    else:
        fig, ax = plt.subplots(figsize=(8.0, 5.0), layout="constrained")
    _sweep_lines(ax, points, lambda plan: plan.tokens_per_s, default)
    _context_axis(ax, points, f"context (tokens of KV cache); {depth_note(points)}")
    ax.set_ylabel("tokens per second (predicted)")
    title = f"{p.rig}: {p.model} on {p.n_gpus} GPU{'s' if p.n_gpus > 1 else ''}, engine {p.engine}"
    if prompt:
        speed = next(pt.result.plan.prompt for pt in points if prompt_speed_of(pt.result.plan) is not None)
        _sweep_lines(pp, points, prompt_speed_of, default)
        _context_axis(pp, points, "context (tokens of KV cache)")
        pp.set_ylabel("prompt tokens per second (predicted)")
        pp.set_title(
            f"prompt processing: {speed.prompt:,} tokens, micro-batches of {speed.n_ubatch:,}",
            fontsize=10,
            loc="left",
        )
        ax.set_title("decode", fontsize=10, loc="left")
        fig.suptitle(title, fontsize=10)
    else:
        ax.set_title(title, fontsize=10)
    _save(fig, plt, path, shown)
