"""Calibration probes: the single-op models that measure a device's roofs, and what they reach.

Each probe is a tiny ONNX model built here with :mod:`onnx.helper` and run through the same
:class:`~pytest_roofline.backends.base.Backend` protocol as user models (``open`` → ``time``), so a
roof is what *that backend* reaches on this device, not what a hand-written kernel could.

Heavy imports (onnx, numpy) happen inside the builders: the cached path of
:func:`pytest_roofline.roofline.calibrate.calibrate` never imports this module's dependencies.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.roofline.roofs import CacheLevel, Probe

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from pytest_roofline.backends.base import Backend
    from pytest_roofline.device import CpuInfo
    from pytest_roofline.device.load import MachineLoad

Builder = Callable[[], "tuple[onnx.ModelProto, dict[str, np.ndarray]]"]

__all__ = [
    "ALL_DTYPES",
    "DTYPES",
    "FUSING_BACKENDS",
    "KERNEL_TIMED_BACKENDS",
    "GPU_DTYPES",
    "ProbeSpec",
    "cache_levels",
    "clock_hz",
    "measured_clock_hz",
    "combine_sessions",
    "confirmation_specs",
    "dram_bandwidth",
    "dram_points",
    "agreed_sessions",
    "busy_windows",
    "crowded",
    "DispatchFloor",
    "dispatch_chain",
    "trace_launch_floor",
    "dispatch_floor",
    "flags_hash",
    "plan_gpu_probes",
    "plan_probes",
    "kernel_seconds",
    "marginal_seconds",
    "best_per_size",
    "ran_dtype",
    "ladder_outliers",
    "run_probe",
    "device_floor",
    "session_spread",
    "steady_sessions",
    "spot_check_specs",
    "size_label",
    "system_caches",
    "cache_capacities",
    "theoretical_peak_flops",
]

# what a backend's compute precision (BackendSession.compute_precision) names, as a roof's dtype
_FLOAT_PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
DTYPES = ("float32", "float16", "int8")  # the CPU plan's (unchanged: CPU caches keep their keys)
GPU_DTYPES = ("float32", "float16", "bfloat16", "int8")
ALL_DTYPES = GPU_DTYPES
KIB, MIB, GIB = 1024, 1024 * 1024, 1024 * 1024 * 1024
OPSET, IR_VERSION = 17, 8  # old enough for every backend we drive (OpenVINO, onnxruntime)

# Probe plans: "full" is the default; "quick" (tests, smoke runs) runs the same code on fewer sizes.
# 2048 only on hosts of >= BIG_GEMM_CORES cores: on 2 cores it costs 266 ms a run (2.4 s of the
# 10 s budget) and never beat 1024 there; many cores need it to fill their threads.
GEMM_SIZES = {"full": (256, 512, 1024), "quick": (512, 1024)}
BIG_GEMM_SIZE, BIG_GEMM_CORES = 2048, 8
# The shapes models run, each with its weights as an initializer (prepacked by the backend, as a
# model's are): (name, op, M, K, N) for MatMul/Gemm; batched MatMul (batch, M, K, N); 1x1 and
# depthwise 3x3 Conv (channels, spatial).  A square ladder alone missed them: a skinny MatMul of a
# Whisper-like model reached 204 GFLOP/s against a 164.6 GFLOP/s square-ladder roof.
MODEL_SHAPES = {
    "full": (
        ("matmul", 128, 768, 3072),  # transformer FFN, 128 tokens
        ("matmul", 8, 1536, 384),  # skinny: few tokens through a projection
        ("gemm", 128, 768, 768),  # Gemm with bias (onnxruntime fuses MatMul + Add into it)
        ("batched", 12, 128, 64, 128),  # attention scores, 12 heads
        ("conv1x1", 256, 28),
        ("dwconv3x3", 256, 56),
    ),
    "quick": (("matmul", 8, 1536, 384), ("batched", 12, 128, 64, 128), ("conv1x1", 128, 28)),
}
GEMM_LOW_SIZES = {"full": (512, 1024), "quick": (512,)}  # float16 / int8 ladders
CONV_SHAPES = {"full": (256, 56), "quick": (128, 28)}  # (channels, spatial) of a 3×3 conv
STREAM_SIZES = {
    "full": tuple(32 * KIB * 2**i for i in range(14)),  # 32 KiB .. 256 MiB working sets
    "quick": (64 * KIB, MIB, 16 * MIB, 128 * MIB),
}
# Read-dominated probes (issue 33): a stream Add reads two arrays and writes one, while a decoder's
# matrix-vector Gemm reads its weights and writes a vector, and a CPU's reads skip the write-allocate
# a store costs, so a read-dominated kernel can beat a 2-read-1-write roof (a 256-wide MLP's fused Gemm
# read 124 % of it).  ``read-SIZE`` chains matrix-vector products v = v . W over one float32 weight
# W of SIZE bytes (an initializer, as a model's weights are); a memory level's roof is the best of the
# stream and read figures at its sizes (:func:`best_per_size`): the best the hardware sustains for
# either kind of traffic, so no kernel of either kind beats it.
# Read probes run only at working sets a cache holds, where they can win: in DRAM the stream is the
# faster of the two.  Measured quiet on the 2-core EPYC (onnxruntime 1.32): read-128MiB 22.1 against
# stream-128MiB 27.6 GB/s at one thread, 42.8 against 53.0 at two, and under load 3.6-4.2 against
# 5.2-6.3; GEMV layers with their own 1-4 MiB weights in a 192 MiB model read 14-22 GB/s at one
# thread.  A 128 MiB weight cost 1-2 s a session to build and load, in up to 6 agreement windows.
# The quick plan (tests, smoke runs) reads at 1 MiB only.
READ_SIZES = {
    "full": (256 * KIB, MIB, 4 * MIB, 16 * MIB),
    "quick": (MIB,),
}
READ_PREFIX = "read-"
# timed budget of one probe session (after warm-up), by plan and probe kind
SECONDS_PER_PROBE = {"full": {"compute": 0.2, "memory": 0.15}, "quick": {"compute": 0.08, "memory": 0.05}}
MIN_SAMPLES, MAX_SAMPLES = 5, 20000
# Steady roofs (:func:`steady_sessions`): sessions of a roof probe further apart than STEADY_SPREAD
# get one more; still further apart than UNSTEADY_SPREAD (the guard's spread limit), the roof is
# unsteady.  A stream whose working set a cache holds must read >= LADDER_FLOOR x the DRAM roof;
# slower, it is measured again up to LADDER_RETRIES times.
STEADY_SPREAD, UNSTEADY_SPREAD = 0.10, 0.15
LADDER_FLOOR, LADDER_RETRIES = 0.9, 2
UNSTEADY_ROOF = "unsteady roof"  # how a calibration warning about such a roof begins
# A busy calibration is never the device's roof (:func:`agreed_sessions`): a roof-setting probe is
# measured in more windows (sessions) until its best two agree within WINDOW_AGREEMENT, at most
# AGREEMENT_WINDOWS in all; its figure keeps the windows within WINDOW_AGREEMENT of the best.  One
# that cannot agree is a NOT_CACHED warning, and such a calibration is not written to the cache.
WINDOW_AGREEMENT, AGREEMENT_WINDOWS = 0.05, 6
NOT_CACHED = "not cached"
STREAM_BYTES_PER_RUN = 8 * MIB  # chain stream nodes until one run moves at least this much
STREAM_MAX_CHAIN = 32
# Backends that fuse a chain of elementwise ops into one kernel: OpenVINO's CPU plugin makes the
# whole Add chain one snippets Subgraph that reads X and Z once and writes Y once, so the bytes
# counted per node overstated its L3 bandwidth 3x (195 GB/s against onnxruntime's 65 on 2 cores).
# Their stream chain alternates the tensors' view (a Reshape, free in both backends) between Adds,
# which the fusion does not cross: every Add runs as its own kernel (checked with 2026.4.1).  Both
# views are 2-D, [elements / 256, 256] and [elements / 512, 512]: OpenVINO's Add over a flat 1-D
# tensor ran 3-5x slower than over a 2-D view of it (4 MiB working set, 2 cores), so a flat view
# set a memory roof far below its models' kernels.
FUSING_BACKENDS = frozenset({"openvino"})
# Backends whose stream probes are timed by the plugin's own per-kernel counters, as its layer
# profile is: OpenVINO's ``infer()`` costs tens of µs around its kernels (a single 4 MiB Add: 40-51
# GB/s end to end, 55-68 by its counter, 2026.4.1 on 2 cores), so an end-to-end memory roof sat
# below the kernels it judges.  The counters keep whole microseconds: a probe whose kernels run
# under KERNEL_TIMED_MIN_SECONDS each (working sets up to about 1 MiB) is timed against its chain
# twice as long instead (:func:`marginal_seconds`: the difference drops infer()'s fixed cost).
KERNEL_TIMED_BACKENDS = frozenset({"openvino"})
KERNEL_TIMED_MIN_SECONDS = 20e-6
KERNEL_TIMED_BATCHES = 9  # profiled batches of a probe session; its figure is their median
MARGINAL_WINDOWS = 7  # windows of a marginal timing (:func:`marginal_seconds`); its figure is their median
# A GPU whose layers CUPTI times on the device (:meth:`Backend.device_kernel_times`) times its
# memory probes alike (``session.device_time``: CUPTI around the same timed runs, no profiler):
# host-timed, the recorded H200's 4-32 MiB streams took 7.0-7.5 µs a kernel, its launch floor, so
# the "L2" roof (4.45 TB/s) was a launch rate the device-timed layers beat.  Its dispatch floor
# (:func:`device_floor`) is the least device time of a kernel over DEVICE_FLOOR_WINDOWS profiles.
DEVICE_FLOOR_WINDOWS = 3
STREAM_VIEW_WIDTH = 256  # the views are [elements / 256, 256] and [elements / 512, 512]

# The GPU plan: buffers bound on the device (the backend's io_binding), GEMMs up to 8192, streams
# from L2-resident working sets to 1 GiB.  A run's fixed cost (launch, stream sync: tens of µs) is
# amortized by chaining stream nodes until one run moves 16 GiB (a 1 GiB working set: 16 nodes).
GPU_GEMM_SIZES = {"full": (1024, 2048, 4096, 8192), "quick": (4096, 8192)}
GPU_GEMM_LOW_SIZES = {"full": (2048, 4096, 8192), "quick": (8192,)}  # float16 / bfloat16 / int8
GPU_STREAM_SIZES = {
    "full": tuple(4 * MIB * 2**i for i in range(9)),  # 4 MiB .. 1 GiB
    "quick": (16 * MIB, 256 * MIB, GIB),
}
GPU_STREAM_BYTES_PER_RUN = 16 * GIB

# The dispatch floor (:func:`dispatch_floor`): the least time one kernel takes through the backend.
# A chain of DISPATCH_CHAIN of the cheapest kernels (a Relu of one float; on a fusing backend Adds
# of DISPATCH_ELEMENTS floats over alternating views, which its fusion does not cross) is timed
# against a chain of one, interleaved, in DISPATCH_WINDOWS windows of DISPATCH_SAMPLES runs each;
# a window's marginal time per kernel is the difference of the two medians over the extra kernels,
# and the floor is the least window's (the quietest: a neighbour only ever slows a window).
# Measured here (onnxruntime 1.32, 2-core EPYC, quiet): 0.2-0.4 µs a Relu; OpenVINO 2026.4 runs the
# 32 Adds as 32 Subgraph kernels (its counters), 0.3-1.2 µs each.
DISPATCH_CHAIN = 32
DISPATCH_ELEMENTS = 2 * STREAM_VIEW_WIDTH
DISPATCH_WINDOWS, DISPATCH_SAMPLES = 7, 200
DISPATCH_PROBE = f"dispatch-chain-{DISPATCH_CHAIN}"
DISPATCH_MODELS = ("dispatch_chain_1", f"dispatch_chain_{DISPATCH_CHAIN}")  # the chains' graph names


@dataclass(frozen=True)
class ProbeSpec:
    """A probe to run: its name, what it measures, and how to build its model and inputs."""

    name: str
    kind: str  # "compute" | "memory"
    dtype: str
    size: int  # GEMM n, conv channels, or working-set bytes
    work: float  # FLOPs (compute) or bytes moved (memory) per run
    build: Builder
    optional: bool = False  # a backend without this kernel skips it instead of failing
    # the same probe with its chain twice as long (a memory probe): on a backend whose run has a
    # fixed cost (:func:`marginal_seconds`), the difference of the two times is the chain's own
    longer: Builder | None = None


def plan_probes(
    dtypes: tuple[str, ...], plan: str = "full", cores: int = 0, separate_streams: bool = False
) -> list[ProbeSpec]:
    """The probes of ``plan`` for ``dtypes``: GEMM ladders, model-shaped probes, a conv, streams.

    ``cores``: the threads the backend runs (2048 joins the square ladder from 8 on).
    ``separate_streams``: the backend fuses a chain of elementwise ops into one kernel
    (:data:`FUSING_BACKENDS`), so the stream chain puts a view between its Adds.
    """
    specs: list[ProbeSpec] = []
    sizes = GEMM_SIZES[plan] + ((BIG_GEMM_SIZE,) if plan == "full" and cores >= BIG_GEMM_CORES else ())
    for n in sizes:
        specs.append(ProbeSpec(f"gemm-{n}-float32", "compute", "float32", n, 2.0 * n**3, _gemm(n, "float32")))
    specs.extend(_shaped(shape) for shape in MODEL_SHAPES[plan])
    channels, spatial = CONV_SHAPES[plan]
    conv_flops = 2.0 * channels * channels * 9 * spatial * spatial
    specs.append(
        ProbeSpec(
            f"conv3x3-{channels}x{spatial}-float32",
            "compute",
            "float32",
            channels,
            conv_flops,
            _conv(channels, spatial),
        )
    )
    if "float16" in dtypes:
        for n in GEMM_LOW_SIZES[plan]:
            specs.append(
                ProbeSpec(
                    f"gemm-{n}-float16",
                    "compute",
                    "float16",
                    n,
                    2.0 * n**3,
                    _gemm(n, "float16"),
                    optional=True,
                )
            )
    if "int8" in dtypes:
        for n in GEMM_LOW_SIZES[plan]:
            specs.append(
                ProbeSpec(
                    f"qlinearmatmul-{n}-int8",
                    "compute",
                    "int8",
                    n,
                    2.0 * n**3,
                    _qlinear_matmul(n),
                    optional=True,
                )
            )
            specs.append(
                ProbeSpec(
                    f"matmulinteger-{n}-int8",
                    "compute",
                    "int8",
                    n,
                    2.0 * n**3,
                    _matmul_integer(n),
                    optional=True,
                )
            )
    for working_set in STREAM_SIZES[plan]:
        nbytes, chain, build = _stream(working_set, separate=separate_streams)
        longer = _stream(working_set, separate=separate_streams, chain=2 * chain)[2]
        name = f"stream-{size_label(working_set)}"
        specs.append(ProbeSpec(name, "memory", "float32", working_set, nbytes, build, longer=longer))
    for working_set in READ_SIZES[plan]:
        nbytes, chain, build = _read(working_set)
        longer = _read(working_set, chain=2 * chain)[2]
        name = f"{READ_PREFIX}{size_label(working_set)}"
        specs.append(ProbeSpec(name, "memory", "float32", working_set, nbytes, build, longer=longer))
    return specs


def plan_gpu_probes(dtypes: tuple[str, ...], plan: str = "full") -> list[ProbeSpec]:
    """The GPU plan of ``plan`` for ``dtypes``: GEMM ladders per precision and the stream ladder.

    float32 runs as the backend runs it (TF32 on Ampere+ under the CUDA EP's default; the
    roofline says which); float16, bfloat16 and int8 (``MatMulInteger`` int8 x int8 -> int32) are
    optional: a backend without the kernel skips them.  The stream ladder starts inside any
    current GPU's L2 (4-32 MiB: the L2-resident level) and ends at 1 GiB (DRAM).
    """
    specs: list[ProbeSpec] = []
    for n in GPU_GEMM_SIZES[plan]:
        specs.append(ProbeSpec(f"gemm-{n}-float32", "compute", "float32", n, 2.0 * n**3, _gemm(n, "float32")))
    for dtype in ("float16", "bfloat16"):
        if dtype in dtypes:
            for n in GPU_GEMM_LOW_SIZES[plan]:
                build = _gemm(n, dtype)
                specs.append(
                    ProbeSpec(f"gemm-{n}-{dtype}", "compute", dtype, n, 2.0 * n**3, build, optional=True)
                )
    if "int8" in dtypes:
        for n in GPU_GEMM_LOW_SIZES[plan]:
            build = _matmul_integer(n, signed=True)
            specs.append(
                ProbeSpec(f"matmulinteger-{n}-int8", "compute", "int8", n, 2.0 * n**3, build, optional=True)
            )
    for working_set in GPU_STREAM_SIZES[plan]:
        nbytes, _, build = _stream(working_set, GPU_STREAM_BYTES_PER_RUN)
        specs.append(
            ProbeSpec(f"stream-{size_label(working_set)}", "memory", "float32", working_set, nbytes, build)
        )
    return specs


def spot_check_specs(
    specs: list[ProbeSpec], probes: list[Probe], last_level_cache: int = 0
) -> list[ProbeSpec]:
    """One or two cheap probes that re-check a cached roofline: a mid-size GEMM and a DRAM stream.

    The float32 GEMM whose cached time per run is nearest 3 ms among those up to n = 4096 (mid-size:
    cheap to build and repeat; a GPU's 8192 would spend the budget making its inputs) and the
    smallest stream probe in the DRAM range (:func:`dram_bandwidth`'s points): both must be in
    ``probes`` so the spot figures have cached ones to compare with.
    """
    by_name = {p.name: p for p in probes}
    gemms = [
        p
        for p in probes
        if p.kind == "compute"
        and p.name.startswith("gemm-")
        and p.name.endswith("-float32")  # the float32 plan's, whatever precision it ran in
        and p.size <= 4096
    ]
    chosen: set[str] = set()
    if gemms:
        chosen.add(min(gemms, key=lambda p: abs(math.log(max(p.seconds, 1e-9) / 3e-3))).name)
    dram = dram_points([p for p in probes if p.kind == "memory"], last_level_cache)
    if dram:
        chosen.add(min(dram, key=lambda p: p.size).name)
    return [spec for spec in specs if spec.name in chosen and spec.name in by_name]


def run_probe(backend: Backend, spec: ProbeSpec, seconds: float) -> Probe:
    """Open the probe's model on ``backend``, time it for about ``seconds``, return its figure.

    Timing is end to end (``session.time``), not the profiler's kernel times, on purpose (memory
    probes of :data:`KERNEL_TIMED_BACKENDS` aside: :func:`kernel_seconds`, else
    :func:`marginal_seconds`; those of a GPU whose layers CUPTI times: ``session.device_time``):
    measured here (onnxruntime 1.32, 2-core EPYC) a 32 KiB Add's profiled kernel time is 3 µs at the
    profiler's 1 µs resolution (11 GB/s, mostly quantization and the profiler's own cost), and the
    profiler is per-backend while ``time`` is the one measurement every backend offers.  The e2e
    time of a single-op model includes the launch overhead (~5 µs per run on onnxruntime CPU): it
    is < 2 % for the GEMM/conv probes (≥ 0.3 ms per run) and the stream probes amortize it by
    chaining nodes until one run moves ≥ 8 MiB (a 32 KiB Add alone reads 8 GB/s, chained 50 GB/s).

    The figure is the median of one session's samples (a sustained rate, not a lucky minimum);
    :func:`~pytest_roofline.roofline.calibrate.calibrate` runs the probes that set the roofs in a second
    session (:func:`confirmation_specs`) and keeps the better session.
    """
    from pytest_roofline.model import ModelSpec

    model, inputs = spec.build()
    model.graph.name = spec.name  # what the backend (and its errors) call the model
    with backend.open(ModelSpec.create(model), inputs) as session:
        dtype = ran_dtype(spec, session.compute_precision())
        if spec.kind == "memory" and dtype != spec.dtype:  # its figure would be dropped: not timed
            raise OtherPrecision(spec.name, dtype)
        session.time(1)  # warm-up: first run allocates the arena, packs weights, pages memory in
        estimate = min(session.time(2))
        count = max(MIN_SAMPLES, min(MAX_SAMPLES, int(seconds / max(estimate, 1e-7))))
        # a kernel's time: the run's share of one working set (the chain's length is work / size)
        kernel_estimate = estimate * spec.size / spec.work if spec.work else 0.0
        device_timed = spec.kind == "memory" and backend.device_kernel_times()
        kernel_timed = (
            spec.kind == "memory"
            and backend.name in KERNEL_TIMED_BACKENDS
            and kernel_estimate >= KERNEL_TIMED_MIN_SECONDS
        )
        samples = (
            (device_timed and session.device_time(count))
            or (kernel_timed and kernel_seconds(session, count))
            or marginal_seconds(backend, spec, session, count)
            or session.time(count)
        )
    median = statistics.median(samples)
    return Probe(spec.name, spec.kind, dtype, spec.size, spec.work / median, median)


class OtherPrecision(Exception):
    """A memory probe the backend runs in another precision than its model's (OpenVINO's bf16
    MatMuls under a ``read-SIZE`` probe): its bytes are not the ones counted, so it is no memory
    roof of its dtype, and :func:`run_probe` raises this before timing it."""

    def __init__(self, name: str, dtype: str) -> None:
        super().__init__(f"{name} runs in {dtype}")
        self.name, self.dtype = name, dtype


def ran_dtype(spec: ProbeSpec, precision: str) -> str:
    """The dtype a probe's figure is a roof of: the precision the backend says it computed in
    (:meth:`~pytest_roofline.backends.base.BackendSession.compute_precision`) where that is another
    float type than the probe's model (OpenVINO 2026.4's CPU plugin runs a float32 MatMul and Conv
    in bf16 on this project's AVX512-BF16 EPYC: its figures are bf16 figures), else the spec's.  A
    read probe's MatMul too: weights kept in bf16 move half the bytes counted, so such a figure is no
    float32 memory roof (:class:`OtherPrecision`: not timed)."""
    ran = _FLOAT_PRECISIONS.get(precision)
    weighted = spec.kind == "compute" or spec.name.startswith(READ_PREFIX)  # a read probe's weights too
    if not weighted or ran is None or spec.dtype not in _FLOAT_PRECISIONS.values():
        return spec.dtype
    return ran


@dataclass(frozen=True)
class DispatchFloor:
    """A dispatch-floor measurement: the floor (seconds a kernel), its windows' marginal times and
    the probe that records it in a calibration."""

    seconds: float
    windows: tuple[
        float, ...
    ]  # marginal seconds a kernel, one per window (<= 0: the window was lost in noise)

    @property
    def spread(self) -> float:
        """How far the best window is from the next best: 1 - best / second best (0.0 with one)."""
        positive = sorted(w for w in self.windows if w > 0)
        return 1.0 - positive[0] / positive[1] if len(positive) > 1 else 0.0

    def probe(self) -> Probe:
        """The calibration's record of it (value in kernels per second)."""
        rate = 1.0 / self.seconds if self.seconds > 0 else 0.0
        return Probe(DISPATCH_PROBE, "dispatch", "float32", DISPATCH_CHAIN, rate, self.seconds)


