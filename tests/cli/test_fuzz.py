"""Every reader fuzzed through the real CLI (docs/edges.md, "Fuzzing").

Valid rig, model and profile files are mutated (values, keys, bytes, units, list lengths, aliases) and
fed to ``solve --json``. Whatever the input, the run exits 2 with one line naming the file (and its
YAML line and key where it has one), or exits 0/3 with a valid plan or infeasibility: never a
traceback, never a hang (see clirun).
"""

from __future__ import annotations

import copy
import os
import random
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from solver.engines import REGISTRY
from solver.errors import brief, one_line
from solver.files.config import ModelConfig, gpus_schema, rig_schema
from tests.helpers.clirun import input_error, invoke, key_line, outcome
from tests.helpers.inputs import MODEL, PAIRS, RIG, at, dump, files, key_name, paths, strp, write_base
from tests.helpers.tiers import examples

ROOT = Path(__file__).resolve().parents[2]
#: CI runs a fixed set of examples; MOESPLIT_FUZZ=N runs N fresh random ones per property instead.
FUZZ_EXAMPLES = int(os.environ.get("MOESPLIT_FUZZ", "0"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES or examples(60),
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=not FUZZ_EXAMPLES,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_base(tmp_path_factory.mktemp("fuzz"))


def test_base_files_plan(base):
    """The unmutated files give a plan, so every mutation below starts from valid input."""
    result = invoke(base / "rig.yaml")
    assert outcome(result, files(base)) == "plan"


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "12 GiB",
            "-1 GiB",
            "1 PiB",
            "1.5",
            "0",
            "1e400 B",
            "1e999999 B",
            "1e-3",
            "nan",
            ".inf",
            "auto",
            "x y",
        ]
    ),
)


junk = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=7)
        | st.dictionaries(
            st.sampled_from(["kind", "b", "exponent", "linear", "full", "free", "x"]), inner, max_size=3
        )
    ),
    max_leaves=12,
)


@FUZZ
@given(data=st.data(), value=junk)
@example(data=None, value=2**70).via("an absurd min_layers")
def test_rig_values_replaced(base, data, value):
    """Any rig value replaced by anything: exit 2 at that key's line (or a sibling's), or a plan."""
    rig = copy.deepcopy(RIG)
    choices = paths(rig)
    path = data.draw(st.sampled_from(choices)) if data else ("gpus", 2, "min_layers")
    at(rig, path[:-1])[path[-1]] = value
    text = dump(rig)
    (base / "mut.yaml").write_text(text)
    result = invoke(base / "mut.yaml")
    named = files(base, base / "mut.yaml")
    if path == ("model",) and isinstance(value, str):
        named += [base / value, Path(value)]  # a model path that is not a model file
    kind = outcome(result, named)
    if kind == "input":
        msg = input_error(result, named)
        if msg.file.endswith("mut.yaml"):
            # the error is at the replaced key, inside it, or at a sibling it conflicts with
            assert msg.line is not None, msg
            assert msg.rest.startswith(key_name(path[:-1])), (path, msg)


RELATED = {
    "layers": ("layers", "experts", "expert_bytes", "dense_bytes", "kinds"),
    "kinds": ("kinds", "state_bytes", "kv_bytes_per_token"),
}


@FUZZ
@given(data=st.data(), value=junk)
def test_model_values_replaced(base, data, value):
    """Any model value replaced by anything: exit 2 naming the model file (line and key), or a plan."""
    model = copy.deepcopy(MODEL)
    path = data.draw(st.sampled_from(paths(model)))
    at(model, path[:-1])[path[-1]] = value
    (base / "mutmodel.yaml").write_text(dump(model))
    result = invoke(base / "rig.yaml", "--model", base / "mutmodel.yaml")
    named = files(base, base / "mutmodel.yaml")
    if path == ("profile",) and isinstance(value, str):
        named += [base / value, Path(value)]  # a profile path that is not a profile
    kind = outcome(result, named)
    if kind == "input":
        msg = input_error(result, named)
        if msg.file.endswith("mutmodel.yaml") and msg.line is not None:
            related = RELATED.get(path[0], (key_name(path[:-1]),))
            assert msg.rest.startswith(related), (path, msg)


