"""The class-count DP's levels and passes: a stage number per level with the order as given, the
counts of GPUs used per class with a free order (GPUs with identical arcs are interchangeable).

Costs are pairs (mass, time) compared lexicographically (more mass first, then less time; mass is 0
unless the objective is mass). ``Graph`` runs the forward and backward passes (sparse steps, or
dense min-plus blocks where a free order's arcs fill them), the min-max pass and the trace back;
``solver.solvers.dp`` settles the whole chain with them. ``refusal`` says which tables it declines.
"""

from __future__ import annotations

import math

import numpy as np

from solver.solvers import TooLarge, check_deadline
from solver.solvers.arcs import Arcs
from solver.solvers.arcs import by_gpu as arcs_by_gpu
from solver.solvers.paths import BIG, NONE, Radix, best_per
from solver.solvers.policy import POLICY, Policy


def arc_classes(arcs: Arcs) -> np.ndarray:
    """Class of each GPU, shape (k,), numbered from 0 in rig order: GPUs with identical arcs share one."""
    seen: dict[bytes, int] = {}
    out = np.empty(arcs.n_gpus, dtype=np.int64)
    fields = (arcs.start, arcs.end, arcs.time, arcs.mass, arcs.bottleneck, arcs.stage, arcs.spare, arcs.host)
    for g, on in enumerate(arcs_by_gpu(arcs)):
        key = np.stack([f[on] for f in fields]).tobytes()
        out[g] = seen.setdefault(key, len(seen))
    return out


def dp_states(arcs: Arcs) -> int:
    """DP states per boundary: k + 1 with the order as given, else the class-count states."""
    if arcs.order == "as-given":
        return arcs.n_gpus + 1
    return math.prod(int(m) + 1 for m in np.bincount(arc_classes(arcs)))


def refusal(arcs: Arcs, policy: Policy = POLICY) -> str | None:
    """Why the DP does not take this table (None: it does, unless a host-memory limit its optimum
    breaks turns up once it has run). A free order's class-count states and dense tables are bounded
    by ``policy``; plans that differ in the GPUs they use are the host/idle DP's."""
    if arcs.subsets:
        return "plans differ in the GPUs they use (idle GPUs, or a free order over hosts)"
    if arcs.order == "as-given":
        return None
    mult = np.bincount(arc_classes(arcs))
    states = math.prod(int(m) + 1 for m in mult)  # Python ints: 64 classes overflow int64
    if states > policy.max_states_free_order:
        return f"the free-order DP takes at most {policy.max_states_free_order:,} states, not {states:,}"
    cells = len(mult) * (arcs.n_layers + 1) ** 2
    if cells > policy.max_dense_cells:
        return f"the free-order DP's tables would hold {cells:,} cells, over {policy.max_dense_cells:,}"
    return None


