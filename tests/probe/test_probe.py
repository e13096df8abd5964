"""``solve probe`` against a fake NVML module: scripted devices, missing functions, per-device errors."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from solver.cli import cli
from solver.engines import REGISTRY
from solver.errors import InputError
from solver.files.cards import find_card
from solver.files.config import load_rig
from solver.probe import run as probe_mod
from solver.probe.nvml import visible_order
from solver.probe.run import ProbeError, probe, rig_yaml
from solver.problem.problem import estimate_layer_ms

MIB, GIB = 2**20, 2**30


class NVMLError(Exception):
    """The fake's base error, like pynvml.NVMLError; subclasses below carry pynvml's names."""

    text = "Unknown Error"

    def __str__(self) -> str:
        return self.text


def _error(name: str, text: str) -> type[NVMLError]:
    return type(name, (NVMLError,), {"text": text})


NotSupported = _error("NVMLError_NotSupported", "Not Supported")
LibraryNotFound = _error("NVMLError_LibraryNotFound", "NVML Shared Library Not Found")
DriverNotLoaded = _error("NVMLError_DriverNotLoaded", "Driver Not Loaded")
FunctionNotFound = _error("NVMLError_FunctionNotFound", "Function Not Found")
GpuIsLost = _error("NVMLError_GpuIsLost", "GPU is lost")


def card(name: str, uuid: str, **kw) -> dict:
    """A scripted device; ``fail`` names the NVML functions that raise Not Supported for it."""
    base = dict(
        name=f"NVIDIA GeForce {name}",
        uuid=uuid,
        bus="00000000:01:00.0",
        total=12 * GIB,
        free=11468 * MIB + 12345,
        free_v1=11000 * MIB,
        clock=2100,
        cores=None,
        cc=(8, 6),
        gen=4,
        max_gen=4,
        width=16,
        fail=set(),
    )
    base.update(kw)
    return base


def fake_nvml(devices: list[dict], *, init_error: type | None = None, v2: bool = True, missing=()):
    """A module-like object with the pynvml functions solve probe calls, scripted by ``devices``."""
    nv = SimpleNamespace(NVMLError=NVMLError, NVML_CLOCK_SM=1, nvmlMemory_v2=0x02000028, shut=False)

    def dev(handle: tuple, fn: str) -> dict:
        d = devices[handle[1]]
        if fn in d["fail"]:
            raise NotSupported()
        return d

    def init() -> None:
        if init_error is not None:
            raise init_error()

    def shutdown() -> None:
        nv.shut = True

    def handle_by_index(i: int) -> tuple:
        if "nvmlDeviceGetHandleByIndex" in devices[i]["fail"]:
            raise GpuIsLost()
        return ("h", i)

    def memory(h: tuple, version: int | None = None) -> SimpleNamespace:
        d = dev(h, "nvmlDeviceGetMemoryInfo")
        if version is not None:
            if not v2:
                raise FunctionNotFound()
            assert version == 0x02000028
            return SimpleNamespace(total=d["total"], reserved=300 * MIB, free=d["free"], used=1)
        return SimpleNamespace(total=d["total"], free=d["free_v1"], used=1)

    def clock(h: tuple, kind: int) -> int:
        assert kind == nv.NVML_CLOCK_SM, "probe must ask for the SM clock"
        return dev(h, "nvmlDeviceGetMaxClockInfo")["clock"]

    def cores(h: tuple) -> int:
        d = dev(h, "nvmlDeviceGetNumGpuCores")
        if d["cores"] is None:
            raise NotSupported()
        return d["cores"]

    nv.nvmlInit = init
    nv.nvmlShutdown = shutdown
    nv.nvmlDeviceGetCount = lambda: len(devices)
    nv.nvmlSystemGetDriverVersion = lambda: "570.86.15"
    nv.nvmlDeviceGetHandleByIndex = handle_by_index
    nv.nvmlDeviceGetName = lambda h: dev(h, "nvmlDeviceGetName")["name"]
    nv.nvmlDeviceGetUUID = lambda h: dev(h, "nvmlDeviceGetUUID")["uuid"]
    nv.nvmlDeviceGetPciInfo = lambda h: SimpleNamespace(busId=dev(h, "nvmlDeviceGetPciInfo")["bus"].encode())
    nv.nvmlDeviceGetMemoryInfo = memory
    nv.nvmlDeviceGetMaxClockInfo = clock
    nv.nvmlDeviceGetNumGpuCores = cores
    nv.nvmlDeviceGetCudaComputeCapability = lambda h: dev(h, "nvmlDeviceGetCudaComputeCapability")["cc"]
    nv.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: dev(h, "nvmlDeviceGetCurrPcieLinkGeneration")["gen"]
    nv.nvmlDeviceGetCurrPcieLinkWidth = lambda h: dev(h, "nvmlDeviceGetCurrPcieLinkWidth")["width"]
    nv.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: dev(h, "nvmlDeviceGetMaxPcieLinkGeneration")["max_gen"]
    nv.nvmlDeviceGetMaxPcieLinkWidth = lambda h: dev(h, "nvmlDeviceGetMaxPcieLinkWidth")["width"]
    for name in missing:
        delattr(nv, name)
    return nv


A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
C = "GPU-bbbbcccc-1111-2222-3333-444444444444"


def box() -> list[dict]:
    """A 3060 whose SMs come from NVML's core count, a 3090 from the name table, a 5080 from the table."""
    return [
        card("RTX 3060", A, cores=3584, clock=1777),
        card("RTX 3090", B, total=24 * GIB, free=23000 * MIB, bus="00000000:02:00.0", clock=1695),
        card(
            "RTX 5080", C, total=16 * GIB, free=15000 * MIB, cc=(12, 0), clock=2617, gen=1, max_gen=5, width=8
        ),
    ]


