"""An engine's own rig keys live beside it (an ``EngineKeys`` model): the rig file keeps them flat
beside the common keys, each is checked with the file at its own line whichever engine the rig names,
a key no engine declares is refused as unknown, and a new engine adds keys without touching
solver.files.config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solver.engines import REGISTRY, Engine, Resolved
from solver.engines.llamacpp.fields import LlamaFields
from solver.engines.strata import StrataFields
from solver.errors import InputError
from solver.files.cards import cards
from solver.files.config import Count, EngineKeys, NonNegMs, check_rig, rig_schema
from solver.files.yamlfile import parse_yaml
from solver.planning.resolve import load_problem
from tests.helpers.clirun import input_error, invoke, key_line
from tests.helpers.rigfiles import DEFAULT_GPUS, tiny_rig

ROOT = Path(__file__).resolve().parents[2]


def shipped(name: str, folder: Path, extra: str = "", gpu: tuple[int, str] | None = None) -> Path:
    """A copy of a shipped rig in ``folder`` with its model by absolute path, ``extra`` lines at the end
    and (``gpu``) a line added to one GPU's entry."""
    text = (ROOT / "rigs" / name).read_text().replace("model: ../models/", f"model: {ROOT}/models/")
    if gpu is not None:
        lines, seen = text.splitlines(), -1
        for i, line in enumerate(lines):
            seen += line.startswith("  - ")
            if seen == gpu[0] and line.startswith("    free:"):
                lines.insert(i + 1, f"    {gpu[1]}")
                break
        text = "\n".join(lines) + "\n"
    out = folder / name
    out.write_text(text + extra)
    return out


def test_an_engines_key_is_checked_at_its_line(tmp_path):
    rig = shipped("llama-mix.yaml", tmp_path, "n_ubatch: 0\n")
    msg = input_error(invoke(rig), [rig])
    assert msg.line == key_line(rig.read_text(), ("n_ubatch",))
    assert msg.rest == "n_ubatch: input should be greater than or equal to 1, got 0"


def test_an_engines_gpu_key_is_checked_at_its_line(tmp_path):
    rig = shipped("llama-mix.yaml", tmp_path, gpu=(1, "pcie_bandwidth: fast"))
    msg = input_error(invoke(rig), [rig])
    assert msg.line == key_line(rig.read_text(), ("gpus", 1, "pcie_bandwidth"))
    assert msg.rest.startswith("gpus[1].pcie_bandwidth: expected a rate like '60 GB/s'"), msg


def test_each_engine_reads_its_own_keys(tmp_path):
    rig = shipped(
        "llama-mix.yaml", tmp_path, "n_ubatch: 256\nflash_attn: off\n", gpu=(0, "matrix_tflops: 100")
    )
    fields = LlamaFields.of(load_problem(rig))
    assert (fields.n_ubatch, fields.flash_attn) == (256, False)
    # the rig's throughput, at the card's own share of it
    assert fields.prompt.flops[0] == pytest.approx(100e12 * cards()["RTX 4090"].matrix_efficiency)
    box = shipped("box.yaml", tmp_path, "").read_text().replace("miss_ms: 190", "miss_ms: 50")
    (tmp_path / "box.yaml").write_text(box)
    assert StrataFields.of(load_problem(tmp_path / "box.yaml")).miss_ms == 50


def test_a_key_no_engine_declares_is_unknown(tmp_path):
    rig = tiny_rig(tmp_path, rig_extra={"colour": "red"})
    msg = input_error(invoke(rig), [rig])
    known = list(rig_schema(REGISTRY).model_fields)
    assert msg.line == key_line(rig.read_text(), ("colour",))
    assert msg.rest == f"unknown key 'colour' (expected one of: {', '.join(known)})"
    assert {"miss_ms", "n_ubatch", "gpu_memory_utilization", "gpus"} <= set(known)
    rig = tiny_rig(tmp_path, rig_extra={"n_ubach": 64})
    assert input_error(invoke(rig), [rig]).rest == "unknown key 'n_ubach' (did you mean 'n_ubatch'?)"


