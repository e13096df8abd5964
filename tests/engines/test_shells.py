"""``--shell``: every export line comes back exactly through the shell it is written for.

The lines are read back by parsers written here from each shell's documented rules
(tests/helpers/shellparse.py: POSIX sh's quoting, cmd.exe's double quotes and ``^`` then the C runtime's argv
split, PowerShell's single quotes), never by the code that wrote them. What each shell reads must be
what the export meant, and the llama.cpp, vLLM and SGLang commands read in cmd.exe or PowerShell must
place every layer as llama.cpp's, vLLM's and SGLang's own mapping code does from the POSIX form.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.engines import Shape, engine_named, export_lines
from solver.engines.export import Command, Comment, Flags, Launch, Line, SetEnv, Text
from solver.engines.shells import SHELLS, quote, render
from tests.engines.test_export import model_tensor_names, offload_sets, plans
from tests.engines.test_export_hosts import host_plans
from tests.helpers.engine_mapping import (
    host_sections,
    llama_overrides,
    llama_slot_devices,
    llama_tensor_buft,
    llama_tensor_split,
    main_argv,
    parse_lines,
    sglang_gpu_id,
    sglang_pp_indices,
    visible,
    vllm_local_device,
    vllm_pp_indices,
)
from tests.helpers.shellparse import crt_argv, parse
from tests.helpers.tiers import examples

#: Characters a word may hold: the shells' syntax, quotes of every kind, backslashes, blanks, Unicode.
ALPHABET = st.sampled_from([*"aZ09_-.,:;=+/\\^&|<>()[]{}$`!?*#~@%\"' \t", "\u2019", "\u00e9", "\u4e2d"])
WORDS = st.text(ALPHABET, min_size=1, max_size=12)
NAMES = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)


def statements(lines: list[Line]) -> list[tuple]:
    """What the lines mean, in the parsers' form."""
    out: list[tuple] = []
    for line in lines:
        if isinstance(line, Comment):
            out.append(("comment", line.text))
        elif isinstance(line, Text):
            out.append(("text", line.text))
        elif isinstance(line, Flags):
            out.append(("words", line.words))
        elif isinstance(line, SetEnv):
            out.append(("set", line.name, line.value))
        else:
            out.append(("run", line.env, line.argv, line.background))
    return out


def refused(word: str, shell: str) -> bool:
    """Whether the shell cannot pass ``word`` to a program at all (solver.engines.shells says why)."""
    if shell == "cmd":
        return any(c in word for c in '%"\n\r')
    if shell == "powershell":
        return not word or '"' in word
    return False


def refused_value(value: str, shell: str) -> bool:
    """Whether the shell cannot set a variable to ``value``."""
    if shell == "cmd":
        return not value or any(c in value for c in '%"\n\r')
    return shell == "powershell" and not value


@settings(max_examples=examples(400), deadline=None)
@given(word=WORDS, shell=st.sampled_from(SHELLS))
def test_any_word_comes_back_unchanged_or_is_refused(word, shell):
    line = Command(("prog", word, "--flag", word))
    if refused(word, shell):
        with pytest.raises(ValueError):
            render([line], shell)
        return
    assert parse(render([line], shell), shell) == statements([line])


@settings(max_examples=examples(300), deadline=None)
@given(
    data=st.data(),
    shell=st.sampled_from(SHELLS),
    words=st.lists(WORDS.filter(lambda w: w[0] != "-"), min_size=1, max_size=4),
)
def test_commands_variables_and_flags_come_back_unchanged(data, shell, words):
    env = tuple(data.draw(st.lists(st.tuples(NAMES, WORDS), max_size=2)))
    background = data.draw(st.booleans())
    lines: list[Line] = [
        Comment("on a: the main command"),
        SetEnv(data.draw(NAMES), data.draw(WORDS)),
        Command(("server", *words), env, background),
        Flags(("--layer-split", data.draw(WORDS))),
        Text('"layer_split": [8, 16, 33]'),
    ]
    values = (*(v for _, v in env), lines[1].value)
    bad = [w for w in (*words, lines[3].words[1]) if refused(w, shell)]
    bad += [v for v in values if refused_value(v, shell)]
    spaced = shell == "powershell" and background and any(c in w for w in words for c in " \t")
    if bad or spaced:
        with pytest.raises(ValueError):
            render(lines, shell)
        return
    assert parse(render(lines, shell), shell) == statements(lines)


def test_the_override_regex_reads_as_each_shell_documents():
    pattern = r"^blk\.(3|17)\.ffn_(gate|up)_exps\.weight$=CPU"
    assert quote(pattern, "posix") == f"'{pattern}'"
    assert quote(pattern, "cmd") == f'"{pattern}"'  # ^ and | are plain inside double quotes
    assert quote(pattern, "powershell") == f"'{pattern}'"
    assert quote("8,8,17,16", "powershell") == "'8,8,17,16'"  # a bare comma makes an array
    assert quote("8,8,17,16", "posix") == "8,8,17,16"
    assert quote("C:\\My Models\\", "cmd") == '"C:\\My Models\\\\"'  # the C runtime halves \\"
    assert crt_argv('a "C:\\My Models\\\\" b') == ["a", "C:\\My Models\\", "b"]
    assert quote("1kb", "powershell") == "'1kb'" and quote("999", "powershell") == "999"


