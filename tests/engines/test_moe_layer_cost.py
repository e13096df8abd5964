"""llama.cpp's fixed cost per MoE layer (``moe_layer_ms``): paid on a GPU for each layer whose expert
tensors it runs, in the share of the layer's tensors it holds, and nowhere else; a rig key of
llama.cpp's, with its default where the rig leaves it out."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from solver.engines import engine_of
from solver.engines.bandwidth import MOE_LAYER_MS, speed_of, with_constants
from solver.planning.resolve import Overrides, load_problem
from solver.problem.problem import Problem

ROOT = Path(__file__).resolve().parents[2]
RIG = ROOT / "rigs" / "llama-mix.yaml"


def window(p: Problem, words: str) -> float:
    engine = engine_of(p)
    return engine.score(p, engine.read_command(words.split())).window_ms


@pytest.fixture(scope="module")
def p() -> Problem:
    return load_problem(RIG)


def extra_ms(p: Problem, words: str) -> float:
    """What the default cost adds to the command's window."""
    return window(p, words) - window(with_constants(p, moe_layer_ms=0.0), words)


def test_the_default_is_llama_cpps(p: Problem) -> None:
    assert speed_of(p).moe_layer_ms == MOE_LAYER_MS


def test_every_layer_on_the_gpus_pays_it_once(p: Problem) -> None:
    moe_layers = int((p.experts_per_layer > 0).sum())
    assert math.isclose(extra_ms(p, "-ngl 99"), MOE_LAYER_MS * moe_layers, rel_tol=1e-9)


def test_experts_on_the_cpu_pay_none_of_it(p: Problem) -> None:
    assert abs(extra_ms(p, "-ngl 99 --cpu-moe")) < 1e-9


def test_a_layer_pays_the_share_of_its_tensors_the_gpu_holds(p: Problem) -> None:
    """-ncmoe 10 takes 10 layers' experts off; one tensor kind of 4 more layers takes a third of each."""
    moe_layers = int((p.experts_per_layer > 0).sum())
    assert math.isclose(extra_ms(p, "-ngl 99 -ncmoe 10"), MOE_LAYER_MS * (moe_layers - 10), rel_tol=1e-9)
    rule = r"blk\.(10|11|12|13)\.ffn_down_exps=CPU"
    expected = MOE_LAYER_MS * (moe_layers - 10 - 4 / 3)
    assert math.isclose(extra_ms(p, f"-ngl 99 -ot {rule} -ncmoe 10"), expected, rel_tol=1e-9)


def test_the_rig_key_sets_it(tmp_path: Path) -> None:
    rig = tmp_path / "rig.yaml"
    text = RIG.read_text().replace("engine: llama.cpp", "engine: llama.cpp\nmoe_layer_ms: 0.1")
    rig.write_text(text.replace("../models/", f"{ROOT / 'models'}/"))
    q = load_problem(rig, Overrides())
    assert speed_of(q).moe_layer_ms == 0.1
    moe_layers = int((q.experts_per_layer > 0).sum())
    assert math.isclose(extra_ms(q, "-ngl 99"), 0.1 * moe_layers, rel_tol=1e-9)