def dispatch_floor(
    backend: Backend,
    separate: bool = False,
    windows: int = DISPATCH_WINDOWS,
    samples: int = DISPATCH_SAMPLES,
) -> DispatchFloor:
    """The least time one kernel takes through ``backend`` at its options (see :data:`DISPATCH_CHAIN`).

    Both chains stay open; each window times the chain of one and the long chain ``samples`` runs
    each, back to back, so a window's difference of medians is the marginal cost of
    ``DISPATCH_CHAIN - 1`` kernels at that moment.  ``separate``: the backend fuses elementwise
    chains (:data:`FUSING_BACKENDS`).  A floor of 0.0 means no window resolved it (a backend whose
    kernels cost nothing measurable, or noise larger than the chain).
    """
    from pytest_roofline.model import ModelSpec

    opened = []
    try:
        for kernels, name in zip((1, DISPATCH_CHAIN), DISPATCH_MODELS, strict=True):
            model, inputs = dispatch_chain(kernels, separate)()
            model.graph.name = name
            session = backend.open(ModelSpec.create(model), inputs)
            opened.append(session)
            session.time(5)  # warm-up
        marginals = []
        for _ in range(windows):
            short, long = (statistics.median(session.time(samples)) for session in opened)
            marginals.append((long - short) / (DISPATCH_CHAIN - 1))
    finally:
        for session in opened:
            session.close()
    positive = [m for m in marginals if m > 0]
    return DispatchFloor(min(positive) if positive else 0.0, tuple(marginals))


