"""llama-quantize's recipes (solver/importers/quant.py) on small models, each case read off llama.cpp's
``llama_tensor_get_type_impl`` by hand, and ggml's type table against gguf-py's copy of it."""

from __future__ import annotations

import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from solver.cli.model import KV_TYPES as CLI_KV_TYPES
from solver.importers.ggmltypes import KV_TYPES, TYPES, row_bytes, tensor_bytes
from solver.importers.quant import FTYPES, Facts, assign_types, category, quantizable

H, W, E = 512, 256, 16


def test_type_table_is_ggmls():
    for kind in TYPES.values():
        assert GGML_QUANT_SIZES[GGMLQuantizationType[kind.name]] == (kind.block, kind.size), kind.name
    assert {f: FTYPES[f] in TYPES for f in FTYPES} == dict.fromkeys(FTYPES, True)
    assert tuple(KV_TYPES) == CLI_KV_TYPES == ("f16", "q8_0", "q4_0")


def test_rows_take_whole_blocks():
    assert row_bytes(TYPES["Q8_0"], 64) == 68 and row_bytes(TYPES["Q4_0"], 33) == 36
    assert tensor_bytes(TYPES["Q4_K"], (3, 256)) == 3 * 144
    assert float(TYPES["IQ2_XXS"].bits) == 2.0625 and float(TYPES["Q6_K"].bits) == 6.5625


def model(layers: int, shared: bool = False, dense_first: bool = False, tied: bool = False, h: int = H):
    """A MoE model's tensors as GGUF names and shapes (row last)."""
    out = [("token_embd.weight", (1000, h)), ("output_norm.weight", (h,))]
    out += [] if tied else [("output.weight", (1000, h))]
    for il in range(layers):
        b = f"blk.{il}."
        out += [(b + "attn_norm.weight", (h,)), (b + "ffn_norm.weight", (h,))]
        out += [(b + f"attn_{p}.weight", (h, h)) for p in ("q", "k", "v", "output")]
        if dense_first and il == 0:
            out += [(b + f"ffn_{p}.weight", (W, h)) for p in ("gate", "up")] + [
                (b + "ffn_down.weight", (h, W))
            ]
            continue
        out += [(b + "ffn_gate_inp.weight", (E, h))]
        out += [(b + f"ffn_{p}_exps.weight", (E, W, h)) for p in ("gate", "up")]
        out += [(b + "ffn_down_exps.weight", (E, h, W))]
        if shared:
            out += [(b + f"ffn_{p}_shexp.weight", (W, h)) for p in ("gate", "up")]
            out += [(b + "ffn_down_shexp.weight", (h, W))]
    return out


def types(ftype: str, layers: int = 16, n_expert: int = E, n_gqa: int = 8, **kwargs) -> dict[str, str]:
    return assign_types(ftype, model(layers, **kwargs), Facts(n_expert, n_gqa, layers))


def per_layer(result: dict[str, str], stem: str, layers: int = 16) -> list[str]:
    return [result[f"blk.{il}.{stem}.weight"] for il in range(layers)]


MORE = [i < 2 or i >= 14 or (i - 2) % 3 == 2 for i in range(16)]  # use_more_bits over 16 layers


def test_categories_and_what_is_left_alone():
    assert (
        category("blk.3.attn_kv_b.weight") == "attn_kv_b"
        and category("blk.0.ffn_gate_inp.weight") == "ffn_gate"
    )
    assert (
        category("blk.1.ffn_down_shexp.weight") == "ffn_down" and category("blk.1.ssm_out.weight") == "other"
    )
    assert not quantizable("blk.0.ffn_gate_inp.weight", 2) and not quantizable("blk.0.attn_q_norm.weight", 1)
    assert not quantizable("blk.0.ssm_conv1d.weight", 2) and not quantizable("blk.0.attn_q.bias", 1)
    assert types("Q4_K_M")["blk.0.ffn_gate_inp.weight"] == "F32"


def test_q4_k_m_gives_v_and_every_down_q6_k_on_use_more_bits_layers():
    r = types("Q4_K_M", shared=True)
    rich = ["Q6_K" if b else "Q4_K" for b in MORE]
    assert per_layer(r, "attn_v") == per_layer(r, "ffn_down_exps") == per_layer(r, "ffn_down_shexp") == rich
    assert set(per_layer(r, "attn_k") + per_layer(r, "ffn_gate_exps") + per_layer(r, "attn_output")) == {
        "Q4_K"
    }
    assert (r["output.weight"], r["token_embd.weight"]) == ("Q6_K", "Q4_K")