def schema_keys(doc: dict, where: tuple) -> set[str]:
    """The keys the schema knows at ``where`` in a rig (every engine's keys too) or model."""
    rig = rig_schema(REGISTRY)
    if where == ():
        return set((rig if "gpus" in doc else ModelConfig).model_fields)
    if where[0] == "gpus":
        return set(gpus_schema(rig).model_fields)
    return {"kind", "b", "exponent"}  # curve


@FUZZ
@given(data=st.data(), key=st.text(min_size=1, max_size=20))
def test_unknown_keys_are_named_with_their_line(base, data, key):
    """A key the schema does not know, at any mapping, is an error at exactly that line and key."""
    which = data.draw(st.sampled_from(["rig", "model"]))
    doc = copy.deepcopy(RIG if which == "rig" else MODEL)
    mappings = [()] + [p for p in paths(doc) if isinstance(at(doc, p), dict)]
    where = data.draw(st.sampled_from(mappings))
    target = at(doc, where)
    assume(key not in schema_keys(doc, where) and key != "<<")
    if where in (("state_bytes",), ("kv_bytes_per_token",)):
        assume(False)  # keys there are layer kinds (covered by test_unknown_layer_kind)
    target[key] = 1
    text = dump(doc)
    assume(yaml.safe_load(text) == doc)  # the key survives a YAML round trip as a string
    name = "mut.yaml" if which == "rig" else "mutmodel.yaml"
    (base / name).write_text(text)
    args = [base / name] if which == "rig" else [base / "rig.yaml", "--model", base / name]
    result = invoke(*args)
    msg = input_error(result, files(base, base / name))
    assert msg.file.endswith(name)
    assert msg.line == key_line(text, (*where, key))
    prefix = f"{key_name(where)}: " if where else ""
    assert msg.rest.startswith(f"{prefix}unknown key {one_line(brief(key))} ("), msg


@FUZZ
@given(data=st.data())
def test_deleted_keys(base, data):
    """Deleting any key (required or not) is exit 2 or a plan, never a crash."""
    which = data.draw(st.sampled_from(["rig", "model"]))
    doc = copy.deepcopy(RIG if which == "rig" else MODEL)
    path = data.draw(st.sampled_from(paths(doc)))
    del at(doc, path[:-1])[path[-1]]
    (base / "del.yaml").write_text(dump(doc))
    args = [base / "del.yaml"] if which == "rig" else [base / "rig.yaml", "--model", base / "del.yaml"]
    outcome(invoke(*args), files(base, base / "del.yaml"))