def device_floor(backend: Backend, windows: int = DEVICE_FLOOR_WINDOWS, runs: int = 20) -> DispatchFloor:
    """The dispatch floor of a backend whose kernels are timed on the device (CUPTI on a GPU): the
    least device time of one kernel of the chain of :data:`DISPATCH_CHAIN` Relus, per profiled
    window of ``runs`` runs, and the least window's.  Its layers are device times, so their floor
    is a kernel's least device time, not the launch cost a host-timed chain measures (the
    recorded H200: 0.93 µs on the device against 6.96 µs a launch)."""
    from pytest_roofline.model import ModelSpec

    model, inputs = dispatch_chain(DISPATCH_CHAIN, False)()
    model.graph.name = DISPATCH_MODELS[1]
    least = []
    with backend.open(ModelSpec.create(model), inputs) as session:
        for _ in range(windows):
            times = [t for k in session.profile(runs).kernels for t in k.times if t > 0]
            least.append(min(times, default=0.0))
    positive = [t for t in least if t > 0]
    return DispatchFloor(min(positive) if positive else 0.0, tuple(least))


def trace_launch_floor(events: Sequence[Mapping[str, Any]]) -> float:
    """The least host time (seconds) an onnxruntime profile spent around one node's kernel launch.

    ``events``: the profiler's JSON (its ``Node`` ``*_kernel_time`` events).  Each node's median over
    the runs after the first (cuDNN autotunes in it), then the least node; 0.0 without node events.
    On the CUDA EP these are host times (launch, not execution): the recorded H200 traces
    (onnxruntime 1.31, profiler on) give 7.0 µs (an encoder's Reshape) and 12.5 µs (ResNet-50's
    Flatten), an upper bound of the launch floor that ``benchmarks/gpu_check.py`` step 5 measures.
    """
    runs: dict[str, list[float]] = {}
    for event in events:
        if event.get("cat") == "Node" and str(event.get("name", "")).endswith("_kernel_time"):
            runs.setdefault(str(event["name"]), []).append(float(event["dur"]) * 1e-6)
    return min((statistics.median(times[1:] or times) for times in runs.values()), default=0.0)


