"""Every threshold that decides which solver answers a table, or how far a solver goes.

``solver.solvers.route`` reads them to pick the solver; the solvers read the ones that bound their
own work. A test or a benchmark that wants another path passes its own ``Policy``
(``dataclasses.replace(POLICY, dp_first_work=0)``); the command line uses ``POLICY``. Numeric
exactness constants (float64's exact integers, the DPs' unreachable values) are not policy: they
live in ``solver.problem.scales`` and ``solver.solvers.paths``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    """Thresholds of the solver route and of each solver's size; see each field."""

    #: Placements at most for ``--check`` to use exhaustive enumeration as its oracle (and for an
    #: engine's fixed orders to be enumerated in each). ``solve bench`` times box.yaml's 16,215
    #: placements at 7-24 ms here, so the check stays under half a second.
    exhaustive_check_limit: int = 200_000
    #: Placements enumeration takes at all (``solve_exhaustive`` refuses more): seconds at the
    #: pace above, and its score table grows with them.
    max_placements: int = 3_000_000
    #: Seconds the report may spend pricing idle GPUs beyond the host/idle DP (one CP-SAT chain per
    #: idle GPU), within what is left of the time limit.
    idle_cost_s: float = 5.0
    #: The class-count DP answers first when its states times (L+1)^2 boundary pairs stay within
    #: this: a free order over 10 distinct GPUs and 130 layers is 17.6 million, and its DP took
    #: 1-4 s by objective on the development machine.
    dp_first_work: int = 20_000_000
    #: Class-count states the free-order DP takes: 2^12 for 12 distinct GPUs, far more GPUs in few
    #: classes.
    max_states_free_order: int = 4096
    #: Dense (L+1)^2 cells over all of a free order's classes: two int64 tables each, 128 MiB.
    max_dense_cells: int = 2**23
    #: Transitions (state, next GPU) one pass of the host/idle DP over a free order may take:
    #: 2^9 states x 9 GPUs on one host (the report's idle-GPU costs use the same DP and bound).
    max_subset_steps: int = 5000
    #: A free order's arc bounds (``best_through``) are exact when the class counts take at most
    #: this many values: 12 distinct GPUs, or sixteen.yaml's 1 + 1 + 6 + 8 (252); beyond, a GPU
    #: may repeat in the bound's relaxed path.
    exact_free_order_states: int = 4096
    #: The pruned path's first cut lies this share of the bound's size above the Lagrangian bound
    #: (at least 10 tie keys): on the sweep's 16 different cards x 128 layers the first cut then
    #: holds the optimum's tie set.
    first_margin: float = 1e-4
    #: How fast a threshold check's cut widens when it holds no plan: any plan answers it, so
    #: fewer, wider rounds beat the time objective's fourfold steps.
    widen_any: int = 64
    #: Subgradient steps of the Lagrangian bound at most; the step factor halves after
    #: ``lagrange_patience`` steps without a better bound and the steps stop below
    #: ``lagrange_min_factor``. On 16 different cards x 128 layers the bound comes within 0.1 %.
    lagrange_steps: int = 400
    lagrange_patience: int = 12
    lagrange_min_factor: float = 1e-4
    #: Hosts the Lagrangian relaxation keeps exact (its DP has 2^H host sets); beyond, a host may
    #: repeat too.
    lagrange_max_hosts: int = 6
    #: Cells of one host's tables in the exact host split (states x (L+1)^2): 512 MiB of float64.
    split_max_cells: int = 2**26
    #: Host sets the exact host split takes (2^H): eight hosts.
    split_max_host_sets: int = 256
    #: States x classes x width^2 steps one capacity-window pass may take: a second or two here.
    window_max_work: int = 2**28
    #: Plans CP-SAT enumerates in a tie set before it settles the tie-breaks level by level
    #: instead (each enumeration solve has the fast min-time shape).
    max_ties: int = 8
    #: Seconds the search for a small set of conflicting rules (why no placement fits) may take,
    #: less when the time limit leaves less.
    core_time_s: float = 10.0


#: The policy of the command line.
POLICY = Policy()