def _llama_layers(lines: list[str], shell: str, n_blocks: int, k: int) -> tuple[list[int], list[tuple]]:
    env, flags = parse_lines(lines, shell)
    slots = llama_slot_devices(llama_tensor_split(flags["--tensor-split"]), n_blocks, int(flags["-ngl"]), 16)
    devices = visible(env, k)
    rules = llama_overrides(flags["-ot"], {"CPU"}) if "-ot" in flags else []
    return [devices[d] for d in slots], rules


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data())
def test_llama_commands_run_the_plan_in_every_shell(data):
    gpus, cuts, n_layers = data.draw(plans(max_layers=64, max_stages=15))
    offload = data.draw(offload_sets(n_layers))
    names = model_tensor_names(n_layers)
    launch = Launch(
        gguf=data.draw(
            st.sampled_from(["m.gguf", "C:\\My Models\\q 4.gguf", "/srv/a b/Q3-00001-of-00002.gguf"])
        ),
        context=data.draw(st.integers(1, 262144)),
        kv_type=data.draw(st.sampled_from(["f16", "q8_0", "q4_0"])),
        fit_off=data.draw(st.booleans()),
    )
    lines = engine_named("llama.cpp").export(Shape(gpus, cuts, n_layers, offload, names, 0, None, launch))
    expected = [gpus[sum(c <= layer for c in cuts)] for layer in range(n_layers)] + [gpus[-1]]
    for shell in SHELLS:
        text = render(lines, shell)
        assert parse(text, shell) == statements(lines), shell
        layers, rules = _llama_layers(text, shell, n_layers, len(gpus))
        assert layers == expected, shell
        assert {n for n in names if llama_tensor_buft(n, rules) == "CPU"} == {u.name for u in offload}
        argv = main_argv(text, shell)
        assert argv[:5] == ["llama-server", "-m", launch.gguf, "-c", str(launch.context)]
        kv = [] if launch.kv_type == "f16" else ["-ctk", launch.kv_type, "-ctv", launch.kv_type, "-fa", "on"]
        assert argv[len(argv) - len(kv) - 2 * launch.fit_off :] == kv + ["-fit", "off"] * launch.fit_off


@settings(max_examples=examples(150), deadline=None)
@given(plan=plans(max_layers=96), model=st.sampled_from([None, "Qwen/Qwen3-30B-A3B-FP8", "D:\\ckpt\\q 30b"]))
def test_vllm_and_sglang_commands_run_the_plan_in_every_shell(plan, model):
    gpus, cuts, n_layers = plan
    bounds = list(zip([0, *cuts], [*cuts, n_layers]))
    launch = Launch(hf_model=model, context=40960)
    for engine, size_flag, indices, device in (
        ("vllm", "--pipeline-parallel-size", vllm_pp_indices, lambda r, _: vllm_local_device(r)),
        ("sglang", "--pp-size", sglang_pp_indices, lambda r, pp: sglang_gpu_id(r, pp)),
    ):
        lines = engine_named(engine).export(Shape(gpus, cuts, n_layers, (), None, 0, None, launch))
        for shell in SHELLS:
            text = render(lines, shell)
            assert parse(text, shell) == statements(lines), (engine, shell)
            env, flags = parse_lines(text, shell)
            pp = int(flags[size_flag])
            assert [indices(env, n_layers, rank, pp) for rank in range(pp)] == bounds
            cuda = visible(env, pp)
            assert [cuda[device(rank, pp)] for rank in range(pp)] == list(gpus)
            argv = main_argv(text, shell)
            served = model or "MODEL"
            assert (
                argv[:3] == ["vllm", "serve", served]
                if engine == "vllm"
                else argv[3:5] == ["--model-path", served]
            )
            assert argv[-2:] == ["--max-model-len" if engine == "vllm" else "--context-length", "40960"]


@settings(max_examples=examples(100), deadline=None)
@given(plan=host_plans())
def test_multi_host_exports_read_alike_in_every_shell(plan):
    """The per-host lines (rpc-server in the background, Ray nodes, SGLang nodes) mean the same in
    cmd.exe and PowerShell as in sh; test_export_hosts.py replays the sh form through the engines."""
    hosts, gpus, cuts, n_layers = plan
    launch = Launch(gguf="m.gguf", hf_model="org/m", context=8192)
    for engine in ("llama.cpp", "vllm", "sglang"):
        try:
            lines = engine_named(engine).export(Shape(gpus, cuts, n_layers, (), None, 0, hosts, launch))
        except ValueError:
            continue  # a plan this engine cannot run across these hosts (test_export_hosts.py)
        posix = host_sections(render(lines, "posix"))
        for shell in ("cmd", "powershell"):
            text = render(lines, shell)
            assert parse(text, shell) == statements(lines), (engine, shell)
            assert host_sections(text, shell) == posix


def test_placeholders_say_what_to_put_there():
    llama = export_lines("llama.cpp", [0], [], 4, launch=Launch(context=4096), shell="cmd")
    assert llama[0].startswith("REM MODEL.gguf: your GGUF file") and " -m MODEL.gguf " in llama[1]
    vllm = export_lines("vllm", [0], [], 4, launch=Launch(context=4096), shell="powershell")
    assert vllm[0].startswith("# MODEL: the checkpoint directory or Hugging Face id")
    none = export_lines("sglang", [0], [], 4, launch=Launch(hf_model="m"))
    assert none[0] == "# the plan holds no KV cache (context 0): plan with --context N, the tokens you need"
    assert "--context-length" not in none[1]
