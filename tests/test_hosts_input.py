"""Rigs that span machines (SPEC 8): the host key, the as-given interleaving error, `probe --host`
with `--gpus-only` concatenation, and `rig new HOST:CARD`."""

from __future__ import annotations

from click.testing import CliRunner
from clirun import invoke
from rigfiles import tiny_rig
from test_probe import box, fake_nvml

from solver.cli import cli
from solver.config import load_rig
from solver.probe import probe, rig_yaml


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
    rig, _ = load_rig(write("rig.yaml", first + more))
    assert [g.host for g in rig.gpus] == ["a", "a", "a", "b", "b"]
    names = ["RTX 3060 12GB", "RTX 3090", "RTX 5080", "RTX 3060 12GB", "RTX 3090"]
    assert [g.name for g in rig.gpus] == names


def test_rig_new_takes_host_card_names(tmp_path):
    out = tmp_path / "rig.yaml"
    res = CliRunner().invoke(
        cli, ["rig", "new", "a:RTX 4090", "a:RTX 3090", "b: RTX 3060 12GB", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    rig, _ = load_rig(out)
    assert [(g.host, g.name) for g in rig.gpus] == [
        ("a", "RTX 4090"),
        ("a", "RTX 3090"),
        ("b", "RTX 3060 12GB"),
    ]
