"""``solve bench``: how long each piece of the planner takes, on the shipped rigs and on a sweep.

For every rig it times the range-walk table, the arc table, the DP and exhaustive oracles, and
end to end (read the files, then ``plan_rig``, whose CP-SAT call is hinted by the DP exactly as
``solve`` runs it; the CP-SAT share is that call's own wall time). Each piece runs ``--repeat``
times, or fewer once its runs have spent ``--budget`` seconds (at least once), so the defaults stay
quick while slow pieces still get measured. Import time comes from fresh interpreters, the way a
user pays it. ``--sweep`` does the same on synthetic rigs of growing GPUs and layers (card kinds,
hosts and orders as asked), and plans each once more in a fresh interpreter for its process time
and peak memory.

Nothing here asserts a time: the numbers are reported (medians, min, max, runs), never checked.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from solver import interrupt
from solver.engines import ENGINES
from solver.options import SECONDS, Finite

if TYPE_CHECKING:  # the plan command imports this module: keep its start-up light
    from rich.console import Console

    from solver.solvers.policy import Policy

IMPORT_CODE = "import solver.cli, ortools.sat.python.cp_model"
#: Where bench looks for rigs when none is given: ``rigs/`` in the working directory (a clone of
#: moesplit, where an installed ``solve`` runs from), then the checkout this module was imported from.
RIG_DIRS = (Path("rigs"), Path(__file__).resolve().parent.parent / "rigs")
#: Placements above which the exhaustive oracle is skipped (the planner's own --check limit).
DEFAULT_EXHAUSTIVE_LIMIT = 200_000


@dataclass
class Timing:
    """Wall times of one piece in ms, or why it was skipped."""

    runs: list[float] = field(default_factory=list)
    skipped: str | None = None

    @property
    def median(self) -> float | None:
        import statistics

        return statistics.median(self.runs) if self.runs else None

    def as_json(self) -> dict[str, Any]:
        if not self.runs:
            return {"skipped": self.skipped}
        return {
            "median_ms": self.median,
            "min_ms": min(self.runs),
            "max_ms": max(self.runs),
            "runs": len(self.runs),
        }


def repeat_timed(fn: Callable[[], Any], repeat: int, budget_s: float) -> tuple[Timing, Any]:
    """Run ``fn`` up to ``repeat`` times, stopping early once the runs have taken ``budget_s``."""
    timing, out = Timing(), None
    while len(timing.runs) < repeat and (not timing.runs or sum(timing.runs) < budget_s * 1e3):
        t0 = time.perf_counter()
        out = fn()
        timing.runs.append((time.perf_counter() - t0) * 1e3)
    return timing, out


@dataclass(frozen=True)
class Settings:
    """What every measurement shares."""

    repeat: int
    budget_s: float
    workers: int
    exhaustive_limit: int
    time_limit: float | None = None


@dataclass
class RigBench:
    """The measurements of one rig (a file, or a synthetic sweep point)."""

    name: str
    order: str
    gpus: int
    layers: int
    pairs: int
    arcs: int
    placements: int
    status: str
    gap: float | None
    agrees: bool | None
    pieces: dict[str, Timing]
    hosts: int = 1
    kinds: int = 1
    fresh: FreshRun | None = None

    def ratio(self, top: str, bottom: str | float | None) -> float | None:
        """median(top) / median(bottom) (or / a number), None when either is missing."""
        num = self.pieces[top].median if top in self.pieces else None
        den = self.pieces[bottom].median if isinstance(bottom, str) and bottom in self.pieces else bottom
        if num is None or not isinstance(den, float) or den <= 0:
            return None
        return num / den

    def as_json(self, import_ms: float | None) -> dict[str, Any]:
        return {
            "rig": self.name,
            "order": self.order,
            "gpus": self.gpus,
            "layers": self.layers,
            "hosts": self.hosts,
            "kinds": self.kinds,
            "pairs": self.pairs,
            "arcs": self.arcs,
            "placements": self.placements,
            "status": self.status,
            "gap": self.gap,
            "cpsat_equals_dp": self.agrees,
            "pieces": {k: t.as_json() for k, t in self.pieces.items()},
            "ratios": {
                "cpsat_over_dp": self.ratio("cp-sat", "dp"),
                "end_to_end_over_import": self.ratio("end-to-end", import_ms),
            },
            **({"process": self.fresh.as_json()} if self.fresh else {}),
        }


def measure(
    problem: Any, settings: Settings, reload: Callable[[], Any] | None = None, policy: Policy | None = None
) -> RigBench:
    """Time every piece on one problem; ``reload`` re-reads its files (``read``, part of end to end);
    ``policy``: the solver route's thresholds (None: the command line's)."""
    from solver.arcs import build_arcs
    from solver.engines import build_table
    from solver.planner import plan_rig
    from solver.report import to_json as plan_json
    from solver.solvers import Limits, TooLarge
    from solver.solvers.exhaustive import count_placements, solve_exhaustive
    from solver.solvers.route import POLICY, exact_dp

    s = settings
    policy = policy or POLICY
    pieces: dict[str, Timing] = {}
    pieces["table"], walk = repeat_timed(lambda: build_table(problem), s.repeat, s.budget_s)
    pieces["arcs"], arcs = repeat_timed(lambda: build_arcs(problem, walk), s.repeat, s.budget_s)
    dp = None
    try:
        pieces["dp"], dp = repeat_timed(lambda: exact_dp(arcs, policy=policy), s.repeat, s.budget_s)
    except TooLarge as exc:
        pieces["dp"] = Timing(skipped=str(exc))
    placements = count_placements(arcs)
    if placements <= s.exhaustive_limit:
        pieces["exhaustive"], _ = repeat_timed(lambda: solve_exhaustive(arcs), s.repeat, s.budget_s)
    else:
        pieces["exhaustive"] = Timing(skipped=f"over the {s.exhaustive_limit:,}-placement limit")
    limits = Limits(time_limit=s.time_limit, workers=s.workers)
    read, cpsat = Timing(), Timing()

    def end_to_end() -> Any:
        t0 = time.perf_counter()
        p = reload() if reload else problem
        read.runs.append((time.perf_counter() - t0) * 1e3)
        result = plan_rig(p, limits, policy=policy)
        cpsat.runs.append(result.solution.wall_ms)
        return result

    pieces["end-to-end"], result = repeat_timed(end_to_end, s.repeat, s.budget_s)
    if reload:
        pieces["read"] = read
    pieces["cp-sat"] = cpsat
    sol = result.solution
    # same plan as the exact DP (an unproven plan can still be the optimum, found by the hint)
    agrees = None if dp is None or not sol.found else (dp.gpus, dp.cuts) == (sol.gpus, sol.cuts)
    return RigBench(
        name=problem.rig,
        order=problem.order,
        gpus=problem.n_gpus,
        layers=problem.n_layers,
        pairs=len(problem.pair_layer),
        arcs=len(arcs),
        placements=placements,
        status=result.status,
        gap=plan_json(result)["solver"]["gap"],
        agrees=agrees,
        pieces=pieces,
        hosts=len(set(problem.hosts.tolist())),
        kinds=len(set(problem.gpu_names)),
    )


def _fresh_env() -> dict[str, str]:
    """The environment of a fresh interpreter that imports this very ``solver``, wherever it runs from."""
    import os

    home = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": home if not path else f"{home}{os.pathsep}{path}"}


def run_fresh(cmd: list[str], **popen: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, **popen)`` for a fresh interpreter, in a session of its own so that a
    Ctrl-C at the terminal reaches bench alone, which then ends the child (even one just starting)."""
    child = None
    try:
        with interrupt.held():
            child = subprocess.Popen(cmd, env=_fresh_env(), start_new_session=True, **popen)
        out, err = child.communicate()
    except BaseException:
        if child is not None:
            child.kill()
            child.wait()
        raise
    return subprocess.CompletedProcess(cmd, child.returncode, out, err)