def rig_text(nv, visible: str | None = None, model_ref: str | None = "m.yaml") -> str:
    gpus, driver = probe(nv, visible)
    return rig_yaml(gpus, visible=visible, model_ref=model_ref, context=32768, reserve_mib=700, driver=driver)


def test_rig_loads_with_sizes_in_mib_and_the_layer_ms_estimate(write):
    nv = fake_nvml(box())
    text = rig_text(nv)
    rig, _ = load_rig(write("rig.yaml", text), REGISTRY)
    # NVML's "RTX 3060" is the 8 GB or the 12 GB card; its 12 GiB total says which
    assert [g.name for g in rig.gpus] == ["RTX 3060 12GB", "RTX 3090", "RTX 5080"]
    assert "NVML name 'NVIDIA GeForce RTX 3060', 12288 MiB total: the card table's 'RTX 3060 12GB'" in text
    # free is NVML's v2 free, rounded down to whole MiB
    assert [g.free for g in rig.gpus] == [11468 * MIB, 23000 * MIB, 15000 * MIB]
    assert all(g.reserve == 700 * MIB for g in rig.gpus)
    for g, sms, ghz in zip(rig.gpus, (28, 82, 84), (1.777, 1.695, 2.617)):
        assert g.layer_ms == pytest.approx(estimate_layer_ms(sms, ghz), abs=5e-5)
    assert rig.gpus[2].layer_ms == pytest.approx(0.33, abs=5e-5)  # the estimate's reference card
    assert rig.context == 32768 and rig.model == "m.yaml"
    assert "free: 11468 MiB" in text and "reserve: 700 MiB" in text
    assert "3584 CUDA cores / 128 per SM at compute 8.6" in text  # the 3060's SMs came from NVML
    assert "sms = 82 (moesplit's table by name)" in text
    assert (
        f"UUID {A}" in text
        and "PCI 00000000:02:00.0" in text
        and "PCIe gen 1 x8 (current link; max gen 5 x8)" in text
    )
    assert f"CUDA_VISIBLE_DEVICES={A},{B},{C}" in text
    assert "driver 570.86.15" in text
    assert nv.shut


