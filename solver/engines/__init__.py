"""The engines a plan can be made for, one object each, registered by name.

strata: a per-expert cache walked in profile order (solver.engines.strata). llama.cpp: whole expert
tensors on the GPU or run by the CPU (solver.engines.llamacpp). vllm/sglang: every weight resident,
spare KV reported (solver.engines.resident). solver.engines.base says what an engine owns. Adding an
engine is one module with an ``Engine`` subclass and one line in ``REGISTRY`` below, which imports an
engine's module the first time the engine is asked for (a plan loads only its own engine's code).

The functions here answer for the problem's engine, by its name; the engine modules never import this
registry (an engine that needs its own rules uses itself), so everything below it imports nothing
above it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping

from solver.engines.base import Engine, Resolved, Shape, Table, Weights
from solver.engines.export import Launch, Offload
from solver.engines.export_hosts import Hosts
from solver.engines.shells import DEFAULT_SHELL, render
from solver.files.config import DEFAULT_ENGINE
from solver.problem.placement import Placement, StageFill
from solver.problem.problem import Problem


class Registry(MutableMapping[str, Engine]):
    """The engines by name, each given as ``"module:Class"`` and made the first time it is looked up
    (its module imported then), or registered as an object."""

    def __init__(self, lazy: dict[str, str]) -> None:
        self._lazy = dict(lazy)
        self._made: dict[str, Engine] = {}

    def __getitem__(self, name: str) -> Engine:
        if name not in self._made:
            module, cls = self._lazy[name].split(":")
            self._made[name] = getattr(importlib.import_module(module), cls)()
        return self._made[name]

    def __setitem__(self, name: str, engine: Engine) -> None:
        self._lazy.setdefault(name, "")
        self._made[name] = engine

    def __delitem__(self, name: str) -> None:
        del self._lazy[name]
        self._made.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(self._lazy)

    def __len__(self) -> int:
        return len(self._lazy)


REGISTRY = Registry(
    {
        "strata": "solver.engines.strata:Strata",
        "llama.cpp": "solver.engines.llamacpp:LlamaCpp",
        "ik_llama.cpp": "solver.engines.ik_llama:IkLlama",
        "vllm": "solver.engines.resident:Vllm",
        "sglang": "solver.engines.resident:Sglang",
    }
)


def register(engine: Engine) -> Engine:
    """Make ``engine`` plannable under its name (``--engine``, the rig's ``engine`` key)."""
    REGISTRY[engine.name] = engine
    return engine


#: The engine names the command line offers.
ENGINES = tuple(REGISTRY)


def engine_named(name: str) -> Engine:
    """The registered engine ``name``; ValueError naming the engines there are."""
    if name not in REGISTRY:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


def engine_of(p: Problem) -> Engine:
    """The engine the problem is planned for."""
    return engine_named(p.engine)


def build_table(p: Problem) -> Table:
    """The table of the problem's engine."""
    return engine_of(p).table(p)


def stage_fill(p: Problem, g: int, a: int, b: int) -> StageFill:
    """One stage's fill under the problem's engine, from the definition."""
    return engine_of(p).stage_fill(p, g, a, b)


def evaluate(
    p: Problem,
    gpus: list[int] | tuple[int, ...],
    cuts: list[int] | tuple[int, ...],
    fill: Callable[[Problem, int, int, int], StageFill] | None = None,
) -> Placement:
    """The placement ``gpus`` and ``cuts`` make under the problem's engine (``Engine.evaluate``)."""
    return engine_of(p).evaluate(p, gpus, cuts, fill)


def export_lines(
    engine: str,
    gpus: list[int],
    cuts: list[int],
    n_layers: int,
    offload: list[Offload] | tuple[Offload, ...] = (),
    tensor_names: list[str] | None = None,
    extra_blocks: int = 0,
    hosts: Hosts | None = None,
    launch: Launch | None = None,
    shell: str = DEFAULT_SHELL,
    cpu_layers: int = 0,
) -> list[str]:
    """Lines to paste (commands, or for Strata flags and a config line) that make ``engine`` run the
    plan, written for ``shell`` (solver.engines.shells).

    ``gpus`` are rig GPU indices in pipeline order, taken to be CUDA device numbers; ``cuts`` the first
    layer of every later stage. llama.cpp only: ``offload`` lists the expert tensors left on the CPU;
    ``tensor_names``, when given (every tensor name of the model), proves the -ot pattern selects exactly
    them; ``extra_blocks`` counts blocks the GGUF holds after the planned layers (GLM's MTP layers are in
    its block_count), which llama.cpp puts on the last device with the output. ``hosts`` says where
    each rig GPU is, for a plan that spans machines. ``launch`` says what the command loads and how
    (solver.engines.export.Launch; by default placeholders). ``cpu_layers``: the first stage's first
    layers that run wholly on the CPU (llama.cpp). Raises ValueError for a plan the engine cannot
    express, or a word the shell cannot be given.
    """
    ordered = list(cuts) == sorted(set(cuts)) and all(0 < c < n_layers for c in cuts)
    if len(cuts) != len(gpus) - 1 or not ordered:
        raise ValueError(f"cuts {cuts} do not split {n_layers} layers into {len(gpus)} stages")
    shape = Shape(
        gpus, cuts, n_layers, offload, tensor_names, extra_blocks, hosts, launch or Launch(), cpu_layers
    )
    lines = engine_named(engine).export(shape)
    return render(lines, shell)


def plan_lines(p: Problem, plan: Placement, shell: str = DEFAULT_SHELL, fit_off: bool = False) -> list[str]:
    """``export_lines`` for a plan of ``p`` under its own engine: the tensors its stages leave on the
    CPU, the blocks after its layers, its hosts (the machine listed first runs the main command) and
    what its files say the command loads. ValueError as ``export_lines``."""
    offload = [Offload(layer, name) for s in plan.stages for layer, names in s.offload for name in names]
    hosts = None
    if len(p.host_names) > 1:
        hosts = Hosts(tuple(p.host_names[h] for h in p.hosts), local=p.host_names[0])
    engine = engine_of(p)
    return export_lines(
        p.engine,
        plan.gpus,
        plan.cuts,
        p.n_layers,
        offload,
        extra_blocks=engine.extra_blocks(p),
        hosts=hosts,
        launch=engine.launch(p, fit_off),
        shell=shell,
        cpu_layers=plan.stages[0].cpu_layers if plan.stages else 0,
    )


__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "REGISTRY",
    "Engine",
    "Resolved",
    "Shape",
    "StageFill",
    "Table",
    "Weights",
    "build_table",
    "engine_named",
    "engine_of",
    "evaluate",
    "export_lines",
    "plan_lines",
    "register",
    "stage_fill",
]