def dispatch_chain(kernels: int, separate: bool) -> Builder:
    """``kernels`` of the cheapest kernel in a chain: Relu of one float, or (``separate``) Adds of
    :data:`DISPATCH_ELEMENTS` floats over alternating 2-D views (:func:`_stream`'s chain)."""
    if separate:
        working_set = 3 * 4 * DISPATCH_ELEMENTS
        return _stream(working_set, working_set * kernels, separate=True)[2]

    def build() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        import numpy as np
        from onnx import helper

        names = [*(f"t{i}" for i in range(kernels - 1)), "Y"]
        nodes = [helper.make_node("Relu", [x], [y]) for x, y in zip(["X", *names[:-1]], names, strict=True)]
        model = _model(
            nodes,
            [helper.make_tensor_value_info("X", _elem("float32"), [1])],
            [helper.make_tensor_value_info("Y", _elem("float32"), [1])],
            name=f"dispatch_{kernels}",
        )
        return model, {"X": np.ones(1, np.float32)}

    return build


def kernel_seconds(session: Any, count: int) -> list[float]:
    """Per-run kernel time of ``count`` profiled runs, by the backend's kernel counters, in up to
    :data:`KERNEL_TIMED_BATCHES` batches (one sample each: its mean); [] when a kernel runs too
    briefly for the counters' whole microseconds (:data:`KERNEL_TIMED_MIN_SECONDS`).  The
    profiling compilation warms itself up (its first inference is no part of the counters)."""
    batches = max(1, min(KERNEL_TIMED_BATCHES, count))
    per_batch = max(1, count // batches)
    samples = []
    for _ in range(batches):
        kernels = session.profile(per_batch).kernels
        times = [k.times[0] for k in kernels if k.kind == "compute" and k.times]
        if not times or min(times) < KERNEL_TIMED_MIN_SECONDS:
            return []
        samples.append(sum(k.times[0] for k in kernels if k.times))  # layout kernels too: they ran
    return samples


def marginal_seconds(backend: Backend, spec: ProbeSpec, session: Any, count: int) -> list[float]:
    """Per-run time of a memory probe's chain without the run's fixed cost: the chain twice as long
    (``spec.longer``) timed against ``session``'s, interleaved in :data:`MARGINAL_WINDOWS` windows,
    one sample a window (the difference of the two medians: the extra chain moves ``spec.work``).

    Only on :data:`KERNEL_TIMED_BACKENDS` where the kernel counters cannot time the probe (kernels
    under :data:`KERNEL_TIMED_MIN_SECONDS`): OpenVINO's ``infer()`` costs tens of µs around a run, so
    its L2/L3-sized streams read 11-35 GB/s end to end.  What stays in the difference is each
    kernel's own time and its dispatch, as a chain of layers pays it.  [] elsewhere, or when no
    window resolved a positive difference (the caller then times end to end)."""
    if spec.kind != "memory" or spec.longer is None or backend.name not in KERNEL_TIMED_BACKENDS:
        return []
    from pytest_roofline.model import ModelSpec

    model, inputs = spec.longer()
    model.graph.name = f"{spec.name}-x2"
    per_window = max(MIN_SAMPLES, count // MARGINAL_WINDOWS)
    marginals = []
    with backend.open(ModelSpec.create(model), inputs) as longer:
        longer.time(1)  # warm-up
        for _ in range(MARGINAL_WINDOWS):
            short = statistics.median(session.time(per_window))
            marginals.append(statistics.median(longer.time(per_window)) - short)
    return [m for m in marginals if m > 0]


# --- roofs from probe figures -------------------------------------------------------------------


def best_per_size(points: Sequence[Probe]) -> list[Probe]:
    """The memory probes, one per working set: the best of its kinds of traffic (a stream's and a
    read probe's figure at one size), smallest working set first."""
    best: dict[int, Probe] = {}
    for point in points:
        if point.kind == "memory" and (point.size not in best or point.value > best[point.size].value):
            best[point.size] = point
    return [best[size] for size in sorted(best)]


def system_caches() -> list[tuple[str, int]]:
    """Data/unified cache levels of this host as (name, bytes per instance), smallest first."""
    caches: dict[str, int] = {}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in sorted(root.glob("index*")):
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = _parse_size((index / "size").read_text().strip())
            if size:
                caches[f"L{(index / 'level').read_text().strip()}"] = size
    except OSError:
        return []
    return sorted(caches.items(), key=lambda item: item[1])


def cache_capacities(threads: int) -> dict[str, int]:
    """Bytes each data cache level holds for ``threads`` threads on distinct cores, from sysfs.

    A private cache (one per core, e.g. L2) counts once per thread up to the instances there are;
    a shared one (L3) once per instance the threads span.  {} where sysfs has no cache data.
    """
    capacities: dict[str, int] = {}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        online = max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        online = os.cpu_count() or 1
    used = max(1, min(threads or online, online))
    try:
        for index in sorted(root.glob("index*")):
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = _parse_size((index / "size").read_text().strip())
            sharing = max(1, _cpu_count((index / "shared_cpu_list").read_text().strip()))
            name = f"L{(index / 'level').read_text().strip()}"
            instances = min(math.ceil(used / sharing), math.ceil(online / sharing))
            capacities[name] = max(capacities.get(name, 0), size * instances)
    except OSError:
        return {}
    return capacities


def _cpu_count(cpu_list: str) -> int:
    """CPUs in a sysfs list such as ``0-3,8``."""
    count = 0
    for part in cpu_list.split(","):
        low, _, high = part.partition("-")
        try:
            count += int(high) - int(low) + 1 if high else 1
        except ValueError:
            continue
    return count


def cache_levels(
    points: list[Probe],
    caches: list[tuple[str, int]] | None = None,
    drop: float = 0.7,
    dram: float | None = None,
) -> tuple[CacheLevel, ...]:
    """Plateaus of the bandwidth-vs-working-set curve as cache levels, the last one DRAM.

    DRAM is the points :func:`dram_bandwidth` uses (working sets ≥ 4 × the last-level cache, or
    the two largest), with bandwidth ``dram`` when given.  The points that fit in the last-level
    cache (all the others when no cache is known) are walked from the smallest working set up; a
    new level starts where bandwidth falls below ``drop`` × the best of the current level (a rise
    is overhead amortizing, not a new level).  A level's bandwidth is its best point (each point
    is itself a sustained median), its size the largest working set it holds; it is named after
    the smallest host cache that holds that working set (``caches``, from sysfs) when known.
    Points between the last-level cache and DRAM sizes are the transition and form no level.
    """
    ordered = best_per_size(points)
    if not ordered:
        return ()
    last_level = caches[-1][1] if caches else 0
    beyond = dram_points(ordered, last_level)
    cached = [p for p in ordered if p not in beyond and (not last_level or p.size <= last_level)]
    segments: list[list[Probe]] = []
    for point in cached:
        if segments and point.value >= drop * max(p.value for p in segments[-1]):
            segments[-1].append(point)
        else:
            segments.append([point])
    levels: list[CacheLevel] = []
    for index, segment in enumerate(segments):
        bandwidth = max(p.value for p in segment)
        size = max(p.size for p in segment)
        name = _cache_holding(size, caches) if caches else f"L{index + 1}"
        if levels and levels[-1].name == name:  # two plateaus near one cache: keep one level
            previous = levels.pop()
            bandwidth, size = max(bandwidth, previous.bandwidth), max(size, previous.size)
        levels.append(CacheLevel(name, size, bandwidth))
    levels.append(CacheLevel("DRAM", 0, max(p.value for p in beyond) if dram is None else dram))
    return tuple(levels)


def dram_bandwidth(points: list[Probe], last_level_cache: int = 0) -> float:
    """DRAM bandwidth: the best stream figure among working sets ≥ 4 × the last-level cache.

    Without a known cache size (or no probe that large) the two largest working sets count.
    """
    dram = dram_points(points, last_level_cache)
    if not dram:
        raise ValueError("no memory probe")
    return max(p.value for p in dram)


def confirmation_specs(
    specs: list[ProbeSpec],
    probes: list[Probe],
    last_level_cache: int = 0,
    caches: list[tuple[str, int]] | None = None,
) -> list[ProbeSpec]:
    """The specs worth a second session: the best compute probe of the float32 plan per precision
    it ran in (float32; bfloat16 where the backend ran some in bf16, :func:`ran_dtype`), the DRAM
    probes, and with ``caches`` the probe that sets each cache level (:func:`level_setters`)."""
    planned = {s.name for s in specs if s.dtype == "float32"}
    fp32 = [p for p in probes if p.kind == "compute" and p.name in planned]
    names = {
        max((p for p in fp32 if p.dtype == d), key=lambda p: p.value).name for d in {p.dtype for p in fp32}
    }
    names |= {p.name for p in dram_points(probes, last_level_cache)}
    if caches is not None:
        names |= set(level_setters(probes, caches))
    return [spec for spec in specs if spec.name in names]


def level_setters(points: list[Probe], caches: list[tuple[str, int]]) -> list[str]:
    """The memory probes whose figure is a cache level's roof (:func:`cache_levels`): one window each
    set it, and one busy window moved it.  Issue 33, measured quiet against one busy process beside
    a one-thread OpenVINO calibration (its own core, so cached): the L3 roof read 0.888 of the quiet
    one, and two quiet calibrations minutes apart 96.3 and 106.5 GB/s."""
    best = best_per_size(points)
    beyond = {p.name for p in dram_points(best, caches[-1][1] if caches else 0)}
    setters = []
    for level in cache_levels(points, caches):
        setter = next((p for p in best if p.value == level.bandwidth and p.name not in beyond), None)
        if setter is not None and level.name != "DRAM":
            setters.append(setter.name)
    return setters


def combine_sessions(*sessions: Probe, disturbed: float = 1.0 - WINDOW_AGREEMENT) -> Probe:
    """One probe's figure from its sessions' medians (two, or more after :func:`steady_sessions`).

    A session slower than the best by more than :data:`WINDOW_AGREEMENT` (below ``disturbed`` ×
    it) was disturbed and is dropped; the times of the rest are averaged.  Keeping only the best
    of close figures would select lucky sessions: measured here, best-of-two made the float32 peak
    spread 6.5 % over five fresh calibrations.
    """
    best = max(sessions, key=lambda p: p.value)
    kept = [p for p in sessions if p.value >= disturbed * best.value]
    seconds = sum(p.seconds for p in kept) / len(kept)  # the mean time; the rate follows from the same work
    if seconds <= 0 or len(kept) == 1:
        return best
    return replace(best, value=best.value * best.seconds / seconds, seconds=seconds)


def session_spread(sessions: Sequence[Probe]) -> float:
    """How far a probe's best session is from the nearest other one: 1 - second best / best.

    0.0 for a single session; for two sessions it is their relative difference.
    """
    values = sorted((p.value for p in sessions), reverse=True)
    return 1.0 - values[1] / values[0] if len(values) > 1 and values[0] > 0 else 0.0


def agreed_sessions(
    sessions: Mapping[str, list[Probe]],
    names: Sequence[str],
    remeasure: Callable[[str], Probe | None],
    windows: int = AGREEMENT_WINDOWS,
    one_roof: Collection[str] = (),
    loads: Mapping[str, Sequence[MachineLoad]] | None = None,
) -> tuple[dict[str, list[Probe]], tuple[str, ...]]:
    """More windows of the roof-setting probes ``names`` until each one's best two agree within
    :data:`WINDOW_AGREEMENT`; (the sessions with the new ones, ``not cached`` warnings).

    A neighbour slows a window, never speeds one: when the best two of several windows agree, the
    roof is the device's, not the moment's.  ``remeasure(name)`` runs one more window (None: it
    could not).  A probe still apart after ``windows`` windows is a :data:`NOT_CACHED` warning:
    the calibration says why its roofs may be low and is not cached.

    Only where needed: ``one_roof`` names probes that set one roof together, the best of them (the
    DRAM probes); they are settled fastest first, and one whose best window reads more than
    :data:`WINDOW_AGREEMENT` under a roof already agreed cannot set it and gets no more windows (a
    quiet 2-thread calibration here: stream-256MiB's windows read 36-47 GB/s, 13 % apart, under
    stream-128MiB's 53: four more windows and a ``not cached`` warning for a probe that set nothing).

    The warning says what was seen, not why: the windows' spread and, from ``loads`` (each probe's
    windows' machine load, as the calibration records them), the CPU load in them.  Quiet here
    (others at ~1 % of the CPUs) a DRAM stream's windows still read 5-10 % apart: this VM's DRAM
    moves with memory traffic the CPU counters cannot see, so "the machine was busy" was a guess.
    """
    agreed = {name: list(runs) for name, runs in sessions.items()}
    warnings: list[str] = []
    shared_roof = 0.0  # the best agreed figure of a ``one_roof`` probe so far

    def best(name: str) -> float:
        return max((p.value for p in agreed.get(name) or ()), default=0.0)

    for name in sorted(names, key=best, reverse=True):
        runs = agreed.get(name)
        if not runs:
            continue
        shared = name in one_roof
        if shared and best(name) < (1.0 - WINDOW_AGREEMENT) * shared_roof:
            continue  # below the roof another probe set: its windows cannot move it
        while len(runs) < windows and session_spread(runs) > WINDOW_AGREEMENT:
            again = remeasure(name)
            if again is None:
                break
            runs.append(again)
        if len(runs) > 1 and session_spread(runs) > WINDOW_AGREEMENT:
            warnings.append(
                f"{NOT_CACHED}: {name}'s best two of {len(runs)} windows read {session_spread(runs):.0%} "
                f"apart (a roof needs {WINDOW_AGREEMENT:.0%}; {windows_load((loads or {}).get(name, ()))})"
            )
        elif shared:
            shared_roof = max(shared_roof, best(name))
    return agreed, tuple(warnings)


def windows_load(windows: Sequence[MachineLoad]) -> str:
    """What the CPU counters saw over a probe's windows, in words: ``in its 6 windows other
    processes used 0-2% of the 2 CPUs, steal up to 0.1%`` (or that no load was recorded)."""
    seen = [window for window in windows if window.available]
    if not seen:
        return "no CPU load recorded in its windows"
    low, high = min(w.other for w in seen), max(w.other for w in seen)
    others = f"{low:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low:.0%}-{high:.0%}"
    return (
        f"in its {len(seen)} windows other processes used {others} of the {seen[0].cores} CPUs, "
        f"steal up to {max(w.steal for w in seen):.1%}"
    )


def crowded(window: MachineLoad, threads: int = 0) -> bool:
    """Whether other work shared the CPUs a probe of ``threads`` threads ran on in ``window``: its
    load (:attr:`MachineLoad.disturbed`) less the share of the cores the probe left idle (0: it
    used them all).  A one-thread probe beside one busy process on two cores has a core of its own
    (no `measured under load` warning, no extra session); a two-thread probe shares.  Whether its
    roofs are the quiet device's is :func:`busy_windows`' question: on every CPU, they are not."""
    spare = max(0, window.cores - threads) / window.cores if threads > 0 and window.cores > 0 else 0.0
    return window.disturbed and replace(window, other=max(0.0, window.other - spare)).disturbed


def busy_windows(
    sessions: Mapping[str, Sequence[Probe]],
    loads: Mapping[str, Sequence[MachineLoad]],
    names: Sequence[str],
    caches: Sequence[tuple[str, int]] = (),
) -> tuple[str, ...]:
    """A :data:`NOT_CACHED` warning (one, or none) naming the roof probes ``names`` (and the roof
    each one measures, ``caches`` placing the memory levels) whose every kept
    window (within :data:`WINDOW_AGREEMENT` of the best, :func:`combine_sessions`'s) ran beside
    other work: other processes on any of the CPUs above the limit, or steal
    (:attr:`MachineLoad.disturbed`), whatever the probe's thread count.

    ``loads[name]`` holds each of ``sessions[name]``'s windows' machine load, in the same order.
    Windows that agree prove no quiet: one busy process beside a 2-thread probe on 2 cores stays in
    every window and slows each alike, so their best two agree and the roof is still the
    neighbour's.  Nor does a core of its own (issue 33): beside one busy process on 2 cores,
    calibrated alternately with quiet ones at one thread, the L3 and DRAM roofs read 0.90-1.10x
    the quiet mean (either way) and OpenVINO's dispatch floor 0.092-0.100 µs against quiet's
    0.123-0.194 (faster every time), while quiet calibrations minutes apart differ by 8-16 %
    themselves: no such roof can show it is within 5 % of what quiet would read.  A roof is the
    device's only when one of its kept windows was quiet."""
    busy: list[str] = []
    roofs: list[str] = []  # the roofs the busy probes measure, in the plan's order
    quiet: list[MachineLoad] = []  # every kept window of the busy probes
    for name in names:
        runs, windows = list(sessions.get(name, ())), list(loads.get(name, ()))
        if not runs or len(windows) != len(runs):
            continue
        best = max(p.value for p in runs)
        kept = [w for p, w in zip(runs, windows, strict=True) if p.value >= (1 - WINDOW_AGREEMENT) * best]
        if kept and all(w.disturbed for w in kept):
            roof = _roof_of(runs[0], sessions, list(caches))
            busy.append(f"{name} ({roof}): {len(kept)} of {len(runs)} windows kept")
            roofs += [roof] if roof not in roofs else []
            quiet.extend(kept)
    if not busy:
        return ()
    quietest = min(quiet, key=lambda w: w.other + w.steal)
    shown = "; ".join(busy[:3]) + (f"; {len(busy) - 3} more" if len(busy) > 3 else "")
    probes = "probe" if len(busy) == 1 else "probes"
    named = ", ".join(roofs)
    which = f"roof {named} cannot show it is" if len(roofs) == 1 else f"roofs {named} cannot show they are"
    return (
        f"{NOT_CACHED}: every kept window of {len(busy)} roof {probes} ran beside other work, so {which} "
        f"the quiet device's ({shown}; the quietest: {quietest.describe()}): a neighbour moves a roof "
        "either way",
    )


def ladder_outliers(points: list[Probe], last_level_cache: int, dram: float) -> list[Probe]:
    """Stream probes whose working set a cache holds but which read below :data:`LADDER_FLOOR` × ``dram``.

    A working set that fits a faster level (at most half the last-level cache; without a known
    cache, 1/8 of the smallest DRAM-range working set) cannot be slower than one that lives in
    DRAM: such a reading was disturbed (a clean-clone CI run read its L3 at 13.8 GB/s against the
    usual ~65 and DRAM's ~21, and a 1×1 conv then read 135 % of that roof).
    """
    memory = [p for p in points if p.kind == "memory"]
    beyond = dram_points(memory, last_level_cache)
    if not beyond:
        return []
    limit = last_level_cache / 2 if last_level_cache else min(p.size for p in beyond) / 8
    names = {p.name for p in beyond}
    return [p for p in memory if p.name not in names and p.size <= limit and p.value < LADDER_FLOOR * dram]


def steady_sessions(
    sessions: Mapping[str, list[Probe]],
    caches: list[tuple[str, int]],
    remeasure: Callable[[str], Probe | None],
    ladder: bool = True,
) -> tuple[dict[str, list[Probe]], tuple[str, ...]]:
    """Re-measure the probes whose figures are unsteady; (the sessions with the new ones, warnings).

    ``sessions`` holds every probe's session figures (the roof-setting ones have two or more);
    ``remeasure(name)`` runs one more session of a probe (None: it could not run).  Only what
    disagrees is measured again:

    1. a probe whose sessions are more than :data:`STEADY_SPREAD` apart (:func:`session_spread`)
       gets one more session;
    2. the ladder: a stream probe that reads below a DRAM-range one although a cache holds its
       working set (:func:`ladder_outliers`, against the DRAM roof after step 1) gets up to
       :data:`LADDER_RETRIES` more sessions, until it reads above the floor (with ``ladder``:
       the CPU plan; a GPU's small streams read below its HBM roof from launch overhead).

    What stays unsteady is a warning the calibration carries, ``unsteady roof (<roof>): ...``
    (:data:`UNSTEADY_ROOF`; ``<roof>`` is a dtype or a memory level), which the roofline guard
    names rather than silently judging layers against that roof.
    """
    steady = {name: list(runs) for name, runs in sessions.items() if runs}
    last_level = caches[-1][1] if caches else 0
    warnings: list[str] = []
    for name, runs in steady.items():
        if len(runs) > 1 and session_spread(runs) > STEADY_SPREAD:
            again = remeasure(name)
            if again is not None:
                runs.append(again)
            if session_spread(runs) > UNSTEADY_SPREAD:
                figures = ", ".join(_figure(p) for p in runs)
                warnings.append(
                    f"{UNSTEADY_ROOF} ({_roof_of(runs[0], steady, caches)}): {name} read {figures} in "
                    f"{len(runs)} sessions, {session_spread(runs):.0%} apart"
                )
    combined = [combine_sessions(*runs) for runs in steady.values()]
    memory = [p for p in combined if p.kind == "memory"]
    if not memory or not ladder:
        return steady, tuple(warnings)
    dram = dram_bandwidth(memory, last_level)
    for outlier in ladder_outliers(memory, last_level, dram):
        runs = steady[outlier.name]
        for _ in range(LADDER_RETRIES):
            again = remeasure(outlier.name)
            if again is not None:
                runs.append(again)
            if combine_sessions(*runs).value >= LADDER_FLOOR * dram:
                break
        else:
            level = _cache_holding(outlier.size, caches) if caches else "cache"
            warnings.append(
                f"{UNSTEADY_ROOF} ({level}): {outlier.name} read {_figure(combine_sessions(*runs))} "
                f"in {len(runs)} sessions, below DRAM's {dram / 1e9:.1f} GB/s although the {level} "
                "holds its working set"
            )
    return steady, tuple(warnings)


def _roof_of(probe: Probe, sessions: Mapping[str, Sequence[Probe]], caches: list[tuple[str, int]]) -> str:
    """The roof a probe sets: its dtype (compute), ``DRAM``, the cache level holding it, or the
    dispatch floor."""
    if probe.kind == "compute":
        return probe.dtype
    if probe.kind == "dispatch":
        return "dispatch floor"
    memory = [runs[0] for runs in sessions.values() if runs and runs[0].kind == "memory"]
    last_level = caches[-1][1] if caches else 0
    if probe.name in {p.name for p in dram_points(memory, last_level)}:
        return "DRAM"
    return _cache_holding(probe.size, caches) if caches else "cache"


def _figure(probe: Probe) -> str:
    unit = "GB/s" if probe.kind == "memory" else "GOP/s" if probe.dtype == "int8" else "GFLOP/s"
    return f"{probe.value / 1e9:.1f} {unit}"


def dram_points(points: list[Probe], last_level_cache: int) -> list[Probe]:
    """The memory probes that measure DRAM: working sets >= 4 x the last-level cache, else the 2 largest."""
    ordered = sorted((p for p in points if p.kind == "memory"), key=lambda p: p.size)
    beyond = [p for p in ordered if last_level_cache and p.size >= 4 * last_level_cache]
    largest = sorted({p.size for p in ordered})[-2:]  # the two largest working sets, every kind at them
    return beyond or [p for p in ordered if p.size in largest]


def clock_hz(measure: bool = False) -> float:
    """The CPU's clock for the theoretical peak: the maximum boost clock where it can be known.

    cpufreq's ``cpuinfo_max_freq`` when present; else, with ``measure``, the larger of the measured
    clock (:func:`measured_clock_hz`) and the largest ``cpu MHz``; else that ``cpu MHz``.  Under a
    hypervisor ``cpu MHz`` is the nominal clock (this project's EPYC VMs: 2445 MHz) while the cores
    boost higher (measured 3.18 GHz on a busy host), and there is no cpufreq.
    """
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()
        return float(text.strip()) * 1e3
    except (OSError, ValueError):
        pass
    nominal = _cpuinfo_mhz()
    return max(nominal, measured_clock_hz()) if measure else nominal


# x86-64 code of ``uint64 f(uint64 n)``: n iterations of 8 dependent ``add rax, 1`` (1 cycle each
# on every x86-64 core since the P6) and a ``dec rcx; jnz`` that runs beside them: 8 cycles each.
_CLOCK_LOOP = bytes.fromhex("4889f931c0" + "4883c001" * 8 + "48ffc9" + "75db" + "c3")
_CLOCK_CYCLES = 8
CLOCK_ITERATIONS, CLOCK_SAMPLES = 200_000, 60  # ~0.5 ms a sample, ~40 ms in all


def measured_clock_hz() -> float:
    """The core's clock now, in Hz, from a chain of dependent integer adds; 0.0 where it cannot run.

    numpy cannot time a dependent add chain (its per-call cost is ~1 µs, 3000 cycles), and
    ``cpu MHz`` under a hypervisor is the nominal clock, so the loop is 15 bytes of x86-64 machine
    code in an executable page called through ctypes: 1.6 M cycles per sample, the fastest of
    :data:`CLOCK_SAMPLES` samples (a sample the scheduler interrupts reads slower, never faster).
    Linux on x86-64 only; elsewhere, or where the page cannot be made executable, 0.0.
    """
    import ctypes
    import mmap
    import platform
    import sys
    import time

    if not sys.platform.startswith("linux") or platform.machine().lower() not in ("x86_64", "amd64"):
        return 0.0
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError, AttributeError):
        return 0.0
    try:
        page.write(_CLOCK_LOOP)
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        loop = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(address)
        if loop(3) != 3 * _CLOCK_CYCLES:  # the code did not run as written
            return 0.0
        best = math.inf
        for _ in range(CLOCK_SAMPLES):
            started = time.perf_counter()
            loop(CLOCK_ITERATIONS)
            best = min(best, time.perf_counter() - started)
        del loop, address
        return CLOCK_ITERATIONS * _CLOCK_CYCLES / best if best > 0 else 0.0
    except (OSError, ValueError, TypeError):
        return 0.0
    finally:
        try:
            page.close()
        except BufferError:  # a ctypes view still holds the page: it is freed with the process
            pass


def _cpuinfo_mhz() -> float:
    """The largest ``cpu MHz`` of ``/proc/cpuinfo``, in Hz (0.0 where absent)."""
    best = 0.0
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "cpu MHz":
                    try:
                        best = max(best, float(value) * 1e6)
                    except ValueError:
                        continue
    except OSError:
        return 0.0
    return best


AMX_BF16_FLOPS_PER_CYCLE = 1024  # a core's AMX tile unit: 16 x 32 x 16 bf16 MACs every 16 cycles


def theoretical_peak_flops(info: CpuInfo, threads: int, clock: float) -> dict[str, float]:
    """Peak FLOP/s per dtype from cores × clock × SIMD FMA throughput (an upper bound).

    Assumptions (documented in docs/calibration.md):
    - fp32 lanes: 16 with avx512f, 8 with avx/avx2, 4 with sse or ARM asimd/neon;
    - two vector FMA pipes per core of the widest width, 2 FLOPs per FMA lane (true for
      Skylake-SP Gold/Platinum, Ice Lake-SP, Zen 4 at 256-bit × 2 ≈ 512-bit × 1, Zen 5); without
      FMA one mul + one add pipe, i.e. the same 2 FLOPs per lane per cycle with one unit;
    - float16 runs at fp32 rate unless avx512_fp16 (then 2×);
    - int8 (ops/s) is 4 × the fp32 lanes with VNNI (avx512_vnni, or avx_vnni at 256 bits), else 2×;
    - bfloat16 (only where the CPU has a bf16 instruction: a backend may run float32 models in it)
      is 2 × fp32 with avx512_bf16 (``vdpbf16ps`` multiplies two bf16 pairs per fp32 lane where an
      FMA multiplies one, on the same pipes), and 1024 FLOPs per cycle per core with AMX
      (``amx_bf16``: one 16 x 32 x 16 tile product every 16 cycles).
    """
    flags = info.flags
    if not clock or not info.cores:
        return {}
    cores = min(threads, info.cores) if threads > 0 else info.cores
    if "avx512f" in flags:
        lanes = 16
    elif "avx" in flags or "avx2" in flags:
        lanes = 8
    elif flags & {"sse", "sse2", "asimd", "neon"}:
        lanes = 4
    else:
        lanes = 1
    fma = bool(flags & {"fma", "avx512f", "asimd"})
    units = 2 if fma else 1
    per_core_fp32 = lanes * 2 * units
    peaks = {"float32": cores * clock * per_core_fp32}
    peaks["float16"] = peaks["float32"] * (2 if "avx512_fp16" in flags else 1)
    if "avx512_vnni" in flags and lanes == 16:
        int8_lanes = 4 * 16
    elif "avx_vnni" in flags or "avx512_vnni" in flags:
        int8_lanes = 4 * 8
    else:
        int8_lanes = 2 * lanes
    peaks["int8"] = cores * clock * int8_lanes * 2 * units
    if "amx_bf16" in flags:
        peaks["bfloat16"] = cores * clock * AMX_BF16_FLOPS_PER_CYCLE
    elif "avx512_bf16" in flags:
        peaks["bfloat16"] = 2 * peaks["float32"]
    return peaks


def flags_hash(flags: frozenset[str]) -> str:
    """A short stable hash of a CPU flag set (kernel choice depends on it)."""
    return hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:16]


