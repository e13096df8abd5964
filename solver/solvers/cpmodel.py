"""CP-SAT's path model over the arcs, and the proto-level writes that keep building it fast.

Data -> model -> solve -> read back, as in OR-Tools' samples. One Boolean per arc (GPU, start,
end); every GPU takes exactly one arc (at most one with idle GPUs); flow is conserved at every
inner boundary, so the chosen arcs form one path from layer 0 to layer L. With the order as given,
GPU s must hand over to GPU s+1 at the same boundary. With a free order, identical GPUs start in
rig order (symmetry) and each host's stages form one run. ``host_limit`` is one linear constraint.
The levels that solve it in turn are ``solver.solvers.cpsat``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pandas as pd
from ortools.sat.python import cp_model

from solver.solvers import Stopped, check_deadline
from solver.solvers.arcs import Arcs
from solver.solvers.arcs import by_gpu as arcs_by_gpu

#: Variables written between two looks at the deadline (a million arcs take seconds to write).
VAR_CHUNK = 2**14


def build(arcs: Arcs, deadline: float | None = None) -> tuple[cp_model.CpModel, list]:
    """The path model: variables, one arc per GPU, flow conservation and symmetry breaking.

    Past ``deadline`` it raises Stopped: it looks at the clock between chunks of variables and
    between groups of constraints, and gives up after the first chunk when the model would not be
    written by then at that pace, so a model too large for the time left is given up, not
    finished."""

    def check() -> None:
        check_deadline(deadline)

    m = cp_model.CpModel()
    x: list = []
    t0 = time.perf_counter()
    for lo in range(0, len(arcs), VAR_CHUNK):
        check()
        x += list(m.new_bool_var_series("x", pd.RangeIndex(lo, min(len(arcs), lo + VAR_CHUNK))))
        pace = (time.perf_counter() - t0) / len(x)  # the constraints take about as long again
        if lo == 0 and deadline is not None and time.perf_counter() + 2 * pace * len(arcs) > deadline:
            raise Stopped
    xs = np.empty(len(x), dtype=object)
    xs[:] = x
    n, k = arcs.n_layers, arcs.n_gpus
    by_gpu = arcs_by_gpu(arcs)
    for g, ids in enumerate(by_gpu):
        if g % 64 == 0:
            check()
        (m.add_at_most_one if arcs.idle else m.add_exactly_one)(xs[ids].tolist())
    if arcs.host_limit is not None:
        bound_total(m, arcs.host, 0, arcs.host_limit)
    if arcs.order == "as-given" and not arcs.idle:
        for g in range(1, k):
            check()
            prev, cur = by_gpu[g - 1], by_gpu[g]
            for p in np.union1d(arcs.end[prev], arcs.start[cur]):
                into = xs[prev[arcs.end[prev] == p]].tolist()
                out = xs[cur[arcs.start[cur] == p]].tolist()
                m.add(cp_model.LinearExpr.sum(into) == cp_model.LinearExpr.sum(out))
    else:
        ending, starting = grouped(arcs.end, n + 1), grouped(arcs.start, n + 1)
        m.add(cp_model.LinearExpr.sum(xs[starting[0]].tolist()) == 1)
        for p in range(1, n):
            check()
            into, out = xs[ending[p]].tolist(), xs[starting[p]].tolist()
            if into or out:
                m.add(cp_model.LinearExpr.sum(into) == cp_model.LinearExpr.sum(out))
        if arcs.order == "as-given":  # idle GPUs as given: the next stage's GPU comes later in the rig
            for g in range(k):
                check()
                for p in np.unique(arcs.end[by_gpu[g]]):
                    if p < n:
                        into = xs[by_gpu[g][arcs.end[by_gpu[g]] == p]].tolist()
                        later = starting[p][arcs.gpu[starting[p]] > g]
                        m.add(cp_model.LinearExpr.sum(into) <= cp_model.LinearExpr.sum(xs[later].tolist()))
        for i, j in arcs.twins:
            check()
            _twin_order(m, xs, arcs, by_gpu[i], by_gpu[j])
        if arcs.n_hosts > 1 and (arcs.order == "auto" or priced(arcs)):
            m.entries = _host_runs(m, xs, arcs, check)  # in every time sum where ``priced``
    return m, x


def grouped(values: np.ndarray, size: int) -> list[np.ndarray]:
    """Arc numbers with each value 0..size-1 of ``values``, ascending: one sort for all of them."""
    order = np.argsort(values, kind="stable")
    cut = np.searchsorted(values[order], np.arange(size + 1))
    return [order[cut[v] : cut[v + 1]] for v in range(size)]


def priced(arcs: Arcs) -> bool:
    """Whether a plan's time holds ``entry_units`` per host run beyond its arcs: idle GPUs over hosts
    whose network hop differs from the hand-off (see ``solver.solvers.arcs``)."""
    return arcs.idle and arcs.entry_units != 0 and arcs.n_hosts > 1


def time_expr(m: cp_model.CpModel, x: list, a: Arcs) -> np.ndarray | cp_model.LinearExpr:
    """A plan's summed time: its arcs', plus ``entry_units`` per host entry where those are priced."""
    if not priced(a):
        return a.time
    entries = cp_model.LinearExpr.sum(m.entries)
    return cp_model.LinearExpr.weighted_sum(x, a.time.tolist()) + a.entry_units * entries


def bound_time(m: cp_model.CpModel, a: Arcs, hi: int) -> None:
    """Constraint: a plan's summed time (``time_expr``) is at most ``hi``."""
    extra = [(e.index, a.entry_units) for e in m.entries] if priced(a) else []
    bound_total(m, a.time, cp_model.INT_MIN, hi, extra)