def test_memory_falls_back_to_v1_when_v2_is_unsupported(write):
    text = rig_text(fake_nvml(box(), v2=False))
    rig, _ = load_rig(write("rig.yaml", text), REGISTRY)
    assert rig.gpus[0].free == 11000 * MIB
    assert "NVML memory info v1" in text


def test_memory_v1_with_an_old_pynvml_that_has_no_v2(write):
    nv = fake_nvml(box(), missing=["nvmlMemory_v2"])
    assert load_rig(write("rig.yaml", rig_text(nv)), REGISTRY)[0].gpus[0].free == 11000 * MIB
    # an nvidia-ml-py whose nvmlDeviceGetMemoryInfo takes no version argument at all
    nv = fake_nvml(box())
    v1 = nv.nvmlDeviceGetMemoryInfo
    nv.nvmlDeviceGetMemoryInfo = lambda h: v1(h)
    assert load_rig(write("rig2.yaml", rig_text(nv)), REGISTRY)[0].gpus[0].free == 11000 * MIB


def test_missing_functions_degrade_fields_not_the_run(write):
    devices = [card("RTX 3060", A), card("Mystery 9000", B)]
    nv = fake_nvml(devices, missing=["nvmlDeviceGetNumGpuCores", "nvmlDeviceGetCurrPcieLinkGeneration"])
    gpus, _ = probe(nv)
    assert gpus[0].sms == 28 and gpus[0].sms_source == "moesplit's table by name"
    assert gpus[1].sms is None and "no nvmlDeviceGetNumGpuCores" in gpus[1].notes["sms"]
    text = rig_yaml(gpus, visible=None, model_ref="m.yaml", context=0, reserve_mib=700)
    assert "PCIe link unknown (this nvidia-ml-py has no nvmlDeviceGetCurrPcieLinkGeneration)" in text
    assert "# sms: ?  EDIT:" in text and "clock_ghz: 2.100" in text
    # the file says exactly what is missing, at that card, instead of guessing a speed
    with pytest.raises(InputError) as err:
        load_rig(write("rig.yaml", text), REGISTRY)
    assert err.value.key == "gpus[1].sms"
    assert probe_mod.problems(gpus) == [f"gpus[1] (Mystery 9000): SM count unknown: {gpus[1].notes['sms']}"]