@FUZZ
@given(
    number=st.sampled_from(["0", "1", "11.2", ".5", "1e3", "1e-3", "-2", "1..2", "", "9" * 25]),
    unit=st.text(st.characters(exclude_characters="0123456789.eE+-"), max_size=4)
    | st.sampled_from(["B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "kb", "mib", "PiB", "G"]),
    space=st.sampled_from(["", " ", "  "]),
)
def test_size_units(base, number, unit, space):
    """``free: "<number><unit>"``: a known unit and a sane number plan; anything else names the key."""
    rig = copy.deepcopy(RIG)
    rig["gpus"][1]["free"] = f"{number}{space}{unit}"
    text = dump(rig)
    (base / "mut.yaml").write_text(text)
    result = invoke(base / "mut.yaml")
    good_unit = unit.strip() in ("", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
    good_number = number not in ("-2", "1..2", "", "9" * 25)  # 10^25 bytes is past 2^63-1
    kind = outcome(result, files(base, base / "mut.yaml"))
    if kind == "input":
        msg = input_error(result, files(base, base / "mut.yaml"))
        assert msg.rest.startswith("gpus[1].free: "), msg
        assert msg.line == key_line(text, ("gpus", 1, "free"))
        assert not (good_unit and good_number), f"{number}{space}{unit!r} was refused"
    else:
        assert good_unit and good_number, f"{number}{space}{unit!r} was accepted"


@FUZZ
@given(data=st.data(), n=st.integers(1, 6))
def test_bytes_mutated(base, data, n):
    """Random byte edits (flips, inserts, deletes, truncation) of a rig or model file."""
    which = data.draw(st.sampled_from(["rig.yaml", "model.yaml"]))
    raw = bytearray((base / which).read_bytes())
    for _ in range(n):
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        i = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            raw[i:i] = data.draw(
                st.binary(min_size=1, max_size=4)
                | st.sampled_from([b"&a ", b"*a", b"[", b"{", b":", b"\t", b"- ", b"<<: "])
            )
        elif op == "delete":
            del raw[i : i + data.draw(st.integers(1, 8))]
        else:
            del raw[i:]
    (base / "bytes.yaml").write_bytes(bytes(raw))
    args = (
        [base / "bytes.yaml"] if which == "rig.yaml" else [base / "rig.yaml", "--model", base / "bytes.yaml"]
    )
    outcome(invoke(*args), files(base, base))  # a mangled model or profile path names a file in base


@FUZZ
@given(raw=st.binary(max_size=200))
def test_random_profile_bytes(base, raw):
    (base / "p.bin").write_bytes(raw)
    outcome(invoke(base / "rig.yaml", "--profile", base / "p.bin"), files(base, base / "p.bin"))


@FUZZ
@given(raw=st.binary(max_size=120))
def test_random_bytes_after_the_strp_magic(base, raw):
    (base / "p.bin").write_bytes(b"STRP" + raw)
    outcome(invoke(base / "rig.yaml", "--profile", base / "p.bin"), files(base, base / "p.bin"))


@FUZZ
@given(cut=st.integers(0, 24 + 4 * 24 + 8))
def test_truncated_strp(base, cut):
    """A valid STRP cut short: an error until the header and every pair are there; the tail is ignored."""
    full = strp(6, 4, PAIRS) + b"\x00" * 8
    (base / "p.strp").write_bytes(full[:cut])
    result = invoke(base / "rig.yaml", "--profile", base / "p.strp")
    if cut == 0:
        assert input_error(result, [base / "p.strp"]).rest == "ranks no pairs, so no expert could be cached"
    elif cut < 24 + 4 * 24:
        msg = input_error(result, [base / "p.strp"])
        assert "truncated" in msg.rest or (cut < 4 and "expected 'layer expert'" in msg.rest)
    else:
        assert outcome(result, files(base, base / "p.strp")) == "plan"


def reference_verdict(pairs: list[tuple[int, int]], lines: list[int]) -> int | None:
    """Line of the error a text profile gets (out of range first, then the first repeat), or None."""
    for (a, b), n in zip(pairs, lines):
        if not (0 <= a < 6 and 0 <= b < 4):
            return n
    seen = set()
    for pair, n in zip(pairs, lines):
        if pair in seen:
            return n
        seen.add(pair)
    return None


@FUZZ
@given(
    pairs=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 5)), max_size=30),
    counts=st.booleans(),
    junk=st.lists(st.sampled_from(["", "   ", "# comment", "\t# x"]), max_size=30),
    seed=st.integers(0, 1000),
)
def test_text_profiles_with_repeats_gaps_and_strays(base, pairs, counts, junk, seed):
    """Random ranked pairs: out of range or repeated pairs are errors at their line; gaps are fine."""
    rng = random.Random(seed)
    body: list[str] = [f"{a} {b}" + (f" {rng.randint(0, 50)}" if counts else "") for a, b in pairs]
    lines = list(range(len(body)))
    for j in junk:
        i = rng.randint(0, len(body))
        body.insert(i, j)
        lines = [n + 1 if n >= i else n for n in lines]
    (base / "p.txt").write_text("\n".join(body) + "\n")
    result = invoke(base / "rig.yaml", "--profile", base / "p.txt")
    bad = reference_verdict(pairs, [n + 1 for n in lines])
    if not pairs:
        assert input_error(result, [base / "p.txt"]).rest == "ranks no pairs, so no expert could be cached"
    elif bad is not None:
        msg = input_error(result, [base / "p.txt"])
        assert msg.line == bad, (msg, pairs)
        assert ("out of range" in msg.rest) or ("ranked twice" in msg.rest)
    else:
        assert outcome(result, files(base, base / "p.txt")) in ("plan", "infeasible")


@pytest.mark.parametrize("seed", range(3))
def test_shipped_box_rig_mutated(base, seed):
    """rigs/box.yaml's text with one line dropped or duplicated, pointed at the tiny model."""
    rows = (ROOT / "rigs" / "box.yaml").read_text().splitlines()
    rng = np.random.default_rng(seed)
    for i in rng.choice(len(rows), 6, replace=False):
        mutated = rows[:i] + rows[i + 1 :] if rng.random() < 0.5 else rows[: i + 1] + rows[i:]
        p = base / "box-mut.yaml"
        p.write_text("\n".join(mutated) + "\n")
        outcome(invoke(p, "--model", base / "model.yaml"), files(base, p))