# --- model builders ------------------------------------------------------------------------------


def _model(
    nodes: list[Any],
    inputs: list[Any],
    outputs: list[Any],
    initializers: list[Any] | None = None,
    name: str = "probe",
) -> onnx.ModelProto:
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers or [])
    opsets = [helper.make_opsetid("", OPSET)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="pytest-roofline")
    model.ir_version = IR_VERSION
    return model


def _elem(dtype: str) -> int:
    from onnx import TensorProto

    return {
        "float32": TensorProto.FLOAT,
        "float16": TensorProto.FLOAT16,
        "bfloat16": TensorProto.BFLOAT16,
        "uint8": TensorProto.UINT8,
        "int8": TensorProto.INT8,
        "int32": TensorProto.INT32,
    }[dtype]


def _gemm(n: int, dtype: str) -> Builder:
    def build() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        import numpy as np
        from onnx import helper

        shape = [n, n]
        model = _model(
            [helper.make_node("MatMul", ["A", "B"], ["Y"])],
            [helper.make_tensor_value_info(x, _elem(dtype), shape) for x in ("A", "B")],
            [helper.make_tensor_value_info("Y", _elem(dtype), shape)],
            name=f"gemm_{n}_{dtype}",
        )
        rng = np.random.default_rng(0)
        # numpy has no bfloat16: such inputs go as float32 and the backend casts them
        data = rng.random((n, n), dtype=np.float32).astype("float32" if dtype == "bfloat16" else dtype)
        return model, {"A": data, "B": data.T.copy()}

    return build


