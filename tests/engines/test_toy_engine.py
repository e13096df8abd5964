"""A new engine is one module and one ``register`` line: a toy engine plans, reports and exports
through the same product path as the shipped ones, and builds its own fields of the problem, with
nothing else in moesplit changed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from solver.engines import REGISTRY, Engine, Resolved, StageFill, Weights, export_lines, register
from solver.engines.export import Flags
from solver.planning.planner import plan_rig
from solver.planning.resolve import load_problem
from solver.problem.problem import EngineFields
from solver.problem.rangewalk import need_table, room_of
from solver.problem.scales import SPARE_UNLIMITED
from solver.report.planview import to_json
from tests.helpers.factory import random_problem

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class ToyTable:
    """Every range holds only its dense layers; time is layers times layer_ms."""

    p: object
    need: np.ndarray
    room: np.ndarray

    def weigh(self, g, a, b, scale, mass):
        gpu = (b - a) * np.rint(self.p.layer_ms * scale).astype(np.int64)[g]
        zero = np.zeros(len(g), dtype=np.int64)
        return Weights(gpu, gpu, zero, zero, zero, np.full(len(g), SPARE_UNLIMITED, dtype=np.int64))

    def const_units(self, scale):
        return 0


@dataclasses.dataclass(frozen=True)
class ToyFields(EngineFields):
    """The toy engine's own field: the model's layer count, as it read it."""

    layers: int = 0


class Toy(Engine):
    name = "toy"
    note = "a test engine"

    def resolve_fields(self, rig, model, experts):
        return Resolved(ToyFields(layers=model.layers), buffers=[1] * len(rig.gpus))

    def table(self, p):
        need = need_table(p)
        return ToyTable(p, need, room_of(p, need))

    def stage_fill(self, p, g, a, b):
        return StageFill(p.room(g, a, b), 0, 0, 0, 1.0, 0.0, 0, fits=p.room(g, a, b) >= 0)

    def export(self, plan):
        return [Flags(("--toy-split", ",".join(map(str, plan.cuts))))]


@pytest.fixture
def toy():
    register(Toy())
    yield
    del REGISTRY["toy"]


@pytest.mark.parametrize("seed", range(5))
def test_a_registered_engine_plans_reports_and_exports(toy, seed):
    p = dataclasses.replace(random_problem(seed, tight=1.5), engine="toy")
    r = plan_rig(p, check=True)
    assert r.status == "optimal" and r.oracle.agrees
    compute = sum((s.end - s.start) * p.layer_ms[s.gpu] for s in r.plan.stages)
    assert r.plan.window_ms == pytest.approx(compute + p.handoff_ms * (p.n_gpus - 1))
    assert to_json(r)["engine"] == "toy"
    lines = export_lines("toy", r.plan.gpus, r.plan.cuts, p.n_layers)
    assert lines == [f"--toy-split {','.join(map(str, r.plan.cuts))}"]


def test_a_registered_engine_builds_its_own_fields_from_the_rig_and_model(toy, tmp_path):
    rig = tmp_path / "toy.yaml"
    text = (ROOT / "rigs/box.yaml").read_text().replace("model: ../models/", f"model: {ROOT}/models/")
    rig.write_text(text.replace("miss_ms: 190", "engine: toy"))
    p = load_problem(rig)
    assert p.engine_fields == ToyFields(layers=p.n_layers)
    assert ToyFields.of(p).layers == p.n_layers and p.reserve.tolist() == [700 * 2**20 + 1] * p.n_gpus
