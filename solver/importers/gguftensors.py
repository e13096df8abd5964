"""A GGUF model's tensors mapped to what the planner counts: per layer, routed experts and dense bytes; the
head; and what no stage holds.

- Every layer must have tensors, and the layers with routed experts must be llama.cpp's: all of them,
  less the first ``leading_dense_block_count``, and only every ``interleave_moe_layer_step``-th
  (llama4, ernie4_5-moe); each MoE layer has the same expert tensors.
- A layer holding ``ffn_{gate,up,down,gate_up}_exps`` tensors has ``{arch}.expert_count`` routed
  experts (their last GGML dimension must agree); any other layer (``leading_dense_block_count``,
  ``mlp_only_layers``) has 0. ``expert_tensors`` are those tensors (biases and scales included) by
  ``n_bytes``; ``expert_bytes[l]`` is their sum over the layer's experts, rounded up; every other
  ``blk.l.`` tensor is ``dense_bytes[l]``; of them, the feed-forward ones that are not routed experts
  (``FFN_TENSOR``: the router, shared experts, a dense layer's MLP, their biases) are also listed by
  name in ``ffn_tensors``, because llama.cpp's ``--fit`` moves them with a layer's expert tensors when
  a layer only partly fits (its ``blk.N.ffn_down.*`` rules). An older Mixtral conversion's
  per-expert tensors (``blk.N.ffn_gate.E.weight``) count as the ``ffn_gate_exps`` tensor llama.cpp
  merges them into.
- ``last_stage_bytes`` = ``output.*`` + ``output_norm.*``: llama.cpp puts the output slot on the
  last device. Without ``output.weight`` the embeddings are tied and llama.cpp loads ``token_embd``
  a second time there (``TENSOR_DUPLICATED``), so it counts as the head. ``first_stage_bytes`` is 0:
  the input embeddings stay in host memory.
- ``other_weight_bytes`` = every other tensor of the file (the untied ``token_embd``, the MTP layers,
  ``rope_freqs``): no stage holds them, but they are part of the file's size (llama-bench's
  ``model_size``), which ``solve calibrate`` checks its rows against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from solver.errors import InputError
from solver.importers.ggufheader import TensorInfo
from solver.importers.ggufmeta import Meta
from solver.importers.modelfile import per_expert_bytes

#: Routed expert tensor stems, in the order ``expert_tensors`` lists them.
EXPERT_STEMS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps")

#: Tensors of the output slot (the head), counted on the last stage.
HEAD_TENSORS = ("output.weight", "output.bias", "output_norm.weight", "output_norm.bias")

#: A layer's feed-forward tensor that is not a routed expert, by its name after ``blk.N.``: what the
#: ``-ot`` rules ``--fit`` writes for a partly fitting layer (``blk\.N\.ffn_(gate|up|gate_up|down).*``
#: and narrower) reach beyond the expert tensors.
FFN_TENSOR = re.compile(r"^ffn_(gate|up|down)")
#: A layer's tensor: ``blk.N.`` and the rest of its name.
BLOCK_TENSOR = re.compile(r"^blk\.(\d+)\.(.+)$")
#: One expert's tensor in an older Mixtral conversion (``blk.N.ffn_gate.E.weight``): llama.cpp merges
#: a layer's into one ``ffn_gate_exps`` tensor when it loads them, so they count as that tensor.
PER_EXPERT_TENSOR = re.compile(r"^(ffn_(?:gate|up|down))\.(\d+)\.weight$")


def check_layers(tensors: list[TensorInfo], layers: int, meta: Meta, shown: str) -> None:
    """Every layer has tensors, and routed experts sit in the layers llama.cpp builds them in.

    Runs before anything per layer is built, so a ``block_count`` the tensors cannot back costs only a
    pass over the tensors.
    """
    present: dict[int, set[str]] = {}
    for t in tensors:
        match = BLOCK_TENSOR.match(t.name)
        if match:
            il, rest = int(match[1]), match[2]
            stem = rest.split(".", 1)[0]
            single = PER_EXPERT_TENSOR.match(rest)
            present.setdefault(il, set()).add(f"{single[1]}_exps" if single else stem)
    count = meta.key("block_count")
    for il in range(layers):
        if il not in present:
            have = f"{len(present)} layer(s) of tensors" if present else "no blk.N tensors"
            raise InputError(
                shown, f"{count} {meta.block_count} but layer {il} has no tensors (the file has {have})"
            )
    if not any(stem in EXPERT_STEMS for il in range(layers) for stem in present[il]):
        raise InputError(shown, "no routed expert tensors (blk.N.ffn_*_exps): not a mixture-of-experts model")
    first_moe: tuple[int, set[str]] | None = None
    for il in range(layers):
        stems = {stem for stem in present[il] if stem in EXPERT_STEMS}
        expected = il >= meta.leading_dense and (il + 1) % meta.moe_step == 0
        if expected and not stems:
            raise InputError(
                shown, f"layer {il} has no routed expert tensors (blk.{il}.ffn_*_exps), but {_moe_rule(meta)}"
            )
        if stems and not expected:
            raise InputError(shown, f"layer {il} has routed expert tensors, but {_moe_rule(meta)}")
        if not stems and not present[il] & {"ffn_down", "ffn_gate", "ffn_up"}:
            raise InputError(shown, f"layer {il} has no feed-forward tensors (blk.{il}.ffn_*)")
        if stems and first_moe is None:
            first_moe = (il, stems)
        elif stems and first_moe is not None and stems != first_moe[1]:
            other, theirs = first_moe
            raise InputError(
                shown,
                f"layer {il} has expert tensors {', '.join(sorted(stems))} but layer {other} has"
                f" {', '.join(sorted(theirs))}",
            )


def _moe_rule(meta: Meta) -> str:
    """Which layers llama.cpp builds routed experts in, for a message."""
    where = "every layer"
    if meta.moe_step > 1:
        step = f"{meta.key('interleave_moe_layer_step')} {meta.moe_step}"
        where = f"the last layer of every {meta.moe_step} ({step})"
    if meta.leading_dense:
        where += f" from layer {meta.leading_dense} on ({meta.key('leading_dense_block_count')})"
    return f"llama.cpp builds them in {where} of a {meta.arch} model"


@dataclass
class Counted:
    """Bytes per layer from the tensor infos, and which tensors each layer has."""

    experts: list[int]
    expert_bytes: list[int]
    expert_tensors: dict[str, list[int]]
    dense_bytes: list[int]
    ffn_tensors: dict[str, list[int]]
    head_bytes: int
    other_bytes: int


def _expert_key_order(key: str) -> tuple[int, str]:
    stem, _, suffix = key.partition(".")
    return (EXPERT_STEMS.index(stem), suffix)


def count_tensors(
    tensors: list[TensorInfo], layers: int, meta: Meta, shown: str, sources: dict[str, str]
) -> Counted:
    """Split every tensor's bytes into experts, dense layer weights, the head, and what is not counted."""
    dense = [0] * layers
    expert_tensors: dict[str, list[int]] = {}
    ffn_tensors: dict[str, list[int]] = {}
    moe = [False] * layers
    per_expert: list[dict[str, set[int]]] = [{} for _ in range(layers)]
    head = {}
    other: dict[str, int] = {}
    dropped = 0
    by_name = {t.name: t for t in tensors}
    for t in tensors:
        match = BLOCK_TENSOR.match(t.name)
        if not match:
            if t.name in HEAD_TENSORS:
                head[t.name] = t.n_bytes
            else:
                other[t.name] = t.n_bytes
            continue
        il, rest = int(match[1]), match[2]
        if il >= meta.block_count:
            raise InputError(shown, f"tensor {t.name} is past {meta.key('block_count')} {meta.block_count}")
        if il >= layers:
            dropped += t.n_bytes
            continue
        stem = rest.split(".", 1)[0]
        single = PER_EXPERT_TENSOR.match(rest)
        if single:
            moe[il] = True
            per_expert[il].setdefault(single[1], set()).add(int(single[2]))
            expert_tensors.setdefault(f"{single[1]}_exps", [0] * layers)[il] += t.n_bytes
            continue
        if stem not in EXPERT_STEMS:
            dense[il] += t.n_bytes
            if FFN_TENSOR.match(rest):
                ffn_tensors.setdefault(rest.removesuffix(".weight"), [0] * layers)[il] += t.n_bytes
            continue
        if not t.shape or t.shape[-1] != meta.expert_count:
            want = f"{meta.expert_count} experts in its last dimension"
            raise InputError(shown, f"tensor {t.name} has shape {list(t.shape)}, not {want}")
        moe[il] = True
        key = rest.removesuffix(".weight")
        expert_tensors.setdefault(key, [0] * layers)[il] += t.n_bytes
    for il, stems in enumerate(per_expert):
        for stem, ids in stems.items():
            if len(ids) != meta.expert_count or min(ids) != 0 or max(ids) != meta.expert_count - 1:
                have = f"{stem}.E tensors for {len(ids)} of {meta.expert_count} experts"
                raise InputError(shown, f"layer {il} has {have}")
    experts = [meta.expert_count if moe[il] else 0 for il in range(layers)]
    expert_bytes = per_expert_bytes(expert_tensors, experts)
    dense_layers = [il for il in range(layers) if not moe[il]]
    sources["experts"] = (
        f"{meta.key('expert_count')} {meta.expert_count} in each layer with ffn_*_exps tensors"
        + (f"; 0 in the {len(dense_layers)} without ({_ranges(dense_layers)})" if dense_layers else "")
        + (f"; {meta.key('leading_dense_block_count')} {meta.leading_dense}" if meta.leading_dense else "")
    )
    sources["expert_tensors"] = "n_bytes of blk.N.ffn_{gate,up,down,gate_up}_exps (ggml type and shape)"
    if any(per_expert):
        sources["expert_tensors"] += "; per-expert blk.N.ffn_{gate,up,down}.E summed (an older conversion)"
    sources["expert_bytes"] = "a layer's expert tensors over its experts, rounded up to a whole byte"
    sources["dense_bytes"] = "n_bytes of every other blk.N tensor (attention, router, shared experts, norms)"
    if dropped:
        sources["dense_bytes"] += f"; the MTP layers' {dropped} bytes are left out"
    if ffn_tensors:
        sources["ffn_tensors"] = (
            "n_bytes of the blk.N.ffn_{gate,up,down}* tensors that are not routed experts"
            " (part of dense_bytes)"
        )
    if "output.weight" in by_name:
        sources["last_stage_bytes"] = (
            "output.weight + output_norm.weight (llama.cpp's output is on the last GPU)"
        )
    elif "token_embd.weight" in by_name:
        head["token_embd.weight"] = other.pop("token_embd.weight")
        sources["last_stage_bytes"] = (
            "token_embd.weight (tied embeddings: no output.weight, llama.cpp loads token_embd again as"
            " the head) + output_norm.weight"
        )
    else:
        raise InputError(shown, "no output.weight and no token_embd.weight: the model has no head")
    sources["first_stage_bytes"] = "0: llama.cpp keeps the token embeddings in host memory"
    if other or dropped:
        parts = [*sorted(other)] + ([f"the MTP layers' {dropped} bytes"] if dropped else [])
        sources["other_weight_bytes"] = (
            "weights no stage holds, counted only in the file's size: " + ", ".join(parts)
        )
    expert_tensors = {k: expert_tensors[k] for k in sorted(expert_tensors, key=_expert_key_order)}
    return Counted(
        experts,
        expert_bytes,
        expert_tensors,
        dense,
        dict(sorted(ffn_tensors.items())),
        sum(head.values()),
        sum(other.values()) + dropped,
    )


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 7]`` as ``layers 0-2, 7``."""
    parts: list[str] = []
    start = prev = indices[0]
    for i in [*indices[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return "layers " + ", ".join(parts)
