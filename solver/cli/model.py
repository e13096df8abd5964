"""``solve model from-gguf|from-hf``: a model file from a GGUF header or a Hugging Face config.json.

The importers are imported inside the commands, so ``solve RIG`` never loads them.
"""

from __future__ import annotations

from pathlib import Path

import click

from solver.cli.badinput import input_errors
from solver.cli.written import OUTPUT, command_line, emit, relative
from solver.files.config import shown_path

KV_TYPES = ("f16", "q8_0", "q4_0")

_PROFILE = click.option(
    "--profile",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Routing profile the model file names (written relative to the output).",
)


@click.group("model")
def model_group() -> None:
    """Write a model file from a GGUF header or a Hugging Face config.json."""


_KV_TYPE = click.option(
    "--kv-type",
    type=click.Choice(KV_TYPES),
    default="f16",
    show_default=True,
    help="KV cache type, as llama.cpp's -ctk/-ctv (q8_0: 34 bytes per 32 values, q4_0: 18 per 32).",
)


@model_group.command("from-gguf")
@click.argument("gguf_file", type=click.Path(path_type=Path))
@OUTPUT
@_KV_TYPE
@_PROFILE
@input_errors
def from_gguf_cmd(gguf_file: Path, output: Path | None, kv_type: str, profile: Path | None) -> None:
    """Exact bytes from a GGUF file's header (the tensor data is never read)."""
    from solver.importers.gguf import first_shard, read_gguf
    from solver.importers.modelfile import model_yaml

    m = read_gguf(gguf_file, kv_type)
    m.gguf = relative(first_shard(gguf_file), output)
    kv = kv_type if kv_type != "f16" else None
    m.command = command_line(
        ["model", "from-gguf", gguf_file], {"--kv-type": kv, "--profile": profile, "-o": output}
    )
    text = model_yaml(m, relative(profile, output) if profile else None)
    emit(text, output, [gguf_file, *([profile] if profile else [])])


@model_group.command("from-hf")
@click.argument("config_file", type=click.Path(path_type=Path))
@click.option(
    "--weights",
    required=True,
    help="Weight scheme the bytes are estimated for: a GGUF quant (Q2_K..Q8_0, IQ1_S..IQ4_XS, IQ4_NL,"
    " the _S/_M/_L mixes, MXFP4_MOE: llama-quantize's recipe) or a checkpoint (BF16, FP8, MXFP4); Q4_K"
    " is one uniform type. docs/models.md lists them.",
)
@click.option("--name", help="Model name (default: the config's folder or file name).")
@click.option(
    "--hf-model",
    help="What vllm serve / SGLang load: a Hugging Face id or checkpoint folder (default: the id of a"
    " config in Hugging Face's cache, or the config's folder when it holds *.safetensors).",
)
@OUTPUT
@_KV_TYPE
@_PROFILE
@input_errors
def from_hf_cmd(
    config_file: Path,
    weights: str,
    name: str | None,
    hf_model: str | None,
    output: Path | None,
    kv_type: str,
    profile: Path | None,
) -> None:
    """Estimated bytes from a Hugging Face config.json and a weight scheme."""
    from solver.importers.hf import checkpoint_of, read_hf
    from solver.importers.modelfile import check_sizes, model_yaml

    m = read_hf(config_file, weights, name, kv_type)
    check_sizes(m, shown_path(config_file))
    found = checkpoint_of(config_file) if hf_model is None else hf_model
    m.hf_model = relative(found, output) if isinstance(found, Path) else found
    options = {
        "--weights": weights.upper(),
        "--name": name,
        "--hf-model": hf_model,
        "--kv-type": kv_type if kv_type != "f16" else None,
        "--profile": profile,
        "-o": output,
    }
    m.command = command_line(["model", "from-hf", config_file], options)
    text = model_yaml(m, relative(profile, output) if profile else None)
    emit(text, output, [config_file, *([profile] if profile else [])])
