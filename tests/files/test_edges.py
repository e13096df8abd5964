"""Edge rigs, each planned through the real CLI with a hand-derived expectation.

Every model here is tiny and its bytes are round numbers, so rooms, held pairs and reasons can be
worked out by hand from docs/reference.md's "The arithmetic".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from solver.cli import cli
from solver.problem.scales import BYTE_LIMIT
from solver.units import INT64_MAX
from tests.helpers.clirun import input_error, invoke, outcome


def model(**kw) -> dict:
    """4 layers of 100 bytes, 3 experts of 10 bytes each, no session or stage bytes."""
    return {"layers": 4, "experts": 3, "expert_bytes": 10, "dense_bytes": 100, "profile": "p.txt", **kw}


def every_pair(layers: int = 4, experts: int = 3) -> str:
    """All pairs, ranked layer-major: (0,0), (0,1), ..., so a walk's stop is easy to see."""
    return "".join(f"{a} {e}\n" for a in range(layers) for e in range(experts))


def gpu(free: int | str, layer_ms: float = 1.0, **kw) -> dict:
    return {"free": free, "layer_ms": layer_ms, **kw}


@pytest.fixture
def rig(tmp_path: Path):
    """rig(gpus, model=..., profile=..., **settings) -> path of a rig file next to its model and profile."""

    def _rig(
        gpus: list[dict], model_doc: dict | None = None, profile: str | bytes | None = None, **kw
    ) -> Path:
        (tmp_path / "m.yaml").write_text(yaml.safe_dump(model_doc or model()))
        p = tmp_path / "p.txt"
        if isinstance(profile, bytes):
            p.write_bytes(profile)
        else:
            p.write_text(every_pair() if profile is None else profile)
        path = tmp_path / "r.yaml"
        path.write_text(yaml.safe_dump({"name": "edge", "model": "m.yaml", "gpus": gpus, **kw}))
        return path

    return _rig


def plan(path: Path, *args: str) -> dict:
    result = invoke(path, *args)
    assert outcome(result, [path, path.parent / "m.yaml", path.parent / "p.txt"]) == "plan", result.stderr
    return json.loads(result.stdout)


def infeasible(path: Path, *args: str) -> str:
    result = invoke(path, *args)
    assert outcome(result, [path]) == "infeasible", (result.exit_code, result.stdout, result.stderr)
    assert result.exit_code == 3
    out = json.loads(result.stdout)
    assert out["status"] == "infeasible" and out["window_ms"] is None
    return out["reason"]


def test_one_gpu_runs_every_layer(rig):
    # room = 1000 - 400 = 600 >= the 120 bytes of all 12 pairs: everything is held
    out = plan(rig([gpu(1000, 0.5)], miss_ms=100))
    assert out["cuts"] == [] and out["gpus"] == [0]
    (s,) = out["stages"]
    assert (s["start"], s["end"], s["room_bytes"], s["cache_bytes"]) == (0, 4, 600, 120)
    assert s["held_pairs"] == s["visible_pairs"] == 12
    assert out["window_ms"] == pytest.approx(4 * 0.5 + 100 * (1 - 1.0))


@pytest.mark.parametrize("order", ["as-given", "auto"])
def test_as_many_gpus_as_layers(rig, order):
    out = plan(rig([gpu(150, 1.0 + i / 10) for i in range(4)], order=order))
    assert out["cuts"] == [1, 2, 3]
    assert [s["end"] - s["start"] for s in out["stages"]] == [1, 1, 1, 1]
    assert sorted(out["gpus"]) == [0, 1, 2, 3]


def test_more_gpus_than_layers(rig):
    reason = infeasible(rig([gpu(1000)] * 5))
    assert reason == "the rig has 5 GPUs but the model only 4 layers; every GPU must run at least one layer"