def _conv(channels: int, spatial: int, kernel: int = 3, groups: int = 1) -> Builder:
    """A ``kernel`` x ``kernel`` Conv keeping channels and size (``groups=channels``: depthwise)."""

    def build() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        import numpy as np
        from onnx import helper, numpy_helper

        rng = np.random.default_rng(0)
        dims = (channels, channels // groups, kernel, kernel)
        weight = numpy_helper.from_array(rng.random(dims, dtype=np.float32) * 0.01, "W")
        shape = [1, channels, spatial, spatial]
        pad = kernel // 2
        node = helper.make_node("Conv", ["X", "W"], ["Y"], pads=[pad] * 4, group=groups)
        model = _model(
            [node],
            [helper.make_tensor_value_info("X", _elem("float32"), shape)],
            [helper.make_tensor_value_info("Y", _elem("float32"), shape)],
            [weight],
            name=f"conv{kernel}x{kernel}_{channels}x{spatial}_g{groups}",
        )
        return model, {"X": rng.random(shape, dtype=np.float32)}

    return build


def _shaped(shape: tuple[Any, ...]) -> ProbeSpec:
    """A float32 probe of a shape models run (:data:`MODEL_SHAPES`), weights as initializers."""
    kind, *dims = shape
    if kind in ("matmul", "gemm"):
        m, k, n = dims
        return ProbeSpec(
            f"{kind}-{m}x{k}x{n}-float32",
            "compute",
            "float32",
            m,
            2.0 * m * k * n,
            _weighted_matmul(m, k, n, kind),
        )
    if kind == "batched":
        batch, m, k, n = dims
        name = f"batchmatmul-{batch}x{m}x{k}x{n}-float32"
        return ProbeSpec(
            name, "compute", "float32", m, 2.0 * batch * m * k * n, _batched_matmul(batch, m, k, n)
        )
    channels, spatial = dims
    depthwise = kind == "dwconv3x3"
    flops = 2.0 * channels * spatial * spatial * (9 if depthwise else channels)
    build = _conv(channels, spatial, kernel=3 if depthwise else 1, groups=channels if depthwise else 1)
    return ProbeSpec(f"{kind}-{channels}x{spatial}-float32", "compute", "float32", channels, flops, build)


def _weighted_matmul(m: int, k: int, n: int, op: str) -> Builder:
    """``[m, k] x W[k, n]`` with W an initializer: MatMul, or Gemm with a bias (``transB=1``)."""

    def build() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        import numpy as np
        from onnx import helper, numpy_helper

        rng = np.random.default_rng(0)
        if op == "gemm":
            weights = [
                numpy_helper.from_array(rng.random((n, k), dtype=np.float32) * 0.01, "W"),
                numpy_helper.from_array(rng.random(n, dtype=np.float32), "C"),
            ]
            node = helper.make_node("Gemm", ["A", "W", "C"], ["Y"], transB=1)
        else:
            weights = [numpy_helper.from_array(rng.random((k, n), dtype=np.float32) * 0.01, "W")]
            node = helper.make_node("MatMul", ["A", "W"], ["Y"])
        model = _model(
            [node],
            [helper.make_tensor_value_info("A", _elem("float32"), [m, k])],
            [helper.make_tensor_value_info("Y", _elem("float32"), [m, n])],
            weights,
            name=f"{op}_{m}x{k}x{n}",
        )
        return model, {"A": rng.random((m, k), dtype=np.float32)}

    return build


def _batched_matmul(batch: int, m: int, k: int, n: int) -> Builder:
    """``[batch, m, k] x [batch, k, n]``, both inputs (attention's scores: no weights)."""

    def build() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        import numpy as np
        from onnx import helper

        model = _model(
            [helper.make_node("MatMul", ["A", "B"], ["Y"])],
            [
                helper.make_tensor_value_info("A", _elem("float32"), [batch, m, k]),
                helper.make_tensor_value_info("B", _elem("float32"), [batch, k, n]),
            ],
            [helper.make_tensor_value_info("Y", _elem("float32"), [batch, m, n])],
            name=f"batchmatmul_{batch}x{m}x{k}x{n}",
        )
        rng = np.random.default_rng(0)
        return model, {
            "A": rng.random((batch, m, k), dtype=np.float32),
            "B": rng.random((batch, k, n), dtype=np.float32),
        }

    return build


def _qlinear_matmul(n: int) -> Builder:
    def build() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        import numpy as np
        from onnx import helper

        scalars = [
            helper.make_tensor("a_scale", _elem("float32"), [], [0.02]),
            helper.make_tensor("a_zero", _elem("uint8"), [], [128]),
            helper.make_tensor("b_scale", _elem("float32"), [], [0.02]),
            helper.make_tensor("b_zero", _elem("int8"), [], [0]),
            helper.make_tensor("y_scale", _elem("float32"), [], [4.0]),
            helper.make_tensor("y_zero", _elem("uint8"), [], [128]),
        ]
        node = helper.make_node(
            "QLinearMatMul", ["A", "a_scale", "a_zero", "B", "b_scale", "b_zero", "y_scale", "y_zero"], ["Y"]
        )
        model = _model(
            [node],
            [
                helper.make_tensor_value_info("A", _elem("uint8"), [n, n]),
                helper.make_tensor_value_info("B", _elem("int8"), [n, n]),
            ],
            [helper.make_tensor_value_info("Y", _elem("uint8"), [n, n])],
            scalars,
            name=f"qlinearmatmul_{n}",
        )
        rng = np.random.default_rng(0)
        return model, {
            "A": rng.integers(0, 256, (n, n), dtype=np.uint8),
            "B": rng.integers(-127, 128, (n, n), dtype=np.int8),
        }

    return build


def _matmul_integer(n: int, signed: bool = False) -> Builder:
    """``MatMulInteger`` of two n x n 8-bit matrices: uint8 (the CPU EP's) or int8 (the CUDA EP's)."""
    element = "int8" if signed else "uint8"

    def build() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        import numpy as np
        from onnx import helper

        model = _model(
            [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])],
            [
                helper.make_tensor_value_info("A", _elem(element), [n, n]),
                helper.make_tensor_value_info("B", _elem(element), [n, n]),
            ],
            [helper.make_tensor_value_info("Y", _elem("int32"), [n, n])],
            name=f"matmulinteger_{n}",
        )
        rng = np.random.default_rng(0)
        low, high = (-127, 128) if signed else (0, 256)
        return model, {
            "A": rng.integers(low, high, (n, n), dtype=element),
            "B": rng.integers(low, high, (n, n), dtype=element),
        }

    return build


