"""llama.cpp's ``--fit`` (``common/fit.cpp``, pinned build 11434.0.0), statement by statement.

Since late 2025 llama.cpp fits memory by itself when the user places nothing (``-fit on`` is the
default): it dry-runs the model with ``no_alloc`` and moves layers and expert tensors until every device
keeps a margin (``-fitt``, 1024 MiB by default) free. ``fit`` takes the user's parameters, the devices
and a memory oracle, and returns what ``common_params_fit_impl`` would set: the context, ``n_gpu_layers``,
the tensor split and the buffer-type overrides, and the ``-c -ngl -ts -ot`` line ``llama-fit-params``
prints for them (``tools/fit-params/fit-params.cpp`` lines 45-69).

The oracle stands for llama.cpp's dry run (``common_get_device_memory_data_impl``, fit.cpp lines
30-154): given a ``DryRun`` it returns the model, context and compute bytes of every device and the
host. It can be moesplit's own memory count (``solver.engines.llamacpp.fitdefault``), or the binary
itself (``llama-fit-params --fit-print on``); the answer depends on the oracle only through the
comparisons ``used <= target``, so an oracle off by less than ``FitResult.min_slack`` gives the same
command.

The code follows fit.cpp statement by statement, unsigned 32-bit layer counts (two paths wrap around,
see ``_Ngl``) and C's truncating division included, because the aim is llama.cpp's answer, not a better
one; its trace (``FitResult.log``) is fit.cpp's LOG_TRC lines, to diff with ``llama-fit-params -v``.
Line numbers in comments are of ``common/fit.cpp`` in the pinned build.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum

MiB = 1024 * 1024
U32 = 0xFFFFFFFF
U32_MAX = U32
LLAMA_MAX_DEVICES = 16  # llama_max_devices(), src/llama.cpp
LLAMA_MAX_TENSOR_BUFT_OVERRIDES = 4096  # llama_max_tensor_buft_overrides(), src/llama.cpp
DEFAULT_N_GPU_LAYERS = -1  # llama_model_default_params().n_gpu_layers, "auto"
CPU_BUFT = "CPU"  # ggml_backend_buft_name(ggml_backend_cpu_buffer_type())

# fit.cpp line 618: every MoE expert tensor, moved to system memory to measure the dense-only footprint.
PATTERN_MOE_ALL = r"blk\.\d+\.ffn_(up|down|gate_up|gate)_(ch|)exps"
# common/common.h line 1224 (-cmoe / -ncmoe), only needed to express those user options.
LLM_FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


class LayerFraction(IntEnum):
    """Which part of a layer stays on its device when the layer only partly fits (fit.cpp lines 18-24)."""

    NONE = 0  # nothing
    ATTN = 1  # attention stays, all FFN tensors overflow
    UP = 2  # attention + up stay
    GATE = 3  # attention + up + gate stay, only down overflows
    MOE = 4  # everything but the sparse expert tensors stays


def overflow_pattern(il: int, lf: LayerFraction) -> str:
    """The override regex for the overflowing tensors of layer ``il`` (fit.cpp lines 493-530)."""
    if il >= 1000:
        raise FitError(f"at most 1000 model layers are supported (layer {il})", FitStatus.ERROR)
    if lf == LayerFraction.ATTN:
        return rf"blk\.{il}\.ffn_(gate|up|gate_up|down).*"
    if lf == LayerFraction.UP:
        return rf"blk\.{il}\.ffn_(gate|gate_up|down).*"
    if lf == LayerFraction.GATE:
        return rf"blk\.{il}\.ffn_down.*"
    if lf == LayerFraction.MOE:
        return rf"blk\.{il}\.ffn_(up|down|gate_up|gate)_(ch|)exps"
    raise FitError("fatal error", FitStatus.ERROR)  # GGML_ABORT


class FitStatus(Enum):
    """``common_params_fit_status`` (fit.h): SUCCESS, FAILURE (a fit exception), ERROR (any other)."""

    SUCCESS = 0
    FAILURE = 1
    ERROR = 2


class OracleError(RuntimeError):
    """The dry run itself failed (llama.cpp: "failed to load model" / "failed to create llama_context",
    fit.cpp lines 60-71), which the fit reports as ERROR."""


class FitError(Exception):
    """A ``common_params_fit_exception`` (FAILURE) or ``std::runtime_error`` (ERROR) raised by the fit."""

    def __init__(self, message: str, status: FitStatus = FitStatus.FAILURE) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Override:
    """One ``--override-tensor`` entry: tensors whose name matches ``pattern`` (std::regex_search) go to
    the buffer type named ``buft`` (``ggml_backend_buft_name``, e.g. ``CPU`` or ``RPC0[127.0.0.1:50052]``)."""

    pattern: str
    buft: str


@dataclass(frozen=True)
class DryRun:
    """What a dry run is asked to measure: the model and context parameters fit.cpp varies.

    ``n_gpu_layers`` is llama.cpp's (-1 = auto, i.e. all n_layer + 1 including the output layer);
    ``tensor_split`` has one proportion per device (all zero = llama.cpp's default split by free memory);
    ``overrides`` are in the order llama.cpp applies them (first match wins)."""

    n_ctx: int
    n_gpu_layers: int
    tensor_split: tuple[float, ...]
    overrides: tuple[Override, ...]

    def args(self) -> list[str]:
        """The llama.cpp CLI arguments that select this placement (for ``--fit-print on``)."""
        out = ["-c", str(self.n_ctx), "-ngl", "auto" if self.n_gpu_layers == -1 else str(self.n_gpu_layers)]
        if any(x != 0.0 for x in self.tensor_split):
            out += ["-ts", ",".join(_fmt_float(x) for x in self.tensor_split)]
        if self.overrides:
            out += ["-ot", ",".join(f"{o.pattern}={o.buft}" for o in self.overrides)]
        return out


@dataclass(frozen=True)
class DeviceMemory:
    """``llama_device_memory_data`` for one device (or the host): free/total as the backend reports them,
    and the projected model (weights), context (KV/recurrent state) and compute buffer bytes."""

    free: int
    total: int
    model: int
    context: int
    compute: int

    @property
    def used(self) -> int:
        """``mb.total()``: what the fit compares with its targets."""
        return self.model + self.context + self.compute


@dataclass(frozen=True)
class Measurement:
    """A dry run's result: one entry per device in model order, then the host (fit.cpp line 74)."""

    devices: tuple[DeviceMemory, ...]
    host: DeviceMemory


Oracle = Callable[[DryRun], Measurement]


@dataclass(frozen=True)
class FitDevice:
    """A device llama.cpp would place layers on: ``name`` and ``description`` as the backend reports them
    (used in log lines only) and ``buft``, the name of its default buffer type, used in ``-ot`` output."""

    name: str
    description: str
    buft: str


@dataclass(frozen=True)
class ModelInfo:
    """The three hyperparameters fit.cpp reads from the model (lines 140-145).

    ``n_layer`` is ``llama_model_n_layer``: block_count minus the nextn/MTP layers (plus them when the
    MTP head is loaded); ``n_expert`` is 0 for a dense model."""

    n_layer: int
    n_ctx_train: int
    n_expert: int


@dataclass(frozen=True)
class UserParams:
    """The parameters the fit starts from, as llama.cpp's CLI sets them (common/arg.cpp).

    ``n_ctx`` 0 means unset/"loaded from model" (the fit may then shrink it down to ``n_ctx_min``; passing
    ``-c 0`` explicitly sets ``n_ctx_min`` to UINT32_MAX, arg.cpp line 1648). ``margins`` are bytes per
    device (``-fitt``, default 1024 MiB each). Any of ``n_gpu_layers != -1``, a non-zero ``tensor_split``,
    ``overrides`` (-ot, -cmoe, -ncmoe) or ``split_mode == "row"`` makes the fit stand aside (FAILURE) when
    changes are needed; ``split_mode == "tensor"`` always does."""

    margins: tuple[int, ...]
    n_ctx: int = 0
    n_ctx_min: int = 4096
    n_gpu_layers: int = DEFAULT_N_GPU_LAYERS
    tensor_split: tuple[float, ...] = ()
    overrides: tuple[Override, ...] = ()
    split_mode: str = "layer"
    n_streams: int = 1  # 1 unless kv_unified is off and n_parallel > 1


@dataclass
class FitResult:
    """What the fit set, its status, its trace (fit.cpp's LOG_TRC lines) and the measurements it made.

    ``n_gpu_layers``/``tensor_split``/``overrides`` are the final model parameters (the user's own where
    the fit returned early or gave up); ``tensor_split`` has ``LLAMA_MAX_DEVICES`` entries like the
    buffer fit-params prints from. ``min_slack`` is the smallest |used - target| over the comparisons
    that decided the result: an oracle whose error stays below it gives the same answer."""

    status: FitStatus
    n_ctx: int
    n_gpu_layers: int
    tensor_split: list[float]
    overrides: list[Override]
    message: str = ""
    log: list[str] = field(default_factory=list)
    n_measurements: int = 0
    min_slack: int | None = None
    layers: list[tuple[int, int, int]] = field(default_factory=list)  # (n_layer, n_part, overflow_type)

    def command(self) -> str | None:
        """``llama-fit-params``' stdout line (fit-params.cpp lines 45-69), None where it exits 1."""
        if self.status != FitStatus.SUCCESS:
            return None
        return format_command(self.n_ctx, self.n_gpu_layers, self.tensor_split, self.overrides)


def _f32(x: float) -> float:
    """Round to single precision, as llama.cpp stores tensor_split."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def _fmt_float(x: float) -> str:
    """A tensor-split value for the CLI: integers without a decimal point."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def format_command(
    n_ctx: int, n_gpu_layers: int, tensor_split: Sequence[float], overrides: Sequence[Override]
) -> str:
    """``-c N -ngl N[ -ts a,b,...][ -ot "p=b,..."]`` exactly as fit-params.cpp prints it: ``-ts`` only
    when more than one entry remains after dropping trailing zeros, each entry as ``uint32_t(float)``."""
    out = f"-c {n_ctx} -ngl {n_gpu_layers}"
    ts = [_f32(x) for x in tensor_split] + [0.0] * (LLAMA_MAX_DEVICES - len(tensor_split))
    nd = LLAMA_MAX_DEVICES
    while nd > 1 and ts[nd - 1] == 0.0:
        nd -= 1
    if nd > 1:
        out += " -ts " + ",".join(str(int(x) & U32) for x in ts[:nd])
    if overrides:
        out += ' -ot "' + ",".join(f"{o.pattern}={o.buft}" for o in overrides) + '"'
    return out