def plan_time(arcs: Arcs, plan: np.ndarray) -> int:
    """``time_expr`` of a plan given as arc numbers: its host runs counted in stage order."""
    total = int(arcs.time[plan].sum())
    if priced(arcs):
        hosts = arcs.hosts[arcs.gpu[plan[np.argsort(arcs.start[plan])]]]
        total += arcs.entry_units * int(1 + np.count_nonzero(hosts[1:] != hosts[:-1]))
    return total


def time_slack(arcs: Arcs) -> int:
    """How far a plan's arc time alone may exceed its ``time_expr``: entries that pay back (a network hop
    cheaper than the hand-off) at most once per host."""
    return max(0, -arcs.entry_units) * arcs.n_hosts if priced(arcs) else 0


def _host_runs(m: cp_model.CpModel, xs: np.ndarray, arcs: Arcs, check: Callable[[], None]) -> list:
    """Each host's stages are one run. The run of host h enters at boundary p when an arc of h
    starts there and none of h ends there: e_h(p) = s_h(p) AND NOT t_h(p), linearised exactly
    (e >= s - t, e <= s, e <= 1 - t, with s and t 0/1 sums), and at most one entry per host.
    Returns every entry variable (their count is the plan's host runs)."""
    host = arcs.hosts[arcs.gpu]
    size = arcs.n_layers + 1
    starting = grouped(host * size + arcs.start, arcs.n_hosts * size)
    ending = grouped(host * size + arcs.end, arcs.n_hosts * size)
    every = []
    for h in range(arcs.n_hosts):
        check()
        entries = []
        for p in range(arcs.n_layers):
            starts = xs[starting[h * size + p]].tolist()
            if not starts:
                continue
            ends = xs[ending[h * size + p]].tolist()
            s, t = cp_model.LinearExpr.sum(starts), cp_model.LinearExpr.sum(ends)
            e = m.new_bool_var("")
            m.add(e >= s - t)
            m.add(e <= s)
            m.add(e <= 1 - t)
            entries.append(e)
        m.add(cp_model.LinearExpr.sum(entries) <= 1)
        every += entries
    return every


def _twin_order(
    m: cp_model.CpModel, xs: np.ndarray, arcs: Arcs, first: np.ndarray, second: np.ndarray
) -> None:
    """Identical GPUs in rig order: ``first`` starts before ``second``.

    Stated per boundary p over "started by p" variables (``second`` may have started by p only if
    ``first`` started before p), so the LP relaxation also excludes fractional mixes of a plan and
    its twin swap. A single weighted inequality start_first < start_second admitted such mixes, and
    proving a 4 x 128 tie set then ran past a minute; written over the arcs directly, this form
    put half a million terms in the model. Only boundaries where one of the two starts an arc get
    a variable (the others add nothing), each defined from the last, so a pruned table's model
    stays small: 24 GPUs x 256 layers built it 37 times in 30 s with every boundary.
    """
    where = np.union1d(arcs.start[first], arcs.start[second])
    if not len(where):
        return
    started = []
    for ids in (first, second):
        ids = ids[np.argsort(arcs.start[ids], kind="stable")]
        lo, hi = (
            np.searchsorted(arcs.start[ids], where),
            np.searchsorted(arcs.start[ids], where, side="right"),
        )
        by_start = [xs[ids[a:b]].tolist() for a, b in zip(lo, hi)]
        run = [m.new_bool_var("") for _ in where]
        for i, terms in enumerate(by_start):
            m.add(run[i] == (run[i - 1] if i else 0) + cp_model.LinearExpr.sum(terms))
        started.append(run)
    a, b = started
    m.add(b[0] == 0)
    for i in range(1, len(where)):
        m.add(b[i] <= a[i - 1])


def set_total(m: cp_model.CpModel, coeffs: np.ndarray, sense: str) -> None:
    """Objective ``sum coeffs[i] * x[i]`` written straight into the proto (the API's loop is slow)."""
    m.clear_objective()
    obj = m.proto.objective
    obj.vars.extend(range(len(coeffs)))
    if sense == "min":
        obj.coeffs.extend(coeffs.tolist())
    else:
        obj.coeffs.extend((-coeffs).tolist())
        obj.scaling_factor = -1


def bound_total(
    m: cp_model.CpModel, coeffs: np.ndarray, lo: int, hi: int, extra: list[tuple[int, int]] = ()
) -> None:
    """Constraint ``lo <= sum coeffs[i] * x[i] (+ the ``extra`` (variable, coefficient) terms) <= hi``,
    written straight into the proto."""
    linear = m.proto.constraints.add().linear
    linear.vars.extend(range(len(coeffs)))
    linear.coeffs.extend(coeffs.tolist())
    for var, coeff in extra:
        linear.vars.append(var)
        linear.coeffs.append(coeff)
    linear.domain.extend([lo, hi])


def read(arcs: Arcs, ids: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Chosen arc numbers -> (GPU of each stage, cut points)."""
    ids = ids[np.argsort(arcs.start[ids])]
    return tuple(int(g) for g in arcs.gpu[ids]), tuple(int(a) for a in arcs.start[ids][1:])