def test_mixtral_rules_for_eight_experts():
    r = types("Q4_K_M", n_expert=8)
    assert set(per_layer(r, "attn_v")) == set(per_layer(r, "attn_k")) == {"Q8_0"}
    assert set(per_layer(r, "attn_output")) == {"Q5_K"}


def test_q3_k_m_and_q2_k():
    r = types("Q3_K_M")
    assert per_layer(r, "attn_v")[:3] == ["Q5_K", "Q5_K", "Q4_K"]  # the first two attn_v tensors
    assert per_layer(r, "ffn_down_exps")[:2] == ["Q5_K", "Q4_K"]  # the first sixteenth of 16 layers
    assert set(per_layer(r, "attn_output")) == {"Q4_K"}
    r = types("Q2_K", n_gqa=2)
    assert set(per_layer(r, "attn_v")) == {"Q3_K"} and set(per_layer(r, "ffn_down_exps")) == {"Q3_K"}
    assert types("Q2_K", n_gqa=4)["blk.5.attn_v.weight"] == "Q4_K"


def test_low_iq_types_count_ffn_down_tensors_not_layers():
    """IQ2_XXS gives Q2_K to the first eighth of the ffn_down tensors: with a dense first layer and a
    shared expert (two ffn_down per MoE layer), 16 // 8 = 2 tensors reach only into layer 1."""
    r = types("IQ2_XXS", shared=True, dense_first=True)
    assert r["blk.0.ffn_down.weight"] == "Q2_K" and r["blk.1.ffn_down_exps.weight"] == "Q2_K"
    assert r["blk.1.ffn_down_shexp.weight"] == "IQ2_XXS" and r["blk.2.ffn_down_exps.weight"] == "IQ2_XXS"
    assert set(per_layer(r, "attn_v")) == {"Q4_K"}  # 16 experts >= 4
    assert (r["output.weight"], r["token_embd.weight"]) == ("Q5_K", "Q2_K")
    assert types("IQ1_S")["blk.3.attn_output.weight"] == "IQ2_XXS"
    assert types("IQ2_M")["blk.3.attn_output.weight"] == "IQ3_S"


def test_iq3_xs_mixes_gate_and_up_in_the_middle_layers():
    r = types("IQ3_XS")
    assert per_layer(r, "ffn_up_exps") == ["IQ3_S"] * 2 + ["IQ3_XXS"] * 12 + ["IQ3_S"] * 2
    assert set(per_layer(r, "attn_q")) == set(per_layer(r, "attn_k")) == {"IQ3_XXS"}
    assert set(per_layer(r, "attn_v")) == {"Q4_K"}


def test_mxfp4_moe_and_tied_embeddings():
    r = types("MXFP4_MOE")
    assert set(per_layer(r, "ffn_gate_exps")) == {"MXFP4"} and set(per_layer(r, "attn_q")) == {"Q8_0"}
    assert r["output.weight"] == r["token_embd.weight"] == "Q8_0"
    assert types("Q4_K_M", tied=True)["token_embd.weight"] == "Q6_K"  # one tensor, the head's rule


@pytest.mark.parametrize(
    ("ftype", "kind"), [("Q4_K_M", "Q5_0"), ("Q6_K", "Q8_0"), ("IQ2_XS", "IQ4_NL"), ("Q8_0", "Q8_0")]
)
def test_rows_that_do_not_fill_a_block_fall_back(ftype: str, kind: str):
    """Rows of 2,880 (gpt-oss) do not fill 256-value blocks; llama.cpp's fallback types do."""
    r = assign_types(ftype, model(2, h=2880), Facts(E, 8, 2))
    assert r["blk.0.attn_q.weight"] == kind
    assert r["output.weight"] == "Q8_0"  # a head whose rows do not fill the default type's blocks


def test_no_block_fits_gives_f16():
    assert assign_types("Q8_0", [("blk.0.attn_q.weight", (64, 100))], Facts(E, 8, 1)) == {
        "blk.0.attn_q.weight": "F16"
    }
