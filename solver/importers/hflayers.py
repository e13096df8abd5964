"""The tensors of a layer, built from a Hugging Face config: attention (GQA, MLA, Gated DeltaNet), MLPs,
routed experts, router and norms, named as llama.cpp's GGUF converter names them (``attn_q``,
``ffn_down_exps``, ...), and the ``Family`` an architecture's reader returns.

A tensor's shape has the row (input) length last. KV cache per token: full attention (GQA) rows are
``num_key_value_heads x head_dim`` values; MLA keeps one row of the compressed latent and the RoPE key;
a Gated-DeltaNet (linear attention) layer holds its convolution and recurrent state in float32 (as
llama.cpp does), whatever the context.
"""

from __future__ import annotations

from dataclasses import dataclass

from solver.importers.ggmltypes import STATE_ELEMENT_BYTES
from solver.importers.hfconfig import Config


@dataclass(frozen=True)
class Tensor:
    """One tensor of a layer: GGUF-style name, class, shape with the row (input) length last."""

    name: str
    cls: str
    shape: tuple[int, ...]
    expert: bool = False


@dataclass
class Layer:
    """One layer: its kind (``full``, ``linear``, ...), its tensors, and its routed experts (0: dense)."""

    kind: str
    tensors: list[Tensor]
    experts: int


def vec(name: str, n: int, expert: bool = False) -> Tensor:
    """A 1-D tensor (a norm, a bias) of ``n`` values."""
    return Tensor(name, "vector", (n,), expert)


