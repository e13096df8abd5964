"""What each engine does by default, evaluated by the same arithmetic as the plan.

strata: cuts in proportion to speed (SPEC 3's proportional baseline). vllm / sglang: the even
partition their ``get_pp_indices`` makes without a partition variable. llama.cpp: layers split by
free memory (no ``--tensor-split``), with the smallest ``--n-cpu-moe`` that makes every GPU fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from itertools import accumulate

from solver.engines.llamacpp import cpu_moe_fill, free_memory_split
from solver.engines.resident import default_partition
from solver.plan import Placement, bounds_ok, evaluate, feasible
from solver.problem import Problem


@dataclass
class Baseline:
    """The engine's default split, evaluated; ``plan`` is None when there is no split (``reason`` says why).

    ``note`` says what the default is in a few words for the report.
    """

    cuts: list[int]
    feasible: bool
    plan: Placement | None
    name: str = "proportional"
    note: str = ""
    reason: str | None = None


def _cuts(counts: list[int]) -> list[int]:
    return list(accumulate(counts))[:-1]


def engine_baseline(p: Problem) -> Baseline:
    """The default split of the problem's engine (strata's is the proportional one), GPUs in rig order."""
    k, gpus = p.n_gpus, list(range(p.n_gpus))
    if p.engine in ("vllm", "sglang"):
        cuts = _cuts(default_partition(p.engine, p.n_layers, k))
        if not bounds_ok(p, cuts):
            return Baseline(
                cuts, False, None, "even", reason="the rig has more GPUs than the model has layers"
            )
        plan = evaluate(p, gpus, cuts)
        return Baseline(cuts, feasible(p, plan), plan, "even", "the engine's even partition")
    cuts = _cuts(free_memory_split(p.free, p.n_layers))
    if not bounds_ok(p, cuts):
        return Baseline(
            cuts, False, None, "free-memory", reason="the free-memory split leaves a GPU without layers"
        )
    for n_cpu in range(p.n_layers + 1):
        plan = evaluate(p, gpus, cuts, partial(cpu_moe_fill, n_cpu_moe=n_cpu))
        if feasible(p, plan):
            return Baseline(cuts, True, plan, "free-memory", f"split by free memory, --n-cpu-moe {n_cpu}")
    plan = evaluate(p, gpus, cuts, partial(cpu_moe_fill, n_cpu_moe=p.n_layers))
    return Baseline(cuts, False, plan, "free-memory", "does not fit even with every expert on the CPU")
