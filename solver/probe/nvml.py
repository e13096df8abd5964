"""The local NVIDIA GPUs as NVML reports them: name, memory, SMs, clock and PCIe link of each, for ``solve
probe``.

Every function takes the NVML module (``pynvml``) as an argument, so tests drive a fake one. A field NVML
cannot give is noted with the reason, not fatal; the card table (``solver.files.cards``) fills the SM count
where NVML has none.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Any

from solver.exitcodes import ExitCode
from solver.files.cards import AmbiguousCard, Card, find_card
from solver.problem.problem import estimate_layer_ms

MIB = 2**20

#: FP32 CUDA cores per SM by compute capability, as in NVIDIA's cuda-samples (helper_cuda.h,
#: _ConvertSMVer2Cores). NVML reports CUDA cores (nvmlDeviceGetNumGpuCores), not SMs; this turns them
#: back into SMs. Capabilities missing here fall through to the name table.
CORES_PER_SM: dict[tuple[int, int], int] = {
    (5, 0): 128,
    (5, 2): 128,
    (5, 3): 128,
    (6, 0): 64,
    (6, 1): 128,
    (6, 2): 128,
    (7, 0): 64,
    (7, 2): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128,
    (10, 1): 128,
    (12, 0): 128,
}


class ProbeError(Exception):
    """The probe cannot go on: one line for the user, and the exit code."""

    def __init__(self, message: str, code: int = ExitCode.NO_GPU):
        super().__init__(message)
        self.code = code


@dataclass
class GpuInfo:
    """What NVML told about one GPU; None where it could not say, with the reason in ``notes``."""

    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    total: int | None = None
    free: int | None = None
    memory_api: str | None = None
    clock_mhz: int | None = None
    sms: int | None = None
    sms_source: str | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max: tuple[int, int] | None = None
    card: Card | None = None
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def short_name(self) -> str:
        return short_name(self.name) if self.name else f"GPU {self.index}"

    @property
    def rig_name(self) -> str:
        """The name the rig gives the GPU: the card table's, which says which card of a name NVML shares
        between memory sizes it is (``RTX 3060 12GB``), else NVML's short name."""
        return self.card.name if self.card is not None else self.short_name

    @property
    def clock_ghz(self) -> float | None:
        return None if self.clock_mhz is None else self.clock_mhz / 1000.0

    @property
    def layer_ms(self) -> float | None:
        if self.sms is None or self.clock_ghz is None:
            return None
        return estimate_layer_ms(self.sms, self.clock_ghz)


def short_name(name: str) -> str:
    """``NVIDIA GeForce RTX 3060`` -> ``RTX 3060``; ``NVIDIA H200`` -> ``H200``."""
    for prefix in ("NVIDIA ", "GeForce "):
        name = name.removeprefix(prefix)
    return name.strip()


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _try(nvml: Any, fn_name: str, *args: Any, **kwargs: Any) -> tuple[Any, str | None]:
    """Call ``nvml.fn_name``; (value, None), or (None, why not) when it is missing or raises NVMLError."""
    fn = getattr(nvml, fn_name, None)
    if fn is None:
        return None, f"this nvidia-ml-py has no {fn_name}"
    try:
        return fn(*args, **kwargs), None
    except nvml.NVMLError as exc:
        return None, f"{fn_name}: {exc}"


