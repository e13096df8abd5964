"""What an engine is: the one object that owns every rule in which engines differ.

Each engine turns a Problem into a ``Table`` over every (GPU g, layers [a, b)):

- ``need`` (L+1, L+1): bytes a stage running [a, b) must hold whatever its GPU (weights, session,
  buffers, and for the resident engines every expert of its layers); ``room`` (k, L+1, L+1) is
  ``free - reserve - need``, -1 where the range does not fit;
- ``weigh(g, a, b, scale, mass)``: integer weights of those ranges (``Weights``), read by solver.solvers.arcs;
- ``const_units(scale)``: the part of every plan's window that no arc carries, in the same units.

``stage_fill(p, g, a, b)`` gives one stage's fill straight from the definition (solver.problem.placement's
``StageFill``), which the tests hold the table to; ``evaluate`` builds a whole placement from those
fills and the engine's ``totals``. Besides the arithmetic, an engine names the
keys it needs, its default placement, its report columns and JSON keys, and its export. It also builds
its own fields of the problem (``resolve_fields``: a subclass of solver.problem.problem.EngineFields
kept beside the engine, with what the engine changes of the shared arrays). Everything else in
moesplit asks the engine object, never the engine's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from solver.engines.export import Launch
from solver.errors import ArgsError
from solver.files.config import EngineKeys
from solver.problem.placement import Placement, Stage, StageFill, handoffs_ms
from solver.problem.problem import EngineFields, Problem

if TYPE_CHECKING:
    from solver.engines.export import Line, Offload
    from solver.engines.export_hosts import Hosts
    from solver.files.config import ModelConfig, RigConfig
    from solver.files.yamlfile import YamlDoc
    from solver.problem.baselines import Baseline
    from solver.problem.scored import Scored


@dataclass(frozen=True)
class Weights:
    """Integer weights of n ranges, shape (n,) each, times in units of 1/scale ms.

    gpu: the stage's GPU time (the tie rule's bottleneck); time: what the stage adds to the window
    beyond ``const_units`` (strata: GPU time less the misses its cache saves; the others: the stage's
    whole time); missed: the time of the stage's own layers' misses or CPU work and switches (the
    throughput objective's stage is gpu + missed); mass: held mass in units of 1e-12; host: bytes of
    the stage's experts left in host memory; spare: spare KV tokens (SPARE_UNLIMITED when none limit).
    """

    gpu: np.ndarray
    time: np.ndarray
    missed: np.ndarray
    mass: np.ndarray
    host: np.ndarray
    spare: np.ndarray


class Table(Protocol):
    """The engine's table over every (GPU, range): rooms, then weights and fills on demand."""

    need: np.ndarray
    room: np.ndarray

    def weigh(self, g: np.ndarray, a: np.ndarray, b: np.ndarray, scale: int, mass: bool) -> Weights: ...

    def const_units(self, scale: int) -> int: ...


@dataclass(frozen=True)
class Shape:
    """A plan as its export needs it: rig GPU indices in pipeline order (taken to be CUDA device
    numbers), the cut points, the layer count; llama.cpp's offloaded tensors, every tensor name of the
    model when known (to prove the -ot pattern), blocks after the planned layers (MTP); where each GPU
    is (a plan over several hosts); what the command loads (solver.engines.export.Launch); and the
    first stage's first layers that run wholly on the CPU (llama.cpp)."""

    gpus: list[int]
    cuts: list[int]
    n_layers: int
    offload: list[Offload] | tuple[Offload, ...] = ()
    names: list[str] | None = None
    extra_blocks: int = 0
    hosts: Hosts | None = None
    launch: Launch | None = None
    cpu_layers: int = 0


@dataclass(frozen=True)
class Orders:
    """The GPU orders (a GPU per stage) an engine can run, ``free``: sets of GPUs it runs in any order
    that keeps each host's stages one run, and why there are none when both lists are empty."""

    gpus: list[tuple[int, ...]]
    reason: str = ""
    free: list[tuple[int, ...]] = field(default_factory=list)


@dataclass(frozen=True)
class Required:
    """A key the engine needs: in which file (``rig`` or ``model``), its name, what it means, and
    (``when``) for which rigs, if not for all."""

    file: str
    key: str
    what: str
    when: Callable[[RigConfig], bool] | None = None


@dataclass(frozen=True)
class Resolved:
    """What an engine makes of a rig and model: its own fields of the problem, and where it differs
    from the files on the shared arrays: each GPU's buffers (None: none beyond the rig's), its time per
    layer (None: the rig's ``layer_ms`` or Strata's estimate), the first stage's bytes (None: the
    model's), bytes the last stage holds beyond the model's, and the bytes the engine itself takes in
    host RAM where experts run there (its host compute buffer), which ``host_memory`` must hold too."""

    fields: EngineFields = field(default_factory=EngineFields)
    buffers: list[int] | None = None
    layer_ms: list[float] | None = None
    first_stage_bytes: int | None = None
    last_stage_extra: int = 0
    host_reserve: int = 0


StageCell = Callable[["Stage"], str]
PlanCell = Callable[["Placement"], str]


def tokens(n: int | None) -> str:
    """A count of KV tokens for a table cell."""
    return "no limit" if n is None else f"{n:,}"


def ms(value: float) -> str:
    """A time in ms for a table cell whose header says ``ms``."""
    return f"{value:.2f}"


class Engine:
    """One engine's rules. Subclasses set ``name`` and override what differs; register them in
    solver.engines."""

    name: ClassVar[str]
    #: The engine reads a routing profile (the model's ``profile`` key).
    profile: ClassVar[bool] = False
    #: What a stage must hold, in words, for infeasibility messages.
    holds: ClassVar[str] = "weights, session"
    #: The report's stage columns after the GPU, its layers and room: what the stage holds and its
    #: times per token (a header may take two lines; the table fits 80 columns).
    columns: ClassVar[list[tuple[str, StageCell]]] = []
    #: The report's plan-against-default rows after the window.
    summary: ClassVar[list[tuple[str, PlanCell]]] = []
    #: The context sweep's columns (solver.report.contexts): what a longer context costs the plan.
    sweep: ClassVar[list[tuple[str, PlanCell]]] = []
    #: What the time a stage spends on what it does not hold is called (plots).
    miss_label: ClassVar[str] = "misses"
    #: What the engine does, in a few words (rig files written for it say so).
    note: ClassVar[str] = ""
    #: Rig-wide keys the engine reads besides the common ones (``rig new`` writes only these).
    rig_keys: ClassVar[tuple[str, ...]] = ()
    #: The engine's own keys of a rig file, rig-wide and on each GPU: their types, bounds and defaults
    #: (solver.files.config.EngineKeys, validated with the file). The engine reads them through
    #: ``rig.keys(schema)`` in ``resolve_fields`` and checks them in ``required`` and ``check_gpus``.
    rig_schema: ClassVar[type[EngineKeys]] = EngineKeys
    gpu_schema: ClassVar[type[EngineKeys]] = EngineKeys
    #: The GPU keys that give the engine a card's speed.
    speed_keys: ClassVar[tuple[str, ...]] = ("mem_bandwidth",)
    #: The rate key that makes misses slow when it is too low (None: misses have no rate).
    miss_rate_key: ClassVar[str | None] = None
    #: Keys the engine needs beyond the common ones.
    required: ClassVar[tuple[Required, ...]] = ()
    #: llama-bench and llama-server runs measure this engine: ``solve calibrate RIG --llama-bench``
    #: fits its speed constants to them (each run's flags read by ``read_command``).
    reads_llama_bench: ClassVar[bool] = False
    #: What ``--export`` prints, in a word: a command to paste, or flags for one the user starts.
    export_noun: ClassVar[str] = "command"
    #: The engine that keeps in host RAM the experts no GPU holds, which a rig this engine cannot fit
    #: may plan with instead (None: this engine does so itself, or none is known).
    host_fallback: ClassVar[str | None] = None
    #: The KV cache types (solver.files.kvcache) the engine runs, its default first.
    kv_types: ClassVar[tuple[str, ...]] = ("f16",)
    #: The rig key ``cpu_layers`` (the first stage's first layers wholly on the CPU) is planned.
    plans_cpu_layers: ClassVar[bool] = False

    def check_gpus(self, rig: RigConfig, doc: YamlDoc) -> None:
        """Raise an InputError (file, line, key) for a GPU whose speed the engine cannot know."""

    def slowest_gpu_ms(self, p: Problem) -> float:
        """More than any stage's GPU time can be, in ms (bounds the integer scale)."""
        return float(p.layer_ms.max(initial=0.0)) * p.n_layers

    def resolve_fields(self, rig: RigConfig, model: ModelConfig, experts: np.ndarray) -> Resolved:
        """The engine's own fields of the problem, from the rig and model (``experts``: per layer)."""
        return Resolved()

    def table(self, p: Problem) -> Table:
        """The (GPU, range) table of rooms and weights."""
        raise NotImplementedError

    def tables(self, ps: Sequence[Problem]) -> list[Table]:
        """The table of each of several problems of this engine (an engine may share work among them)."""
        return [self.table(p) for p in ps]

    def stage_fill(self, p: Problem, g: int, a: int, b: int) -> StageFill:
        """One stage's fill from the definition."""
        raise NotImplementedError

    def miss_total_ms(self, p: Problem) -> float:
        """The most a window can spend on misses: nothing held at all."""
        return 0.0

    def worst_window_ms(self, p: Problem) -> float:
        """More than any arc's time weight or any window can be, in ms: what the integer scale must fit."""
        hop = max(p.handoff_ms, p.network_ms)
        return self.slowest_gpu_ms(p) + self.miss_total_ms(p) + hop * p.n_gpus + 1.0

    def prompt_gap(self, p: Problem) -> str | None:
        """Why the engine cannot price a prompt on the problem's GPUs (None: it can), for the
        ``request`` objective."""
        return f"the {self.name} engine has no prompt-processing model"

    def prompt_arc_ms(
        self, p: Problem, g: np.ndarray, a: np.ndarray, b: np.ndarray, host: np.ndarray
    ) -> np.ndarray:
        """ms each stage (GPU ``g``, layers [a, b), ``host`` bytes of its experts in host memory) takes
        on each micro-batch of the prompt, (arcs, micro-batches); only where ``prompt_gap`` is None."""
        raise NotImplementedError

    def totals(self, p: Problem, fills: list[StageFill], compute_ms: float) -> tuple[float, float]:
        """A placement's (window ms, held mass) from its stages' fills and its compute and hand-offs."""
        return compute_ms + sum(f.miss_ms for f in fills), float(np.sum([f.held_mass for f in fills]))

    def evaluate(
        self,
        p: Problem,
        gpus: list[int] | tuple[int, ...],
        cuts: list[int] | tuple[int, ...],
        fill: Callable[[Problem, int, int, int], StageFill] | None = None,
    ) -> Placement:
        """Fill each stage (by ``stage_fill`` unless ``fill`` says otherwise) and add up ``window_ms``
        and ``held_mass`` in floating point."""
        fill = fill or self.stage_fill
        bounds = [0, *cuts, p.n_layers]
        stages, fills = [], []
        for s, g in enumerate(gpus):
            a, b = bounds[s], bounds[s + 1]
            f = fill(p, int(g), a, b)
            fills.append(f)
            stages.append(Stage.of(p, int(g), a, b, f))
        compute = sum(s.compute_ms for s in stages) + handoffs_ms(p, [s.gpu for s in stages])
        window, held = self.totals(p, fills, compute)
        return Placement(stages=stages, window_ms=window, held_mass=held)

    def orders(self, p: Problem) -> Orders | None:
        """The GPU orders the engine can run this rig in, where it restricts them; None: any order
        the rig's ``order`` allows."""
        return None

    def plan_classes(self, p: Problem) -> tuple[Problem, ...]:
        """The problem of each way the engine may run a plan, where they count memory differently (a
        ``held_only`` one admits only plans that hold every unit; the others' plans that hold every unit
        run as a held one); none where ``p`` counts every plan exactly (solver.planning.classes)."""
        return ()

    def as_run(self, p: Problem, plan: Placement) -> tuple[Problem, Placement] | None:
        """The plan as its own command runs, where ``p`` counts a bound for it: the problem counting
        exactly what the command takes and the plan under it (filled again where that holds more);
        None where ``p`` counts it exactly already."""
        return None

    def plan_problem(self, scored: Scored, args: object, reload: Callable[..., Problem]) -> Problem:
        """The problem ``solve score`` plans beside a command (``reload(**overrides)``: the rig's files
        with other settings): the rig as the command runs it (its context, KV types, depth)."""
        return scored.problem

    #: The engine's defaults a plan can be set beside (``--default``), the first unless one is named.
    defaults: tuple[str, ...] = ()
    #: Whether ``default_split`` is a search of its own (tenths of a second), worth computing beside the
    #: plan in a child process (solver.planning.background) rather than after it.
    default_searches = False

    def default_split(self, p: Problem, which: str | None = None) -> Baseline | None:
        """What the engine does unasked (``which`` of ``defaults``), evaluated like a plan; None where
        that is the proportional one."""
        return None

    def stage_json(self, stage: Stage) -> dict:
        """Engine keys of one stage in the JSON report."""
        return {}

    def plan_json(self, plan: Placement | None) -> dict:
        """Engine keys of the whole plan in the JSON report."""
        return {}

    def launch(self, p: Problem, fit_off: bool = False) -> Launch:
        """What the engine's command for a plan of ``p`` loads and assumes: the context and KV cache
        type (an engine whose command loads a model file names it too)."""
        return Launch(context=p.context, kv_type=p.kv_type, fit_off=fit_off)

    def extra_blocks(self, p: Problem) -> int:
        """Blocks the engine's model file holds after the planned layers (its export places them)."""
        return 0

    def export(self, plan: Shape) -> list[Line]:
        """The lines that make the engine run the plan (solver.engines.shells writes them for a shell);
        ValueError for a plan it cannot express."""
        raise NotImplementedError

    def read_command(self, words: list[str]) -> object:
        """The words of a command that runs this engine (its flags, ``NAME=VALUE`` variables before
        them), read as the engine reads them, for ``score``; ArgsError for words it would refuse."""
        raise ArgsError(f"engine {self.name} has no command line to score")

    def bench_row(self, row: dict) -> dict:
        """One ``llama-bench -o json`` test object in mainline llama-bench's field names (what
        solver.calibrate.llamabench reads); an engine whose llama-bench names them otherwise converts."""
        return row

    def score(self, p: Problem, args: object) -> Scored:
        """The placement ``args`` (from ``read_command``) makes on the rig, predicted like a plan."""
        raise NotImplementedError