def test_per_device_errors_are_noted_on_that_device(write):
    devices = box()
    devices[1]["fail"] = {"nvmlDeviceGetName", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetUUID"}
    devices[2]["fail"] = {"nvmlDeviceGetMemoryInfo"}
    gpus, _ = probe(fake_nvml(devices))
    assert gpus[0].layer_ms is not None and not gpus[0].notes
    assert gpus[1].short_name == "GPU 1" and gpus[1].clock_mhz is None and gpus[1].uuid is None
    assert "nvmlDeviceGetMaxClockInfo: Not Supported" in gpus[1].notes["clock_ghz"]
    assert gpus[1].sms is None  # no name, no core count: nothing to look up
    assert gpus[2].free is None and "Not Supported" in gpus[2].notes["free"]
    text = rig_yaml(gpus, visible=None, model_ref="m.yaml", context=0, reserve_mib=700)
    assert "# clock_ghz: ?  EDIT" in text and "# free: ?  EDIT" in text
    assert "CUDA_VISIBLE_DEVICES=" not in text  # cannot pin the order without every UUID
    with pytest.raises(InputError) as err:
        load_rig(write("rig.yaml", text), REGISTRY)
    assert err.value.key == "gpus[2].free"  # pydantic reports the missing key before the cross checks


def test_a_lost_gpu_is_listed_with_every_field_marked():
    devices = box()
    devices[0]["fail"] = {"nvmlDeviceGetHandleByIndex"}
    gpus, _ = probe(fake_nvml(devices))
    assert len(gpus) == 3 and gpus[0].free is None and "GPU is lost" in gpus[0].notes["free"]
    assert len(probe_mod.problems(gpus)) == 3


def test_cuda_visible_devices_by_index_and_by_uuid():
    nv = fake_nvml(box())
    assert [g.index for g in probe(nv, "2,0")[0]] == [2, 0]
    assert [g.index for g in probe(nv, "GPU-bbbbc, GPU-aaaa,1")[0]] == [2, 0, 1]
    assert [g.index for g in probe(nv, B.upper())[0]] == [1]
    text = rig_text(nv, "2,0")
    assert "CUDA_VISIBLE_DEVICES order (2,0)" in text
    assert text.index("RTX 5080") < text.index("RTX 3060") and "RTX 3090" not in text


@pytest.mark.parametrize(
    ("spec", "says", "code"),
    [
        ("0,3", "'3' is beyond the 3 GPUs NVML sees (0-2)", 2),
        ("0,-1", "'-1' is neither a GPU index nor a GPU- UUID", 2),
        ("GPU-ffff", "'GPU-ffff' matches no GPU's UUID", 2),
        ("GPU-bbbb", "'GPU-bbbb' is ambiguous", 2),
        ("1,GPU-bbbbbbbb", "names a GPU already listed", 2),
        ("0,,1", "'' is neither", 2),
        ("MIG-abc", "is a MIG device", 2),
        ("", "set but empty", 1),
    ],
)
def test_invalid_cuda_visible_devices_is_one_clear_error(spec, says, code):
    with pytest.raises(ProbeError) as err:
        probe(fake_nvml(box()), spec)
    assert says in str(err.value) and err.value.code == code


def test_visible_order_needs_the_uuid_to_match_a_uuid_entry():
    with pytest.raises(ProbeError, match="matches no GPU"):
        visible_order("GPU-aaaa", [None, B])


@pytest.mark.parametrize(
    ("error", "says"),
    [(LibraryNotFound, "NVML library not found"), (DriverNotLoaded, "driver is not loaded")],
)
def test_no_driver_is_one_line_and_exit_1(monkeypatch, error, says):
    monkeypatch.setattr(probe_mod, "load_nvml", lambda: fake_nvml([], init_error=error))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    result = CliRunner().invoke(cli, ["probe"])
    assert result.exit_code == 1
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output and result.stdout == ""


def test_no_gpu_is_exit_1(monkeypatch):
    monkeypatch.setattr(probe_mod, "load_nvml", lambda: fake_nvml([]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    result = CliRunner().invoke(cli, ["probe"])
    assert result.exit_code == 1 and "no NVIDIA GPU" in result.stderr


def test_without_the_package_it_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    result = CliRunner().invoke(cli, ["probe"])
    assert result.exit_code == 1
    assert "pip install 'moesplit[gpu]'" in result.stderr and "Traceback" not in result.output


def test_the_real_pynvml_without_a_driver_exits_1_in_one_line():
    """On a machine without an NVIDIA driver (like CI) the real package must fail cleanly."""
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVIDIA driver")
    done = subprocess.run([sys.executable, "-m", "solver.cli", "probe"], capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_plan_command_does_not_import_pynvml(plan_modules):
    assert "pynvml" not in plan_modules and "solver.probe.run" not in plan_modules


TINY_MODEL = """\
name: tiny
layers: 4
experts: 8
expert_bytes: 64 MiB
dense_bytes: 512 MiB
profile: tiny.txt
"""


def test_probe_then_plan_end_to_end(monkeypatch, tmp_path, write):
    write("models/tiny.txt", "".join(f"{layer} {e}\n" for e in range(8) for layer in range(4)))
    model = write("models/tiny.yaml", TINY_MODEL)
    monkeypatch.setattr(probe_mod, "load_nvml", lambda: fake_nvml(box()))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(cli, ["probe", "-o", "rigs/r.yaml", "--model", str(model)])
    assert result.exit_code == 2 and "rigs/r.yaml: cannot write" in result.stderr  # no rigs/ folder yet
    (tmp_path / "rigs").mkdir()
    result = runner.invoke(cli, ["probe", "-o", "rigs/r.yaml", "--model", str(model)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and "wrote rigs/r.yaml" in result.stderr
    text = (tmp_path / "rigs" / "r.yaml").read_text()
    assert 'model: "../models/tiny.yaml"' in text
    planned = runner.invoke(cli, ["rigs/r.yaml", "--json"])
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)
    assert plan["status"] == "optimal"
    assert [s["name"] for s in plan["stages"]] == ["RTX 3090", "RTX 3060 12GB"]
    # a second probe does not overwrite the rig unless asked
    again = runner.invoke(cli, ["probe", "-o", "rigs/r.yaml"])
    assert again.exit_code == 2 and "already exists" in again.stderr
    assert runner.invoke(cli, ["probe", "-o", "rigs/r.yaml", "--force"]).exit_code == 0


def test_stdout_holds_only_the_yaml(monkeypatch, tmp_path):
    monkeypatch.setattr(probe_mod, "load_nvml", lambda: fake_nvml(box()))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    result = CliRunner().invoke(cli, ["probe", "--context", "8192", "--reserve", "1 GiB"])
    assert result.exit_code == 0
    path = tmp_path / "rig.yaml"
    path.write_text(result.stdout)
    rig, _ = load_rig(path, REGISTRY)
    assert rig.context == 8192 and rig.gpus[0].reserve == 1024 * MIB and rig.model is None
    assert "EDIT model:" in result.stderr and "probed 3 GPU(s) in NVML order" in result.stderr


@pytest.mark.parametrize(
    ("args", "says"), [(["--reserve", "lots"], "--reserve:"), (["--reserve", "100"], "whole MiB")]
)
def test_bad_options_exit_2(monkeypatch, args, says):
    monkeypatch.setattr(probe_mod, "load_nvml", lambda: fake_nvml(box()))
    result = CliRunner().invoke(cli, ["probe", *args])
    assert result.exit_code == 2 and says in result.stderr


def test_a_bad_model_is_refused_before_probing(monkeypatch, write):
    bad = write("bad.yaml", "layers: 0\n")
    monkeypatch.setattr(probe_mod, "load_nvml", lambda: pytest.fail("probed with a bad model"))
    result = CliRunner().invoke(cli, ["probe", "--model", str(bad)])
    assert result.exit_code == 2 and "bad.yaml" in result.stderr


def test_the_name_table_matches_whole_names_only():
    assert find_card("NVIDIA GeForce RTX 3060 Ti").sms == 38
    assert find_card("NVIDIA GeForce RTX 3060", 12 * 1024).sms == 28
    assert find_card("NVIDIA H200").sms == 132
    assert find_card("NVIDIA GeForce RTX 3060 Laptop GPU") is None


def test_a_name_nvml_shares_between_memory_sizes_is_told_apart_by_the_total(write):
    devices = [
        card("RTX 4060 Ti", A, total=16 * GIB, free=15000 * MIB, cc=(8, 9)),
        card("RTX 4060 Ti", B, total=8 * GIB, free=7000 * MIB, cc=(8, 9), bus="00000000:02:00.0"),
        card("RTX 3060", C, total=12 * GIB, free=11000 * MIB, fail={"nvmlDeviceGetMemoryInfo"}),
    ]
    gpus, _ = probe(fake_nvml(devices))
    assert [g.rig_name for g in gpus] == ["RTX 4060 Ti 16GB", "RTX 4060 Ti 8GB", "RTX 3060"]
    assert [g.sms for g in gpus[:2]] == [34, 34] and gpus[2].sms is None
    # without the memory NVML would not give, the name stays ambiguous and the rig says so
    assert "'NVIDIA GeForce RTX 3060' names 2 cards" in gpus[2].notes["sms"]
    text = rig_yaml(gpus, visible=None, model_ref="m.yaml", context=0, reserve_mib=700)
    assert 'name: "RTX 4060 Ti 16GB"' in text and 'name: "RTX 3060"' in text