def _memory(nvml: Any, handle: Any, gpu: GpuInfo) -> None:
    """Total and free bytes: memory info v2 (free excludes driver-reserved memory), else v1."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            mem, _why = _try(nvml, "nvmlDeviceGetMemoryInfo", handle, version=version)
        except TypeError:  # an nvidia-ml-py whose nvmlDeviceGetMemoryInfo takes no version
            mem = None
        if mem is not None:
            gpu.total, gpu.free, gpu.memory_api = int(mem.total), int(mem.free), "v2"
            return
    mem, why = _try(nvml, "nvmlDeviceGetMemoryInfo", handle)
    if mem is None:
        gpu.notes["free"] = str(why)
        return
    gpu.total, gpu.free, gpu.memory_api = int(mem.total), int(mem.free), "v1"


def _table_card(gpu: GpuInfo) -> None:
    """The card table's entry for the GPU, by NVML's name and, where the name is shared between memory
    sizes (an RTX 3060 has 8 or 12 GB), by NVML's total memory."""
    if gpu.name is None:
        return
    try:
        gpu.card = find_card(gpu.name, None if gpu.total is None else gpu.total // MIB)
    except AmbiguousCard as exc:
        gpu.notes["card"] = str(exc)


def _sms(nvml: Any, handle: Any, gpu: GpuInfo) -> None:
    """SM count: NVML's CUDA cores / cores per SM of the compute capability, else the card table."""
    cores, why_cores = _try(nvml, "nvmlDeviceGetNumGpuCores", handle)
    cc, why_cc = _try(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
    if cores is not None and cc is not None:
        cc = (int(cc[0]), int(cc[1]))
        per = CORES_PER_SM.get(cc)
        if per and cores > 0 and cores % per == 0:
            gpu.sms = cores // per
            gpu.sms_source = f"NVML: {cores} CUDA cores / {per} per SM at compute {cc[0]}.{cc[1]}"
            return
        why_cores = f"{cores} CUDA cores at compute {cc[0]}.{cc[1]} do not give a known SM count"
    if gpu.card is not None and gpu.card.sms is not None:
        gpu.sms = gpu.card.sms
        gpu.sms_source = "moesplit's table by name"
        return
    reason = why_cores or why_cc
    table = gpu.notes.get("card") or f"{gpu.short_name!r} is not in the table"
    gpu.notes["sms"] = f"NVML does not report SMs ({reason}) and {table}"


def read_gpu(nvml: Any, index: int) -> GpuInfo:
    """Everything the rig needs about NVML device ``index``; a field NVML cannot give is noted, not fatal."""
    gpu = GpuInfo(index=index)
    handle, why = _try(nvml, "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        for key in ("name", "free", "sms", "clock_ghz"):
            gpu.notes[key] = str(why)
        return gpu
    name, why = _try(nvml, "nvmlDeviceGetName", handle)
    if name is None:
        gpu.notes["name"] = str(why)
    else:
        gpu.name = _text(name)
    uuid, why = _try(nvml, "nvmlDeviceGetUUID", handle)
    gpu.uuid = None if uuid is None else _text(uuid)
    if uuid is None:
        gpu.notes["uuid"] = str(why)
    pci, why = _try(nvml, "nvmlDeviceGetPciInfo", handle)
    gpu.bus_id = None if pci is None else _text(pci.busId)
    if pci is None:
        gpu.notes["bus_id"] = str(why)
    _memory(nvml, handle, gpu)
    _table_card(gpu)
    clock, why = _try(nvml, "nvmlDeviceGetMaxClockInfo", handle, getattr(nvml, "NVML_CLOCK_SM", 1))
    if clock:
        gpu.clock_mhz = int(clock)
    else:
        gpu.notes["clock_ghz"] = str(why or "NVML reports a max SM clock of 0 MHz")
    _sms(nvml, handle, gpu)
    gen, why_gen = _try(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle)
    width, why_width = _try(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle)
    gpu.pcie_gen = None if gen is None else int(gen)
    gpu.pcie_width = None if width is None else int(width)
    if gen is None or width is None:
        gpu.notes["pcie"] = str(why_gen or why_width)
    # An idle card may train its link down; the maximum says what the slot can do.
    max_gen, _ = _try(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle)
    max_width, _ = _try(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle)
    if max_gen is not None and max_width is not None:
        gpu.pcie_max = (int(max_gen), int(max_width))
    return gpu


def visible_order(spec: str, uuids: list[str | None]) -> list[int]:
    """NVML indices in ``CUDA_VISIBLE_DEVICES`` order: entries are indices or (prefixes of) GPU- UUIDs.

    CUDA silently hides an invalid entry and everything after it; a planner must not plan a different
    set of cards than the engine will see, so an entry that names no GPU (or one already named) is an error.
    """
    n = len(uuids)
    if not spec.strip():
        raise ProbeError("CUDA_VISIBLE_DEVICES is set but empty: CUDA sees no GPU (unset it to probe all)")
    order: list[int] = []
    for raw in spec.split(","):
        entry = raw.strip()
        if re.fullmatch(r"\d+", entry):
            index = int(entry)
            problem = f"is beyond the {n} GPUs NVML sees (0-{n - 1})" if index >= n else None
        elif entry[:4].upper() == "GPU-":
            hits = [i for i, u in enumerate(uuids) if u and u.lower().startswith(entry.lower())]
            index = hits[0] if len(hits) == 1 else -1
            problem = None if len(hits) == 1 else ("matches no GPU's UUID" if not hits else "is ambiguous")
        elif entry[:4].upper() == "MIG-":
            index, problem = -1, "is a MIG device; solve probe plans whole GPUs"
        else:
            index, problem = -1, "is neither a GPU index nor a GPU- UUID"
        if problem is None and index in order:
            problem = "names a GPU already listed"
        if problem is not None:
            raise ProbeError(f"CUDA_VISIBLE_DEVICES={spec}: entry {entry!r} {problem}", ExitCode.INPUT)
        order.append(index)
    return order


def probe(nvml: Any, visible: str | None = None) -> tuple[list[GpuInfo], str | None]:
    """Read the GPUs NVML sees, in ``visible`` (CUDA_VISIBLE_DEVICES) order when given; and the driver."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise ProbeError(_init_message(nvml, exc)) from None
    try:
        count, why = _try(nvml, "nvmlDeviceGetCount")
        if count is None:
            raise ProbeError(f"NVML cannot count the GPUs: {why}")
        if count == 0:
            raise ProbeError("NVML sees no NVIDIA GPU on this machine")
        driver, _ = _try(nvml, "nvmlSystemGetDriverVersion")
        if visible is None:
            order = list(range(count))
        else:
            order = visible_order(visible, [_uuid(nvml, i) for i in range(count)])
        return [read_gpu(nvml, i) for i in order], None if driver is None else _text(driver)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _uuid(nvml: Any, index: int) -> str | None:
    handle, _ = _try(nvml, "nvmlDeviceGetHandleByIndex", index)
    uuid = None if handle is None else _try(nvml, "nvmlDeviceGetUUID", handle)[0]
    return None if uuid is None else _text(uuid)


def _init_message(nvml: Any, exc: Exception) -> str:
    """One line for a failed nvmlInit: the missing library and the unloaded driver said plainly."""
    kind = type(exc).__name__
    if kind == "NVMLError_LibraryNotFound":
        return "NVML library not found: no NVIDIA driver is installed here, so there is no GPU to probe"
    if kind == "NVMLError_DriverNotLoaded":
        return "the NVIDIA driver is not loaded (no GPU to probe): check nvidia-smi"
    return f"NVML could not start: {exc}"
