"""A mistyped key is reported as unknown, at its own line, with the closest key it could have meant."""

from __future__ import annotations

import copy

import pytest

from tests.helpers.clirun import input_error, invoke, key_line
from tests.helpers.inputs import MODEL, RIG, at, dump, files, write_base


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return write_base(tmp_path_factory.mktemp("typos"))


def rename(doc: dict, where: tuple, old: str, new: str) -> dict:
    """A copy of ``doc`` with the key ``old`` of the mapping at ``where`` spelled ``new``, in place."""
    doc = copy.deepcopy(doc)
    target = at(doc, where)
    items = [(new if k == old else k, v) for k, v in target.items()]
    target.clear()
    target.update(items)
    return doc


@pytest.mark.parametrize(
    ("which", "where", "old", "new", "expect"),
    [
        # a required key: before the fix, "gpus[0].free: missing (required)"
        ("rig", ("gpus", 0), "free", "fre", "gpus[0]: unknown key 'fre' (did you mean 'free'?)"),
        ("rig", ("gpus", 2), "free", "Free", "gpus[2]: unknown key 'Free' (did you mean 'free'?)"),
        ("rig", (), "model", "modle", "unknown key 'modle' (did you mean 'model'?)"),
        ("model", (), "layers", "layer", "unknown key 'layer' (did you mean 'layers'?)"),
        (
            "model",
            (),
            "expert_bytes",
            "expert_byte",
            "unknown key 'expert_byte' (did you mean 'expert_bytes'?)",
        ),
        ("model", (), "profile", "profiel", "unknown key 'profiel' (did you mean 'profile'?)"),
    ],
)
def test_a_typo_is_an_unknown_key_with_a_suggestion(base, write, which, where, old, new, expect):
    doc = rename(RIG if which == "rig" else MODEL, where, old, new)
    text = dump(doc)
    path = write(f"typo-{which}.yaml", text)
    args = [path] if which == "rig" else [base / "rig.yaml", "--model", path]
    msg = input_error(invoke(*args), files(base, path))
    assert msg.line == key_line(text, (*where, new))
    assert msg.rest == expect


def test_a_key_of_the_curve_suggests_from_its_own_kind(base, write):
    model = copy.deepcopy(MODEL)
    model["curve"] = {"kind": "power", "exponnet": 1.2}
    path = write("curve.yaml", dump(model))
    msg = input_error(invoke(base / "rig.yaml", "--model", path), files(base, path))
    assert msg.rest == "curve: unknown key 'exponnet' (did you mean 'exponent'?)"
    model["curve"] = {"kind": "cover", "exponent": 1.2}  # a key of another kind is not suggested
    path = write("curve.yaml", dump(model))
    msg = input_error(invoke(base / "rig.yaml", "--model", path), files(base, path))
    assert msg.rest == "curve: unknown key 'exponent' (expected one of: kind, b)"


def test_nothing_close_lists_the_keys_allowed_there(base, write):
    rig = copy.deepcopy(RIG)
    rig["gpus"][1]["colour"] = "red"
    text = dump(rig)
    path = write("colour.yaml", text)
    msg = input_error(invoke(path), files(base, path))
    assert msg.line == key_line(text, ("gpus", 1, "colour"))
    assert msg.rest == (
        "gpus[1]: unknown key 'colour' "
        "(expected one of: name, free, reserve, layer_ms, sms, clock_ghz, min_layers, max_layers, host, "
        "mem_bandwidth, buffer, pcie_bandwidth, matrix_tflops)"
    )
