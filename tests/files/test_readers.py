"""Reader regressions through the real CLI: each bad input gives exit 2 and one exact line.

The fuzzed counterparts are in test_fuzz.py; the inputs they start from are in inputs.py.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from solver.files.yamlfile import MAX_DEPTH, MAX_VALUES
from tests.helpers.clirun import check_plan, input_error, invoke, key_line, outcome
from tests.helpers.inputs import MODEL, PAIRS, RIG, at, dump, files, key_name, profile_text, strp, write_base

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_base(tmp_path_factory.mktemp("readers"))


def test_unknown_layer_kind(base, write):
    model = copy.deepcopy(MODEL)
    model["state_bytes"]["moe"] = 5
    path = write("k.yaml", dump(model))
    msg = input_error(invoke(base / "rig.yaml", "--model", path), files(base, path))
    assert msg.line == key_line(dump(model), ("state_bytes", "moe"))
    assert msg.rest.startswith("state_bytes.moe: unknown layer kind")


REQUIRED = {
    "rig": [("gpus",), ("gpus", 0, "free"), ("gpus", 2, "free"), ("model",)],
    "model": [("layers",), ("experts",), ("expert_bytes",), ("profile",)],
}


@pytest.mark.parametrize(("which", "path"), [(w, p) for w, ps in REQUIRED.items() for p in ps])
def test_missing_required_keys(base, write, which, path):
    doc = copy.deepcopy(RIG if which == "rig" else MODEL)
    del at(doc, path[:-1])[path[-1]]
    p = write(f"{which}.yaml", dump(doc))
    args = [p] if which == "rig" else [base / "rig.yaml", "--model", p]
    msg = input_error(invoke(*args), files(base, p))
    assert msg.file == str(p)
    assert msg.rest.startswith(f"{key_name(path)}: missing (required")
    assert msg.line == key_line(dump(doc), path[:-1])  # the mapping that lacks it


@pytest.mark.parametrize("key", ["experts", "expert_bytes", "dense_bytes"])
@pytest.mark.parametrize("n", [0, 1, 5, 7, 60])
def test_per_layer_lists_of_the_wrong_length(base, write, key, n):
    model = copy.deepcopy(MODEL)
    model[key] = [4 if key == "experts" else "1 MiB"] * n
    p = write("m.yaml", dump(model))
    msg = input_error(invoke(base / "rig.yaml", "--model", p), files(base, p))
    assert msg.rest.startswith(f"{key}: has {n} entries; expected one per layer (6)")
    assert msg.line == key_line(dump(model), (key,))


@pytest.mark.parametrize(
    ("value", "expect"),
    [
        (["1 MiB"] * 5, "ffn_tensors.ffn_gate_inp: has 5 entries; expected one per layer (6)"),
        ("11 MiB", "ffn_tensors: add up to more than layer 0's dense_bytes, which hold them"),
    ],
)
def test_ffn_tensors_beside_dense_bytes(base, write, value, expect):
    model = copy.deepcopy(MODEL)
    model["ffn_tensors"] = {"ffn_gate_inp": value}
    p = write("m.yaml", dump(model))
    msg = input_error(invoke(base / "rig.yaml", "--model", p), files(base, p))
    assert msg.rest.startswith(expect)


def test_kinds_longer_than_the_layers(base, write):
    model = copy.deepcopy(MODEL)
    model["kinds"] = ["linear", "full"] * 4
    p = write("m.yaml", dump(model))
    msg = input_error(invoke(base / "rig.yaml", "--model", p), files(base, p))
    assert msg.rest.startswith("kinds: has 8 entries, more than the 6 layers")


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (b"", "is empty"),
        (b"# only a comment\n", "is empty"),
        (b"---\n", "expected a mapping of keys at the top level"),
        (b"- free: 1\n- free: 2\n", "expected a mapping of keys at the top level"),
        (b"just words\n", "expected a mapping of keys at the top level"),
        (b"a: 1\n---\nb: 2\n", "expected one YAML document holding a mapping"),
        (b"gpus: [\n", "YAML syntax error"),
        (b"gpus:\n\t- free: 1\n", "YAML syntax error"),
        (b"name: caf\xe9\n", "not UTF-8 text"),
        (b"\xff\xfe\x00n\x00a\x00m\x00e\x00", "not UTF-8 text"),
        (b"name: a\x00b\n", "is a binary file, expected a YAML file"),
        (b"name: !!python/object:os.system x\n", "bad value"),
        (b"a: &x [*x]\n", "an alias refers to the value that contains it"),
        (b"a: &x {b: *x}\n", "an alias refers to the value that contains it"),
        (b"a: &x {<<: *x}\n", "an alias refers to the value that contains it"),
        (b"a: *nowhere\n", "YAML syntax error"),
        (b"a: 1\na: 2\n", "duplicate key"),
        (b"? [a, b]\n: 1\n", "a mapping key must be a plain word"),
        (b"gpus:\n  - <<: 5\n", "a merge (<<) takes a mapping or a list of mappings"),
    ],
)
def test_yaml_files_that_are_not_rigs(write, text, expect):
    p = write("bad.yaml", text)
    msg = input_error(invoke(p), [p])
    assert expect in msg.rest


def test_deep_nesting(write):
    p = write("deep.yaml", "gpus: " + "[" * 3000 + "]" * 3000 + "\n")
    assert "nested more than" in input_error(invoke(p), [p]).rest
    p = write("deep2.yaml", "gpus: " + "[" * (MAX_DEPTH + 3) + "]" * (MAX_DEPTH + 3) + "\n")
    msg = input_error(invoke(p), [p])
    assert msg.line == 1 and "nested more than" in msg.rest


def test_alias_bomb_is_refused_quickly(write):
    """Nine levels of nine aliases would expand to 387 million values (the billion laughs)."""
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    p = write("bomb.yaml", "\n".join(lines) + "\n")
    msg = input_error(invoke(p), [p])
    assert f"over {MAX_VALUES:,} values" in msg.rest


def test_merge_keys_give_identical_gpus(base, write):
    """``<<: *anchor`` copies a GPU; keys set next to it win; an error inside names the merging line."""
    text = (
        "model: model.yaml\nfirst_stage_min_layers: 2\ngpus:\n"
        "  - &card {name: A, free: 60 MiB, layer_ms: 0.9}\n"
        "  - <<: *card\n    name: B\n"
        "  - <<: [{free: 70 MiB, layer_ms: 0.5}, *card]\n    name: C\n"
    )
    p = base / "merge.yaml"
    p.write_text(text)
    result = invoke(p)
    assert outcome(result, files(base, p)) == "plan"

    stages = {s["name"]: s for s in json.loads(result.stdout)["stages"]}
    assert set(stages) == {"A", "B", "C"}
    # C took free and layer_ms from the first source in its list
    assert stages["C"]["compute_ms"] == pytest.approx(0.5 * (stages["C"]["end"] - stages["C"]["start"]))
    bad = text.replace("free: 60 MiB", "free: sixty")
    p.write_text(bad)
    msg = input_error(invoke(p), [p])
    assert (msg.line, msg.rest) == (
        4,
        "gpus[0].free: expected a size like '11.2 GiB' (units B KB MB GB TB KiB MiB GiB TiB), got 'sixty'",
    )


@pytest.mark.parametrize("key", ["§", "§one", "§many"])
@pytest.mark.parametrize("where", [(), ("gpus", 0), ("curve",), ("state_bytes",)])
def test_keys_that_look_like_internal_tags(base, write, key, where):
    """pydantic's union tags are dropped from error paths; a user's key spelled like one is not."""
    which = "model" if where in (("curve",), ("state_bytes",)) else "rig"
    doc = copy.deepcopy(RIG if which == "rig" else MODEL)
    at(doc, where)[key] = 1
    p = write("t.yaml", dump(doc))
    args = [p] if which == "rig" else [base / "rig.yaml", "--model", p]
    msg = input_error(invoke(*args), [p])
    assert msg.line == key_line(dump(doc), (*where, key))
    if where == ("state_bytes",):
        assert msg.rest.startswith(f"{key_name((*where, key))}: unknown layer kind"), msg
    else:
        assert msg.rest.startswith(f"{key_name(where) + ': ' if where else ''}unknown key {key!r} ("), msg


@pytest.mark.parametrize(
    ("raw", "expect"),
    [
        (strp(6, 4, PAIRS[:3], version=2), "STRP version 2; only version 1 is supported"),
        (strp(6, 4, PAIRS[:3], slots=2), "STRP n_ranked 3 exceeds slots 2"),
        (strp(5, 4, PAIRS[:3]), "STRP shape is 5 layers x 4 experts; the model has 6 x 4"),
        (strp(6, 5, PAIRS[:3]), "STRP shape is 6 layers x 5 experts; the model has 6 x 4"),
        (strp(6, 4, [(0, 0), (6, 1)]), "pair #1 (6, 1): layer out of range (the model has 6 layers)"),
        (strp(6, 4, [(0, 0), (1, 4)]), "pair #1 (1, 4): expert out of range (layer 1 has 4 experts)"),
        (strp(6, 4, [(0, 0), (1, 1), (0, 0)]), "pair #2 (0, 0) ranked twice (first at rank 0)"),
        (b"STRP" + b"\x01\x00", "STRP header truncated: 6 of 24 bytes"),
        (strp(6, 4, []), "ranks no pairs, so no expert could be cached"),
        (strp(6, 4, PAIRS)[:-1], "STRP truncated: 24 pairs need 120 bytes, file has 119"),
    ],
)
def test_strp_errors(base, write, raw, expect):
    p = write("p.strp", raw)
    msg = input_error(invoke(base / "rig.yaml", "--profile", p), [p])
    assert (msg.line, msg.rest) == (None, expect)


@pytest.mark.parametrize(
    ("text", "line", "expect"),
    [
        ("0 0\n1\n", 2, "expected 'layer expert' or 'layer expert count', got '1'"),
        ("0 0\n1 1 1 1\n", 2, "expected 'layer expert' or 'layer expert count', got '1 1 1 1'"),
        ("0 0 5\n1 1\n", 2, "counts must be given on every line or on none"),
        ("0 0\n1 x\n", 2, "expected whole numbers, got 'x'"),
        ("0 0\n1 1.5\n", 2, "expected whole numbers, got '1.5'"),
        ("0 0\n-1 1\n", 2, "layers, experts and counts cannot be negative"),
        ("0 0 1\n1 1 -3\n", 2, "layers, experts and counts cannot be negative"),
        ("0 0\n1 99999999999999999999999\n", 2, "'99999999999999999999999' is too large (at most 2^63-1)"),
        ("0 0\n1 -99999999999999999999999\n", 2, "'-99999999999999999999999' is too large (at most 2^63-1)"),
        ("# header only\n\n", None, "ranks no pairs, so no expert could be cached"),
        ("", None, "ranks no pairs, so no expert could be cached"),
        ("0 0\n0 0\n", 2, "pair (0, 0) ranked twice (first at line 1)"),
        ("0 0\n\n# gap\n6 0\n", 4, "pair (6, 0): layer out of range (the model has 6 layers)"),
    ],
)
def test_text_profile_errors(base, write, text, line, expect):
    p = write("p.txt", text)
    msg = input_error(invoke(base / "rig.yaml", "--profile", p), [p])
    assert (msg.line, msg.rest) == (line, expect)


def test_counts_that_overflow_int64_when_summed(base, write):
    """Counts near 2^63 each: their sum must not wrap to a negative or zero total."""
    model = copy.deepcopy(MODEL)
    model["curve"] = {"kind": "counts"}
    m = write("m.yaml", dump(model))
    big = 2**62
    p = write("p.txt", profile_text(PAIRS[:4], [big, big, big, big - 8]))
    result = invoke(base / "rig.yaml", "--model", m, "--profile", p)
    assert outcome(result, files(base, m, p)) == "plan"

    out = json.loads(result.stdout)
    assert 0 < out["held_mass"] <= 1 + 1e-12
    p = write("p0.txt", profile_text(PAIRS[:2], [0, 0]))
    msg = input_error(invoke(base / "rig.yaml", "--model", m, "--profile", p), [p])
    assert msg.rest == "every count is 0, so the counts curve has no mass"


def test_shipped_model_with_a_sparse_profile(base, write):
    """The real 48 x 512 model with a profile that ranks only three pairs still plans; as STRP (no
    counts) its counts curve is refused, naming the model file and key."""
    rig = ROOT / "rigs" / "duo.yaml"
    model = ROOT / "models" / "qwen3-next-80b-a3b.yaml"
    p = write("q.txt", "0 0 5\n47 511 3\n20 3 1\n")
    result = invoke(rig, "--profile", p)
    assert outcome(result, [rig, p]) == "plan"

    assert json.loads(result.stdout)["held_pairs"] == 3
    p = write("q.strp", strp(48, 512, [(0, 0), (47, 511), (20, 3)]))
    msg = input_error(invoke(rig, "--profile", p), [rig, model, p])
    assert msg.file.endswith("qwen3-next-80b-a3b.yaml")
    assert msg.rest.startswith("curve.kind: the counts curve needs a profile with counts")


@pytest.mark.parametrize(
    "case",
    [
        # slow: test_deep_nesting refuses the same file in process, and tests/cli's
        # test_console_script_runs_without_traceback a bad rig in a fresh interpreter
        pytest.param("gpus: " + "[" * 3000 + "]" * 3000, id="deep", marks=pytest.mark.slow),
        pytest.param("a: &x [*x]\ngpus: []", id="self-alias", marks=pytest.mark.slow),
        pytest.param(
            "\n".join(
                ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
                + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
            ),
            id="alias-bomb",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_in_a_real_process(write, case):
    """The installed entry point, as a user runs it: one line on stderr, exit 2, within seconds."""
    p = write("r.yaml", case + "\n")
    proc = subprocess.run(
        [sys.executable, "-c", "from solver.cli import main; main()", str(p), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(str(p))


def test_plans_from_the_shipped_files_are_valid(base):

    for rig in sorted((ROOT / "rigs").glob("*.yaml")):
        result = invoke(rig)
        check_plan(json.loads(result.stdout))


@pytest.mark.parametrize(
    ("which", "path"),
    [
        ("rig", ("gpus", 2, "min_layers")),
        ("rig", ("gpus", 0, "max_layers")),
        ("rig", ("gpus", 1, "sms")),
        ("rig", ("first_stage_min_layers",)),
        ("model", ("layers",)),
        ("model", ("experts",)),
    ],
)
@pytest.mark.parametrize("value", [2**31, 2**63, 2**70, 10**400])
def test_absurd_counts(base, write, which, path, value):
    """Counts past 2^31 - 1 are refused at their key (unchecked, they overflow int64 arrays: a traceback)."""
    doc = copy.deepcopy(RIG if which == "rig" else MODEL)
    at(doc, path[:-1])[path[-1]] = value
    p = write("absurd.yaml", dump(doc))
    args = [p] if which == "rig" else [base / "rig.yaml", "--model", p]
    msg = input_error(invoke(*args), [p])
    assert msg.line == key_line(dump(doc), path)
    assert msg.rest.startswith(f"{key_name(path)}: input should be less than or equal to 2147483647, got ")


@pytest.mark.parametrize("key", ["layer_ms", "clock_ghz"])
@pytest.mark.parametrize(("value", "ok"), [("1e-3", True), ("5E-1", True), ("1.5e+2", True), ("1e7", False)])
def test_numbers_in_exponent_form(base, write, key, value, ok):
    """``1e-3`` is a number in YAML 1.2 (PyYAML reads a string); past 10^6 it is refused at its key."""
    rig = copy.deepcopy(RIG)
    gpu = rig["gpus"][0 if key == "layer_ms" else 1]
    p = base / "e.yaml"
    p.write_text(dump(rig).replace(f"{key}: {gpu[key]}", f"{key}: {value}"))
    result = invoke(p)
    if ok:
        assert outcome(result, [p]) == "plan"
    else:
        assert input_error(result, [p]).rest.endswith(
            f"input should be less than or equal to 1000000, got '{value}'"
        )


@pytest.mark.parametrize(("which", "key"), [("rig", "model"), ("model", "profile")])
def test_empty_paths(base, write, which, key):
    doc = copy.deepcopy(RIG if which == "rig" else MODEL)
    doc[key] = ""
    p = write("empty.yaml", dump(doc))
    args = [p] if which == "rig" else [base / "rig.yaml", "--model", p]
    msg = input_error(invoke(*args), [p])
    assert msg.rest == f"{key}: string should have at least 1 character, got ''"


def test_times_too_large_to_score(write):
    """200 layers at 10^6 ms each over 8 GPUs: a window could be 2e8 ms, too much for 1e-6 ms units
    across 160,800 possible arcs (CP-SAT's objective would overflow); refused before any solve."""
    write("p.txt", "".join(f"{layer} 0\n" for layer in range(200)))
    write("m.yaml", dump({"layers": 200, "experts": 1, "expert_bytes": 1, "profile": "p.txt"}))
    rig = {"model": "m.yaml", "gpus": [{"free": "1 GiB", "layer_ms": 1e6}] * 8}
    p = write("r.yaml", dump(rig))
    msg = input_error(invoke(p), [p])
    assert msg.rest.startswith("a window could take 2e+08 ms over 160,800 (GPU, layer range) choices")
    rig["gpus"] = [{"free": "1 GiB", "layer_ms": 1.0}] * 16
    write("p.txt", "".join(f"{layer} 0\n" for layer in range(400)))
    write("m.yaml", dump({"layers": 400, "experts": 1, "expert_bytes": 1, "profile": "p.txt"}))
    p = write("r.yaml", dump({**rig, "objective": "mass"}))
    msg = input_error(invoke(p), [p])
    assert msg.rest.startswith(
        "objective: 1,283,200 (GPU, layer range) choices are too many to score held mass"
    )


def test_tables_too_large_to_plan(base, write):
    """A layer count or GPU list that would need gigabytes of range-walk table is refused at once."""
    model = copy.deepcopy(MODEL)
    model.update(layers=100_000, kinds=None)
    del model["kinds"], model["state_bytes"], model["kv_bytes_per_token"]
    p = base / "huge.yaml"
    p.write_text(dump(model))
    msg = input_error(invoke(base / "rig.yaml", "--model", p), [p])
    assert msg.rest == (
        "layers: 100,000 layers with 3 GPUs need a range-walk table of 30,000,600,003 cells, "
        "over the 33,554,432 moesplit plans in"
    )
    # more GPUs than layers (infeasible anyway) and too many cells: the rig's GPU list is named
    model["layers"] = 322
    p.write_text(dump(model))
    rig = copy.deepcopy(RIG)
    rig["gpus"] = [{"free": "1 GiB", "layer_ms": 1.0}] * 323
    r = base / "many.yaml"
    r.write_text(dump(rig))
    msg = input_error(invoke(r, "--model", p), [r])
    assert msg.rest == (
        "gpus: 322 layers with 323 GPUs need a range-walk table of 33,698,267 cells, "
        "over the 33,554,432 moesplit plans in"
    )
