"""``solve rig new``: the keys each engine reads and no others, each with a comment; host bandwidth from a
rate or a memory description; every bad option or card one line and exit 2."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from solver.cli import cli
from solver.engines import REGISTRY
from solver.files.cards import card
from solver.files.config import load_rig
from solver.importers.hostmem import HOST_EFFICIENCY, parse_host_bandwidth
from solver.units import parse_rate, parse_size

ROOT = Path(__file__).resolve().parents[2]
MIB, GB = 2**20, 10**9


def run(*args: object):
    return CliRunner().invoke(cli, ["rig", "new", *map(str, args)])


def written(*args: object) -> tuple[str, dict]:
    """The rig ``rig new ARGS`` prints, as text and as YAML."""
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result.stdout, yaml.safe_load(result.stdout)


def assert_every_key_has_a_comment(text: str) -> None:
    for line in text.splitlines():
        if line.startswith("#") or line.strip() in ("gpus:", "") or line.lstrip().startswith("- name:"):
            continue
        if line.startswith(("name:", "model:")):
            continue
        assert " # " in line, f"no comment: {line!r}"


def test_a_strata_rig_is_the_estimate_keys_and_the_miss_cost():
    text, rig = written("RTX 3090", "RTX 3060 12GB")
    assert set(rig) == {"context", "miss_ms", "first_stage_min_layers", "gpus"}
    assert [set(g) for g in rig["gpus"]] == [{"name", "free", "reserve", "sms", "clock_ghz"}] * 2
    assert rig["gpus"][1] == {
        "name": "RTX 3060 12GB",
        "free": "11588 MiB",
        "reserve": "700 MiB",
        "sms": 28,
        "clock_ghz": 1.777,
    }
    assert_every_key_has_a_comment(text)


def test_a_llama_cpp_rig_has_host_and_memory_bandwidth_and_nothing_strata_reads():
    text, rig = written(
        "RTX 3090",
        "RTX 4060 Ti 16GB",
        "--engine",
        "llama.cpp",
        "--host-bandwidth",
        "DDR5-5600x2",
        "--host-memory",
        "128 GiB",
        "--context",
        "16384",
    )
    assert set(rig) == {"engine", "host_bandwidth", "host_memory", "context", "gpus"}
    assert rig["engine"] == "llama.cpp" and rig["context"] == 16384 and rig["host_memory"] == "128 GiB"
    assert [set(g) for g in rig["gpus"]] == [{"name", "free", "reserve", "mem_bandwidth"}] * 2
    assert parse_rate(rig["gpus"][0]["mem_bandwidth"]) == card("RTX 3090").bandwidth == 936 * GB
    assert parse_rate(rig["gpus"][1]["mem_bandwidth"]) == 288 * GB
    for absent in ("miss_ms", "first_stage_min_layers", "layer_ms", "sms", "clock_ghz"):
        assert f"{absent}:" not in text
    assert_every_key_has_a_comment(text)
    # the comment says how the rate was found: nominal, and the share taken
    [line] = [t for t in text.splitlines() if t.startswith("host_bandwidth:")]
    assert line.startswith("host_bandwidth: 44.8 GB/s") and "89.6 GB/s nominal" in line
    assert f"x {HOST_EFFICIENCY:g}" in line


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_vllm_or_sglang_rig_has_the_cards_only(engine):
    text, rig = written("RTX 3090", "RTX 3090", "Radeon RX 7900 XTX", "--engine", engine)
    assert set(rig) == {"engine", "context", "gpus"} and rig["engine"] == engine
    assert [set(g) for g in rig["gpus"]] == [{"name", "free", "reserve", "mem_bandwidth"}] * 3
    assert rig["gpus"][2]["mem_bandwidth"] == "960 GB/s"
    assert_every_key_has_a_comment(text)


def test_host_card_names_put_each_card_on_its_machine():
    text, rig = written("a:RTX 3090", "b: RTX 5090", "--engine", "llama.cpp", "--host-bandwidth", "60 GB/s")
    assert [(g["host"], g["name"]) for g in rig["gpus"]] == [("a", "RTX 3090"), ("b", "RTX 5090")]
    assert "# network_handoff_ms: EDIT" in text


def test_network_handoff_ms_is_written_and_read_back(tmp_path):
    out = tmp_path / "rig.yaml"
    args = ["a:RTX 3090", "b:RTX 5090", "--engine", "llama.cpp", "--host-bandwidth", "60 GB/s"]
    result = run(*args, "--network-handoff-ms", "2.5", "-o", out)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "EDIT the ms of a hop" not in text and "--network-handoff-ms 2.5" in text.splitlines()[0]
    assert_every_key_has_a_comment(text)
    rig, _ = load_rig(out, REGISTRY)
    assert rig.network_handoff_ms == 2.5


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("-1", "--network-handoff-ms: expected milliseconds of 0 or more, got -1"),
        ("nan", "--network-handoff-ms: expected milliseconds of 0 or more, got nan"),
        ("inf", "--network-handoff-ms: expected milliseconds of 0 or more, got inf"),
    ],
)
def test_a_bad_network_handoff_is_one_line_and_exit_2(value, says):
    result = run("a:RTX 3090", "b:RTX 3090", "--network-handoff-ms", value)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr


def test_a_network_handoff_on_one_machine_is_refused():
    result = run("RTX 3090", "RTX 3090", "--network-handoff-ms", "2")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "the cards name no machine (HOST:CARD)" in result.stderr


@pytest.mark.parametrize(
    ("given", "effective", "nominal"),
    [
        ("80 GB/s", 80 * GB, None),
        ("80 gb/s", 80 * GB, None),
        ("DDR5-5600x2", 44_800_000_000, 89_600_000_000),
        ("2x DDR5-5600", 44_800_000_000, 89_600_000_000),
        ("dual-channel DDR5-6000", 48 * GB, 96 * GB),
        ("8ch DDR4-3200", 102_400_000_000, 204_800_000_000),
        ("8-channel DDR4-3200", 102_400_000_000, 204_800_000_000),
        ("DDR4-3200 8ch", 102_400_000_000, 204_800_000_000),
        ("12 channels DDR5-4800", 230_400_000_000, 460_800_000_000),
    ],
)
def test_host_bandwidth_from_a_rate_or_a_memory_description(given, effective, nominal):
    rate = parse_host_bandwidth(given)
    assert rate.effective == effective and rate.nominal == nominal
    if nominal is not None:  # MT/s x 8 bytes x channels, times the documented share
        assert effective == int(nominal * HOST_EFFICIENCY)
    _, rig = written("RTX 3090", "--engine", "llama.cpp", "--host-bandwidth", given)
    assert parse_rate(rig["host_bandwidth"]) == effective


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--host-bandwidth", "DDR5-5600"], "say how many memory channels, e.g. 'DDR5-5600x2'"),
        (["--host-bandwidth", "80"], "expected a rate like '80 GB/s' or a memory description"),
        (["--host-bandwidth", "80 GB"], "expected a rate like '80 GB/s'"),
        (["--host-bandwidth", "lots"], "expected a rate like '80 GB/s'"),
        (["--host-bandwidth", "80 Gbit/s"], "expected a rate like '60 GB/s'"),
        (["--host-bandwidth", "DDR5-56000x2"], "DDR5 runs at 3200-12000 MT/s"),
        (["--host-bandwidth", "2x DDR5-5600x2"], "give the number of channels once"),
        (["--host-bandwidth", "DDR2-800x2"], "give DDR3, DDR4 or DDR5"),
        (["--host-bandwidth", "DDR5-5600x99"], "a machine has 1 to 24"),
        (["--host-memory", "lots"], "--host-memory: expected a size"),
    ],
)
def test_bad_host_options_are_one_line_and_exit_2(args, says):
    base = ["RTX 3090", "--engine", "llama.cpp"]
    if "--host-bandwidth" not in args:
        base += ["--host-bandwidth", "60 GB/s"]
    result = run(*base, *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["RTX 3090", "--engine", "llama.cpp"], "--engine llama.cpp needs --host-bandwidth"),
        (
            ["RTX 3090", "--engine", "vllm", "--host-bandwidth", "60 GB/s"],
            "engine vllm (every weight in VRAM",
        ),
        (["RTX 3090", "--host-bandwidth", "60 GB/s"], "engine strata (a per-expert VRAM cache"),
        (["RTX 3090", "--engine", "sglang", "--host-memory", "64 GiB"], "reads no host_memory"),
        (["Radeon RX 7900 XTX"], "has no SM count in the card table"),
        (["RTX 4060 Ti", "--engine", "vllm"], '"RTX 4060 Ti 8GB" (8 GiB, 288 GB/s), "RTX 4060 Ti 16GB"'),
        (["a:RTX 4900"], "'a:RTX 4900': unknown card 'RTX 4900' (closest: RTX 4090"),
        ([":RTX 3090"], "host is empty; name the machine"),
        (["a:"], "name the card after the colon"),
        (["RTX 3090", "--reserve", "lots"], "--reserve:"),
        ([], "name at least one card"),
    ],
)
def test_bad_cards_and_options_for_the_engine_are_one_line_and_exit_2(args, says):
    result = run(*args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr


def test_the_header_command_writes_the_same_rig(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = Path("mine.yaml")
    args = ["RTX 5090", "RTX 3090", "--engine", "llama.cpp", "--host-bandwidth", "8ch DDR4-3200", "-o", out]
    assert run(*args).exit_code == 0
    text = out.read_text()
    command = shlex.split(text.splitlines()[0].split("`")[1])
    assert command[:3] == ["solve", "rig", "new"]
    out.unlink()
    assert run(*command[3:]).exit_code == 0 and out.read_text() == text


def test_the_strata_rig_loads_with_the_tables_figures(tmp_path):
    out = tmp_path / "rig.yaml"
    assert run("RTX 4090", "Tesla P40", "-o", out).exit_code == 0
    rig, _ = load_rig(out, REGISTRY)
    assert [(g.name, g.sms, g.clock_ghz) for g in rig.gpus] == [
        ("RTX 4090", 128, 2.52),
        ("Tesla P40", 30, 1.531),
    ]
    assert rig.gpus[1].free == (24 * 1024 - 700) * MIB and rig.gpus[1].reserve == parse_size("700 MiB")


def test_a_llama_cpp_rig_loads(tmp_path):
    out = tmp_path / "rig.yaml"
    args = ["RTX 3090", "Radeon RX 7900 XTX", "--engine", "llama.cpp", "--host-bandwidth", "DDR5-6000x2"]
    assert run(*args, "-o", out).exit_code == 0
    rig, _ = load_rig(out, REGISTRY)
    assert rig.engine == "llama.cpp" and rig.host_bandwidth == 48 * GB
    assert [g.name for g in rig.gpus] == ["RTX 3090", "Radeon RX 7900 XTX"]


def test_the_shipped_rigs_are_what_their_header_commands_write(tmp_path, monkeypatch):
    shipped = sorted(p for p in (ROOT / "rigs").glob("*.yaml") if "`solve rig new" in p.read_text())
    assert len(shipped) >= 7
    monkeypatch.chdir(ROOT)
    for path in shipped:
        command = shlex.split(path.read_text().splitlines()[0].split("`")[1])
        out = command.index("-o") + 1
        assert ROOT / command[out] == path
        command[out] = str(tmp_path / path.name)
        assert run(*command[3:]).exit_code == 0, path.name
        # the same file but for the -o in its first line and the model path, relative to the output
        ours, theirs = (p.read_text().splitlines()[1:] for p in (tmp_path / path.name, path))
        assert [t for t in ours if not t.startswith("model:")] == [
            t for t in theirs if not t.startswith("model:")
        ]


def test_the_docs_quote_the_host_efficiency_in_force():
    for page in ("README.md", "docs/models.md"):
        assert f"`HOST_EFFICIENCY` ({HOST_EFFICIENCY:g}" in (ROOT / page).read_text(), page


def test_a_strata_rig_takes_host_memory(tmp_path):
    out = tmp_path / "rig.yaml"
    assert run("RTX 3090", "--host-memory", "96 GiB", "--context", "4096", "-o", out).exit_code == 0
    rig, _ = load_rig(out, REGISTRY)
    assert rig.host_memory == 96 * 2**30 and rig.context == 4096 and rig.engine == "strata"