def import_time(repeat: int) -> Timing:
    """Wall time of a fresh interpreter importing the CLI and CP-SAT (what every ``solve`` pays).

    Always ``repeat`` runs, whatever the budget: it is the yardstick of every end-to-end ratio.
    """
    cmd = [sys.executable, "-c", IMPORT_CODE]
    timing, _ = repeat_timed(lambda: run_fresh(cmd).check_returncode(), repeat, float("inf"))
    return timing


def process_time(rig: Path, settings: Settings, engine: str | None = None) -> Timing:
    """Wall time of ``solve RIG --json`` in a fresh interpreter, imports included."""
    cmd = [sys.executable, "-m", "solver.cli", str(rig), "--json", "--workers", str(settings.workers)]
    cmd += ["--engine", engine] if engine else []

    def run() -> None:
        done = run_fresh(cmd, stdout=subprocess.DEVNULL)
        if done.returncode not in (0, 3):  # a plan, or an infeasibility explained: both are answers
            raise subprocess.CalledProcessError(done.returncode, cmd)

    timing, _ = repeat_timed(run, settings.repeat, settings.budget_s)
    return timing


#: A sweep card: (name, free GiB, SMs, boost GHz), from published specs.
Card = tuple[str, float, int, float]
#: The sweep's palette of real cards, every one a different (room, speed) kind.
CARDS: list[Card] = [
    ("RTX 3060", 11.5, 28, 1.777),
    ("RTX 5060 Ti", 15.3, 36, 2.572),
    ("RTX A4000", 15.3, 48, 1.56),
    ("RTX 2080 Ti", 10.5, 68, 1.545),
    ("RTX 3090", 23.3, 82, 1.695),
    ("RTX 4090", 23.3, 128, 2.52),
    ("RTX A6000", 47.3, 84, 1.8),
    ("RTX 3080", 9.5, 68, 1.71),
    ("RTX 3080 Ti", 11.5, 80, 1.665),
    ("RTX 4070", 11.5, 46, 2.475),
    ("RTX 4080", 15.3, 76, 2.505),
    ("RTX 5090", 31.3, 170, 2.407),
    ("RTX A5000", 23.3, 64, 1.695),
    ("Titan RTX", 23.3, 72, 1.77),
    ("RTX 4060 Ti 16GB", 15.3, 34, 2.535),
    ("RTX 5080", 15.3, 84, 2.617),
]
GIB, MIB = 2**30, 2**20
#: Sweep defaults: card kinds per rig (per host with hosts), hosts, and the network hop in ms.
DEFAULT_KINDS, DEFAULT_HOSTS, DEFAULT_NETWORK_MS = 7, 1, 2.0


