"""llama.cpp's flags as its programs spell them: which flags place layers and tensors (llama-server and
llama-cli, llama-bench, ``LLAMA_ARG_*`` variables), which take no value, which belong to another
engine's command, and the rules ``-ncmoe``/``-cmoe`` add (solver.engines.llamacpp.args reads them)."""

from __future__ import annotations

#: llama.cpp refuses a ``--tensor-split`` of llama_max_devices() (16) values or more.
LLAMA_MAX_DEVICES = 16
#: The expert tensors ``-ncmoe``/``-cmoe`` move (common/common.h, LLM_FFN_EXPS_REGEX).
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
#: Bytes one cached value takes, by ``-ctk``/``-ctv`` type: ggml's block bytes over block values.
KV_TYPE_BYTES: dict[str, tuple[int, int]] = {
    "f32": (4, 1),
    "f16": (2, 1),
    "bf16": (2, 1),
    "q8_0": (34, 32),
    "q4_0": (18, 32),
    "q4_1": (20, 32),
    "iq4_nl": (18, 32),
    "q5_0": (22, 32),
    "q5_1": (24, 32),
}
#: Names of the programs whose flags are read (a path to one counts by its file name).
PROGRAMS = ("llama-server", "llama-cli", "llama-bench", "llama-mtmd-cli", "llama-simple", "server", "main")
#: What ``-sm`` takes; ``row`` and ``tensor`` split each matrix over the GPUs.
SPLIT_MODES = ("none", "layer", "row", "tensor")


#: Most blocks a model moesplit plans can have: the range-walk table's 2^25 cells allow 5,791 layers, so
#: ``--n-cpu-moe`` rules past this many name no tensor and are not made.
MAX_BLOCKS = 8192


def moe_rules(n_cpu_moe: int = 0, cpu_moe: bool = False) -> list[tuple[str, str]]:
    """The rules ``--n-cpu-moe N`` (the experts of layers < N, at most MAX_BLOCKS) or ``--cpu-moe``
    (every expert) add."""
    if cpu_moe:
        return [(FFN_EXPS_REGEX, "CPU")]
    return [(f"blk\\.{i}{FFN_EXPS_REGEX}", "CPU") for i in range(min(n_cpu_moe, MAX_BLOCKS))]


