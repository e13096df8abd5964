"""A free order solved exactly on the few arcs that Lagrangian bounds leave in play.

``solver.solvers.lagrange`` bounds, per arc, the best plan through it. Any plan whose value is at most X
uses only arcs whose bound is at most X, so the table cut at X holds every such plan, and an exact
solver run on the cut table returns the global answer as soon as every plan tied with its optimum
lies within X (the time objective's tie set ends at ``time_cap``; held mass compares exactly). The
rounds:

1. X = bound + delta; solve the cut table. No plan: delta grows fourfold, try again.
2. A plan of value v: if its tie set ends within X, it is the answer, ties and all. Else the
   prices are tightened with v as the step target and the table is cut at the tie set's end, which
   holds every plan at least as good; that solve is the answer.

On the sweep's 16 different cards x 128 layers this keeps 725 of 127,200 arcs and proves the
optimum in under 3 s, where CP-SAT on the whole table took 53 s. The exact solver on the cut table
is the DP where its class-count states are few, else CP-SAT; both run the whole tie-break chain.
Over several hosts the exact host split (``solver.solvers.hostsplit``) cuts instead, in one solve. The
throughput objective settles its slowest stage first (over hosts by the host split in the min-max
form, on one host by the capacity windows of ``solver.solvers.windows``), then cuts by time among the arcs
within it, by the same split or windows, exactly. Those exact values leave ``host_limit`` out: an
answer they lose to it falls back to the rounds. Idle GPUs are not pruned this way (``applies``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from solver.problem.scales import MASS_SCALE
from solver.solvers import Limits, Solution, hostsplit, lagrange, plan_arcs, stage_key, usable, windows
from solver.solvers.arcs import Arcs, Objective, subset
from solver.solvers.paths import narrow, path_minimax
from solver.solvers.policy import POLICY, Policy

Inner = Callable[[Arcs, Limits, Solution | None], Solution]
#: The throughput objective's least slowest-stage key on a whole table, proven (None: stopped), where
#: the exact cuts cannot settle it (a host-memory limit): CP-SAT's bisection, which the route supplies.
Top = Callable[[Arcs, Limits, Solution | None], int | None]


def applies(arcs: Arcs) -> bool:
    """Whether pruning by bounds is exact for this table: a free order using every GPU."""
    return arcs.order == "auto" and not arcs.idle and len(arcs) > 0


def solve_pruned(
    arcs: Arcs,
    limits: Limits,
    hint: Solution | None,
    inner: Inner,
    policy: Policy = POLICY,
    least_top: Top | None = None,
) -> Solution | None:
    """The exact plan by ``inner`` on the arcs the bounds keep; None when the bounds cannot be had
    (then the caller solves the whole table). ``limits.time_limit`` bounds every round together; a
    plan stopped short is "feasible" with a bound that holds for the whole table.

    Held mass first: when the hint already holds the most mass the bound allows (every plan that
    fits all the experts ties there), mass cannot cut, so the time level cuts instead, among the
    arcs a plan of that mass may use; otherwise the rounds cut by mass."""
    t0 = time.perf_counter()
    if limits.started is None:  # one clock for every round
        limits = dataclasses.replace(limits, started=t0)
    proven = None  # the objective's value, once settled (the throughput objective's slowest stage)
    if arcs.objective.minmax:
        keys = stage_key(arcs)
        top, low = _least_top(arcs, keys, limits, hint, inner, t0, policy, least_top)
        if top is None and low > keys.max():  # no plan at all, proven exactly
            return Solution("dp", "infeasible", wall_ms=(time.perf_counter() - t0) * 1e3)
        if top is None:
            if limits.left(t0) == 0:  # stopped: the hint, if any, with the slowest stage proven so far
                stop = Solution(hint.name if hint is not None else "cut", "unknown")
                return _stopped(arcs, stop, hint, 0, 0, low / 10**6)
            return None
        ids = usable(arcs, hint)
        if ids is None or keys[ids].max() > top:
            hint = None
        arcs = subset(arcs, keys <= top)  # every plan here is as fast as any; time decides among them
        proven = top / 10**6
    if arcs.n_hosts > 1:
        got = _split(arcs, limits, hint, inner, t0, proven, policy)
        if got is not None:
            return got
    elif arcs.objective.minmax:
        got = _window_cut(arcs, limits, hint, inner, t0, proven, policy)
        if got is not None:
            return got
    if not arcs.objective.maximises:
        return _rounds(arcs, arcs.time, arcs.time_cap, limits, hint, inner, t0, policy, proven=proven)
    known = _value(arcs, -arcs.mass, hint)
    prices = lagrange.prices(arcs, -arcs.mass, known, limits.deadline(t0), policy)
    if prices is None:
        return None
    if known is None or prices.bound < known:
        return _rounds(arcs, -arcs.mass, lambda v: v, limits, hint, inner, t0, policy, prices)
    most = lagrange.through(arcs, -arcs.mass, prices, policy) <= known  # the arcs of plans holding -known
    sub = subset(arcs, most)
    return _rounds(sub, arcs.time[most], arcs.time_cap, limits, hint, inner, t0, policy, held=-known)


def _least_top(
    arcs: Arcs,
    keys: np.ndarray,
    limits: Limits,
    hint: Solution | None,
    inner: Inner,
    t0: float,
    policy: Policy,
    whole: Top | None,
) -> tuple[int | None, int]:
    """The throughput objective's slowest stage key, proven, and the lower bound proven on the way;
    None for the key when the deadline stops it or the bounds are out of reach.

    Over hosts the host split in the min-max semiring answers, on one host the windowed min-max
    passes (``solver.solvers.windows``). Both leave out ``host_limit``: under one, their answer only bounds
    the key from below, and a bisection on a threshold settles it, its checks cut solves
    (``_within``), else ``whole`` (None: not settled here)."""
    low = path_minimax(arcs, keys, np.ones(len(arcs), dtype=bool))
    ids = usable(arcs, hint)
    high = None if ids is None else int(keys[ids].max())
    if arcs.n_hosts > 1:
        split = hostsplit.exact_through(arcs, keys, np.maximum, policy)
        top = None if split is None else split[0]
    else:
        top, low = windows.least_top(arcs, keys, low, high, limits.deadline(t0), policy)
    if top is not None:
        if arcs.host_limit is None:
            return top, top
        low = max(low, top)
    if limits.left(t0) == 0 or low > keys.max():
        return None, low
    values = np.unique(keys)
    lo = int(np.searchsorted(values, low))
    plan = hint if ids is not None else _within(arcs, keys, int(values[-1]), limits, inner, t0, policy)
    if plan is None:
        return (None if whole is None else whole(arcs, limits, hint)), low
    if not plan.found:
        return None, low  # no plan at all: the whole solve says why

    def probe(mid: int) -> int | None:  # a plan found within a threshold lowers the top to its own
        got = _within(arcs, keys, int(values[mid]), limits, inner, t0, policy)
        if got is None:
            return None
        return int(np.searchsorted(values, keys[_ids(arcs, got)].max())) if got.found else -1

    lo, done = narrow(lo, int(np.searchsorted(values, keys[_ids(arcs, plan)].max())), probe)
    if not done:
        return (None if whole is None else whole(arcs, limits, hint)), int(values[lo])
    return int(values[lo]), int(values[lo])


def _within(
    arcs: Arcs, keys: np.ndarray, top: int, limits: Limits, inner: Inner, t0: float, policy: Policy
) -> Solution | None:
    """A plan whose slowest stage key is at most ``top`` (the fastest such by time, found by cut
    rounds, which find plans far faster than a feasibility solve), an "infeasible" Solution if none,
    or None when that cannot be told (the deadline, or bounds out of reach)."""
    within = keys <= top
    sub = dataclasses.replace(subset(arcs, within), objective=Objective.TIME)
    if not len(sub) or path_minimax(sub, keys[within], np.ones(len(sub), dtype=bool)) > top:
        return Solution("cut", "infeasible")  # not even a relaxed path of k arcs
    got = _rounds(sub, sub.time, sub.time_cap, limits, None, inner, t0, policy, widen=policy.widen_any)
    if got is None or got.status not in ("optimal", "infeasible"):
        return None
    return got


def _split(
    arcs: Arcs,
    limits: Limits,
    hint: Solution | None,
    inner: Inner,
    t0: float,
    proven: float | None,
    policy: Policy,
) -> Solution | None:
    """Several hosts: cut at the optimum's tie set by the exact best plan through each arc
    (``solver.solvers.hostsplit``), one solve. None when the split's tables would be too large."""
    weight = -arcs.mass if arcs.objective.maximises else arcs.time
    split = hostsplit.exact_through(arcs, weight, policy=policy)
    if split is None:
        return None
    best, through = split
    cut = best if arcs.objective.maximises else arcs.time_cap(best)
    return _cut_solve(arcs, weight, best, through, cut, limits, hint, inner, t0, proven, "host split")