def _cdiv(a: int, b: int) -> int:
    """C/C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@dataclass
class _Ngl:
    """``ngl_t`` (fit.cpp lines 532-543) with uint32 fields: total and partial layers of one device."""

    n_layer: int = 0
    n_part: int = 0
    overflow_type: LayerFraction = LayerFraction.MOE

    def n_full(self) -> int:
        return (self.n_layer - self.n_part) & U32

    def copy(self) -> _Ngl:
        return replace(self)


def _copy(v: list[_Ngl]) -> list[_Ngl]:
    return [n.copy() for n in v]


class _Fit:
    """State of one ``common_params_fit_impl`` run; ``run`` is the function body."""

    def __init__(
        self, model: ModelInfo, devices: Sequence[FitDevice], user: UserParams, oracle: Oracle
    ) -> None:
        self.model = model
        self.devs = list(devices)
        self.user = user
        self.oracle = oracle
        self.log: list[str] = []
        self.n_measurements = 0
        self.slacks: list[int] = []
        nd = len(self.devs)
        self.n_ctx = user.n_ctx
        # the model parameters the function writes (mparams); tensor_split is the caller's writable buffer
        self.n_gpu_layers = user.n_gpu_layers
        self.tensor_split = [float(x) for x in user.tensor_split] + [0.0] * (
            LLAMA_MAX_DEVICES - len(user.tensor_split)
        )
        self.overrides: list[Override] = list(user.overrides)
        self.layers: list[tuple[int, int, int]] = []
        if nd and len(user.margins) < nd:
            raise ValueError(f"{nd} devices but {len(user.margins)} margins")

    # -- helpers -------------------------------------------------------------------------------------------

    def trc(self, msg: str) -> None:
        self.log.append(f"common_params_fit_impl: {msg}")

    def measure(
        self, n_gpu_layers: int, tensor_split: Sequence[float], overrides: Sequence[Override]
    ) -> Measurement:
        nd = len(self.devs)
        ts = tuple(float(x) for x in tensor_split[: max(nd, 1)])
        m = self.oracle(DryRun(self.n_ctx, n_gpu_layers, ts, tuple(overrides)))
        self.n_measurements += 1
        if len(m.devices) != nd:
            raise ValueError(f"oracle returned {len(m.devices)} devices, expected {nd}")
        return m

    def measure_user(self) -> Measurement:
        return self.measure(self.n_gpu_layers, self.tensor_split, self.overrides)

    def decide(self, used: int, target: int, strict: bool = False) -> bool:
        """``used <= target`` (or ``<``), remembering how close the call was."""
        self.slacks.append(abs(target - used))
        return used < target if strict else used <= target

    def set_ngl_tensor_split_tbo(
        self, ngl_per_device: Sequence[_Ngl], overflow_bufts: Sequence[str]
    ) -> tuple[int, list[float], list[Override]]:
        """fit.cpp lines 548-586: n_gpu_layers, tensor_split and overrides for per-device layer counts.

        Layers are numbered so that the last ``n_gpu_layers`` of the n_layer + 1 (the output layer
        counts as index n_layer) are on devices, device 0 first; within a device full layers come first,
        then its partial layers. A device's first partial layer overflows its ``overflow_type`` part to
        ``overflow_bufts[id]``, every later partial layer only its expert tensors, to the CPU."""
        nd = len(self.devs)
        hp_ngl = self.model.n_layer
        n_gpu_layers = 0
        ts = list(self.tensor_split)
        for id_ in range(nd):
            n_gpu_layers += ngl_per_device[id_].n_layer
            if nd > 1:
                ts[id_] = float(ngl_per_device[id_].n_layer)
        n_gpu_layers = _i32(n_gpu_layers)
        il0 = (hp_ngl + 1 - n_gpu_layers) & U32
        tbo: list[Override] = []
        for id_ in range(nd):
            n = ngl_per_device[id_]
            il0 = (il0 + n.n_full()) & U32
            end = (il0 + n.n_part) & U32
            il = il0
            while il < end:
                if len(tbo) + 1 >= LLAMA_MAX_TENSOR_BUFT_OVERRIDES:
                    raise FitError(
                        f"llama_max_tensor_buft_overrides() == {LLAMA_MAX_TENSOR_BUFT_OVERRIDES} "
                        "is insufficient for model"
                    )
                first = il == il0
                tbo.append(
                    Override(
                        overflow_pattern(il, n.overflow_type if first else LayerFraction.MOE),
                        overflow_bufts[id_] if first else CPU_BUFT,
                    )
                )
                il = (il + 1) & U32
            il0 = (il0 + n.n_part) & U32
        return n_gpu_layers, ts, tbo

    def get_memory_for_layers(
        self, ngl_per_device: Sequence[_Ngl], overflow_bufts: Sequence[str]
    ) -> list[int]:
        """fit.cpp lines 589-614: measured bytes used per device for a layer distribution."""
        ngl, ts, tbo = self.set_ngl_tensor_split_tbo(ngl_per_device, overflow_bufts)
        m = self.measure(ngl, ts, tbo)
        self.trc("memory for test allocation by device:")
        for id_, n in enumerate(ngl_per_device):
            self.trc(
                f"id={id_}, n_layer={n.n_layer:2d}, n_part={n.n_part:2d}, "
                f"overflow_type={int(n.overflow_type)}, "
                f"mem={_cdiv(m.devices[id_].used, MiB):6d} MiB"
            )
        return [d.used for d in m.devices]

    def apply(self, ngl_per_device: Sequence[_Ngl], overflow_bufts: Sequence[str]) -> None:
        """Write the final distribution into the model parameters (fit.cpp lines 731 and 876)."""
        self.n_gpu_layers, self.tensor_split, self.overrides = self.set_ngl_tensor_split_tbo(
            ngl_per_device, overflow_bufts
        )
        self.layers = [(n.n_layer, n.n_part, int(n.overflow_type)) for n in ngl_per_device]

    # -- the algorithm --------------------------------------------------------------------------------------

    def run(self) -> None:
        user, hp = self.user, self.model
        if user.split_mode == "tensor":
            raise FitError("llama_params_fit is not implemented for SPLIT_MODE_TENSOR, abort")
        hp_ngl, hp_nct, hp_nex = hp.n_layer, hp.n_ctx_train, hp.n_expert
        n_streams = max(1, user.n_streams)
        n_ctx_auto = self.n_ctx == 0
        nd = len(self.devs)

        # step 1 (lines 261-371): measure the parameters as given; nothing to do if every margin is met
        self.trc("getting device memory data for initial parameters:")
        dmds_full = self.measure_user()
        n_ctx_max = min(hp_nct * n_streams, U32_MAX)
        n_ctx_min_total = min(user.n_ctx_min * n_streams, U32_MAX)
        if n_ctx_auto:
            self.n_ctx = n_ctx_max
            if n_streams > 1:
                dmds_full = self.measure_user()

        margins = [user.margins[0]] if nd == 0 else [user.margins[i] for i in range(nd)]
        names = [f"{d.name} ({d.description})" for d in self.devs]
        width = max((len(n) for n in names), default=0)
        names = [n.ljust(width) for n in names]

        sum_free = sum_projected_free = sum_projected_used = sum_projected_model = 0
        projected_free_per_device: list[int] = []
        if nd == 0:
            sum_projected_used = dmds_full.host.used
            sum_free = dmds_full.host.total
            sum_projected_free = sum_free - sum_projected_used
            self.trc(
                f"projected to use {_cdiv(sum_projected_used, MiB)} MiB of host memory vs. "
                f"{_cdiv(sum_free, MiB)} MiB of total host memory"
            )
            if sum_projected_free >= margins[0]:
                self.trc("will leave ... MiB of system memory, no changes needed")
                return
        else:
            if nd > 1:
                self.trc("projected memory use with initial parameters [MiB]:")
            for id_ in range(nd):
                dmd = dmds_full.devices[id_]
                projected_used = dmd.used
                projected_free = dmd.free - projected_used
                projected_free_per_device.append(projected_free)
                sum_free += dmd.free
                sum_projected_used += projected_used
                sum_projected_free += projected_free
                sum_projected_model += dmd.model
                if nd > 1:
                    self.trc(
                        f"  - {names[id_]}: {_cdiv(dmd.total, MiB):6d} total, "
                        f"{_cdiv(projected_used, MiB):6d} used, "
                        f"{_cdiv(projected_free, MiB):6d} free vs. target of {_cdiv(margins[id_], MiB):6d}"
                    )
            self.trc(
                f"projected to use {_cdiv(sum_projected_used, MiB)} MiB of device memory vs. "
                f"{_cdiv(sum_free, MiB)} MiB of free device memory"
            )
            if nd == 1:
                if self.decide(margins[0], projected_free_per_device[0]):
                    self.trc(
                        f"will leave {_cdiv(projected_free_per_device[0], MiB)} >= "
                        f"{_cdiv(margins[0], MiB)} MiB "
                        "of free device memory, no changes needed"
                    )
                    return
            else:
                changes_needed = False
                for id_ in range(nd):
                    if not self.decide(margins[id_], projected_free_per_device[id_]):
                        changes_needed = True
                        break
                if not changes_needed:
                    self.trc("targets for free memory can be met on all devices, no changes needed")
                    return

        # step 2 (lines 373-461): with the context unset, shrink it towards n_ctx_min
        global_surplus = sum_projected_free - sum(margins)
        if global_surplus < 0:
            if nd <= 1:
                self.trc(
                    f"cannot meet free memory target of {_cdiv(margins[0], MiB)} MiB, need to reduce device "
                    f"memory by {_cdiv(-global_surplus, MiB)} MiB"
                )
            else:
                self.trc(
                    "cannot meet free memory targets on all devices, need to use "
                    f"{_cdiv(-global_surplus, MiB)} MiB less in total"
                )
            if n_ctx_auto:
                if n_ctx_max > n_ctx_min_total:
                    sum_used_target = sum_free - sum(margins)
                    if nd > 1:
                        # whole layers/tensors waste about half a layer (dense) or a tensor (MoE) per device
                        n_div = min(self.n_gpu_layers & U32, hp_ngl)
                        if n_div == 0:
                            raise FitError("integer division by zero (SIGFPE in llama.cpp)", FitStatus.ERROR)
                        model_per_layer = _cdiv(sum_projected_model, n_div)
                        sum_used_target -= (nd + 1) * model_per_layer // (2 if hp_nex == 0 else 6)
                    self.n_ctx = n_ctx_min_total
                    dmds_min_ctx = self.measure_user()
                    if nd == 0:
                        sum_projected_used_min_ctx = dmds_min_ctx.host.used
                    else:
                        sum_projected_used_min_ctx = sum(d.used for d in dmds_min_ctx.devices)
                    if sum_used_target > sum_projected_used_min_ctx:
                        # linear interpolation between the minimum and maximum context size
                        self.n_ctx += _cdiv(
                            (n_ctx_max - n_ctx_min_total) * (sum_used_target - sum_projected_used_min_ctx),
                            sum_projected_used - sum_projected_used_min_ctx,
                        )
                        self.n_ctx &= U32
                        align = 256 * n_streams
                        self.n_ctx = max(self.n_ctx - self.n_ctx % align, n_ctx_min_total)
                        bytes_per_ctx = _cdiv(
                            sum_projected_used - sum_projected_used_min_ctx, n_ctx_max - n_ctx_min_total
                        )
                        memory_reduction = (n_ctx_max - self.n_ctx) * bytes_per_ctx
                        self.trc(
                            f"context size reduced from {n_ctx_max} to {self.n_ctx} -> need "
                            f"{_cdiv(memory_reduction, MiB)} MiB less memory in total"
                        )
                        if nd <= 1:
                            self.trc("entire model can be fit by reducing context")
                            return
                        self.trc("entire model should be fit across devices by reducing context")
                    else:
                        memory_reduction = sum_projected_used - sum_projected_used_min_ctx
                        self.trc(
                            f"context size reduced from {n_ctx_max} to {self.n_ctx} -> need "
                            f"{_cdiv(memory_reduction, MiB)} MiB less memory in total"
                        )
                elif user.n_ctx_min == U32_MAX:
                    self.trc(f"user has requested full context size of {n_ctx_max} -> no change")
                else:
                    self.trc(
                        f"default model context size is {n_ctx_max} which is <= the min. context size of "
                        f"{n_ctx_min_total} -> no change"
                    )
            else:
                self.trc(f"context size set by user to {self.n_ctx} -> no change")
        if nd == 0:
            raise FitError("was unable to fit model into system memory by reducing context, abort")

        # stand aside where the user already chose the weight placement (lines 463-486)
        if self.n_gpu_layers != DEFAULT_N_GPU_LAYERS:
            raise FitError(f"n_gpu_layers already set by user to {self.n_gpu_layers}, abort")
        if nd > 1:
            if any(self.tensor_split[id_] != 0.0 for id_ in range(nd)):
                raise FitError("model_params::tensor_split already set by user, abort")
            if user.split_mode == "row":
                raise FitError("changing weight allocation for LLAMA_SPLIT_MODE_ROW not implemented, abort")
        if self.overrides:
            raise FitError("model_params::tensor_buft_overrides already set by user, abort")

        # step 3 (lines 488-733): fill devices back to front with dense-only layers (experts on the CPU)
        global_surplus_cpu_moe = 0
        if hp_nex > 0:
            self.trc("getting device memory data with all MoE tensors moved to system memory:")
            dmds_cpu_moe = self.measure(
                self.n_gpu_layers, self.tensor_split, [Override(PATTERN_MOE_ALL, CPU_BUFT)]
            )
            for id_ in range(nd):
                global_surplus_cpu_moe += dmds_cpu_moe.devices[id_].free
                global_surplus_cpu_moe -= dmds_cpu_moe.devices[id_].used + margins[id_]
            if global_surplus_cpu_moe > 0:
                self.trc(
                    "with only dense weights in device memory there is a total surplus of "
                    f"{_cdiv(global_surplus_cpu_moe, MiB)} MiB"
                )
            else:
                self.trc(
                    "with only dense weights in device memory there is still a total deficit of "
                    f"{_cdiv(-global_surplus_cpu_moe, MiB)} MiB"
                )

        targets = []
        for id_ in range(nd):
            targets.append(dmds_full.devices[id_].free - margins[id_])
            self.trc(f"id={id_}, target={_cdiv(targets[id_], MiB)} MiB")

        overflow_bufts = [CPU_BUFT] * nd
        ngl_per_device = [_Ngl() for _ in range(nd)]
        mem = self.get_memory_for_layers(ngl_per_device, overflow_bufts)

        # the method of false position between "no layers" and "all unassigned layers" on device id
        self.trc(f"filling {'dense' if hp_nex == 0 else 'dense-only'} layers back-to-front:")
        for id_ in range(nd - 1, -1, -1):
            n_unassigned = hp_ngl + 1
            for jd in range(id_ + 1, nd):
                n_unassigned = (n_unassigned - ngl_per_device[jd].n_layer) & U32
            high = _copy(ngl_per_device)
            high[id_].n_layer = n_unassigned
            if hp_nex > 0:
                high[id_].n_part = high[id_].n_layer if id_ < nd - 1 else (high[id_].n_layer - 1) & U32
            if high[id_].n_layer > 0:
                mem_high = self.get_memory_for_layers(high, overflow_bufts)
                if not self.decide(mem_high[id_], targets[id_]):
                    delta = (high[id_].n_layer - ngl_per_device[id_].n_layer) & U32
                    self.trc(f"start filling device {id_}, delta={delta}")
                    while delta > 1:
                        step = _step_size(delta, targets[id_], mem[id_], mem_high[id_])
                        test = _copy(ngl_per_device)
                        test[id_].n_layer = (test[id_].n_layer + step) & U32
                        if hp_nex:
                            add = (step - 1) & U32 if id_ == nd - 1 and test[id_].n_part == 0 else step
                            test[id_].n_part = (test[id_].n_part + add) & U32
                        mem_test = self.get_memory_for_layers(test, overflow_bufts)
                        if self.decide(mem_test[id_], targets[id_]):
                            ngl_per_device, mem = test, mem_test
                            self.trc(f"set ngl_per_device[{id_}].n_layer={ngl_per_device[id_].n_layer}")
                        else:
                            high, mem_high = test, mem_test
                            self.trc(f"set ngl_per_device_high[{id_}].n_layer={high[id_].n_layer}")
                        delta = (high[id_].n_layer - ngl_per_device[id_].n_layer) & U32
                else:
                    ngl_per_device, mem = high, mem_high
                    self.trc(f"set ngl_per_device[{id_}].n_layer={ngl_per_device[id_].n_layer}")
            projected_margin = dmds_full.devices[id_].free - mem[id_]
            self.trc(
                f"  - {names[id_]}: {ngl_per_device[id_].n_layer:2d} layers, "
                f"{_cdiv(mem[id_], MiB):6d} MiB used, "
                f"{_cdiv(projected_margin, MiB):6d} MiB free"
            )
        if hp_nex == 0 or global_surplus_cpu_moe <= 0:
            self.apply(ngl_per_device, overflow_bufts)
            return

        # step 4 (lines 735-876): convert the dense-only layers at the back into full layers at the front,
        # device by device, then try one more layer whose FFN part overflows to the next device
        id_dense_start = nd
        for id_ in range(nd - 1, -1, -1):
            if ngl_per_device[id_].n_layer > 0:
                id_dense_start = id_
                continue
            break
        self.trc(
            "converting dense-only layers to full layers and filling them front-to-back with overflow to "
            "next device/system memory:"
        )
        id_ = 0
        while id_ <= id_dense_start and id_dense_start < nd:
            high = _copy(ngl_per_device)
            for jd in range(id_dense_start, nd):
                n_layer_move = high[jd].n_layer if jd < nd - 1 else (high[jd].n_layer - 1) & U32
                high[id_].n_layer = (high[id_].n_layer + n_layer_move) & U32
                high[jd].n_layer = (high[jd].n_layer - n_layer_move) & U32
                high[jd].n_part = 0
            id_dense_start_high = nd - 1
            mem_high = self.get_memory_for_layers(high, overflow_bufts)

            if not self.decide(mem_high[id_], targets[id_]):
                delta = (high[id_].n_full() - ngl_per_device[id_].n_full()) & U32
                while delta > 1:
                    step = _step_size(delta, targets[id_], mem[id_], mem_high[id_])
                    test = _copy(ngl_per_device)
                    id_dense_start_test = id_dense_start
                    n_converted_test = 0
                    while id_dense_start_test < nd:
                        jd = id_dense_start_test
                        n_convert_jd = min((step - n_converted_test) & U32, test[jd].n_part)
                        test[jd].n_layer = (test[jd].n_layer - n_convert_jd) & U32
                        test[jd].n_part = (test[jd].n_part - n_convert_jd) & U32
                        test[id_].n_layer = (test[id_].n_layer + n_convert_jd) & U32
                        n_converted_test = (n_converted_test + n_convert_jd) & U32
                        if test[jd].n_part > 0:
                            break
                        id_dense_start_test += 1
                    mem_test = self.get_memory_for_layers(test, overflow_bufts)
                    if self.decide(mem_test[id_], targets[id_]):
                        ngl_per_device, mem, id_dense_start = test, mem_test, id_dense_start_test
                        self.trc(
                            f"set ngl_per_device[{id_}].(n_layer, n_part)=({ngl_per_device[id_].n_layer}, "
                            f"{ngl_per_device[id_].n_part}), id_dense_start={id_dense_start}"
                        )
                    else:
                        high, mem_high, id_dense_start_high = test, mem_test, id_dense_start_test
                        self.trc(
                            f"set ngl_per_device_high[{id_}].(n_layer, n_part)=({high[id_].n_layer}, "
                            f"{high[id_].n_part}), id_dense_start_high={id_dense_start_high}"
                        )
                    delta = (high[id_].n_full() - ngl_per_device[id_].n_full()) & U32
            else:
                ngl_per_device, mem, id_dense_start = high, mem_high, id_dense_start_high
                self.trc(
                    f"set ngl_per_device[{id_}].(n_layer, n_part)=({ngl_per_device[id_].n_layer}, "
                    f"{ngl_per_device[id_].n_part}), id_dense_start={id_dense_start}"
                )

            # try to fit at least part of one more layer (lines 810-860)
            if ngl_per_device[id_dense_start].n_layer > (0 if id_ < nd - 1 else 1):
                test = _copy(ngl_per_device)
                id_dense_start_test = id_dense_start
                test[id_dense_start_test].n_layer = (test[id_dense_start_test].n_layer - 1) & U32
                test[id_dense_start_test].n_part = (test[id_dense_start_test].n_part - 1) & U32
                test[id_].n_layer = (test[id_].n_layer + 1) & U32
                test[id_].n_part = (test[id_].n_part + 1) & U32
                if test[id_dense_start_test].n_part == 0:
                    id_dense_start_test += 1
                overflow_bufts_test = list(overflow_bufts)
                if id_ < nd - 1:
                    overflow_bufts_test[id_] = self.devs[id_ + 1].buft
                # UP first; where it fits, GATE (only down overflows) too; where it does not, ATTN
                kind: LayerFraction | None = LayerFraction.UP
                while kind is not None:
                    mem_test = self._try_extra(test, overflow_bufts_test, targets, id_, kind)
                    if mem_test is not None:
                        ngl_per_device, overflow_bufts, mem = _copy(test), overflow_bufts_test, mem_test
                        id_dense_start = id_dense_start_test
                        self.trc(
                            f"set ngl_per_device[{id_}].(n_layer, n_part, overflow_type)=("
                            f"{ngl_per_device[id_].n_layer}, {ngl_per_device[id_].n_part}, {kind.name}), "
                            f"id_dense_start={id_dense_start}"
                        )
                    if kind is not LayerFraction.UP:
                        kind = None
                    else:
                        kind = LayerFraction.ATTN if mem_test is None else LayerFraction.GATE

            projected_margin = dmds_full.devices[id_].free - mem[id_]
            self.trc(
                f"  - {names[id_]}: {ngl_per_device[id_].n_layer:2d} layers ({ngl_per_device[id_].n_part:2d} "
                f"overflowing), {_cdiv(mem[id_], MiB):6d} MiB used, "
                f"{_cdiv(projected_margin, MiB):6d} MiB free"
            )
            id_ += 1

        for jd in range(id_dense_start + 1, nd):
            projected_margin = dmds_full.devices[jd].free - mem[jd]
            self.trc(
                f"  - {names[jd]}: {ngl_per_device[jd].n_layer:2d} layers ({ngl_per_device[jd].n_part:2d} "
                f"overflowing), {_cdiv(mem[jd], MiB):6d} MiB used, {_cdiv(projected_margin, MiB):6d} MiB free"
            )
        self.apply(ngl_per_device, overflow_bufts)

    def _try_extra(
        self, test: list[_Ngl], bufts: Sequence[str], targets: Sequence[int], id_: int, kind: LayerFraction
    ) -> list[int] | None:
        """One extra layer on device ``id_`` with ``kind`` of it staying there (lines 810-860): its
        memory when it fits on this device and the next, else None."""
        test[id_].overflow_type = kind
        self.trc(f"trying to fit one extra layer with overflow_type=LAYER_FRACTION_{kind.name}")
        mem_test = self.get_memory_for_layers(test, bufts)
        return mem_test if self._fits_extra(mem_test, targets, id_) else None

    def _fits_extra(self, mem_test: Sequence[int], targets: Sequence[int], id_: int) -> bool:
        """Lines 828/839/851: strictly below target on this device and, unless last, on the next one.
        (C's && short-circuits: the next device's comparison only counts when this one passed.)"""
        nd = len(self.devs)
        if not self.decide(mem_test[id_], targets[id_], strict=True):
            return False
        return id_ + 1 == nd or self.decide(mem_test[id_ + 1], targets[id_ + 1], strict=True)


def _i32(x: int) -> int:
    """Wrap to int32 (mparams.n_gpu_layers)."""
    x &= U32
    return x - (1 << 32) if x >= 1 << 31 else x


def _step_size(delta: int, target: int, mem_low: int, mem_high: int) -> int:
    """Lines 694-696 / 766-768: the false-position guess, computed in int64 then stored in a uint32 (a
    negative guess, where even the low bound misses the target, wraps to a huge value), clamped to
    [1, delta - 1]."""
    step = _cdiv(delta * (target - mem_low), mem_high - mem_low) & U32
    step = max(step, 1)
    return min(step, (delta - 1) & U32)


def fit(model: ModelInfo, devices: Sequence[FitDevice], user: UserParams, oracle: Oracle) -> FitResult:
    """Run ``common_fit_params`` (fit.cpp lines 879-904) and return what it set.

    Exceptions inside the fit become the FAILURE/ERROR status as in llama.cpp; the parameters then hold
    whatever the fit had written before it gave up (fit-params exits 1 and prints nothing)."""
    f = _Fit(model, devices, user, oracle)
    status, message = FitStatus.SUCCESS, ""
    try:
        f.run()
        f.log.append("common_fit_params: successfully fit params to free device memory")
    except FitError as e:
        status, message = e.status, str(e)
        if e.status == FitStatus.FAILURE:
            f.log.append(f"common_fit_params: failed to fit params to free device memory: {e}")
        else:
            f.log.append(
                "common_fit_params: encountered an error while trying to fit params to free device memory: "
                f"{e}"
            )
    except OracleError as e:
        status, message = FitStatus.ERROR, str(e)
        f.log.append(
            f"common_fit_params: encountered an error while trying to fit params to free device memory: {e}"
        )
    return FitResult(
        status=status,
        n_ctx=f.n_ctx,
        n_gpu_layers=f.n_gpu_layers,
        tensor_split=list(f.tensor_split),
        overrides=list(f.overrides),
        message=message,
        log=f.log,
        n_measurements=f.n_measurements,
        min_slack=min(f.slacks) if f.slacks else None,
        layers=f.layers,
    )


def user_params_from_cli(args: Sequence[str], n_devices: int) -> UserParams:
    """The ``UserParams`` that llama.cpp's argument parser (common/arg.cpp) builds from ``args``, for the
    options the fit reads: ``-c``, ``-fitt``, ``-fitc``, ``-ngl``, ``-ts``, ``-ot``, ``-cmoe``, ``-ncmoe``,
    ``-sm``, ``-np``, ``-kvu``. Options are applied in order, as llama.cpp does (``-c 0`` then ``-fitc N``
    re-enables context reduction)."""
    margins = [1024 * MiB] * LLAMA_MAX_DEVICES
    n_ctx, n_ctx_min, ngl, split_mode = 0, 4096, DEFAULT_N_GPU_LAYERS, "layer"
    ts: tuple[float, ...] = ()
    ot: list[Override] = []
    n_parallel, kv_unified = 1, False
    it = iter(args)
    for a in it:
        if a in ("-c", "--ctx-size"):
            n_ctx = int(next(it))
            if n_ctx == 0:
                n_ctx_min = U32_MAX
        elif a in ("-fitt", "--fit-target"):
            vals = [int(v) * MiB for v in _split_list(next(it))]
            if len(vals) == 1:
                margins = [vals[0]] * LLAMA_MAX_DEVICES
            else:
                margins[: len(vals)] = vals
        elif a in ("-fitc", "--fit-ctx"):
            n_ctx_min = int(next(it))
        elif a in ("-ngl", "--gpu-layers", "--n-gpu-layers"):
            v = next(it)
            ngl = -1 if v == "auto" else -2 if v == "all" else int(v)
        elif a in ("-ts", "--tensor-split"):
            ts = tuple(_f32(float(v)) for v in _split_list(next(it)))
        elif a in ("-ot", "--override-tensor"):
            for item in next(it).split(","):
                pattern, buft = item.split("=", 1)
                ot.append(Override(pattern, buft))
        elif a in ("-cmoe", "--cpu-moe"):
            ot.append(Override(LLM_FFN_EXPS_REGEX, CPU_BUFT))
        elif a in ("-ncmoe", "--n-cpu-moe"):
            ot += [Override(rf"blk\.{i}{LLM_FFN_EXPS_REGEX}", CPU_BUFT) for i in range(int(next(it)))]
        elif a in ("-sm", "--split-mode"):
            split_mode = next(it)
        elif a in ("-np", "--parallel"):
            n_parallel = int(next(it))
        elif a in ("-kvu", "--kv-unified"):
            kv_unified = True
        elif a in ("-fit", "--fit"):
            next(it)  # llama-fit-params fits whatever -fit says (fit-params.cpp line 33)
        else:
            raise ValueError(f"option not modelled: {a}")
    return UserParams(
        margins=tuple(margins[: max(n_devices, 1)]),
        n_ctx=n_ctx,
        n_ctx_min=n_ctx_min,
        n_gpu_layers=ngl,
        tensor_split=ts,
        overrides=tuple(ot),
        split_mode=split_mode,
        n_streams=1 if kv_unified else max(1, n_parallel),
    )


def _split_list(value: str) -> list[str]:
    """arg.cpp's split of a list value on runs of ',' and '/'."""
    return re.split(r"[,/]+", value)