def test_a_key_of_another_engine_is_checked_and_otherwise_ignored(tmp_path):
    """A strata rig keeps llama.cpp's and vLLM's keys (a rig planned with --engine keeps its file):
    a bad value is refused at its line as on their own rigs, a good one changes nothing."""
    rig = tiny_rig(tmp_path, rig_extra={"n_ubatch": 0})
    msg = input_error(invoke(rig), [rig])
    assert msg.line == key_line(rig.read_text(), ("n_ubatch",))
    assert msg.rest == "n_ubatch: input should be greater than or equal to 1, got 0"
    plain = json.loads(invoke(tiny_rig(tmp_path)).stdout)
    other = {"n_ubatch": 64, "gpu_memory_utilization": 0.5, "host_bandwidth": "1 GB/s", "depth": 9}
    rig = tiny_rig(tmp_path, gpus=[{**g, "matrix_tflops": 1.0} for g in DEFAULT_GPUS], rig_extra=other)
    planned = json.loads(invoke(rig).stdout)
    assert planned["cuts"] == plain["cuts"] and planned["stages"] == plain["stages"]
    assert planned["window_ms"] == plain["window_ms"]


class ToyKeys(EngineKeys):
    toy_ms: NonNegMs = 1.0


class ToyGpuKeys(EngineKeys):
    toy_slots: Count | None = None


class Toy(Engine):
    name = "toy"
    rig_schema = ToyKeys
    gpu_schema = ToyGpuKeys

    def resolve_fields(self, rig, model, experts):
        return Resolved()


TOY_RIG = "engine: toy\ntoy_ms: 2.5\ngpus:\n  - free: 1 GiB\n    layer_ms: 1\n    toy_slots: {slots}\n"


def test_a_new_engine_declares_its_keys_beside_itself():
    engines = {**REGISTRY, "toy": Toy()}
    rig = check_rig(parse_yaml(TOY_RIG.format(slots=3), "t.yaml"), engines)
    assert rig.keys(ToyKeys).toy_ms == 2.5 and rig.gpus[0].keys(ToyGpuKeys).toy_slots == 3
    assert rig.keys(ToyKeys).model_fields_set == {"toy_ms"}
    with pytest.raises(InputError) as bad:
        check_rig(parse_yaml(TOY_RIG.format(slots=0), "t.yaml"), engines)
    assert str(bad.value) == "t.yaml:6: gpus[0].toy_slots: input should be greater than or equal to 1, got 0"
    with pytest.raises(InputError) as unknown:  # without the engine its keys are no rig's
        check_rig(parse_yaml(TOY_RIG.format(slots=3), "t.yaml"), REGISTRY)
    assert str(unknown.value).startswith("t.yaml:6: gpus[0]: unknown key 'toy_slots' (expected one of: ")


def test_a_config_built_without_an_engines_keys_reads_their_defaults():
    from solver.engines.llamacpp.fields import LlamaKeys
    from solver.files.config import RigConfig

    rig = RigConfig.model_validate({"gpus": [{"free": 1, "layer_ms": 1.0}]})
    assert rig.keys(LlamaKeys) == LlamaKeys()


class Clash(EngineKeys):
    miss_ms: NonNegMs = 1.0


class Common(EngineKeys):
    context: Count = 1


@pytest.mark.parametrize(("keys", "clash"), [(Clash, "StrataKeys"), (Common, "RigConfig")])
def test_a_key_is_declared_once(keys, clash):
    """Two engines that read one key share the model declaring it; none redeclares a common key."""
    owner = type("Owner", (Toy,), {"rig_schema": keys})
    with pytest.raises(TypeError, match=f"of {keys.__name__} is also {clash}'s"):
        rig_schema({**REGISTRY, "toy": owner()})