def head_dim(c: Config) -> int:
    """``head_dim``, else hidden_size / num_attention_heads."""
    return c.int("head_dim", c.int("hidden_size") // max(c.int("num_attention_heads"), 1))


def gqa(
    c: Config, *, gate: bool = False, qk_norm: str = "", bias: str = "", sinks: bool = False
) -> list[Tensor]:
    """Grouped-query attention: q, k, v, o (+ q/k norms, biases, sinks).

    ``qk_norm``: "head" (one norm of head_dim) or "layer" (over all heads); ``bias``: "qkv" or "qkvo".
    """
    h, nh, nkv = c.int("hidden_size"), c.int("num_attention_heads"), c.int("num_key_value_heads")
    d = head_dim(c)
    q = nh * d * (2 if gate else 1)
    out = [
        Tensor("attn_q", "matrix", (q, h)),
        Tensor("attn_k", "matrix", (nkv * d, h)),
        Tensor("attn_v", "matrix", (nkv * d, h)),
        Tensor("attn_output", "matrix", (h, nh * d)),
    ]
    if "qkv" in bias:
        out += [vec("attn_q.bias", q), vec("attn_k.bias", nkv * d), vec("attn_v.bias", nkv * d)]
    if bias == "qkvo":
        out.append(vec("attn_output.bias", h))
    if qk_norm == "head":
        out += [vec("attn_q_norm", d), vec("attn_k_norm", d)]
    elif qk_norm == "layer":
        out += [vec("attn_q_norm", nh * d), vec("attn_k_norm", nkv * d)]
    if sinks:
        out.append(vec("attn_sinks", nh))
    return out


def gqa_kv(c: Config) -> int:
    """KV bytes per token of a GQA layer: one K and one V row of num_key_value_heads x head_dim."""
    return 2 * c.kv_row(c.int("num_key_value_heads") * head_dim(c))


def gqa_heads(c: Config) -> int:
    """llama.cpp's ``n_gqa()``: query heads per KV head."""
    nkv = c.int("num_key_value_heads")
    return c.int("num_attention_heads") // nkv if nkv else 0


def mla(c: Config) -> list[Tensor]:
    """DeepSeek's multi-head latent attention."""
    h, nh = c.int("hidden_size"), c.int("num_attention_heads")
    kv, rope, nope, v = (
        c.int(k) for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    )
    out = []
    if c.has("q_lora_rank"):
        ql = c.int("q_lora_rank")
        out += [Tensor("attn_q_a", "matrix", (ql, h)), vec("attn_q_a_norm", ql)]
        out.append(Tensor("attn_q_b", "matrix", (nh * (nope + rope), ql)))
    else:
        out.append(Tensor("attn_q", "matrix", (nh * (nope + rope), h)))
    return [
        *out,
        Tensor("attn_kv_a_mqa", "matrix", (kv + rope, h)),
        vec("attn_kv_a_norm", kv),
        Tensor("attn_kv_b", "matrix", (nh * (nope + v), kv)),
        Tensor("attn_output", "matrix", (h, nh * v)),
    ]


def gated_deltanet(c: Config, split_ba: bool) -> tuple[list[Tensor], int]:
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): its tensors and fixed state in bytes.

    llama.cpp's converter writes the q/k/v projection as ``attn_qkv`` and the output gate ``z`` as
    ``attn_gate``; beta and alpha are one ``ssm_ba`` (Qwen3-Next) or ``ssm_beta`` and ``ssm_alpha``.
    """
    h = c.int("hidden_size")
    nk, nv = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
    dk, dv, kernel = (
        c.int("linear_key_head_dim"),
        c.int("linear_value_head_dim"),
        c.int("linear_conv_kernel_dim"),
    )
    key, value = nk * dk, nv * dv
    conv = 2 * key + value
    ba = (
        [Tensor("ssm_beta", "matrix", (nv, h)), Tensor("ssm_alpha", "matrix", (nv, h))]
        if split_ba
        else [Tensor("ssm_ba", "matrix", (2 * nv, h))]
    )
    tensors = [
        Tensor("attn_qkv", "matrix", (conv, h)),
        Tensor("attn_gate", "matrix", (value, h)),
        *ba,
        vec("ssm_conv1d", conv * kernel),
        vec("ssm_dt", nv),
        vec("ssm_a", nv),
        vec("ssm_norm", dv),
        Tensor("ssm_out", "matrix", (h, value)),
    ]
    state = (conv * (kernel - 1) + nv * dk * dv) * STATE_ELEMENT_BYTES
    return tensors, state


def mlp(h: int, width: int, suffix: str = "") -> list[Tensor]:
    """A gated MLP of ``width`` (``suffix`` ``_shexp`` for a shared expert)."""
    return [
        Tensor(f"ffn_gate{suffix}", "matrix", (width, h)),
        Tensor(f"ffn_up{suffix}", "matrix", (width, h)),
        Tensor(f"ffn_down{suffix}", "matrix", (h, width)),
    ]


def experts(h: int, n: int, width: int, bias: bool = False) -> list[Tensor]:
    """``n`` routed experts of ``width``, merged per projection as llama.cpp stores them."""
    out = [
        Tensor("ffn_gate_exps", "expert", (n, width, h), True),
        Tensor("ffn_up_exps", "expert", (n, width, h), True),
        Tensor("ffn_down_exps", "expert", (n, h, width), True),
    ]
    if bias:
        out += [
            Tensor("ffn_gate_exps.bias", "vector", (n, width), True),
            Tensor("ffn_up_exps.bias", "vector", (n, width), True),
            Tensor("ffn_down_exps.bias", "vector", (n, h), True),
        ]
    return out


def router(h: int, e: int) -> Tensor:
    """The router: one row of ``h`` weights per routed expert."""
    return Tensor("ffn_gate_inp", "router", (e, h))


def norms(h: int) -> list[Tensor]:
    """The layer's two norms, before attention and before the MLP."""
    return [vec("attn_norm", h), vec("ffn_norm", h)]


@dataclass
class Family:
    """What one architecture's reader returns: per-layer tensors and kinds, and notes for the header.

    ``gqa`` is llama.cpp's query heads per KV head (the recipes test it); ``nextn`` the
    next-token-prediction blocks llama.cpp's converter keeps after the layers.
    """

    layers: list[Layer]
    kv: dict[str, int]
    state: dict[str, int]
    active: int
    notes: dict[str, str]
    gqa: int
    nextn: int = 0
    nextn_note: str = ""


def mtp_kept(family: Family, c: Config, key: str) -> None:
    """The config's next-token-prediction layers, which llama.cpp's converter appends as blocks."""
    family.nextn = c.int(key, 0)
    if family.nextn:
        family.nextn_note = f"{key} {family.nextn}: llama.cpp's converter appends them after the layers"