@pytest.mark.parametrize("order", ["as-given", "auto"])
@pytest.mark.parametrize(("layers", "gpus"), [(2, 3), (2, 7), (2, 9), (4, 5), (4, 8), (4, 11), (4, 13)])
def test_many_more_gpus_than_layers_is_infeasible_without_a_baseline(rig, order, layers, gpus):
    """G >= 2L + 3 crashed in the baseline (its clamp gave negative cuts); any G > L gives exit 3,
    the reason, and a baseline that says there is no proportional split."""
    doc = model(layers=layers)
    path = rig([gpu(1000)] * gpus, model_doc=doc, profile=every_pair(layers), order=order)
    reason = infeasible(path)
    assert reason == (
        f"the rig has {gpus} GPUs but the model only {layers} layers; every GPU must run at least one layer"
    )
    base = json.loads(invoke(path).stdout)["baseline"]
    assert base["cuts"] == [] and base["feasible"] is False and base["window_ms"] is None
    assert base["reason"] == f"no proportional split: {gpus} GPUs cannot each run a layer of {layers}"
    text = CliRunner().invoke(cli, [str(path), "--workers", "1"])
    assert text.exit_code == 3 and "no proportional split" in text.stdout


def test_first_stage_minimum_leaves_no_proportional_split(rig):
    """lo_0 = 3 > hi_0 = 4 - 2: the baseline has no split (clamping to hi would give cuts 2, 3)."""
    path = rig([gpu(1000)] * 3, first_stage_min_layers=3)
    infeasible(path)
    base = json.loads(invoke(path).stdout)["baseline"]
    assert base["cuts"] == [] and "first_stage_min_layers" in base["reason"]


def test_layers_with_no_experts(rig):
    # layers 1 and 2 are dense: no pairs there, and a pair that names one is out of range
    doc = model(experts=[3, 0, 0, 3])
    pairs = "0 0\n3 2\n0 1\n3 0\n"
    out = plan(rig([gpu(1000), gpu(1000)], doc, pairs))
    assert out["held_pairs"] == 4
    visible = {(s["start"], s["end"]): s["visible_pairs"] for s in out["stages"]}
    assert sum(visible.values()) == 4
    path = rig([gpu(1000)], doc, pairs + "2 0\n")
    msg = input_error(invoke(path), [path.parent / "p.txt"])
    assert (msg.line, msg.rest) == (5, "pair (2, 0): expert out of range (layer 2 has 0 experts)")


def test_every_layer_dense(rig):
    """experts: 0 everywhere: a profile cannot rank anything, so no profile is valid."""
    path = rig([gpu(1000)], model(experts=0), "0 0\n")
    msg = input_error(invoke(path), [path.parent / "p.txt"])
    assert msg.rest == "pair (0, 0): expert out of range (layer 0 has 0 experts)"


def test_profile_that_ranks_only_some_pairs(rig):
    # two of the twelve pairs are ranked; all mass is on them, so holding both holds everything
    out = plan(rig([gpu(1000), gpu(1000)], profile="2 1\n0 2\n"))
    assert out["held_pairs"] == 2
    assert out["held_mass"] == pytest.approx(1.0)
    assert sum(s["visible_pairs"] for s in out["stages"]) == 2


def test_every_range_infeasible(rig):
    # each layer needs 100 bytes; neither GPU has 100
    reason = infeasible(rig([gpu(99, name="small"), gpu(50)]))
    assert reason == (
        "GPU 0 (small) cannot hold its minimum of 1 layer (layer 0): "
        "it needs 100 B and has 99 B after its reserve"
    )
    # one GPU must run every layer, so its minimum is all four
    assert infeasible(rig([gpu(50)])) == (
        "GPU 0 cannot hold its minimum of 4 layers (layers 0-3): "
        "it needs 400 B and has 50 B after its reserve"
    )


@pytest.mark.parametrize(("spare", "held"), [(0, 12), (-1, 11), (-10, 11), (-11, 10), (1, 12)])
def test_room_exactly_equal_to_the_walk(rig, spare, held):
    """The cache is full at the first pair with used + bytes > room: a room equal to the total holds it."""
    out = plan(rig([gpu(400 + 120 + spare)]))
    (s,) = out["stages"]
    assert s["room_bytes"] == 120 + spare
    assert s["held_pairs"] == held and s["cache_bytes"] == 10 * held


def test_room_exactly_zero_is_feasible(rig):
    out = plan(rig([gpu(400)]))
    assert out["stages"][0]["room_bytes"] == 0 and out["held_pairs"] == 0
    assert infeasible(rig([gpu(399)])).startswith("GPU 0 cannot hold its minimum of 4 layers (layers 0-3)")


