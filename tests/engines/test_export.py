"""Exports are exact: each engine's own mapping code, re-implemented, runs every layer where the plan does.

Random plans (hypothesis) go through export_lines, the lines through a shell-like split, and the flags
through tests/helpers/engine_mapping.py (llama.cpp's float32 --tensor-split placement and -ot override loop,
vLLM's and SGLang's partition parsers).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.engines import export_lines
from solver.engines.export import (
    LLAMA_ALL_LAYERS,
    LLAMA_MAX_SPLITS,
    Launch,
    Offload,
    check_export_engine,
    override_pattern,
    stage_sizes,
    tensor_split,
)
from tests.helpers.engine_mapping import (
    LLAMA_MAX_DEVICES,
    llama_overrides,
    llama_slot_devices,
    llama_tensor_buft,
    llama_tensor_split,
    parse_lines,
    sglang_gpu_id,
    sglang_pp_indices,
    visible,
    vllm_local_device,
    vllm_pp_indices,
)
from tests.helpers.tiers import examples

EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
OFFLOADABLE = (
    *EXPERT_TENSORS,
    "ffn_gate_exps.bias",
    "ffn_up_exps.bias",
    "ffn_down_exps.bias",
    "ffn_gate_up_exps",
    "ffn_gate_up_exps.bias",
)
LAYER_TENSORS = (
    *[f"{t}.weight" for t in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm")],
    *[f"{t}.weight" for t in ("ffn_gate_inp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")],
    *[f"{t}.weight" for t in ("ffn_gate", "ffn_up", "ffn_down", "ffn_gate_inp_shexp", "attn_sinks")],
    *[f"{t}.weight" for t in ("attn_q_a", "attn_q_b", "attn_kv_a_mqa", "attn_kv_b", "attn_k_b", "attn_v_b")],
    *[f"{t}.weight" for t in ("attn_q_a_norm", "attn_kv_a_norm", "ssm_in", "ssm_out", "ssm_norm")],
    "ssm_a",
    "ssm_d",
    "ssm_conv1d.weight",
    "ssm_conv1d.bias",
    "ssm_dt.bias",
    "ffn_gate_inp.bias",
    "exp_probs_b.bias",
    *[f"nextn.{t}.weight" for t in ("eh_proj", "enorm", "hnorm", "shared_head_head", "embed_tokens")],
    "nextn.shared_head_norm.weight",
    *[t if t.endswith(".bias") else f"{t}.weight" for t in OFFLOADABLE],
)


def model_tensor_names(n_blocks: int) -> list[str]:
    """Every tensor name a GGUF of n_blocks blocks may hold, over the architectures llama.cpp loads."""
    top = ["token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight"]
    return top + [f"blk.{i}.{t}" for i in range(n_blocks) for t in LAYER_TENSORS]


@st.composite
def plans(draw, max_layers: int = 256, max_stages: int = 64):
    """(gpus in pipeline order, cuts, n_layers): any layer counts >= 1, any order over a larger rig."""
    n_layers = draw(st.integers(1, max_layers))
    k = draw(st.integers(1, min(max_stages, n_layers)))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, n_layers - 1)), min_size=k - 1, max_size=k - 1)))
    rig = draw(st.integers(k, k + 3))
    gpus = draw(st.permutations(range(rig)))[:k]
    return gpus, cuts, n_layers


def stage_of_layer(cuts: list[int], n_layers: int) -> list[int]:
    return [sum(c <= layer for c in cuts) for layer in range(n_layers)]


def check_devices(env: dict[str, str], gpus: list[int]) -> None:
    """The engine's device s (CUDA device s after CUDA_VISIBLE_DEVICES) is the plan's GPU of stage s."""
    assert visible(env, len(gpus))[: len(gpus)] == list(gpus)


# llama.cpp: --tensor-split


@settings(max_examples=examples(400), deadline=None)
@given(plan=plans(), extra=st.integers(0, 3))
def test_llama_float32_placement_puts_every_layer_on_its_stage(plan, extra):
    """Up to 64 stages: llama.cpp's float32 upper_bound maps each block to its stage, the output last."""
    _, cuts, n_layers = plan
    k = len(cuts) + 1
    n_blocks = n_layers + extra
    ts = [np.float32(c) for c in tensor_split(stage_sizes(cuts, n_layers), n_blocks)]
    got = llama_slot_devices(ts, n_blocks, LLAMA_ALL_LAYERS, n_devices=k)
    assert got[:n_layers] == stage_of_layer(cuts, n_layers)
    assert got[n_layers:] == [k - 1] * (extra + 1)  # extra blocks and the output slot: the last stage