class Graph:
    """Levels of the DP (stage number, or counts of GPUs used per class) and the arcs between them."""

    def __init__(self, arcs: Arcs, deadline: float | None = None, policy: Policy = POLICY):
        self.arcs, self.deadline = arcs, deadline
        self.free_order = arcs.order == "auto"
        k = arcs.n_gpus
        why = refusal(arcs, policy)
        if why is not None:
            raise TooLarge(why)
        by_gpu = arcs_by_gpu(arcs)
        if not self.free_order:
            self.by_link = by_gpu
            self.levels = list(range(k + 1))
        else:
            cls = arc_classes(arcs)
            self.members = [np.flatnonzero(cls == c) for c in range(cls.max() + 1)]
            self.mult = np.array([len(m) for m in self.members])
            radix = Radix(self.mult)
            states, self.stride, self.counts = radix.size, radix.stride, radix.counts
            self.by_link = [by_gpu[m[0]] for m in self.members]  # one GPU's arcs stand for its class
            self.levels = list(range(states))
        self.final = self.levels[-1]
        self.lexicographic = bool(arcs.mass.any())  # else every mass is 0 and only time counts
        self.alive: dict[int, np.ndarray] | None = None  # see narrow()

    def narrow(self, forward: dict, allowed: np.ndarray, good) -> None:
        """Keep, for every later pass, only the (level, boundary) nodes that some plan meeting ``good``
        passes through (forward and backward values together meet it): the tie-break passes ask only
        about such plans over fewer arcs, so no other node can matter. On a 10-card x 130-layer free
        order a quarter of the reachable nodes stay, each level's in one run of boundaries, so the
        dense steps shrink to those runs."""
        backward = self.backward(allowed)
        self.alive = {}
        for level, (fm, ft) in forward.items():
            if level in backward:
                bm, bt = backward[level]
                self.alive[level] = (fm >= 0) & (bm >= 0) & good(fm + bm, ft + bt)

    def leaving(self, level: int) -> list[tuple[int, int]]:
        """(next level, link) for the links whose arcs can follow a state at ``level``."""
        if not self.free_order:
            return [(level + 1, level)] if level < self.arcs.n_gpus else []
        open_ = np.flatnonzero(self.counts[level] < self.mult)
        return [(level + int(self.stride[c]), int(c)) for c in open_]

    def entering(self, level: int) -> list[tuple[int, int]]:
        """(previous level, link) for the links whose arcs lead into ``level``."""
        if not self.free_order:
            return [(level - 1, level - 1)] if level > 0 else []
        used = np.flatnonzero(self.counts[level] > 0)
        return [(level - int(self.stride[c]), int(c)) for c in used]

    def gpu_of(self, level: int, link: int) -> int:
        """The GPU that runs the link's arc from ``level``: in a class, its next unused member."""
        if not self.free_order:
            return link
        return int(self.members[link][self.counts[level][link]])

    def _links(self, allowed: np.ndarray, backward: bool) -> list[tuple]:
        """Each link's allowed arcs, to step a state's values by one more arc.

        Sparse, ("arcs", from boundary, to boundary, mass, time) with forward from = start; or,
        where the arcs fill much of their block of boundaries (a free order's usual case), dense
        ("block", first row, first column, mass, time) matrices indexed [from, to], mass -BIG and
        time BIG where there is no arc. Dense steps are min-plus products, which numpy does far
        faster than sorting each state's candidate arcs; a fixed order has only k + 1 levels and
        a sparse long model never needs (L+1)^2 tables.
        """
        a, out = self.arcs, []
        for ids in self.by_link:
            ids = ids[allowed[ids]]
            src, dst = (a.end[ids], a.start[ids]) if backward else (a.start[ids], a.end[ids])
            if not len(ids):
                out.append(("arcs", src, dst, a.mass[ids], a.time[ids]))
                continue
            r0, c0 = int(src.min()), int(dst.min())
            shape = (int(src.max()) + 1 - r0, int(dst.max()) + 1 - c0)
            if not self.free_order or 64 * len(ids) < shape[0] * shape[1]:
                out.append(("arcs", src, dst, a.mass[ids], a.time[ids]))
                continue
            mass = np.full(shape, -BIG, dtype=np.int64)
            cost = np.full(shape, BIG, dtype=np.int64)
            mass[src - r0, dst - c0], cost[src - r0, dst - c0] = a.mass[ids], a.time[ids]
            out.append(("block", r0, c0, mass, cost))
        return out

    def forward(self, allowed: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Best (mass, time) from the start to every (level, boundary)."""
        return self._sweep(self._links(allowed, False), self.levels, self.entering, 0)

    def backward(self, allowed: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Best (mass, time) from every (level, boundary) to the end."""
        return self._sweep(self._links(allowed, True), self.levels[::-1], self.leaving, self.arcs.n_layers)

    def _step(
        self, link: tuple, lm: np.ndarray, lt: np.ndarray, span: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Best (mass, time) per boundary after one more arc of ``link`` from the values (lm, lt),
        computed for the boundaries in ``span`` (a dense block's columns outside it are skipped)."""
        n = len(lm)
        if link[0] == "arcs":
            _, src, dst, mass, cost = link
            ok = lm[src] >= 0
            return best_per(dst[ok], lm[src[ok]] + mass[ok], lt[src[ok]] + cost[ok], n)
        m, t = np.full(n, NONE, dtype=np.int64), np.full(n, BIG, dtype=np.int64)
        _, r0, c0, mass, cost = link
        reach = np.flatnonzero(lm[r0 : r0 + len(mass)] >= 0)
        if not len(reach):
            return m, t
        lo, hi = int(reach[0]), int(reach[-1]) + 1  # rows as a slice of the block: views, no copies
        rows = slice(r0 + lo, r0 + hi)
        first, last = max(c0, span[0]), min(c0 + mass.shape[1], span[1])
        if first >= last:
            return m, t
        cols, inside = slice(first, last), slice(first - c0, last - c0)
        if self.lexicographic:  # no arc has mass -BIG, so sums through a missing arc stay negative
            cm = np.where(lm[rows] >= 0, lm[rows], -BIG)[:, None] + mass[lo:hi, inside]
            m[cols] = cm.max(axis=0)
            t[cols] = np.where(cm == m[None, cols], lt[rows, None] + cost[lo:hi, inside], BIG).min(axis=0)
            m[m < 0] = NONE
        else:
            t[cols] = (np.where(lm[rows] >= 0, lt[rows], BIG)[:, None] + cost[lo:hi, inside]).min(axis=0)
            m = np.where(t < BIG // 2, 0, NONE)
        return m, np.where(m >= 0, t, BIG)

    def _sweep(self, links: list, levels: list[int], linked_by, origin: int) -> dict:
        """One DP pass over ``levels``: a state's best is the best of its linked states plus an arc.

        ``linked_by(level)`` gives (linked level, link); the link's arcs carry the linked state's
        values from one boundary to the next. Returns level -> (mass, time) per boundary.
        """
        n = self.arcs.n_layers + 1
        first = np.full(n, NONE, dtype=np.int64)
        first[origin] = 0
        table = {levels[0]: (first, np.zeros(n, dtype=np.int64))}
        for i, level in enumerate(levels[1:]):
            if i % 16 == 0:
                check_deadline(self.deadline)
            best_m = np.full(n, NONE, dtype=np.int64)
            best_t = np.full(n, BIG, dtype=np.int64)
            alive = None if self.alive is None else self.alive.get(level)
            if alive is not None and not alive.any():
                continue
            on = np.flatnonzero(alive) if alive is not None else None
            span = (0, n) if on is None else (int(on[0]), int(on[-1]) + 1)
            for linked, link in linked_by(level):
                if linked in table:
                    m, t = self._step(links[link], *table[linked], span)
                    better = (m > best_m) | ((m == best_m) & (t < best_t))
                    best_m, best_t = np.where(better, m, best_m), np.where(better, t, best_t)
            if alive is not None:
                best_m[~alive], best_t[~alive] = NONE, BIG
            if (best_m >= 0).any():
                table[level] = (best_m, best_t)
        return table

    def minimax(self, weight: np.ndarray, allowed: np.ndarray) -> int | None:
        """The smallest max ``weight`` over the arcs of a whole plan on ``allowed`` arcs, or None.

        One forward pass in the (min, max) semiring over the same levels: a bottleneck path."""
        a, n = self.arcs, self.arcs.n_layers + 1
        first = np.full(n, BIG, dtype=np.int64)
        first[0] = -BIG
        table = {self.levels[0]: first}
        for i, level in enumerate(self.levels[1:]):
            if i % 16 == 0:
                check_deadline(self.deadline)
            best = np.full(n, BIG, dtype=np.int64)
            for linked, link in self.entering(level):
                if linked not in table:
                    continue
                came = table[linked]
                ids = self.by_link[link]
                ids = ids[allowed[ids] & (came[a.start[ids]] < BIG)]
                np.minimum.at(best, a.end[ids], np.maximum(came[a.start[ids]], weight[ids]))
            if (best < BIG).any():
                table[level] = best
        last = table.get(self.final)
        return None if last is None or last[-1] >= BIG else int(last[-1])

    def placement(self, plan: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(GPU of each stage, cuts) of a traced plan: with a free order its arcs are those of each
        class's first GPU, so a class's stages take its GPUs in rig order."""
        a = self.arcs
        plan = sorted(plan, key=lambda i: int(a.start[i]))
        if not self.free_order:
            gpus = [int(a.gpu[i]) for i in plan]
        else:
            first = {int(m[0]): c for c, m in enumerate(self.members)}
            used = [0] * len(self.members)
            gpus = []
            for i in plan:
                c = first[int(a.gpu[i])]
                gpus.append(int(self.members[c][used[c]]))
                used[c] += 1
        return tuple(gpus), tuple(int(a.start[i]) for i in plan[1:])

    def optimum(self, allowed: np.ndarray) -> tuple[int, int] | None:
        """Best (mass, time) of a whole plan using only ``allowed`` arcs."""
        got = self.best_plan(allowed, trace=False)
        return None if got is None else got[:2]

    def best_plan(
        self, allowed: np.ndarray, trace: bool = True, table: dict | None = None
    ) -> tuple[int, int, list[int]] | None:
        """Best (mass, time) of a whole plan on ``allowed`` arcs and, traced back, the arcs of one
        (``table``: this very forward pass, if already made)."""
        table = self.forward(allowed) if table is None else table
        if self.final not in table or table[self.final][0][-1] < 0:
            return None
        a = self.arcs
        m, t = int(table[self.final][0][-1]), int(table[self.final][1][-1])
        level, at, plan = self.final, a.n_layers, []
        while trace and at > 0:  # a predecessor whose value plus the arc makes this one exists
            for linked, link in self.entering(level):
                if linked not in table:
                    continue
                lm, lt = table[linked]
                ids = self.by_link[link]
                ids = ids[allowed[ids] & (a.end[ids] == at)]
                ok = (lm[a.start[ids]] >= 0) & (lm[a.start[ids]] + a.mass[ids] == m)
                ok &= lt[a.start[ids]] + a.time[ids] == t
                if ok.any():
                    i = int(ids[ok][0])
                    plan.append(i)
                    level, at, m, t = linked, int(a.start[i]), m - int(a.mass[i]), t - int(a.time[i])
                    break
        return int(table[self.final][0][-1]), int(table[self.final][1][-1]), plan