def test_walk_stops_at_the_first_pair_that_does_not_fit(rig):
    # room 25: (0,0) takes 10, (0,1) 10 more, then (1,0) needs 20 > the 5 left: the cache is full, and
    # the 1-byte (3,0) ranked after it is not taken although it would fit
    doc = model(expert_bytes=[10, 20, 10, 1])
    pairs = "0 0\n0 1\n1 0\n3 0\n"
    out = plan(rig([gpu(425)], doc, pairs))
    assert out["held_pairs"] == 2 and out["stages"][0]["cache_bytes"] == 20


def test_free_at_the_int64_limit_still_plans(rig):
    """free = 2^63 - 1 with a tiny model: room arithmetic is exact, nothing wraps."""
    out = plan(rig([gpu(INT64_MAX), gpu(INT64_MAX, reserve=INT64_MAX - 1000)]))
    rooms = [s["room_bytes"] for s in out["stages"]]
    layers = [s["end"] - s["start"] for s in out["stages"]]
    assert rooms == [INT64_MAX - 100 * layers[0], 1000 - 100 * layers[1]]
    assert out["held_pairs"] == 12


def test_sizes_just_below_the_byte_limit(rig):
    """Sizes that add up to just under 2^62 plan exactly; the JSON rooms are exact integers."""
    dense = (BYTE_LIMIT - 1 - 120) // 4
    out = plan(rig([gpu(INT64_MAX)], model(dense_bytes=dense)))
    assert out["stages"][0]["room_bytes"] == INT64_MAX - 4 * dense
    assert out["held_pairs"] == 12


@pytest.mark.parametrize(
    "doc",
    [
        model(dense_bytes=2**61),  # 4 x 2^61 = 2^63
        model(dense_bytes=[INT64_MAX, 0, 0, 0], stage_bytes=INT64_MAX),
        model(expert_bytes=2**60),  # 12 pairs of 2^60
        model(last_stage_bytes=2**62),
    ],
)
def test_sizes_beyond_the_byte_limit_are_refused(rig, doc):
    path = rig([gpu(INT64_MAX)], doc)
    msg = input_error(invoke(path), [path.parent / "m.yaml"])
    assert msg.rest.startswith("the model's sizes add up to ")
    assert msg.rest.endswith("beyond the 2^62 bytes moesplit plans in")


def test_huge_frees_do_not_wrap_in_the_reason(rig):
    """Three GPUs' free bytes sum past 2^63; the reason must still report the real binding fact."""
    path = rig([gpu(INT64_MAX, max_layers=1), gpu(INT64_MAX, max_layers=1), gpu(120)])
    assert infeasible(path) == (
        "the GPUs can hold at most 3 of the 4 layers between them "
        "(the longest range each fits: 1 on GPU 0, 1 on GPU 1, 1 on GPU 2)"
    )


def test_whole_memory_short(rig):
    """Each card alone can run 3 of the 6 layers, but the 650 bytes of layers exceed their 640 together."""
    doc = model(layers=6, dense_bytes=[300, 10, 10, 10, 10, 310])
    path = rig([gpu(320), gpu(320)], doc, every_pair(6), order="auto")
    assert infeasible(path) == (
        "the 6 layers need 650 B for weights, session and stage buffers; "
        "the 2 GPUs have 640 B free after reserves"
    )


def test_huge_context(rig):
    """Full layers (every 2nd) hold 1 KiB of KV per token: 1 GiB each at 2^20 tokens, 1 PiB at 2^40."""
    doc = model(kinds=["linear", "full"], kv_bytes_per_token={"full": 1024})
    out = plan(rig([gpu("64 GiB"), gpu("64 GiB")], doc, context=2**20))
    assert sum(s["room_bytes"] for s in out["stages"]) == 2 * 64 * 2**30 - 400 - 2 * 2**30
    # at 2^31 - 1 tokens (the most a context may be) the last GPU must run layer 3 (a full layer) at
    # the least: 2 TiB + 100 bytes
    reason = infeasible(rig([gpu("64 GiB"), gpu("64 GiB")], doc, context=2**31 - 1))
    assert reason.startswith("GPU 1 cannot hold its minimum of 1 layer (layer 3): it needs 2")
    assert reason.endswith("TiB and has 64.00 GiB after its reserve")
    # past it, the rig's context is refused as the rig's, not reported as a model too large
    path = rig([gpu("64 GiB"), gpu("64 GiB")], doc, context=2**40)
    msg = input_error(invoke(path), [path])
    assert msg.rest.startswith("context: input should be less than or equal to 2147483647")