def _window_cut(
    arcs: Arcs,
    limits: Limits,
    hint: Solution | None,
    inner: Inner,
    t0: float,
    proven: float | None,
    policy: Policy,
) -> Solution | None:
    """One host, the throughput objective's slowest stage settled: cut at the tie set by the exact
    best time through each arc within the capacity windows (``solver.solvers.windows``), one solve. None
    when the windows are too wide."""
    split = windows.exact_through(arcs, arcs.time, limits.deadline(t0), policy)
    if split is None:
        return None
    best, through = split
    cut = arcs.time_cap(best)
    return _cut_solve(arcs, arcs.time, best, through, cut, limits, hint, inner, t0, proven, "windows")


def _cut_solve(
    arcs: Arcs,
    weight: np.ndarray,
    best: int,
    through: np.ndarray,
    cut: int,
    limits: Limits,
    hint: Solution | None,
    inner: Inner,
    t0: float,
    proven: float | None,
    how: str,
) -> Solution | None:
    """Solve the arcs whose exact best plan through them is within ``cut``, the tie set of the
    optimum ``best`` of summed ``weight``: every tied plan, and no other, uses only them. The exact
    values leave ``host_limit`` out, so an answer off that optimum (or none) means the limit cut it
    off: None, and the rounds answer."""
    keep = through <= cut
    got = inner(subset(arcs, keep), _clamped(limits, arcs, cut, best, proven), hint)
    got = _tagged(got, t0, pruned_arcs=int(keep.sum()), cut_by=how)
    if got.status == "optimal" and int(weight[_ids(arcs, got)].sum()) <= cut:
        return got
    if got.status in ("optimal", "infeasible"):
        return None
    return _stopped(arcs, got, hint, cut, best, proven)


