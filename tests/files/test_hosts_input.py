"""Rigs that span machines (docs/reference.md, "Idle GPUs and hosts"): the host key, the as-given
interleaving error, `probe --host` with `--gpus-only` concatenation, and `rig new HOST:CARD`."""

from __future__ import annotations

from click.testing import CliRunner

from solver.cli import cli
from solver.engines import REGISTRY
from solver.files.config import load_rig
from solver.probe.run import probe, rig_yaml
from tests.helpers.clirun import input_error, invoke, key_line
from tests.helpers.rigfiles import tiny_rig
from tests.probe.test_probe import box, fake_nvml


def test_interleaved_hosts_as_given_is_an_input_error_naming_the_gpus(tmp_path):
    gpus = [{"free": 9000, "layer_ms": 1.0, "host": h} for h in ("a", "b", "a")]
    res = invoke(tiny_rig(tmp_path, gpus=gpus))
    assert res.exit_code == 2
    assert "rig.yaml:" in res.stderr and "gpus[2].host: GPU 2 is on host 'a' like GPU 0" in res.stderr
    assert "GPU 1 between them is on 'b'" in res.stderr


def test_probe_host_and_gpus_only_concatenate_into_one_rig(write):
    gpus, driver = probe(fake_nvml(box()))
    first = rig_yaml(
        gpus, visible=None, model_ref="m.yaml", context=0, reserve_mib=700, driver=driver, host="a"
    )
    more = rig_yaml(
        gpus[:2], visible=None, model_ref=None, context=0, reserve_mib=700, host="b", gpus_only=True
    )
    assert not more.lstrip().startswith("gpus") and "model" not in more
    rig, _ = load_rig(write("rig.yaml", first + more), REGISTRY)
    assert [g.host for g in rig.gpus] == ["a", "a", "a", "b", "b"]
    names = ["RTX 3060 12GB", "RTX 3090", "RTX 5080", "RTX 3060 12GB", "RTX 3090"]
    assert [g.name for g in rig.gpus] == names


def test_rig_new_takes_host_card_names(tmp_path):
    out = tmp_path / "rig.yaml"
    res = CliRunner().invoke(
        cli, ["rig", "new", "a:RTX 4090", "a:RTX 3090", "b: RTX 3060 12GB", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    rig, _ = load_rig(out, REGISTRY)
    assert [(g.host, g.name) for g in rig.gpus] == [
        ("a", "RTX 4090"),
        ("a", "RTX 3090"),
        ("b", "RTX 3060 12GB"),
    ]


def host_rig_error(tmp_path, hosts: list[str | None], gpu: int) -> str:
    """The message of planning a rig whose GPUs have these hosts (None: no host key), which must be one
    line naming the rig, the line of GPU ``gpu``'s host (or of the GPU, without one) and its key."""
    gpus = [{"free": 9000, "layer_ms": 1.0, **({} if h is None else {"host": h})} for h in hosts]
    rig = tiny_rig(tmp_path, gpus=gpus, rig_extra={"order": "auto"})
    got = input_error(invoke(rig), [rig])
    assert got.line == key_line(
        rig.read_text(), ("gpus", gpu, "host") if hosts[gpu] is not None else ("gpus", gpu)
    )
    prefix = f"gpus[{gpu}].host: "
    assert got.rest.startswith(prefix), got.rest
    return got.rest[len(prefix) :]


def test_an_empty_host_is_an_error_naming_the_key(tmp_path):
    for empty in ("", "  "):
        assert host_rig_error(tmp_path, ["a", empty], 1).startswith("is empty")


def test_some_gpus_naming_a_host_and_others_none_is_an_error(tmp_path):
    err = host_rig_error(tmp_path, ["a", "a", None], 2)
    assert err == "missing, but GPU 0 names host 'a': give every GPU a host, or none (all on one machine)"
    assert host_rig_error(tmp_path, [None, "b", "b"], 1).startswith("'b', but GPU 0 names no host")
    # naming the default still mixes the two forms
    assert host_rig_error(tmp_path, [None, "local"], 1).startswith("'local', but GPU 0 names no host")


def test_hosts_differing_only_in_case_are_an_error(tmp_path):
    err = host_rig_error(tmp_path, ["box", "Box"], 1)
    assert err == "'Box' differs from host 'box' of GPU 0 only in case or spaces; spell one machine one way"
    assert host_rig_error(tmp_path, ["a", "b", "a "], 2).startswith("'a ' differs from host 'a' of GPU 0")


def test_every_gpu_naming_a_host_or_none_still_loads(tmp_path):
    for hosts in (["local", "local"], ["a", "b"], [None, None]):
        gpus = [{"free": 9000, "layer_ms": 1.0, **({} if h is None else {"host": h})} for h in hosts]
        rig, _ = load_rig(tiny_rig(tmp_path, gpus=gpus), REGISTRY)
        assert [g.host for g in rig.gpus] == [h or "local" for h in hosts]


def test_a_merged_host_counts_as_named(write):
    rig = write(
        "rig.yaml",
        "model: m.yaml\ngpus:\n  - &card {free: 9000, layer_ms: 1.0, host: a}\n  - <<: *card\n",
    )
    assert [g.host for g in load_rig(rig, REGISTRY)[0].gpus] == ["a", "a"]


def test_rig_new_refuses_cards_that_break_the_host_rules(tmp_path):
    for cards, says in (
        (["a:RTX 4090", "RTX 3090"], "'RTX 3090': host missing, but GPU 0 names host 'a'"),
        ([":RTX 4090", ":RTX 3090"], "':RTX 4090': host is empty"),
        (["Box:RTX 4090", "box:RTX 3090"], "'box:RTX 3090': host 'box' differs from host 'Box'"),
    ):
        res = CliRunner().invoke(cli, ["rig", "new", *cards, "-o", str(tmp_path / "r.yaml")])
        assert res.exit_code == 2 and res.stderr.startswith(f"solve rig new: {says}")
        assert res.stderr.count("\n") == 1 and not (tmp_path / "r.yaml").exists()


def test_probe_refuses_an_empty_host(monkeypatch):
    import solver.probe.run as probe_mod

    monkeypatch.setattr(probe_mod, "load_nvml", lambda: fake_nvml(box()))
    res = CliRunner().invoke(cli, ["probe", "--host", ""])
    assert res.exit_code == 2 and res.stderr == "--host: is empty; name this machine, or leave --host out\n"


def test_shipped_multi_host_rigs_load(root):
    for path in sorted((root / "rigs").glob("*.yaml")):
        rig, _ = load_rig(path, REGISTRY)
        assert rig.gpus