def test_context_beyond_the_byte_limit(rig):
    """A context the model's KV cache cannot be counted at is the model's; one past the most tokens a
    context may be is the option's or the rig key's."""
    doc = model(kinds=["full"], kv_bytes_per_token={"full": 2**33})
    path = rig([gpu(INT64_MAX)], doc)
    msg = input_error(invoke(path, "--context", str(2**30)), [path.parent / "m.yaml"])
    assert "beyond the 2^62 bytes moesplit plans in" in msg.rest and "at a context of" in msg.rest
    result = invoke(path, "--context", str(10**30))
    assert result.exit_code == 2 and "'--context'" in result.stderr and "moesplit plans" in result.stderr
    path.write_text(path.read_text() + f"context: {2**60}\n")
    msg = input_error(invoke(path), [path])
    assert msg.rest.startswith("context: input should be less than or equal to 2147483647")


def test_context_that_fits(rig):
    doc = model(kinds=["linear", "full"], kv_bytes_per_token={"full": 1})
    out = plan(rig([gpu(1000 + 2 * 50)], doc, context=50))
    # layers 1 and 3 hold 50 bytes of KV each: room = 1100 - 400 - 100 = 600
    assert out["stages"][0]["room_bytes"] == 600


@pytest.mark.parametrize("order", ["as-given", "auto"])
def test_identical_gpus(rig, order):
    """Three identical cards: any order is as good, so the plan keeps rig order (the tie-break)."""
    out = plan(rig([gpu(300, 0.7)] * 3, profile=every_pair()), "--order", order)
    assert out["gpus"] == [0, 1, 2]
    # every split into 1 + 1 + 2 layers holds every pair with the same compute and bottleneck: the
    # lexicographically smallest cut list wins
    assert out["cuts"] == [1, 2]
    other = plan(rig([gpu(300, 0.7)] * 3, order="as-given" if order == "auto" else "auto"))
    assert other["window_ms"] == out["window_ms"]


def test_max_layers_make_the_rig_infeasible(rig):
    assert infeasible(rig([gpu(1000, max_layers=1), gpu(1000, max_layers=2)])) == (
        "the GPUs' max_layers add up to 3, fewer than the model's 4 layers"
    )


def test_first_stage_minimum_larger_than_the_layers(rig):
    assert infeasible(rig([gpu(1000)], first_stage_min_layers=5)) == (
        "first_stage_min_layers is 5, more than the model's 4 layers"
    )


def test_first_stage_minimum_that_squeezes_the_rest(rig):
    assert infeasible(rig([gpu(1000), gpu(1000)], first_stage_min_layers=4)) == (
        "the GPUs' minimum layers (with first_stage_min_layers 4) add up to 5, more than the model's 4"
    )


@pytest.mark.parametrize("order", ["as-given", "auto"])
def test_first_stage_minimum_above_every_max_layers(rig, order):
    reason = infeasible(
        rig([gpu(1000, max_layers=2), gpu(1000, max_layers=2)], first_stage_min_layers=3, order=order)
    )
    first = "GPU 0's max_layers is 2" if order == "as-given" else "the largest max_layers is 2"
    assert reason == f"the first stage needs at least 3 layers (first_stage_min_layers) but {first}"


def test_hand_over_point_that_the_next_gpu_cannot_take(rig):
    """As given, GPU 0 holds only layer 0, so GPU 1 must start at layer 1, whose 300 bytes it cannot
    hold; every count, size and capacity check passes (GPU 1 could run layer 2, GPU 2 anything), so the
    reason is the minimal set of conflicting rules."""
    doc = model(dense_bytes=[100, 300, 100, 100])
    path = rig([gpu(100), gpu(250), gpu(10_000)], doc)
    assert infeasible(path) == (
        "no split respects GPU 0's memory and GPU 1's memory at once; relaxing any one of them makes a "
        "plan possible"
    )
    # in another order the rig plans: GPU 1 cannot take layer 1 anywhere, so GPU 2 must
    out = plan(path, "--order", "auto")
    assert next(s["gpu"] for s in out["stages"] if s["start"] <= 1 < s["end"]) == 2
