"""Small GGUF files for the importer's tests, written with ``gguf.GGUFWriter`` (llama.cpp's own writer).

Run as a script (``python -m tests.ggufbuild DIR``) it writes a header the size of a real one (a
151,936-token tokenizer with as many merges, Qwen3-235B-A22B's 1,131 tensors at Q4_K_M-like types)
over a sparse data region of about 130 GiB, and measures ``read_gguf`` against ``gguf.GGUFReader`` (wall
time and peak RSS of each in a fresh subprocess).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

Q = GGMLQuantizationType


@dataclass(frozen=True)
class Tensor:
    """A tensor to write: name, GGML type, shape in GGML order (ne0, the row, first)."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]


def _add_kv(writer: GGUFWriter, key: str, value: object) -> None:
    """One metadata value: ints as uint32, floats as float32, strings, bools, lists as arrays."""
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, list):
        writer.add_array(key, value)
    else:
        raise TypeError(f"{key}: {type(value)}")


def _data(t: Tensor) -> np.ndarray:
    """Zeros of the tensor's byte size: numpy shape is GGML's reversed; quantized rows as bytes."""
    dims = list(reversed(t.shape))
    if t.qtype == Q.F32:
        return np.zeros(dims, np.float32)
    if t.qtype == Q.F16:
        return np.zeros(dims, np.float16)
    block, size = GGML_QUANT_SIZES[t.qtype]
    dims[-1] = dims[-1] // block * size
    return np.zeros(dims, np.uint8)


def write_gguf(
    path: Path, arch: str, kv: dict[str, object], tensors: list[Tensor], split_max_tensors: int = 0
) -> None:
    """A GGUF file (or shards ``STEM-0000k-of-0000n.gguf`` when split) with these keys and tensors."""
    writer = GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    for key, value in kv.items():
        _add_kv(writer, key, value)
    for t in tensors:
        raw = None if t.qtype in (Q.F32, Q.F16) else t.qtype
        writer.add_tensor(t.name, _data(t), raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_sparse_gguf(path: Path, arch: str, kv: dict[str, object], tensors: list[Tensor]) -> int:
    """A GGUF header declaring ``tensors`` over a sparse (unwritten) data region; returns the file size."""
    writer = GGUFWriter(path, arch)
    for key, value in kv.items():
        _add_kv(writer, key, value)
    total = 0
    for t in tensors:
        block, size = GGML_QUANT_SIZES[t.qtype]
        n_bytes = int(np.prod(t.shape)) // block * size
        shape = list(reversed(t.shape))
        writer.add_tensor_info(t.name, shape, np.dtype(np.float32), n_bytes, raw_dtype=t.qtype)
        total += GGUFWriter.ggml_pad(n_bytes, writer.data_alignment)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header = path.stat().st_size
    data_start = GGUFWriter.ggml_pad(header, writer.data_alignment)
    os.truncate(path, data_start + total)
    return data_start + total


def qwen3_235b_like(vocab: int = 151_936, tokenizer: bool = True) -> tuple[dict[str, object], list[Tensor]]:
    """Qwen3-235B-A22B's metadata and tensors at Q4_K_M-like types (ffn_down_exps Q6_K in every
    fourth layer), with a full-size tokenizer unless ``tokenizer`` is False."""
    arch, layers, hidden, experts, width, heads, heads_kv, head = "qwen3moe", 94, 4096, 128, 1536, 64, 4, 128
    kv: dict[str, object] = {
        "general.name": "Qwen3-235B-A22B",
        f"{arch}.block_count": layers,
        f"{arch}.context_length": 40960,
        f"{arch}.embedding_length": hidden,
        f"{arch}.expert_count": experts,
        f"{arch}.expert_used_count": 8,
        f"{arch}.expert_feed_forward_length": width,
        f"{arch}.attention.head_count": heads,
        f"{arch}.attention.head_count_kv": heads_kv,
        f"{arch}.attention.key_length": head,
        f"{arch}.attention.value_length": head,
    }
    if tokenizer:
        kv["tokenizer.ggml.model"] = "gpt2"
        kv["tokenizer.ggml.tokens"] = [f"tok{i}" for i in range(vocab)]
        kv["tokenizer.ggml.token_type"] = [1] * vocab
        kv["tokenizer.ggml.merges"] = [f"t{i} k{i}" for i in range(vocab - 1)]
    tensors = [Tensor("token_embd.weight", Q.Q4_K, (hidden, vocab))]
    for il in range(layers):
        down = Q.Q6_K if il % 4 == 0 else Q.Q4_K
        tensors += [
            Tensor(f"blk.{il}.attn_norm.weight", Q.F32, (hidden,)),
            Tensor(f"blk.{il}.attn_q.weight", Q.Q4_K, (hidden, heads * head)),
            Tensor(f"blk.{il}.attn_k.weight", Q.Q4_K, (hidden, heads_kv * head)),
            Tensor(f"blk.{il}.attn_v.weight", Q.Q6_K, (hidden, heads_kv * head)),
            Tensor(f"blk.{il}.attn_output.weight", Q.Q4_K, (heads * head, hidden)),
            Tensor(f"blk.{il}.attn_q_norm.weight", Q.F32, (head,)),
            Tensor(f"blk.{il}.attn_k_norm.weight", Q.F32, (head,)),
            Tensor(f"blk.{il}.ffn_norm.weight", Q.F32, (hidden,)),
            Tensor(f"blk.{il}.ffn_gate_inp.weight", Q.F32, (hidden, experts)),
            Tensor(f"blk.{il}.ffn_gate_exps.weight", Q.Q4_K, (hidden, width, experts)),
            Tensor(f"blk.{il}.ffn_up_exps.weight", Q.Q4_K, (hidden, width, experts)),
            Tensor(f"blk.{il}.ffn_down_exps.weight", down, (width, hidden, experts)),
        ]
    tensors += [
        Tensor("output_norm.weight", Q.F32, (hidden,)),
        Tensor("output.weight", Q.Q6_K, (hidden, vocab)),
    ]
    return kv, tensors


MEASURE = """
import resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
if sys.argv[1] == "read_gguf":
    from solver.importers.gguf import read_gguf
    model = read_gguf(Path(sys.argv[2]))
    what = f"{model.layers} layers, expert_bytes[0] {model.expert_bytes[0]}"
else:
    from gguf import GGUFReader
    reader = GGUFReader(sys.argv[2])
    what = f"{len(reader.tensors)} tensors, {len(reader.fields)} fields"
seconds = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{sys.argv[1]:10s} {seconds:6.2f} s (imports included)  peak RSS {rss:6.0f} MiB  ({what})")
"""


def main(out: Path) -> None:
    """Write the full-size header over a sparse data region and time both readers on it."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "qwen3-235b-a22b-like.gguf"
    kv, tensors = qwen3_235b_like()
    size = write_sparse_gguf(path, "qwen3moe", kv, tensors)
    blocks = os.stat(path).st_blocks * 512
    print(
        f"{path}: {len(tensors)} tensors, {size / 2**30:.2f} GiB apparent, {blocks / 2**20:.1f} MiB on disk"
    )
    root = Path(__file__).resolve().parent.parent
    for reader, runs in (("read_gguf", 5), ("GGUFReader", 1)):
        for _ in range(runs):
            subprocess.run([sys.executable, "-c", MEASURE, reader, str(path)], check=True, cwd=root)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ggufbench"))
