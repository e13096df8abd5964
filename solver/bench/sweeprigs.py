"""The sweep's synthetic rigs: real card types, an MoE model whose experts overfill the room, and a
routing profile, all drawn from one seed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

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

    from solver.problem.problem import Problem, estimate_layer_ms
    from solver.profiles.synth import SynthParams, synth_profile

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
class SweepGrid:
    """The sweep's points, every GPU order x GPU count x layer count, and what they share: experts per
    layer, the rig's shape, and how each is planned (``sweep_limit``: CP-SAT's seconds per plan)."""

    gpus: list[int]
    layers: list[int]
    experts: int
    sweep_limit: float
    kinds: int
    hosts: int
    network_ms: float
    orders: list[str]
    objective: str
    idle_gpus: bool

    @property
    def shape(self) -> SweepShape:
        return SweepShape(self.kinds, self.hosts, self.network_ms)

    def refused(self) -> str | None:
        """Why one of the GPU counts cannot have the grid's shape (SweepShape.check), or None."""
        return next((why for k in self.gpus if (why := self.shape.check(k))), None)

    def points(self) -> Iterator[SweepPoint]:
        """Each point with a layer for every GPU and two for the first (idle GPUs: two layers in all,
        on one GPU), its seed drawn from its size."""
        for order in self.orders:
            for k in self.gpus:
                for n in self.layers:
                    if n >= (2 if self.idle_gpus else k + 1):
                        yield SweepPoint(
                            k * 1000 + n,
                            k,
                            n,
                            self.experts,
                            order,
                            self.kinds,
                            self.hosts,
                            self.network_ms,
                            self.objective,
                            self.idle_gpus,
                        )

    def title(self) -> str:
        """What every point shares, for the sweep table's title."""
        kind_text = "every GPU a different card" if self.kinds == 0 else f"{self.kinds} card kinds"
        hosts_text = f" per host, {self.hosts} hosts {self.network_ms:g} ms apart" if self.hosts > 1 else ""
        idle = ", idle GPUs" if self.idle_gpus else ""
        plan_text = f"objective {self.objective}{idle}, time limit {self.sweep_limit:g} s"
        return f"{self.experts} experts per layer, {kind_text}{hosts_text}, {plan_text}"

    def as_json(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The ``--json`` object's ``sweep``: the grid and the points' ``rows``."""
        return {
            "experts": self.experts,
            "time_limit_s": self.sweep_limit,
            "rows": rows,
            "kinds": self.kinds,
            "hosts": self.hosts,
            "network_ms": self.network_ms,
            "orders": self.orders,
            "objective": self.objective,
            "idle_gpus": self.idle_gpus,
        }