@dataclass(frozen=True)
class SweepShape:
    """What a sweep point's rig looks like besides its size: card kinds, hosts and their network hop.

    ``kinds`` distinct kinds are drawn (seeded) for the rig, or for each host when there are several,
    and every GPU is one of them; 0 makes every GPU of the rig a different card (at most len(CARDS)).
    GPUs go to ``hosts`` equal contiguous groups, one per host.
    """

    kinds: int = DEFAULT_KINDS
    hosts: int = DEFAULT_HOSTS
    network_ms: float = DEFAULT_NETWORK_MS

    def check(self, n_gpus: int) -> str | None:
        """Why a rig of ``n_gpus`` cannot have this shape, or None."""
        if self.kinds == 0 and n_gpus > len(CARDS):
            return f"--kinds 0 makes every GPU a different card: at most {len(CARDS)} GPUs, not {n_gpus}"
        if n_gpus % self.hosts:
            return f"--hosts {self.hosts} splits the GPUs into equal groups: {n_gpus} GPUs do not divide"
        return None


def draw_cards(seed: int, n_gpus: int, shape: SweepShape, rng: Any) -> list[Card]:
    """Each GPU's card: kinds drawn from their own seeded stream, GPUs spread over them by ``rng``.

    With the default 7 kinds on one host ``rng`` draws exactly what it drew when the palette had
    only those 7 cards, so a seed keeps its layers, experts and GPU groupings.
    """
    import numpy as np

    pick = np.random.default_rng([seed, 1])
    if shape.kinds == 0:
        return [CARDS[i] for i in pick.choice(len(CARDS), n_gpus, replace=False)]
    slots = rng.integers(0, shape.kinds, n_gpus)
    per_host = n_gpus // shape.hosts
    pools = [pick.choice(len(CARDS), shape.kinds, replace=False) for _ in range(shape.hosts)]
    return [CARDS[pools[g // per_host][s]] for g, s in enumerate(slots)]


def sweep_problem(
    seed: int,
    n_gpus: int,
    n_layers: int,
    experts: int,
    order: str,
    shape: SweepShape | None = None,
    objective: str = "time",
    idle_gpus: bool = False,
) -> Any:
    """A synthetic rig of real card types with an MoE model whose experts fill about 1.6x its room.

    Layers hold 60-120 MiB each (dense + KV), every card needs 1 GiB of buffers and 700 MiB of
    reserve, and the expert size is set so that the cards can cache about 60% of all experts;
    routing counts come from the synthetic profile generator with the same seed. ``shape`` sets
    the card kinds and hosts (default: 7 kinds, one host); ``objective`` and ``idle_gpus`` how it
    is planned (they leave the rig itself as the seed draws it).
    """
    import numpy as np

    from solver.problem import Problem, estimate_layer_ms
    from solver.synth import SynthParams, synth_profile

    shape = shape or SweepShape()
    rng = np.random.default_rng(seed)
    cards = draw_cards(seed, n_gpus, shape, rng)
    free = np.array([int(c[1] * GIB) for c in cards], dtype=np.int64)
    reserve = np.full(n_gpus, 700 * MIB, dtype=np.int64)
    stage, last = GIB, 512 * MIB
    layer_bytes = rng.integers(60 * MIB, 120 * MIB, n_layers).astype(np.int64)
    room = int((free - reserve - stage).sum() - layer_bytes.sum() - last)
    mean_expert = max(room / (0.6 * n_layers * experts), 1.0)
    expert_bytes = (mean_expert * rng.uniform(0.8, 1.2, n_layers)).astype(np.int64)
    profile = synth_profile([experts] * n_layers, SynthParams(seed=seed))
    counts = profile.count.astype(np.float64)
    hosts: dict[str, Any] = {}
    if shape.hosts > 1:
        hosts = {
            "gpu_host": np.arange(n_gpus, dtype=np.int64) // (n_gpus // shape.hosts),
            "host_names": [f"host{h}" for h in range(shape.hosts)],
            "network_handoff_ms": shape.network_ms,
        }
    return Problem(
        rig=f"{n_gpus}x{n_layers}",
        model="synthetic",
        layer_bytes=layer_bytes,
        expert_bytes=expert_bytes,
        pair_layer=profile.layer,
        pair_bytes=expert_bytes[profile.layer],
        mass=counts / counts.sum(),
        free=free,
        reserve=reserve,
        layer_ms=np.array([estimate_layer_ms(c[2], c[3]) for c in cards]),
        min_layers=np.ones(n_gpus, dtype=np.int64),
        max_layers=np.full(n_gpus, n_layers, dtype=np.int64),
        gpu_names=[c[0] for c in cards],
        stage_bytes=stage,
        last_stage_bytes=last,
        first_stage_min_layers=2,
        order=order,
        objective=objective,
        idle_gpus=idle_gpus,
        **hosts,
    )


@dataclass(frozen=True)
class SweepPoint:
    """One sweep rig, as arguments a fresh interpreter rebuilds it from."""

    seed: int
    gpus: int
    layers: int
    experts: int
    order: str
    kinds: int
    hosts: int
    network_ms: float
    objective: str = "time"
    idle_gpus: bool = False

    @property
    def shape(self) -> SweepShape:
        return SweepShape(self.kinds, self.hosts, self.network_ms)

    def problem(self) -> Any:
        return sweep_problem(
            self.seed,
            self.gpus,
            self.layers,
            self.experts,
            self.order,
            self.shape,
            self.objective,
            self.idle_gpus,
        )


@dataclass(frozen=True)
class FreshRun:
    """``plan_rig`` on a sweep point in a fresh interpreter: the wall time of the whole process
    (start-up, imports and building the rig included), of plan_rig alone, the peak RSS, and what
    answered (the solver's name, and the arcs Lagrangian pruning kept where it ran)."""

    process_s: float
    plan_s: float
    peak_mib: float
    status: str
    gap: float | None
    solver: str
    pruned_arcs: int | None

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FRESH_CODE = "import sys; from solver.bench import fresh_point_main; fresh_point_main(sys.argv[1])"


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB: Linux's VmHWM, the high-water mark of the address
    space since exec. (``ru_maxrss`` keeps the parent's RSS at fork across exec, so a child of a big
    bench process would report at least the parent's size.) Elsewhere ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def fresh_point_main(arg: str) -> None:
    """In the fresh interpreter: plan the point ``arg`` (JSON: SweepPoint and its limits), print JSON."""
    from solver.planner import plan_rig
    from solver.report import to_json as plan_json
    from solver.solvers import Limits

    spec = json.loads(arg)
    problem = SweepPoint(**spec["point"]).problem()
    t0 = time.perf_counter()
    result = plan_rig(problem, Limits(time_limit=spec["time_limit"], workers=spec["workers"]))
    plan_s = time.perf_counter() - t0
    sol = result.solution
    got = {"plan_s": plan_s, "peak_mib": peak_rss_mib(), "status": result.status}
    got |= {"gap": plan_json(result)["solver"]["gap"], "solver": sol.name}
    print(json.dumps({**got, "pruned_arcs": sol.work.pruned_arcs}))


def fresh_point(point: SweepPoint, settings: Settings) -> FreshRun:
    """Plan ``point`` once in a fresh interpreter under the sweep's time limit (what ``solve`` pays)."""
    spec = {
        "point": dataclasses.asdict(point),
        "time_limit": settings.time_limit,
        "workers": settings.workers,
    }
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", FRESH_CODE, json.dumps(spec)]
    done = run_fresh(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process_s = time.perf_counter() - t0
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise click.ClickException(f"the fresh process for {point} failed: {last}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return FreshRun(process_s=process_s, **got)


def _ms(t: Timing) -> str:
    """A table cell: the median and the number of runs, then min-max in the median's unit."""
    if not t.runs:
        return f"[dim]skipped: {t.skipped}[/dim]" if t.skipped else "[dim]-[/dim]"
    med = t.median or 0.0
    return f"{_fmt(med)} x{len(t.runs)}\n[dim]{_span(min(t.runs), max(t.runs), med)}[/dim]"


def _line(t: Timing) -> str:
    """The same on one line: ``median xruns (min-max)``."""
    cell = _ms(t).split("\n")
    return f"{cell[0]} ({cell[1]})" if len(cell) == 2 else cell[0]


def _fmt(ms: float) -> str:
    return f"{ms / 1e3:.2f} s" if ms >= 1e3 else f"{ms:.3g} ms" if ms >= 1 else f"{ms:.2f} ms"


def _span(lo: float, hi: float, like: float) -> str:
    """``lo-hi`` in the unit ``_fmt`` gives ``like``."""
    scale = 1e3 if like >= 1e3 else 1.0
    return f"{_num(lo / scale)}-{_num(hi / scale)}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{_num(x)}x"


def _num(x: float) -> str:
    """Three significant digits, but never an exponent below a million."""
    return f"{x:.0f}" if 100 <= x < 1e6 else f"{x:.3g}"


ORDERS = ("as-given", "auto")
PIECES = ("read", "table", "arcs", "dp", "exhaustive", "cp-sat", "end-to-end")


def render(title: str, rows: list[RigBench], import_ms: float | None, console: Console) -> None:
    """One rich table: size, medians (min-max, runs) of every piece, and the ratios.

    Skip reasons become numbered notes under the table, so the cells stay narrow.
    """
    from rich.table import Table

    from solver.console import print_lines, split_to_fit

    notes: list[str] = []

    def cell(t: Timing) -> str:
        if t.runs or not t.skipped:
            return _ms(t)
        if t.skipped not in notes:
            notes.append(t.skipped)
        return f"[dim]skipped [{notes.index(t.skipped) + 1}][/dim]"

    table = Table(title=title, title_justify="left")
    table.add_column("rig")
    table.add_column("GPUs x\nlayers", justify="right")
    table.add_column("pairs\narcs", justify="right")
    table.add_column("status")
    for col in PIECES:
        table.add_column(col, justify="right")
    table.add_column("cp-sat\n/ dp", justify="right")
    table.add_column("e2e /\nimport", justify="right")
    fresh = any(r.fresh for r in rows)
    if fresh:
        table.add_column("fresh\nprocess", justify="right")
    for r in rows:
        status = _status(r.status, r.gap)
        if r.agrees is not None:
            # an unproven plan may be an equally good one that the tie-breaks did not get to
            differs = "\n[red]!= dp[/red]" if r.status == "optimal" else "\n[dim]not dp's plan[/dim]"
            status += "\n= dp" if r.agrees else differs
        table.add_row(
            f"{r.name}\n[dim]{r.order}\n{_shape(r)}[/dim]",
            f"{r.gpus} x {r.layers}",
            f"{r.pairs:,}\n{r.arcs:,}",
            status,
            *(cell(r.pieces.get(p, Timing())) for p in PIECES),
            _ratio(r.ratio("cp-sat", "dp")),
            _ratio(r.ratio("end-to-end", import_ms)),
            *([_fresh(r.fresh)] if fresh else []),
        )
    print_lines(console, *split_to_fit(table, console))
    for i, note in enumerate(notes, 1):
        print_lines(console, f"[dim][{i}] skipped: {note}[/dim]")


def _status(status: str, gap: float | None) -> str:
    """A status, and the gap of an unproven (``feasible``) plan on the next line."""
    return f"{status}\ngap {gap:.2%}" if status == "feasible" and gap is not None else status


def _shape(r: RigBench) -> str:
    """``N kinds`` of cards, and ``on H hosts`` when there are several."""
    kinds = f"{r.kinds} kind{'s' if r.kinds != 1 else ''}"
    return f"{kinds}, {r.hosts} hosts" if r.hosts > 1 else kinds


def _fresh(run: FreshRun | None) -> str:
    """The fresh-process cell: whole process, plan_rig alone, peak RSS, and its own status."""
    if run is None:
        return "[dim]-[/dim]"
    took = f"{_fmt(run.process_s * 1e3)}\n[dim]plan {_fmt(run.plan_s * 1e3)}[/dim]"
    return f"{took}\n{run.peak_mib:,.0f} MiB\n{_status(run.status, run.gap)}\n[dim]{run.solver}[/dim]"


def _int_list(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated whole numbers, got {value!r}") from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"expected positive whole numbers, got {value!r}")
    return out


def _orders(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    out = [v.strip() for v in value.split(",") if v.strip()]
    if not out or set(out) - set(ORDERS):
        raise click.BadParameter(f"expected some of {', '.join(ORDERS)}, comma-separated; got {value!r}")
    return list(dict.fromkeys(out))


def default_rigs() -> list[Path]:
    """The ``*.yaml`` of the first of RIG_DIRS that has any; a UsageError saying where it looked if none."""
    for folder in RIG_DIRS:
        found = sorted(folder.glob("*.yaml"))
        if found:
            return found
    looked = " or ".join(str(d.resolve()) for d in RIG_DIRS)
    raise click.UsageError(
        f"no rigs given and no rigs/*.yaml under {looked}; give rig files: solve bench RIG..."
    )


@click.command("bench")
@click.argument("rig_args", metavar="[RIG]...", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--rig",
    "rigs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Rig file (repeatable; rig files may also follow as arguments: --rig rigs/*.yaml).",
)
@click.option("--repeat", type=click.IntRange(min=1), default=5, show_default=True, help="Runs per piece.")
@click.option(
    "--budget",
    type=Finite(min=0),
    default=2.0,
    show_default=True,
    help="Stop repeating a piece once its runs took SECONDS (it runs at least once).",
)
@click.option("--sweep", is_flag=True, help="Also time synthetic rigs of growing GPUs and layers.")
@click.option("--gpus", default="4,8,16", show_default=True, callback=_int_list, help="Sweep: GPU counts.")
@click.option("--layers", default="48,128", show_default=True, callback=_int_list, help="Sweep: layers.")
@click.option(
    "--experts", type=click.IntRange(min=1), default=128, show_default=True, help="Sweep: per layer."
)
@click.option(
    "--sweep-limit",
    type=SECONDS,
    default=5.0,
    show_default=True,
    help="Sweep: CP-SAT time limit per plan (status feasible when it stops the proof).",
)
@click.option(
    "--kinds",
    type=click.IntRange(0, len(CARDS)),
    default=DEFAULT_KINDS,
    show_default=True,
    help=f"Sweep: card kinds of the {len(CARDS)} per rig (per host with --hosts); 0: every GPU different.",
)
@click.option(
    "--hosts",
    type=click.IntRange(min=1),
    default=DEFAULT_HOSTS,
    show_default=True,
    help="Sweep: hosts; the GPUs split into that many equal contiguous groups.",
)
@click.option(
    "--network-ms",
    type=Finite(min=0),
    default=DEFAULT_NETWORK_MS,
    show_default=True,
    help="Sweep: ms a stage boundary between two hosts costs.",
)
@click.option(
    "--orders",
    default="as-given,auto",
    show_default=True,
    callback=_orders,
    help="Sweep: GPU orders, comma-separated.",
)
@click.option(
    "--objective",
    type=click.Choice(["time", "mass", "throughput"]),
    default="time",
    show_default=True,
    help="Sweep: what the plans optimise.",
)
@click.option(
    "--idle-gpus", is_flag=True, help="Sweep: plans may leave GPUs out (then layers may be fewer than GPUs)."
)
@click.option("--process", is_flag=True, help="Also time `solve RIG --json` in a fresh interpreter.")
@click.option(
    "--exhaustive-limit",
    type=click.IntRange(min=0),
    default=DEFAULT_EXHAUSTIVE_LIMIT,
    show_default=True,
    help="Skip exhaustive enumeration above this many placements.",
)
@click.option(
    "--workers", type=click.IntRange(min=1), default=None, help="CP-SAT workers (default: as solve)."
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    help="Plan every rig for this engine (default: each rig's own).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def bench(
    rig_args: tuple[Path, ...],
    rigs: tuple[Path, ...],
    repeat: int,
    budget: float,
    sweep: bool,
    gpus: list[int],
    layers: list[int],
    experts: int,
    sweep_limit: float,
    kinds: int,
    hosts: int,
    network_ms: float,
    orders: list[str],
    objective: str,
    idle_gpus: bool,
    process: bool,
    exhaustive_limit: int,
    workers: int | None,
    engine: str | None,
    as_json: bool,
) -> None:
    """Time table build, arcs, CP-SAT, DP, exhaustive and end to end on rigs (default: rigs/*.yaml here)."""
    from rich.console import Console

    from solver.cli import EXIT_INPUT, default_workers
    from solver.errors import InputError
    from solver.problem import Overrides, load_problem

    def load(path: Path) -> Any:
        problem = load_problem(path, Overrides(engine=engine))
        return dataclasses.replace(problem, rig=f"{problem.rig} ({engine})") if engine else problem

    shape = SweepShape(kinds, hosts, network_ms)
    if sweep:
        for k in gpus:
            why = shape.check(k)
            if why:
                raise click.BadParameter(why, param_hint="--gpus")
    paths = list(dict.fromkeys([*rigs, *rig_args])) or default_rigs()
    try:
        problems = [load(path) for path in paths]
    except InputError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_INPUT)
    settings = Settings(repeat, budget, workers or default_workers(), exhaustive_limit)
    err = Console(stderr=True)
    show = err.is_terminal and not as_json
    imports = import_time(repeat)
    rows: list[RigBench] = []
    for path, problem in zip(paths, problems):
        if show:
            err.print(f"[dim]bench: {path} ...[/dim]")
        row = measure(problem, settings, reload=lambda path=path: load(path))
        if process:
            row.pieces["solve process"] = process_time(path, settings, engine)
        rows.append(row)
    sweep_rows: list[RigBench] | None = None
    if sweep:
        sweep_settings = Settings(repeat, budget, settings.workers, exhaustive_limit, sweep_limit)
        sweep_rows = []
        for order, k, n in ((o, k, n) for o in orders for k in gpus for n in layers):
            if n < (2 if idle_gpus else k + 1):  # every GPU runs a layer, the first two (idle: one GPU)
                continue
            if show:
                err.print(f"[dim]bench: sweep {k} GPUs x {n} layers, {order} ...[/dim]")
            point = SweepPoint(
                k * 1000 + n, k, n, experts, order, kinds, hosts, network_ms, objective, idle_gpus
            )
            row = measure(point.problem(), sweep_settings)
            row.fresh = fresh_point(point, sweep_settings)
            sweep_rows.append(row)
    if as_json:
        out = to_json(settings, imports, rows, sweep_rows, experts, sweep_limit)
        if sweep_rows is not None:
            out["sweep"].update(
                kinds=kinds,
                hosts=hosts,
                network_ms=network_ms,
                orders=orders,
                objective=objective,
                idle_gpus=idle_gpus,
            )
        click.echo(json.dumps(out, indent=2))
    else:
        kind_text = "every GPU a different card" if kinds == 0 else f"{kinds} card kinds"
        hosts_text = f" per host, {hosts} hosts {network_ms:g} ms apart" if hosts > 1 else ""
        plan_text = f"objective {objective}{', idle GPUs' if idle_gpus else ''}, time limit {sweep_limit:g} s"
        report(
            settings,
            imports,
            rows,
            sweep_rows,
            f"{experts} experts per layer, {kind_text}{hosts_text}, {plan_text}",
        )


def to_json(
    settings: Settings,
    imports: Timing,
    rows: list[RigBench],
    sweep_rows: list[RigBench] | None,
    experts: int,
    sweep_limit: float,
) -> dict[str, Any]:
    """The ``--json`` object: settings, import time, one entry per rig and, with --sweep, per point."""
    out: dict[str, Any] = {
        "settings": {
            "repeat": settings.repeat,
            "budget_s": settings.budget_s,
            "workers": settings.workers,
            "exhaustive_limit": settings.exhaustive_limit,
        },
        "import": {"code": IMPORT_CODE, **imports.as_json()},
        "rigs": [r.as_json(imports.median) for r in rows],
    }
    if sweep_rows is not None:
        out["sweep"] = {
            "experts": experts,
            "time_limit_s": sweep_limit,
            "rows": [r.as_json(imports.median) for r in sweep_rows],
        }
    return out


def report(
    settings: Settings,
    imports: Timing,
    rows: list[RigBench],
    sweep_rows: list[RigBench] | None,
    sweep_title: str,
) -> None:
    """The human output: the rigs' table, process times, the sweep's table and the import line."""
    from solver.console import console as make_console
    from solver.console import print_lines

    console = make_console()
    render("rigs", rows, imports.median, console)
    for r in rows:
        if "solve process" in r.pieces:
            ratio = _ratio(r.ratio("solve process", imports.median))
            took = _line(r.pieces["solve process"])
            print_lines(console, f"solve {r.name} --json, fresh interpreter: {took}, {ratio} import")
    if sweep_rows is not None:
        render(f"sweep ({sweep_title})", sweep_rows, imports.median, console)
    print_lines(
        console,
        f"import ({IMPORT_CODE!r}, fresh interpreter): {_line(imports)}; {settings.workers} CP-SAT workers; "
        f"medians of up to {settings.repeat} runs per piece, fewer once a piece took {settings.budget_s:g} s",
    )