# llama-server / llama-cli: flag spellings -> what they set.
LLAMA_FLAGS: dict[str, str] = {
    "-ngl": "ngl",
    "--gpu-layers": "ngl",
    "--n-gpu-layers": "ngl",
    "-sm": "sm",
    "--split-mode": "sm",
    "-ts": "ts",
    "--tensor-split": "ts",
    "-mg": "mg",
    "--main-gpu": "mg",
    "-dev": "dev",
    "--device": "dev",
    "-ot": "ot",
    "--override-tensor": "ot",
    "-ncmoe": "ncmoe",
    "--n-cpu-moe": "ncmoe",
    "-cmoe": "cmoe",
    "--cpu-moe": "cmoe",
    "-c": "ctx",
    "--ctx-size": "ctx",
    "-ctk": "ctk",
    "--cache-type-k": "ctk",
    "-ctv": "ctv",
    "--cache-type-v": "ctv",
    "--rpc": "rpc",
    "-b": "batch",
    "--batch-size": "batch",
    "-ub": "ubatch",
    "--ubatch-size": "ubatch",
}
#: The flags that place layers and tensors: llama.cpp's own, in no other engine's command.
LLAMA_PLACEMENT = frozenset(
    f for f, what in LLAMA_FLAGS.items() if what in ("ngl", "ts", "ot", "ncmoe", "cmoe", "sm")
)
# Words that set another engine's layer split: a command for that engine, not llama.cpp.
OTHER_ENGINES: dict[str, str] = {
    "VLLM_PP_LAYER_PARTITION": "vllm",
    "-pp": "vllm",
    "--pipeline-parallel-size": "vllm",
    "SGLANG_PP_LAYER_PARTITION": "sglang",
    "--pp-size": "sglang",
    "--layer-split": "strata",
}
# llama-bench: its own spellings.
BENCH_FLAGS: dict[str, str] = {
    "-ngl": "ngl",
    "--n-gpu-layers": "ngl",
    "-sm": "sm",
    "--split-mode": "sm",
    "-ts": "ts",
    "--tensor-split": "ts",
    "-mg": "mg",
    "--main-gpu": "mg",
    "-dev": "dev",
    "--device": "dev",
    "-ot": "ot",
    "--override-tensor": "ot",
    "-ncmoe": "ncmoe",
    "--n-cpu-moe": "ncmoe",
    "-ctk": "ctk",
    "--cache-type-k": "ctk",
    "-ctv": "ctv",
    "--cache-type-v": "ctv",
    "-rpc": "rpc",
    "--rpc": "rpc",
    "-d": "depth",
    "--n-depth": "depth",
    "-n": "gen",
    "--n-gen": "gen",
    "-b": "batch",
    "--batch-size": "batch",
    "-ub": "ubatch",
    "--ubatch-size": "ubatch",
    "-fa": "fa",
    "--flash-attn": "fa",
}
# Environment variables llama-server reads as flag values (common/arg.cpp set_env).
ENV_FLAGS: dict[str, str] = {
    "LLAMA_ARG_N_GPU_LAYERS": "-ngl",
    "LLAMA_ARG_SPLIT_MODE": "-sm",
    "LLAMA_ARG_TENSOR_SPLIT": "-ts",
    "LLAMA_ARG_MAIN_GPU": "-mg",
    "LLAMA_ARG_DEVICE": "-dev",
    "LLAMA_ARG_N_CPU_MOE": "-ncmoe",
    "LLAMA_ARG_CTX_SIZE": "-c",
    "LLAMA_ARG_CACHE_TYPE_K": "-ctk",
    "LLAMA_ARG_CACHE_TYPE_V": "-ctv",
    "LLAMA_ARG_BATCH": "-b",
    "LLAMA_ARG_UBATCH": "-ub",
}
# Flags of llama-server/llama-cli/llama-bench that take no value (any other unknown flag is taken
# with the word after it, unless that word is itself a flag).
VOID_FLAGS = frozenset(
    [
        "--jinja",
        "--no-jinja",
        "--mlock",
        "--no-mmap",
        "--mmap",
        "-nkvo",
        "--no-kv-offload",
        "-kvo",
        "--kv-offload",
        "-cb",
        "--cont-batching",
        "-nocb",
        "--no-cont-batching",
        "--metrics",
        "--slots",
        "--no-slots",
        "--props",
        "--embedding",
        "--embeddings",
        "--reranking",
        "--rerank",
        "-v",
        "--verbose",
        "--log-disable",
        "--no-warmup",
        "--warmup",
        "--swa-full",
        "--check-tensors",
        "-nopo",
        "--no-op-offload",
        "-nr",
        "--no-repack",
        "--repack",
        "--no-host",
        "-kvu",
        "--kv-unified",
        "-no-kvu",
        "--no-kv-unified",
        "--webui",
        "--no-webui",
        "-sp",
        "--special",
        "-cnv",
        "--conversation",
        "-no-cnv",
        "--no-conversation",
        "-i",
        "--interactive",
        "-if",
        "--interactive-first",
        "-st",
        "--single-turn",
        "--verbose-prompt",
        "--no-display-prompt",
        "-co",
        "--color",
        "-e",
        "--escape",
        "--no-escape",
        "--offline",
        "--list-devices",
        "--context-shift",
        "--no-context-shift",
        "-dio",
        "--direct-io",
        "-ndio",
        "--no-direct-io",
        "--no-perf",
        "--perf",
        "--cache-prompt",
        "--no-cache-prompt",
        "--log-prefix",
        "--log-timestamps",
        "--log-colors",
        "--mmproj-offload",
        "--no-mmproj-offload",
        "--no-mmproj",
        "--progress",
        "--ignore-eos",
        "--simple-io",
        "--version",
        "-h",
        "--help",
        "--usage",
        "--completion-bash",
        "--no-prefill-assistant",
        "--lora-init-without-apply",
        "--clear-idle",
        "--no-clear-idle",
        "--spm-infill",
        "-fa-off",
        "--flash-attn-off",
    ]
)
# What -fa (and its long form) may take: newer builds a value, older builds none.
FLASH_VALUES = frozenset({"on", "off", "auto", "1", "0", "true", "false", "enabled", "disabled", "yes", "no"})
# What each -fa value means (common/arg.cpp): flash attention on, off, or auto (on where the backend
# supports it, as RPC and CUDA builds do for these models).
FLASH_MEANS = {"1": "on", "true": "on", "enabled": "on", "yes": "on", "0": "off", "false": "off"} | {
    "disabled": "off", "no": "off", "on": "on", "off": "off", "auto": "auto"
}  # fmt: skip