def _rounds(
    arcs: Arcs,
    weight: np.ndarray,
    edge: Callable[[int], int],
    limits: Limits,
    hint: Solution | None,
    inner: Inner,
    t0: float,
    policy: Policy,
    prices: lagrange.Prices | None = None,
    held: int | None = None,
    proven: float | None = None,
    widen: int = 4,
) -> Solution | None:
    """Cut ``arcs`` by the Lagrangian bound on summed ``weight`` and solve, widening the cut until
    the answer's tie set (plans of summed weight up to ``edge(value)``) lies within it.

    ``held``: every answer must hold this mass (the mass objective's time level); a cut whose answer
    holds less has lost those plans and widens (``widen``-fold). ``proven``: the objective's settled
    value (held mass, slowest stage ms), the bound a stopped answer reports. None when the bounds
    cannot be had."""
    proven = held / MASS_SCALE if held is not None else proven
    known = _value(arcs, weight, hint)
    prices = prices or lagrange.prices(arcs, weight, known, limits.deadline(t0), policy)
    if prices is None:
        return None
    through = lagrange.through(arcs, weight, prices, policy)
    margin = max(10 * arcs.coarse, int(abs(prices.bound) * policy.first_margin))
    while True:
        cut = prices.bound + margin if known is None else min(prices.bound + margin, edge(known))
        keep = through <= cut
        got = inner(subset(arcs, keep), _clamped(limits, arcs, cut, prices.bound, proven), hint)
        lost = held is not None and got.found and int(arcs.mass[_ids(arcs, got)].sum()) < held
        if got.found and got.status == "optimal" and not lost:
            value = int(weight[_ids(arcs, got)].sum())
            if edge(value) > cut:  # plans tied with it may lie outside: cut at its tie set's end
                tighter = lagrange.prices(arcs, weight, value, limits.deadline(t0), policy)
                if tighter is not None and tighter.bound > prices.bound:
                    prices, through = tighter, lagrange.through(arcs, weight, tighter, policy)
                cut, hint = edge(value), got
                keep = through <= cut
                got = inner(subset(arcs, keep), _clamped(limits, arcs, cut, prices.bound, proven), hint)
        got = _tagged(got, t0, pruned_arcs=int(keep.sum()), cut_by="lagrange")
        if (got.status == "infeasible" or lost) and not keep.all():
            margin *= widen  # nothing good enough within the cut: widen it
            continue
        if got.status in ("optimal", "infeasible"):
            return got
        return _stopped(arcs, got, hint, cut, prices.bound, proven)