@settings(max_examples=examples(400), deadline=None)
@given(plan=plans(max_stages=LLAMA_MAX_SPLITS), extra=st.integers(0, 2))
def test_llama_export_runs_the_plan(plan, extra):
    """The printed flags, parsed as llama.cpp parses them, place every layer on its stage's GPU."""
    gpus, cuts, n_layers = plan
    env, flags = parse_lines(export_lines("llama.cpp", gpus, cuts, n_layers, extra_blocks=extra))
    assert flags["--split-mode"] == "layer" and "-ot" not in flags
    ngl = int(flags["-ngl"])
    # more devices than stages (a rig without CUDA_VISIBLE_DEVICES): the unnamed ones get no layer
    devices = llama_slot_devices(llama_tensor_split(flags["--tensor-split"]), n_layers + extra, ngl, 16)
    assert devices == [*stage_of_layer(cuts, n_layers), *[len(gpus) - 1] * (extra + 1)]
    check_devices(env, gpus)


def test_float32_fractions_are_strictly_increasing_for_every_exportable_model():
    """The proof behind integer -ts counts: i -> fl(i / T) is strictly increasing for T up to 999.

    llama.cpp compares fl(il / T) with fl(C_j / T), C_j a cumulative count summed exactly in float; so
    slot il goes past boundary j iff il >= C_j as long as fl(. / T) keeps integers apart. -ngl 999 bounds
    T = n_layer + 1 by 999, so this covers every plan the export accepts.
    """
    for total in range(1, LLAMA_ALL_LAYERS + 1):
        fractions = np.arange(total + 1, dtype=np.float32) / np.float32(total)
        assert np.all(np.diff(fractions) > 0), total
        assert fractions[-1] == 1


def test_llama_split_counts_the_output_slot_on_the_last_device():
    """A worked example: 0-7/8-15/16-32/33-47 is -ts 8,8,17,16, not the plan's 8,8,17,15."""
    _, flags = parse_lines(export_lines("llama.cpp", [0, 1, 2, 3], [8, 16, 33], 48))
    assert flags["--tensor-split"] == "8,8,17,16"
    wrong = llama_slot_devices(llama_tensor_split("8,8,17,15"), 48, 999, 4)
    assert wrong[8:10] == [0, 1]  # the plan's own counts put layer 8 on the first GPU


def test_llama_refuses_what_its_flags_cannot_say():
    with pytest.raises(ValueError, match="at most 15"):
        export_lines("llama.cpp", list(range(16)), list(range(1, 16)), 48)
    with pytest.raises(ValueError):  # llama.cpp itself rejects 16 values
        llama_tensor_split(",".join(["1"] * LLAMA_MAX_DEVICES))
    with pytest.raises(ValueError, match="-ngl 999"):
        export_lines("llama.cpp", [0], [], 999)
    with pytest.raises(ValueError, match="beyond"):
        export_lines("llama.cpp", [0], [], 4, [Offload(4, "ffn_up_exps")])
    with pytest.raises(ValueError, match="do not split"):
        export_lines("llama.cpp", [0, 1], [4], 4)


# llama.cpp: --override-tensor


@st.composite
def offload_sets(draw, n_blocks: int):
    """Random expert tensors to keep on the CPU: whole layers, single tensors, biases, fused tensors."""
    if draw(st.booleans()):  # default units: all three expert tensors of some layers
        layers = draw(st.sets(st.integers(0, n_blocks - 1), min_size=1))
        return [Offload(layer, t) for layer in sorted(layers) for t in EXPERT_TENSORS]
    units = st.tuples(st.integers(0, n_blocks - 1), st.sampled_from(OFFLOADABLE))
    return [Offload(*u) for u in draw(st.sets(units, min_size=1, max_size=4 * n_blocks))]


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_override_selects_exactly_the_offloaded_tensors(data):
    """Of every tensor name of the model, the -ot rule sends exactly the offloaded ones to the CPU."""
    gpus, cuts, n_layers = data.draw(plans(max_stages=LLAMA_MAX_SPLITS))
    extra = data.draw(st.integers(0, 2))
    offload = data.draw(offload_sets(n_layers + extra))
    names = model_tensor_names(n_layers + extra)
    lines = export_lines("llama.cpp", gpus, cuts, n_layers, offload, names, extra_blocks=extra)
    _, flags = parse_lines(lines)
    rules = llama_overrides(flags["-ot"], {"CPU", "CUDA0", "CUDA1"})
    assert len(rules) == 1
    on_cpu = {n for n in names if llama_tensor_buft(n, rules) == "CPU"}
    assert on_cpu == {u.name for u in offload}
    assert not any(llama_tensor_buft(n, rules) for n in names if n not in on_cpu)


def test_every_set_of_expert_tensors_is_matched_exactly():
    """All 255 sets of offloadable tensor kinds, e.g. {ffn_gate_exps, ffn_gate_up_exps}: an optional group."""
    names = model_tensor_names(12)
    for mask in range(1, 2 ** len(OFFLOADABLE)):
        kinds = [t for i, t in enumerate(OFFLOADABLE) if mask >> i & 1]
        offload = [Offload(layer, t) for layer in (1, 7) for t in kinds]
        rules = [(override_pattern(offload), "CPU")]
        assert {n for n in names if llama_tensor_buft(n, rules)} == {u.name for u in offload}, kinds


