"""A placement: its stages (each built from the fill its engine gives it), the window and held mass, its
prompt processing where the engine models it, and the rules every placement must keep. Engines evaluate
placements (solver.engines.base)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

from solver.problem.problem import Problem


@dataclass(frozen=True)
class StageFill:
    """What one stage holds, straight from the definition, in exact ints and float ms.

    held/visible count the cached items (strata: profile pairs; llama.cpp: expert tensors;
    resident: experts). ``offload`` lists the (layer, tensor names) llama.cpp leaves on the CPU.
    ``fits``: the stage's range and what it must hold fit the GPU (room >= 0, and for the resident
    engines every expert too). ``gpu_ms``: the stage's GPU time (None: its layers times the GPU's
    layer_ms); ``miss_ms`` is the rest of its time, of which ``switch_ms`` device switches.
    ``cpu_layers``: the first layers of the range that run wholly on the CPU (llama.cpp's ``-ngl``).
    """

    room: int
    cache_bytes: int
    held: int
    visible: int
    held_mass: float
    miss_ms: float
    host_bytes: int
    spare_tokens: int | None = None
    offload: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    fits: bool = True
    gpu_ms: float | None = None
    switch_ms: float = 0.0
    cpu_layers: int = 0


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: GPU ``gpu`` runs layers [start, end) and caches what fits; the first
    ``cpu_layers`` of them run wholly on the CPU instead (llama.cpp's ``-ngl``)."""

    gpu: int
    name: str
    start: int
    end: int
    room_bytes: int
    cache_bytes: int
    held_pairs: int
    visible_pairs: int
    held_mass: float
    compute_ms: float
    miss_ms: float = 0.0
    host_bytes: int = 0
    spare_tokens: int | None = None
    offload: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    fits: bool = True
    switch_ms: float = 0.0
    cpu_layers: int = 0

    @classmethod
    def of(cls, p: Problem, g: int, a: int, b: int, f: StageFill) -> Stage:
        """GPU g running layers [a, b) with fill ``f``; its compute is the fill's GPU time, or the
        layers times the GPU's ``layer_ms`` where the fill gives none."""
        return cls(
            gpu=g,
            name=p.gpu_names[g],
            start=a,
            end=b,
            room_bytes=f.room,
            cache_bytes=f.cache_bytes,
            held_pairs=f.held,
            visible_pairs=f.visible,
            held_mass=f.held_mass,
            compute_ms=(b - a) * float(p.layer_ms[g]) if f.gpu_ms is None else f.gpu_ms,
            miss_ms=f.miss_ms,
            switch_ms=f.switch_ms,
            host_bytes=f.host_bytes,
            spare_tokens=f.spare_tokens,
            offload=f.offload,
            fits=f.fits,
            cpu_layers=f.cpu_layers,
        )

    @property
    def stage_ms(self) -> float:
        """The stage's compute plus the misses of its own layers (what batched serving waits on)."""
        return self.compute_ms + self.miss_ms


@dataclass(frozen=True)
class PromptSpeed:
    """A placement's prompt processing, as an engine that models it predicts it (llama.cpp:
    solver.engines.llamacpp.prompt): ``prompt`` tokens in micro-batches of ``n_ubatch``, at
    ``tokens_per_s``, the first token after ``ttft_ms``; both None where the engine cannot say (a GPU
    whose matrix throughput is unknown). ``pipeline``: the stages overlap micro-batches;
    ``flash_attn``: the run's flash attention setting. Kept here, engine-neutral, so that the report
    shows it without asking which engine ran."""

    tokens_per_s: float | None
    ttft_ms: float | None
    prompt: int
    n_ubatch: int
    pipeline: bool
    flash_attn: bool = True

    def json(self) -> dict:
        """The keys a plan's, a default's or a scored command's JSON adds."""
        return {
            "pp_tokens_per_s": self.tokens_per_s,
            "ttft_ms": self.ttft_ms,
            "prompt": self.prompt,
            "n_ubatch": self.n_ubatch,
            "flash_attn": self.flash_attn,
        }


#: The prompt keys of a JSON report where there is no placement to give them.
NO_PROMPT_JSON = dict.fromkeys(("pp_tokens_per_s", "ttft_ms", "prompt", "n_ubatch", "flash_attn"))


@dataclass(frozen=True)
class Placement:
    """Stages in pipeline order, with the predicted window (ms) and held mass; ``prompt``: its prompt
    processing (None: the engine does not model it)."""

    stages: list[Stage]
    window_ms: float
    held_mass: float
    prompt: PromptSpeed | None = None

    @property
    def cuts(self) -> list[int]:
        return [s.start for s in self.stages[1:]]

    @property
    def gpus(self) -> list[int]:
        return [s.gpu for s in self.stages]

    @property
    def held_pairs(self) -> int:
        return sum(s.held_pairs for s in self.stages)

    @property
    def bottleneck_ms(self) -> float:
        """The slowest stage, which sets a batched pipeline's pace (a command that runs every layer on
        the CPU, as --fit chooses where no card can hold one, is one stage: the whole window)."""
        return max((s.stage_ms for s in self.stages), default=self.window_ms)

    @property
    def tokens_per_s(self) -> float:
        """Decode speed: one token per window."""
        return 1000.0 / self.window_ms if self.window_ms > 0 else float("inf")

    def request_ms(self, generate: int | None) -> float | None:
        """One request's ms: the prompt's time to first token, then ``generate`` windows (None where
        the prompt time is unknown or no request is asked)."""
        if generate is None or self.prompt is None or self.prompt.ttft_ms is None:
            return None
        return self.prompt.ttft_ms + generate * self.window_ms

    @property
    def host_bytes(self) -> int:
        """Bytes of experts the plan leaves in host memory (the engine reads misses from there)."""
        return sum(s.host_bytes for s in self.stages)

    @property
    def spare_tokens(self) -> int | None:
        """The smallest stage's spare KV tokens (None: no stage keeps per-token KV, or a stage
        does not fit at all)."""
        if not all(s.fits for s in self.stages):
            return None
        spare = [s.spare_tokens for s in self.stages if s.spare_tokens is not None]
        return min(spare) if spare else None


def bounds_ok(p: Problem, cuts: list[int] | tuple[int, ...]) -> bool:
    """Cuts strictly increasing inside (0, L) with one per stage boundary."""
    b = [0, *cuts, p.n_layers]
    return len(b) == p.n_gpus + 1 and all(x < y for x, y in pairwise(b))


def handoffs_ms(p: Problem, gpus: list[int]) -> float:
    """The boundaries' cost: ``network_handoff_ms`` where consecutive stages are on different hosts,
    ``handoff_ms`` where they share one."""
    hosts = p.hosts
    return sum(p.handoff_ms if hosts[g] == hosts[h] else p.network_ms for g, h in pairwise(gpus))


def feasible(p: Problem, plan: Placement) -> bool:
    """Every feasibility rule: layer counts within each GPU's limits, every stage fits, each GPU
    at most once (exactly once unless idle GPUs are allowed; in rig order as given), each host's stages
    one run, and the experts left in host memory within ``host_memory`` less what the engine itself
    takes there (``Problem.host_room``; none where the problem is ``held_only``)."""
    for i, s in enumerate(plan.stages):
        n = s.end - s.start
        low = max(int(p.min_layers[s.gpu]), p.first_stage_min_layers if i == 0 else 1)
        if not (low <= n <= p.max_layers[s.gpu]) or not s.fits:
            return False
    gpus = plan.gpus
    if len(set(gpus)) != len(gpus) or (not p.idle_gpus and len(gpus) != p.n_gpus):
        return False
    if p.order == "as-given" and gpus != sorted(gpus):
        return False
    runs = [int(h) for i, h in enumerate(p.hosts[gpus]) if i == 0 or h != p.hosts[gpus[i - 1]]]
    if len(runs) != len(set(runs)):
        return False
    room = 0 if p.held_only else p.host_room
    return room is None or plan.host_bytes <= room