def _ids(arcs: Arcs, plan: Solution) -> np.ndarray:
    return plan_arcs(arcs, plan.gpus, plan.cuts)


def _value(arcs: Arcs, weight: np.ndarray, plan: Solution | None) -> int | None:
    """A plan's summed weight, None when there is none or it breaks the host-memory limit."""
    ids = usable(arcs, plan)
    return None if ids is None else int(weight[ids].sum())


def _global(arcs: Arcs, inner_bound: float | None, cut: int, lowest: int, proven: float | None) -> float:
    """A bound for the whole table from one the cut table proved: a plan outside the cut weighs more
    than ``cut``, and none weighs less than the Lagrangian ``lowest``. In the objective's units;
    ``proven``: the objective's value, settled before the cut (then that is the bound)."""
    if proven is not None:
        return proven
    if arcs.objective.maximises:
        outside, best = -(cut + 1) / MASS_SCALE, -lowest / MASS_SCALE
        return best if inner_bound is None else min(best, max(inner_bound, outside))
    outside, best = arcs.window_ms(cut + 1), arcs.window_ms(lowest)
    return best if inner_bound is None else max(best, min(inner_bound, outside))


def _clamped(limits: Limits, arcs: Arcs, cut: int, lowest: int, proven: float | None) -> Limits:
    """The limits with progress bounds made valid for the whole table (see ``_global``)."""
    report = limits.progress
    if report is None:
        return limits

    def progress(what: str, incumbent: float, bound: float) -> None:
        report(what, incumbent, _global(arcs, bound, cut, lowest, proven))

    return dataclasses.replace(limits, progress=progress)


def _tagged(got: Solution, t0: float, **work: int | str) -> Solution:
    """``got`` with the pruned path's wall time and what it did (``Work`` fields) added."""
    wall_ms = (time.perf_counter() - t0) * 1e3
    return dataclasses.replace(got, wall_ms=wall_ms, work=dataclasses.replace(got.work, **work))


def _stopped(
    arcs: Arcs, got: Solution, hint: Solution | None, cut: int, lowest: int, proven: float | None
) -> Solution:
    """The time limit ran out: the best plan found (or the hint) as feasible, with a global bound."""
    best = got if got.found else hint
    if best is None or not best.found:
        return dataclasses.replace(got, status="unknown")
    bound = _global(arcs, got.bound if got.found else None, cut, lowest, proven)
    done = {"wall_ms": got.wall_ms, "work": got.work, "reason": got.reason}
    return dataclasses.replace(best, name=got.name, status="feasible", bound=bound, **done)