@settings(max_examples=examples(200), deadline=None)
@given(
    layers=st.sets(st.integers(0, 1100), min_size=1),
    probe=st.lists(st.integers(0, 1200), max_size=50),
)
def test_layer_numbers_are_matched_exactly(layers, probe):
    """blk.1. never matches blk.11. or blk.111.: the digit classes match exactly the chosen numbers."""
    rules = [(override_pattern([Offload(layer, "ffn_up_exps") for layer in layers]), "CPU")]
    for n in {*layers, *probe, *(10 * x for x in layers), *(x // 10 for x in layers)}:
        got = llama_tensor_buft(f"blk.{n}.ffn_up_exps.weight", rules)
        assert (got == "CPU") == (n in layers), n


def test_override_examples_read_as_the_spec_writes_them():
    pattern = override_pattern([Offload(n, t) for n in (3, 17) for t in ("ffn_gate_exps", "ffn_up_exps")])
    assert pattern == r"^blk\.(3|17)\.ffn_(gate|up)_exps\.weight$"
    everything = override_pattern([Offload(layer, t) for layer in range(48) for t in EXPERT_TENSORS])
    assert everything == r"^blk\.([0-9]|[1-3][0-9]|4[0-7])\.ffn_(down|gate|up)_exps\.weight$"
    launch = Launch(gguf="Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf", context=32768, kv_type="q8_0")
    lines = export_lines("llama.cpp", [1, 0], [20], 48, [Offload(5, "ffn_down_exps")], launch=launch)
    assert lines == [
        "CUDA_VISIBLE_DEVICES=1,0 llama-server -m Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf -c 32768"
        " --split-mode layer -ngl 999 --tensor-split 20,29 -ot '^blk\\.5\\.ffn_down_exps\\.weight$=CPU'"
        " -ctk q8_0 -ctv q8_0 -fa on"
    ]


def test_tensor_names_catch_a_tensor_the_model_lacks():
    with pytest.raises(ValueError, match=r"no tensor blk\.2\.ffn_gate_up_exps\.weight"):
        export_lines("llama.cpp", [0], [], 4, [Offload(2, "ffn_gate_up_exps")], ["blk.2.ffn_up_exps.weight"])


# vLLM and SGLang


@settings(max_examples=examples(400), deadline=None)
@given(plan=plans())
def test_vllm_and_sglang_partitions_give_every_rank_its_layers(plan):
    gpus, cuts, n_layers = plan
    bounds = list(zip([0, *cuts], [*cuts, n_layers]))
    for engine, size_flag, indices, device in (
        ("vllm", "--pipeline-parallel-size", vllm_pp_indices, lambda r, _: vllm_local_device(r)),
        ("sglang", "--pp-size", sglang_pp_indices, lambda r, pp: sglang_gpu_id(r, pp)),
    ):
        env, flags = parse_lines(export_lines(engine, gpus, cuts, n_layers))
        pp_size = int(flags[size_flag])
        assert [indices(env, n_layers, rank, pp_size) for rank in range(pp_size)] == bounds
        cuda = visible(env, pp_size)
        assert [cuda[device(rank, pp_size)] for rank in range(pp_size)] == list(gpus)


def test_engine_defaults_are_their_own_even_splits():
    """Without the variable, vLLM puts the remainder before the last stage and SGLang on the last ones."""
    assert [vllm_pp_indices({}, 47, r, 4) for r in range(4)] == [(0, 12), (12, 24), (24, 36), (36, 47)]
    assert [sglang_pp_indices({}, 47, r, 4) for r in range(4)] == [(0, 11), (11, 23), (23, 35), (35, 47)]


def test_offload_is_refused_for_engines_that_keep_every_weight():
    with pytest.raises(ValueError, match="nothing to offload"):
        export_lines("vllm", [0], [], 4, [Offload(0, "ffn_up_exps")])


# strata and the engine check


@settings(max_examples=examples(200), deadline=None)
@given(plan=plans())
def test_strata_layer_split_is_the_cuts(plan):
    gpus, cuts, n_layers = plan
    lines = export_lines("strata", gpus, cuts, n_layers)
    assert lines[-1] == f'"layer_split": {cuts}'
    env, flags = parse_lines(lines[:-1])
    assert flags.get("--layer-split", "") == ",".join(map(str, cuts))
    check_devices(env, gpus)


def test_export_for_another_engine_says_to_plan_with_engine():
    assert check_export_engine("vllm", "vllm") is None
    message = check_export_engine("llama.cpp", "strata")
    assert message == "the plan is for engine strata; plan with --engine llama.cpp to get llama.cpp's flags"
    with pytest.raises(ValueError, match="unknown engine"):
        export_lines("tgi", [0], [], 4)
