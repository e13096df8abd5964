"""The llama.cpp memory model (solver.engines.llamacpp.memory) against what ``llama-fit-params
--fit-print on`` printed for 528 random commands over 11 models of every architecture it rebuilds
(tests/fixtures/llama-memory.json, written by scripts/llama-memory-fixture.py): each device's and the
host's context and compute MiB, from the geometry ``solve model from-gguf`` reads, without the binary."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.engines import engine_of
from solver.engines.llamacpp import memory
from solver.engines.llamacpp.fields import LlamaFields
from solver.files.config import ModelConfig
from solver.importers.hf import read_hf
from solver.planning.resolve import Overrides, load_problem
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "llama-memory.json"
MiB = 2**20


@cache
def _data() -> dict:
    return json.loads(FIXTURE.read_text())


@cache
def geometry(key: str) -> memory.Geometry:
    """The memory model's geometry of a fixture model, through the model file's schema."""
    entry = _data()["models"][key]
    model = ModelConfig.model_validate({**entry, "expert_bytes": 1})
    g = memory.geometry(model)
    assert g is not None
    return g


def parse(args: Sequence[str], n_devices: int) -> tuple[memory.Placement, memory.Flags]:
    """Placement and flags of a fit-params argument list (``-ngl -ts -ot -c -b -ub -fa -ctk -ctv``)."""
    opts = dict(zip(args[::2], args[1::2]))
    ts = tuple(float(x) for x in opts["-ts"].split(",")) if "-ts" in opts else None
    ot = tuple(tuple(item.rsplit("=", 1)) for item in opts["-ot"].split(",")) if "-ot" in opts else ()
    ngl = int(opts.get("-ngl", -1))
    placement = memory.Placement(n_devices, -1 if ngl >= 999 else ngl, ts, ot)  # type: ignore[arg-type]
    flags = memory.Flags(
        n_ctx=int(opts.get("-c", 4096)),
        n_batch=int(opts.get("-b", 2048)),
        n_ubatch=int(opts.get("-ub", 512)),
        flash_attn=opts.get("-fa", "on") != "off",
        type_k=opts.get("-ctk", "f16"),
        type_v=opts.get("-ctv", "f16"),
    )
    return placement, flags


def predicted(row: dict) -> dict[str, tuple[int, int]]:
    """Context and compute MiB per device name (``RPC0``, ...) and ``Host``, truncated as fit-print does."""
    placement, flags = parse(row["args"], row["n_devices"])
    est = memory.estimate(geometry(row["model"]), placement, flags)
    out = {f"RPC{d}": (u.context // MiB, u.compute // MiB) for d, u in enumerate(est.devices)}
    out["Host"] = (est.host.context // MiB, est.host.compute // MiB)
    return out


def agrees(pred: int, meas: int) -> bool:
    """Within max(2 %, 64 MiB)."""
    return abs(pred - meas) <= max(0.02 * meas, 64)


def _measured() -> list[dict]:
    return [r for r in _data()["rows"] if "measured" in r]


def test_fixture_covers_every_architecture() -> None:
    archs = {m["geometry"]["arch"] for m in _data()["models"].values()}
    assert archs == {"qwen3moe", "qwen3next", "deepseek2", "gpt-oss", "glm4moe", "llama", "llama4"}
    assert len(_measured()) >= 200
    assert any(m["nextn_layers"] for m in _data()["models"].values())  # GLM-4.5-Air's MTP block


#: The model whose recorded commands the quick tier replays (every architecture's run in the full suite;
#: the quick tier checks the role buffers of four other models).
QUICK_MODELS = {"gpt-oss-20b"}


@pytest.mark.parametrize(
    "key",
    [k if k in QUICK_MODELS else pytest.param(k, marks=pytest.mark.slow) for k in sorted(_data()["models"])],
)
def test_every_command_agrees(key: str) -> None:
    """Every device line and the host line of every command of this model: context and compute within
    max(2 %, 64 MiB) of fit-print (they are in fact exact to the MiB)."""
    rows = [r for r in _measured() if r["model"] == key]
    assert rows
    for row in rows:
        pred = predicted(row)
        for name, (_, ctx, comp) in row["measured"].items():
            assert agrees(pred[name][0], ctx) and agrees(pred[name][1], comp), (row["args"], name)
            assert pred[name] == (ctx, comp), (row["args"], name, pred[name], (ctx, comp))


def test_refusals_are_foreseen() -> None:
    """The commands llama.cpp refused are the ones ``memory.refusal`` names, and no others."""
    for r in _data()["rows"]:
        _, flags = parse(r["args"], r["n_devices"])
        assert (memory.refusal(geometry(r["model"]), flags) is not None) == ("error" in r), r["args"]


#: The Hugging Face config of each fixture model that tests/fixtures/hf has.
HF_CONFIGS = {
    "glm-4.5-air": "glm-4.5-air", "gpt-oss-120b": "gpt-oss-120b", "qwen3-next-80b-a3b": "qwen3-next-80b-a3b",
    "deepseek-v3": "deepseek-v3", "qwen3-30b-a3b": "qwen3-30b-a3b", "qwen3-235b-a22b": "qwen3-235b-a22b",
    "mixtral-8x22b": "mixtral-8x22b", "llama-4-scout": "llama-4-scout-17b-16e",
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(HF_CONFIGS))
def test_from_hf_geometry_gives_the_same_memory(key: str) -> None:
    """``solve model from-hf``'s geometry of the same model gives fit-print's figures too (the first
    two measured commands of the model)."""
    m = read_hf(ROOT / "tests" / "fixtures" / "hf" / f"{HF_CONFIGS[key]}.json", "Q4_K_M")
    entry = _data()["models"][key]
    model = ModelConfig.model_validate({**entry, "geometry": m.geometry, "expert_bytes": 1})
    g = memory.geometry(model)
    assert g is not None
    for row in [r for r in _measured() if r["model"] == key][:2]:
        placement, flags = parse(row["args"], row["n_devices"])
        est = memory.estimate(g, placement, flags)
        for d, u in enumerate(est.devices):
            assert (u.context // MiB, u.compute // MiB) == tuple(row["measured"][f"RPC{d}"][1:])


@pytest.mark.parametrize("key", ["qwen3-30b-a3b", "deepseek-v3", "qwen3-next-80b-a3b", "gpt-oss-120b"])
def test_a_role_buffer_does_not_depend_on_the_layers_it_runs(key: str) -> None:
    """What the plan counts for each role (three devices split evenly) is what the device of that role
    takes in other splits over 2-4 devices, with pipeline parallelism on (no override), and is an upper
    bound with it off (an override that moves no weight)."""
    g = geometry(key)
    flags = memory.Flags(32768)
    roles = memory.role_compute(g, flags)
    for split in ((1, 5), (5, 1, 1), (1, 1, 6), (2, 3, 1, 4)):
        for overrides in ((), (("^$", "CPU"),)):
            got = memory.compute_bytes(
                g, memory.Placement(len(split), tensor_split=split, overrides=overrides), flags
            )
            figures = [got[0], *got[1 : len(split) - 1], got[len(split) - 1]]
            bound = [roles.first, *[roles.middle] * (len(split) - 2), roles.last]
            if overrides:
                assert all(f <= b for f, b in zip(figures, bound)), (split, figures, bound)
            else:
                assert figures == bound, (split, figures, bound)


def test_plans_count_each_role_and_the_export_writes_the_flags() -> None:
    """A llama.cpp rig over a model with a geometry: every GPU keeps the middle role's buffer, the
    first and last stages what their roles take beyond it; -ub and -fa reach the export."""
    rig = ROOT / "rigs" / "two-hosts.yaml"
    p = load_problem(rig, Overrides(n_ubatch=1024, flash_attn="off"))
    pm = LlamaFields.of(p).llama_memory
    assert isinstance(pm, memory.PlanMemory) and pm.flags.n_ubatch == 1024 and not pm.flags.flash_attn
    roles = memory.role_compute(pm.geometry, pm.flags)
    assert set(pm.buffers) == {roles.middle}
    assert pm.first_extra == max(roles.first - roles.middle, 0)
    assert pm.last_extra == max(roles.last - roles.middle, 0)
    launch = engine_of(p).launch(p)
    assert (launch.n_ubatch, launch.flash_attn) == (1024, False)
    done = CliRunner().invoke(cli, [str(rig), "--ubatch", "4096", "--export", "llama.cpp"])
    assert done.exit_code == 0 and "-b 4096 -ub 4096" in done.output
    done = CliRunner().invoke(cli, [str(rig), "--kv-type", "q8_0", "--flash-attn", "off"])
    assert done.exit_code == 2 and "flash_attn" in done.output