def _stream(
    working_set: int, bytes_per_run: int = STREAM_BYTES_PER_RUN, separate: bool = False, chain: int = 0
) -> tuple[float, int, Builder]:
    """A chain of Adds ``y_i = y_(i-1) + Z`` over a ``working_set`` of three equal float32 tensors.

    Bytes per node = two inputs read + one output written (the DESIGN convention); the chain's
    intermediates die at once, so the backend's planner reuses buffers and the working set stays
    about three tensors.  With ``separate`` the Adds alternate between ``[n / 256, 256]`` and
    ``[n / 512, 512]`` views of the tensors (Reshapes of the same buffer, no copy), which a backend
    that fuses elementwise chains (:data:`FUSING_BACKENDS`) does not fuse across.  ``chain``: this
    many Adds (0: enough to move ``bytes_per_run``, at most :data:`STREAM_MAX_CHAIN`).  Returns
    (bytes moved per run, chain length, builder).
    """
    elements = max(working_set // (3 * 4), 16)
    if separate:
        elements = max(elements // (2 * STREAM_VIEW_WIDTH), 1) * 2 * STREAM_VIEW_WIDTH
    node_bytes = 3 * 4 * elements
    chain = chain or _chain_length(bytes_per_run, node_bytes)

    def build() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        import numpy as np
        from onnx import helper, numpy_helper

        nodes, previous, initializers = [], "X", []
        views = {
            0: ("matrix", [elements // STREAM_VIEW_WIDTH, STREAM_VIEW_WIDTH]),
            1: ("wide", [elements // (2 * STREAM_VIEW_WIDTH), 2 * STREAM_VIEW_WIDTH]),
        }
        operands = {0: "Z", 1: "Z"}
        if separate:
            initializers = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in views.values()]
            operands = {index: f"Z_{view}" for index, (view, _) in views.items()}
            nodes += [helper.make_node("Reshape", ["Z", view], [f"Z_{view}"]) for view, _ in views.values()]
            nodes.append(helper.make_node("Reshape", ["X", "matrix"], ["X_matrix"]))
            previous = "X_matrix"
        for index in range(chain):
            output = "Y" if index == chain - 1 else f"t{index}"
            if separate and index > 0:
                nodes.append(helper.make_node("Reshape", [previous, views[index % 2][0]], [f"v{index}"]))
                previous = f"v{index}"
            nodes.append(helper.make_node("Add", [previous, operands[index % 2]], [output]))
            previous = output
        out_shape = views[(chain - 1) % 2][1] if separate else [elements]
        model = _model(
            nodes,
            [helper.make_tensor_value_info(x, _elem("float32"), [elements]) for x in ("X", "Z")],
            [helper.make_tensor_value_info("Y", _elem("float32"), out_shape)],
            initializers,
            name=f"stream_{working_set}",
        )
        return model, {"X": np.full(elements, 1.0, np.float32), "Z": np.full(elements, 0.5, np.float32)}

    return float(node_bytes * chain), chain, build


def _chain_length(bytes_per_run: int, node_bytes: int) -> int:
    return max(1, min(STREAM_MAX_CHAIN, math.ceil(bytes_per_run / node_bytes)))


def _read(
    working_set: int, bytes_per_run: int = STREAM_BYTES_PER_RUN, chain: int = 0
) -> tuple[float, int, Builder]:
    """A chain of matrix-vector products ``v_i = v_(i-1) . W`` over one float32 weight ``W[k, k]``
    of about ``working_set`` bytes (an initializer): read-dominated traffic, a decoder's Gemm at
    one token.  Bytes per node = W + the vector read + the vector written (the DESIGN convention).
    ``W`` is 1/k everywhere, so the chain's values stay 1.  ``chain`` as :func:`_stream`'s."""
    k = max(16, math.isqrt(working_set // 4) // 16 * 16)
    node_bytes = 4 * (k * k + 2 * k)
    chain = chain or _chain_length(bytes_per_run, node_bytes)

    def build() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
        import numpy as np
        from onnx import helper, numpy_helper

        names = [*(f"v{i}" for i in range(chain - 1)), "Y"]
        nodes = [
            helper.make_node("MatMul", [x, "W"], [y]) for x, y in zip(["X", *names[:-1]], names, strict=True)
        ]
        model = _model(
            nodes,
            [helper.make_tensor_value_info("X", _elem("float32"), [1, k])],
            [helper.make_tensor_value_info("Y", _elem("float32"), [1, k])],
            [numpy_helper.from_array(np.full((k, k), 1.0 / k, np.float32), "W")],
            name=f"read_{working_set}",
        )
        return model, {"X": np.ones((1, k), np.float32)}

    return float(node_bytes * chain), chain, build


def size_label(nbytes: int) -> str:
    """Binary size label of a working set: ``32KiB``, ``256MiB``."""
    return f"{nbytes // MIB}MiB" if nbytes >= MIB else f"{nbytes // KIB}KiB"


def _parse_size(text: str) -> int:
    units = {"K": KIB, "M": MIB, "G": 1024 * MIB}
    text = text.upper().rstrip("B")
    try:
        return int(text[:-1]) * units[text[-1]] if text and text[-1] in units else int(text)
    except ValueError:
        return 0


def _cache_holding(size: int, caches: list[tuple[str, int]]) -> str:
    """The smallest cache that holds ``size`` (×2 slack: per-core caches add up across threads)."""
    return next((name for name, capacity in caches if 2 * capacity >= size), caches[-1][0])
