"""ModelProfile: static costs joined with measured times and the device roofline.

A layer is one backend kernel (or fused group) with the ONNX nodes it executes; its FLOPs and bytes
come from the analyzer (bytes of a fused group: only tensors crossing its boundary), its time from
the backend's profiled run, its roofline fraction from the device roofline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_roofline.analysis.views import RUNTIME_VIEW_OPS
from pytest_roofline.errors import RooflineError
from pytest_roofline.fmt import fmt_pct
from pytest_roofline.measure.stats import LatencyStats
from pytest_roofline.roofline import DeviceRoofline
from pytest_roofline.roofline.roofs import MemoryRoof, roof_dtype
from pytest_roofline.schema import PROFILE_SCHEMA

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pytest_roofline.analysis.types import ModelAnalysis
    from pytest_roofline.backends.base import KernelProfile, KernelRecord
    from pytest_roofline.memory import LayerMemory, MemoryProfile
    from pytest_roofline.profile.sanity import RooflineCheck

__all__ = [
    "FractionUnavailable",
    "Layer",
    "LayerNotFound",
    "ModelProfile",
    "NoFraction",
    "OpTypeSummary",
    "build_layers",
    "known_fraction",
    "profiler_scale",
    "profiler_scales",
    "roof_dtype",
]


class FractionUnavailable(RooflineError):
    """A roofline fraction that could not be computed was compared; the message says why."""


class NoFraction(float):
    """A roofline fraction that cannot be computed: a NaN that names why.

    ``prof.layer(name).roofline_fraction`` and ``prof.efficiency`` hold one where there is no
    number (roof invalid, layer not timed, no roofline): ``fraction > 0.2`` raises
    :class:`FractionUnavailable` with that reason in one line instead of a ``TypeError`` on None.
    JSON writes it as null (:func:`known_fraction`).
    """

    reason: str

    def __new__(cls, reason: str) -> NoFraction:
        value = super().__new__(cls, math.nan)
        value.reason = reason
        return value

    def _refuse(self, other: object) -> bool:
        __tracebackhide__ = True  # pytest shows the test's line and the reason
        raise FractionUnavailable(self.reason)

    __lt__ = __le__ = __gt__ = __ge__ = _refuse

    def __repr__(self) -> str:
        return f"NoFraction({self.reason!r})"

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:
        return (NoFraction, (self.reason,))


def known_fraction(value: float | None) -> float | None:
    """``value`` as a number, or None where it is missing or a :class:`NoFraction` (the JSON form)."""
    return None if value is None or isinstance(value, NoFraction) else value


class LayerNotFound(KeyError):
    """No layer of that name; the message lists close names."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Layer:
    """One executed kernel or fused group, with its costs, time and place under the roofline.

    ``kind`` is ``compute``, ``layout`` (reorder/reformat overhead serving another layer),
    ``folded`` (ONNX nodes removed at load time: zero time) or ``unattributed`` (a kernel whose
    ONNX nodes could not be found).
    """

    name: str
    op_type: str
    onnx_nodes: tuple[str, ...]
    time: float  # median seconds per inference
    flops: int
    bytes: int
    kind: str = "compute"
    serves: str | None = None
    share: float = 0.0  # of all kernel time
    roofline_fraction: float | None = None
    bound: str | None = None
    attainable_flops: float | None = None
    times: tuple[float, ...] = field(default=(), repr=False)
    # where its bytes live: "L2", "L3", "DRAM" (DeviceRoofline.memory_roof), and that roof's byte/s
    memory_level: str | None = None
    memory_bandwidth: float | None = None
    memory: LayerMemory | None = None  # bytes it allocates and live at its end (pytest_roofline.memory)
    roof_dtype: str | None = None  # the compute roof it is judged against: its kernel's own precision's
    # a kernel that ran but read 0 on its timer (OpenVINO's whole-µs counter): its time lies in
    # [0, time_below) and ``roofline_fraction`` is the least its fraction can be (at ``time_below``)
    time_below: float = 0.0

    def __repr__(self) -> str:
        """Short form for assertion messages: name, op, time, roofline fraction, bound."""
        fraction = fmt_pct(self.roofline_fraction, missing="-")  # a NoFraction is a NaN: "-"
        return (
            f"Layer({self.name!r}, {self.op_type}, time={self.time * 1e3:.4g} ms, "
            f"roofline_fraction={fraction}, bound={self.bound})"
        )

    @property
    def achieved_flops(self) -> float:
        """FLOP/s reached."""
        return self.flops / self.time if self.time > 0 else 0.0

    @property
    def achieved_bandwidth(self) -> float:
        """byte/s moved."""
        return self.bytes / self.time if self.time > 0 else 0.0

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP/byte."""
        return self.flops / self.bytes if self.bytes else 0.0

    @property
    def roof_time(self) -> float:
        """Seconds this layer would take at its roof (its time when no roof is known)."""
        known = known_fraction(self.roofline_fraction)
        if known is None or known <= 0:
            return self.time
        return self.time * min(known, 1.0)

    def to_dict(self, include_times: bool = False) -> dict[str, Any]:
        """JSON-ready dict (the ``roofline profile --format json`` layer contract)."""
        return {
            "name": self.name,
            "op_type": self.op_type,
            "onnx_nodes": list(self.onnx_nodes),
            "kind": self.kind,
            "serves": self.serves,
            "time": self.time,
            "share": self.share,
            "flops": self.flops,
            "bytes": self.bytes,
            "intensity": self.intensity,
            "achieved_flops": self.achieved_flops,
            "achieved_bandwidth": self.achieved_bandwidth,
            "attainable_flops": self.attainable_flops,
            "roofline_fraction": known_fraction(self.roofline_fraction),
            "bound": self.bound,
            "memory_level": self.memory_level,
            "memory_bandwidth": self.memory_bandwidth,
            "times": list(self.times) if include_times else [],
            "memory": self.memory.to_dict() if self.memory is not None else None,
            "roof_dtype": self.roof_dtype,
            "time_below": self.time_below,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Layer:
        """Inverse of :meth:`to_dict`."""
        return cls(
            name=data["name"],
            op_type=data["op_type"],
            onnx_nodes=tuple(data["onnx_nodes"]),
            time=data["time"],
            flops=data["flops"],
            bytes=data["bytes"],
            kind=data.get("kind", "compute"),
            serves=data.get("serves"),
            share=data.get("share", 0.0),
            roofline_fraction=data.get("roofline_fraction"),
            bound=data.get("bound"),
            attainable_flops=data.get("attainable_flops"),
            times=tuple(data.get("times", ())),
            memory_level=data.get("memory_level"),
            memory_bandwidth=data.get("memory_bandwidth"),
            memory=_layer_memory(data.get("memory")),
            roof_dtype=data.get("roof_dtype"),
            time_below=data.get("time_below", 0.0),
        )


def _layer_memory(data: dict[str, Any] | None) -> LayerMemory | None:
    from pytest_roofline.memory import LayerMemory

    return LayerMemory.from_dict(data) if data else None


def _model_memory(data: dict[str, Any] | None) -> MemoryProfile | None:
    from pytest_roofline.memory import MemoryProfile

    return MemoryProfile.from_dict(data) if data else None


@dataclass(frozen=True)
class OpTypeSummary:
    """Layers aggregated by op type."""

    op_type: str
    count: int
    time: float
    share: float
    flops: int
    bytes: int

    @property
    def achieved_flops(self) -> float:
        """FLOP/s over the group."""
        return self.flops / self.time if self.time > 0 else 0.0


def profiler_scale(kernels: KernelProfile, e2e_time: float | None) -> float:
    """Factor that brings profiled kernel times back to the unprofiled end-to-end time.

    A profiler slows the kernels it times (ORT 1.32 gathers allocator and thread statistics
    per kernel; trtexec's per-layer timing adds sync points), so the kernel times of a profiled
    run can add up to more than the model's measured latency.  Layer times are then scaled by
    ``e2e_time / kernel_sum`` so that shares are kept and fractions judge the real speed; the
    factor is never above 1 (kernels that add up to less leave time to the host).  GPU kernel
    times from CUPTI are the device's own clock, untouched by the profiler: they are never scaled.
    """
    if kernels.timing_source == "CUPTI":
        return 1.0
    total = sum(float(np.median(k.times)) for k in kernels.kernels if k.times)
    if not e2e_time or total <= e2e_time:
        return 1.0
    return e2e_time / total


def profiler_scales(kernels: KernelProfile, e2e_time: float | None, floor: float = 0.0) -> tuple[float, ...]:
    """One factor per kernel that brings its profiled time back to the unprofiled run.

    A profiler's cost is per event: onnxruntime 1.32 here took 0.7 µs a trivial Relu unprofiled
    and 10.7 µs profiled, inside its ``_kernel_time`` event, and a Loop/Scan's own time holds its
    body events' bookkeeping (fences, recording).  Where a control-flow body repeats kernels, one
    factor for every kernel (:func:`profiler_scale`) shrinks a long body kernel beside many short
    ones far below its real time: a 16-trip Loop body's MatMul, 81-90 % of the unprofiled run
    (measured by removing it), kept 54 % and read 108 % of its compute roof at one thread; a
    32-step Scan's FusedGemm, 63 %, kept 50 % (109 %).  So where the backend counts every kernel's
    events a run (``extra["events_per_run"]``; a container counts its body's), the kernel sum's
    excess over ``e2e_time`` is charged evenly to the events: a kernel keeps its time less its
    events' share, none when that is under one timer step per event (its time is the
    profiler's), and the rest is scaled down to ``e2e_time`` when it adds up to more (here: the
    MatMul 81-94 %, the FusedGemm 100 %: a body kernel errs long, its fraction low).
    With one event per kernel the profiler's cost is charged the same way, but never more than
    the cheapest kernel read less one timer step, nor so much that the cheapest kernel ends below
    ``floor`` (the roofline's dispatch floor: every kernel keeps a time a view can be priced by),
    and the rest of the excess scales every kernel down.  A small exporter
    graph is mostly small kernels, each carrying the profiler's cost: GPT-2 from transformers (2
    layers of width 64, one thread) had 210 kernels add up to 700 µs profiled against a 133 µs
    run, a ``Shape`` read 2.5 µs; one factor, 0.19, left its 16x64x256 Gemm 2.0 µs, 117 % of the
    one-thread compute roof, where it read 11 µs profiled and a session of that Gemm alone runs
    in 7.3 µs end to end.  Kernels that add up to less than ``e2e_time`` keep their times
    (:func:`profiler_scale`'s 1.0); without counts, see the last paragraph.

    Load is not the profiler's cost: every profiled run of a kernel carries its events' cost, so
    what a kernel's median reads above its fastest run is the machine's other work (a run
    preempted inside one Gemm).  The charge is read from the fastest runs, and an excess still
    left over the unprofiled run is taken from those load excesses first, each kernel in
    proportion to its own; only what remains scales every kernel down, and none below ``floor``.
    Before, an MLP profiled twice with one Gemm preempted 10 ms in one run (its median 5 ms)
    scaled every kernel by about ``e2e / 5 ms``: the other Gemms ended at 0.1 us (1.3 TFLOP/s on a
    256-wide layer) and the Relus at 20 ns, under the floor.

    Without event counts (OpenVINO) the one factor applies, but it too scales no kernel below
    ``floor``: OpenVINO's counters keep whole microseconds, a sub-microsecond primitive's mean
    over 3 inferences reads 0.33 us when one of them ticked, and one factor took GPT-2's
    ``Add``/``Transpose``/``Reorder`` primitives to 0.05-0.2 us, 119-596 % of a 0.28 us floor.
    A kernel already under the floor before the factor keeps its time: nothing is stretched.
    """
    uniform = profiler_scale(kernels, e2e_time)
    medians = [float(np.median(k.times)) if k.times else 0.0 for k in kernels.kernels]
    fastest = [float(min(k.times)) if k.times else 0.0 for k in kernels.kernels]
    counts = [_events_per_run(k) for k in kernels.kernels]  # 0.0 where the backend records none
    timed = [(n, q) for n, q, m in zip(counts, fastest, medians, strict=True) if m > 0]
    counted = bool(timed) and all(n > 0 for n, _ in timed)
    if uniform >= 1.0 or not e2e_time:
        return (uniform,) * len(medians)
    if not counted:  # one factor, but none scaled below the floor (OpenVINO's whole-µs counters)
        down = _scaled_down(medians, e2e_time, floor)
        return tuple(k / m if m > 0 else uniform for k, m in zip(down, medians, strict=True))
    per_event = (sum(q for _, q in timed) - e2e_time) / sum(n for n, _ in timed)
    step = kernels.timer_resolution
    if all(n == 1 for n, _ in timed):  # no body repeats: the cheapest kernel bounds the charge
        cheapest, total = min(q for _, q in timed), sum(q for _, q in timed)
        per_event = min(per_event, cheapest - step, cheapest - floor)
        room = e2e_time - floor * len(timed)  # the cheapest, charged c and scaled down, keeps >= floor
        if floor > 0:
            per_event = min(per_event, (cheapest * e2e_time - floor * total) / room if room > 0 else 0.0)
    per_event = max(0.0, per_event)
    keeps = [q - n * per_event >= n * step * (1 - 1e-9) for n, q in zip(counts, fastest, strict=True)]
    quiet = [q - n * per_event if keep else 0.0 for n, q, keep in zip(counts, fastest, keeps, strict=True)]
    if sum(quiet) <= 0:
        return (uniform,) * len(medians)
    load = [m - q if keep else 0.0 for m, q, keep in zip(medians, fastest, keeps, strict=True)]
    excess = sum(quiet) + sum(load) - e2e_time  # what the charged medians read over the run
    if excess >= sum(load):  # the load excesses go, and the rest scales every kernel down
        kept = _scaled_down(quiet, e2e_time, floor)
    else:  # each kernel gives back its share of the excess, never more than its load
        share = max(excess, 0.0) / sum(load) if sum(load) > 0 else 0.0
        kept = [t + extra * (1 - share) for t, extra in zip(quiet, load, strict=True)]
    return tuple(k / m if m > 0 else uniform for k, m in zip(kept, medians, strict=True))


def _scaled_down(times: Sequence[float], total: float, floor: float) -> list[float]:
    """``times`` scaled by one factor to add up to ``total``, except that none is scaled below
    ``floor`` (one already under it keeps its time): those are pinned and the others scaled more.

    A pinned time is a billionth above the floor: the caller's factor (time / median) times the
    median can come back one unit in the last place short, and a layer exactly at its floor then
    read 100.00000000002 % of it (two Unsqueezes counted above 100 % in the corpus benchmark)."""
    pin_at = floor * (1 + 1e-9)
    pinned = [False] * len(times)
    while True:
        held = sum(min(t, pin_at) for t, pin in zip(times, pinned, strict=True) if pin)
        free = sum(t for t, pin in zip(times, pinned, strict=True) if not pin)
        down = max(total - held, 0.0) / free if free > 0 else 0.0
        low = [not pin and t > 0 and t * down < pin_at for t, pin in zip(times, pinned, strict=True)]
        if not any(low):
            return [min(t, pin_at) if pin else t * down for t, pin in zip(times, pinned, strict=True)]
        pinned = [pin or lo for pin, lo in zip(pinned, low, strict=True)]


def _events_per_run(kernel: KernelRecord) -> float:
    """The profiler events a kernel recorded per run (``extra["events_per_run"]``), else 0.0."""
    value = kernel.extra.get("events_per_run")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def build_layers(
    analysis: ModelAnalysis,
    kernels: KernelProfile,
    roofline: DeviceRoofline | None = None,
    time_scale: float | Sequence[float] = 1.0,
) -> tuple[list[Layer], float]:
    """Join a profiled run with the analysis; returns the layers and the attributed fraction.

    Layer times are the kernels' profiled medians times ``time_scale`` (one factor, see
    :func:`profiler_scale`, or one per kernel, :func:`profiler_scales`); ``Layer.times`` keeps the
    raw profiled samples.  Layers are judged
    against the roof of the precision that ran (:func:`roof_dtype`).  Host-timed kernels (an
    accelerator's launch times, ``kernels.timing == "host"``) get a bound and an attainable
    figure but no roofline fraction: a host time says nothing about the device's speed.

    Layout kernels carry no FLOPs (their bytes are what they move, from the backend's record
    when given in ``extra["bytes"]``).  Nodes of the analysis that no kernel executes and that
    the backend reported as folded become ``folded`` layers with zero time.

    A node several kernels execute (a backend's helper kernels list the node they help) counts
    its FLOPs once: in the first kernel that lists it outside its ``extra["shared"]`` (the
    backend's choice of main kernel), else in the first kernel listing it.  The others get 0
    FLOPs from it but its bytes, since they do move its tensors; a helper owning none of its
    nodes gets the bytes the backend reports in ``extra["bytes"]`` when it does (a precision
    Cast moves one tensor, not the whole node it serves).  A kernel with ``extra["precision"]``
    ran at that precision (onnxruntime runs fp16 nodes without an fp16 kernel in fp32): its
    bytes are counted at that precision's element size, and an int8 one is judged against the
    int8 roof where that is higher.  ``extra["portion"]``: the kernel runs
    that share of its nodes (FLOPs and bytes); ``extra["io_bytes"]`` caps its bytes (the sizes
    of the tensors it reads and writes, as the backend ran them); ``extra["arithmetic"] = False``:
    the kernel only moves data (a Transpose named after the Einsum it lays out), so no FLOPs.
    """
    from pytest_roofline.model.precision import precision_itemsize

    known = {node.name for node in analysis.nodes}
    owner = _flop_owners(kernels, known)
    itemsize = precision_itemsize(kernels.precision)  # bytes follow what ran (an fp16 engine: 2)
    dtype = roof_dtype(roofline, kernels.precision) if roofline is not None else None
    timed = kernels.timing != "host"
    scales = (
        (time_scale,) * len(kernels.kernels) if isinstance(time_scale, (int, float)) else tuple(time_scale)
    )
    total_time = sum(
        float(np.median(k.times)) * scale if k.times else 0.0
        for k, scale in zip(kernels.kernels, scales, strict=True)
    )
    layers: list[Layer] = []
    weights: list[int] = []  # weight bytes of each layer (the rest of its bytes are activations)
    dtypes: list[str | None] = []  # the roof each layer is judged against
    attributed = 0.0
    for kernel, scale in zip(kernels.kernels, scales, strict=True):
        median = float(np.median(kernel.times)) * scale if kernel.times else 0.0
        nodes = tuple(n for n in kernel.onnx_nodes if n in known)
        weight_bytes = 0
        if kernel.kind == "layout":
            cost_flops, cost_bytes = 0, int(kernel.extra.get("bytes", 0))
            kind = "layout"
        elif nodes:
            ran = kernel.extra.get("precision")  # a kernel the backend ran at another precision
            group = analysis.group(nodes, precision_itemsize(ran) if ran else itemsize)
            cost_flops, cost_bytes, kind = group.flops, group.bytes, "compute"
            weight_bytes = _weight_bytes(analysis, nodes, precision_itemsize(ran) if ran else itemsize)
            own = tuple(n for n in nodes if owner[n] is kernel)
            if len(own) < len(nodes):
                cost_flops = analysis.group(own).flops if own else 0
            if not own and "bytes" in kernel.extra:  # a helper: what it moves, not its nodes' tensors
                cost_bytes, weight_bytes = int(kernel.extra["bytes"]), 0
            if "portion" in kernel.extra:  # it runs a share of its nodes (one direction of an LSTM)
                portion = float(kernel.extra["portion"])
                cost_flops, cost_bytes = round(group.flops * portion), round(group.bytes * portion)
                weight_bytes = round(weight_bytes * portion)
            if "io_bytes" in kernel.extra:  # no more than the kernel's own tensors, each once
                cost_bytes = min(cost_bytes, int(kernel.extra["io_bytes"]))
                weight_bytes = min(weight_bytes, cost_bytes)
            if kernel.extra.get("arithmetic") is False:  # the backend says it only moves data
                cost_flops = 0
            if kernel.op_type in RUNTIME_VIEW_OPS and not all(_copies(analysis, n) for n in nodes):
                cost_bytes = weight_bytes = 0  # a view kernel (a Gemm's input reshape too) moves nothing
        else:
            cost_flops, cost_bytes, kind = 0, int(kernel.extra.get("bytes", 0)), "unattributed"
        if kind != "unattributed":
            attributed += median
        layer = Layer(
            name=kernel.name,
            op_type=kernel.op_type,
            onnx_nodes=nodes if nodes else kernel.onnx_nodes,
            time=median,
            flops=cost_flops,
            bytes=cost_bytes,
            kind=kind,
            serves=kernel.serves,
            share=median / total_time if total_time > 0 else 0.0,
            times=kernel.times,
            # it ran, but under one step of its timer: an interval, not "0 s"
            time_below=kernels.timer_resolution if kernel.times and median <= 0 else 0.0,
        )
        layers.append(layer)
        # a Gather reads rows, not its table: the rows it touches are its working set, placed by their
        # size like activations (repeated indices, and rows read again each run, stay in cache)
        weights.append(0 if cost_bytes < weight_bytes else weight_bytes)
        dtypes.append(_kernel_dtype(roofline, kernel.extra.get("precision"), dtype))
    footprint = sum(weights) + max((la.bytes - w for la, w in zip(layers, weights, strict=True)), default=0)
    layers = [
        apply_roofline(la, roofline, d, timed, _memory_roof(roofline, la, w, footprint), copy=la.bytes > 0)
        for la, w, d in zip(layers, weights, dtypes, strict=True)
    ]
    executed = {n for layer in layers for n in layer.onnx_nodes}
    for name in kernels.folded:
        if name in known and name not in executed:
            node = analysis.node(name)
            layers.append(Layer(name, node.op_type, (name,), 0.0, node.flops, node.bytes, kind="folded"))
    fraction = attributed / total_time if total_time > 0 else 0.0
    return layers, fraction


_KERNEL_PRECISIONS = {  # a kernel's reported precision (OpenVINO's runtimePrecision, ...) as roof_dtype's
    "int8": "int8",
    "i8": "int8",
    "u8": "int8",
    "bf16": "bf16",
    "f16": "fp16",
    "fp16": "fp16",
    "f32": "fp32",
    "fp32": "fp32",
}


def _kernel_dtype(roofline: DeviceRoofline | None, precision: Any, dtype: str | None) -> str | None:
    """The roof of a kernel that ran at a precision of its own: that precision's where higher than
    the model's, and never a bfloat16 roof for a kernel that did not run in bf16.

    EfficientNet int8's u8 Convolutions (OpenVINO, a mixed QDQ model) reached 128 % of the float32
    roof; OpenVINO 2026.4 runs float32 MatMuls and Convs in bf16 on CPUs with AVX512-BF16 (its
    runtimePrecision says so), and T5's FullyConnected read 176 % of the float32 FMA peak it never
    ran at.  A ``mixed`` model's own roof is the highest (a bf16 one on such a CPU): its f32 kernels
    are judged against float32's."""
    own_precision = _KERNEL_PRECISIONS.get(str(precision).lower())
    if roofline is None or dtype is None or own_precision is None:
        return dtype
    own = roof_dtype(roofline, own_precision)
    higher = roofline.peak_flops.get(own, 0.0) > roofline.peak_flops.get(dtype, 0.0)
    return own if higher or (dtype == "bfloat16" and own_precision != "bf16") else dtype


def _copies(analysis: ModelAnalysis, name: str) -> bool:
    """Whether node ``name`` is a view the cost model prices as a copy (it writes a body's output)."""
    node = analysis.node(name)
    return node.op_type in RUNTIME_VIEW_OPS and node.bytes > 0


def _weight_bytes(analysis: ModelAnalysis, nodes: tuple[str, ...], itemsize: float | None) -> int:
    """Bytes of the weights (initializers) a group of nodes reads whole from outside it.

    A weight its nodes read only in part (Gather rows, a Slice of a position table) is left out:
    the rows it touches are the layer's working set, placed by their size like activations.  A
    Slice fused into OpenVINO's embedding Add otherwise made the whole table the layer's weights,
    and the layer was placed with the model's weights in DRAM (BERT-base: 288 % of that roof)."""
    members = [analysis.node(name) for name in nodes]
    produced = {t for node in members for t in node.outputs}
    total = 0.0
    for tensor in {t for node in members for t in node.inputs if t and t not in produced}:
        info = analysis.tensors.get(tensor)
        partial = all(tensor in node.touched_elements for node in members if tensor in node.inputs)
        if info is not None and info.is_weight and not partial:
            floating = itemsize is not None and info.dtype.startswith(("float", "bfloat"))
            total += info.numel * itemsize if floating and itemsize is not None else info.nbytes
    return round(total)


def _memory_roof(
    roofline: DeviceRoofline | None, layer: Layer, weight_bytes: int, footprint: int
) -> MemoryRoof | None:
    """Where ``layer``'s bytes live in a model of ``footprint`` bytes (weights and live activations)."""
    if roofline is None or layer.kind == "folded":
        return None
    return roofline.memory_roof(weight_bytes, max(layer.bytes - weight_bytes, 0), footprint)


def _flop_owners(kernels: KernelProfile, known: set[str]) -> dict[str, KernelRecord]:
    """ONNX node -> the compute kernel whose layer carries the node's FLOPs (see build_layers)."""
    owner: dict[str, KernelRecord] = {}
    fallback: dict[str, KernelRecord] = {}
    for kernel in kernels.kernels:
        if kernel.kind == "layout":
            continue
        shared = set(kernel.extra.get("shared", ()))
        for name in kernel.onnx_nodes:
            if name in known:
                target = fallback if name in shared else owner
                target.setdefault(name, kernel)
    return {**fallback, **owner}


def apply_roofline(
    layer: Layer,
    roofline: DeviceRoofline | None,
    dtype: str | None = None,
    timed: bool = True,
    memory: MemoryRoof | None = None,
    copy: bool = False,
) -> Layer:
    """Fill roofline fraction, bound and attainable FLOP/s of ``layer`` against ``dtype``'s roof.

    The layer's attainable time is the slowest of its roofs (compute, memory, the dispatch floor:
    :meth:`DeviceRoofline.attainable_time`), its fraction that time over its own, its bound the roof
    that set it: ``compute``, ``memory`` or ``overhead``.  ``memory`` is the layer's memory roof
    (where its bytes live, :func:`build_layers`); without it the level holding the layer's bytes.
    ``timed=False`` (host-timed layers) leaves the fraction out: bound and attainable figure follow
    from the layer's costs alone.  A view op's layer moves nothing (unless ``copy``: it writes a
    Loop/Scan body's output), so only the dispatch floor prices it: without a calibrated floor it
    gets no fraction.

    A layer that read 0 on its timer (``time_below``: it ran under one step) is priced at that
    step: its fraction is the least it can be, never one read above its roof on quantization.
    """
    seconds_run = layer.time if layer.time > 0 else layer.time_below
    if roofline is None or seconds_run <= 0 or layer.kind == "folded":
        return layer
    memory = memory or roofline.memory_roof(0, layer.bytes, None)
    bandwidth = memory.bandwidth
    if layer.op_type in RUNTIME_VIEW_OPS and not copy and not roofline.dispatch_floor:
        timed = False  # a view hands out a buffer: nothing to price without a floor
    bound = roofline.limit(layer.flops, layer.bytes, dtype, bandwidth=bandwidth)
    fraction = roofline.fraction(layer.flops, layer.bytes, seconds_run, dtype, bandwidth=bandwidth)
    seconds = roofline.attainable_time(layer.flops, layer.bytes, dtype, bandwidth)
    return replace(
        layer,
        roofline_fraction=fraction if timed else None,
        bound=bound,
        attainable_flops=layer.flops / seconds if layer.flops and seconds > 0 else None,
        memory_level=memory.level,
        memory_bandwidth=bandwidth,
        roof_dtype=dtype,
    )


@dataclass(frozen=True)
class ModelProfile:
    """Everything measured about one model at one batch size on one backend."""

    model_name: str
    model_path: str | None
    model_hash: str
    backend: str
    backend_version: str
    options: dict[str, str] = field(hash=False)
    batch: int
    input_shapes: dict[str, tuple[int, ...]] = field(hash=False)
    latency: LatencyStats
    layers: tuple[Layer, ...]
    attributed_fraction: float
    total_flops: int
    total_macs: int
    total_bytes: int
    precision: str = "fp32"
    roofline: DeviceRoofline | None = None
    dims: dict[str, int] = field(default_factory=dict, hash=False)
    shape_method: str = ""
    fingerprint: dict[str, Any] = field(default_factory=dict, hash=False)
    spans: dict[str, LatencyStats] = field(default_factory=dict, hash=False)
    extra: dict[str, Any] = field(default_factory=dict, hash=False)
    layer_timing: str = "device"  # "device" (the device's own kernel times) | "host" (launch times)
    memory: MemoryProfile | None = None  # one inference's memory, where the backend reports it

    def __repr__(self) -> str:
        """Short form for assertion messages: model, batch, backend, median, efficiency."""
        eff = fmt_pct(self.efficiency, missing="-")
        if self.roofline is None:  # nothing to be efficient against: say so where the figure would be
            eff += " (no roofline: roofline='auto' calibrates one)"
        return (
            f"ModelProfile({self.model_name!r}, batch={self.batch}, backend={self.backend}, "
            f"median={self.latency.median * 1e3:.4g} ms, efficiency={eff}, layers={len(self.layers)})"
        )

    @property
    def throughput(self) -> float:
        """Samples per second at the median latency."""
        return self.batch / self.latency.median if self.latency.median > 0 else 0.0

    @property
    def achieved_flops(self) -> float:
        """Whole-model FLOP/s at the median latency."""
        return self.total_flops / self.latency.median if self.latency.median > 0 else 0.0

    @property
    def on_gpu(self) -> bool:
        """Whether the model ran on a GPU (the fingerprint names one): device-conditioned assertions."""
        return isinstance(self.fingerprint.get("gpu"), dict)

    @property
    def kernel_time(self) -> float:
        """Sum of the layers' median times (profiled run)."""
        return sum(layer.time for layer in self.layers)

    def layer(self, name: str) -> Layer:
        """The layer called ``name``, or the layer executing ONNX node ``name``.

        Raises:
            LayerNotFound: no such layer or node; the message suggests close names.
        """
        __tracebackhide__ = True  # pytest shows the test's line and the one-line message, not this frame
        for layer in self.layers:
            if layer.name == name:
                return self._with_reason(layer)
        executing = [layer for layer in self.layers if name in layer.onnx_nodes]
        if executing:  # a node run by several kernels: the one carrying its FLOPs, then the longest
            return self._with_reason(max(executing, key=lambda layer: (layer.flops, layer.time)))
        import difflib

        names = list(
            dict.fromkeys([la.name for la in self.layers] + [n for la in self.layers for n in la.onnx_nodes])
        )
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise LayerNotFound(f"no layer or ONNX node {name!r} in the profile of {self.model_name}{hint}")

    def _with_reason(self, layer: Layer) -> Layer:
        """``layer`` with a :class:`NoFraction` naming why where its fraction cannot be used."""
        reason = self._no_fraction_reason(layer)
        return layer if reason is None else replace(layer, roofline_fraction=NoFraction(reason))

    def _no_fraction_reason(self, layer: Layer | None) -> str | None:
        """Why ``layer``'s (or, for None, the model's) roofline fraction cannot be used, or None."""
        model = self.model_name
        what = f"layer {layer.name!r} of {model}" if layer is not None else f"the efficiency of {model}"
        if self.roofline is None:
            return f"{what} has no roofline fraction: no device roofline (calibrate, or pass one)"
        check = self.roofline_check
        if check.status == "host-timed":
            return f"{what} has no roofline fraction: {check.message()}"
        if check.status == "invalid":
            cause = check.causes[0] if check.causes else "unknown"
            problems = ", ".join(check.problems)
            return f"{what} has no roofline fraction: roof invalid ({problems}; likely: {cause})"
        if layer is None:
            return None if self.raw_efficiency is not None else f"{what} is unknown: no layer was timed"
        if layer.roofline_fraction is not None:
            return None
        if layer.kind == "folded":
            return f"{what} has no roofline fraction: layer not timed (folded at load time, 0 s)"
        if layer.time <= 0:
            return f"{what} has no roofline fraction: layer not timed (0 s)"
        if layer.op_type in RUNTIME_VIEW_OPS:
            return f"{what} has no roofline fraction: a view ({layer.op_type}) moves no data a roof can price"
        return f"{what} has no roofline fraction"

    def by_op_type(self) -> list[OpTypeSummary]:
        """Time, FLOPs and bytes aggregated by op type, most time first."""
        groups: dict[str, list[Layer]] = {}
        for layer in self.layers:
            groups.setdefault(layer.op_type, []).append(layer)
        total = self.kernel_time or 1.0
        rows = [
            OpTypeSummary(
                op_type=op,
                count=len(members),
                time=sum(m.time for m in members),
                share=sum(m.time for m in members) / total,
                flops=sum(m.flops for m in members),
                bytes=sum(m.bytes for m in members),
            )
            for op, members in groups.items()
        ]
        return sorted(rows, key=lambda row: row.time, reverse=True)

    @property
    def efficiency(self) -> float:
        """Time-weighted roofline fraction of the model.

        A :class:`NoFraction` (NaN; comparing it raises one line naming why; JSON null) without a
        roofline, with host-timed layers, without timed layers, or when the figures are physically
        impossible (``roofline_check.status == "invalid"``: its message says why, and
        :attr:`raw_efficiency` keeps the impossible figure): no consumer prints 5777 % as fact.
        """
        reason = self._no_fraction_reason(None)
        raw = self.raw_efficiency
        if reason is not None or raw is None:
            return NoFraction(reason or f"the efficiency of {self.model_name} is unknown")
        return raw

    @property
    def raw_efficiency(self) -> float | None:
        """Time-weighted roofline fraction, unchecked (see :attr:`efficiency`)."""
        timed = [(la.roofline_fraction, la.time) for la in self.layers if la.roofline_fraction is not None]
        timed = [(fraction, time) for fraction, time in timed if time > 0]
        total = sum(time for _, time in timed)
        if not timed or total <= 0:
            return None
        return sum(fraction * time for fraction, time in timed) / total

    @property
    def roofline_check(self) -> RooflineCheck:
        """Whether this profile's roofline figures are physically possible (see :mod:`.sanity`).

        ``check.valid`` is False when a layer runs above its roof (the timer's step in its favour)
        or the model above 100 %;
        ``check.message()`` names the likely cause; :attr:`efficiency` is then a :class:`NoFraction`.
        """
        from pytest_roofline.profile.sanity import check_profile

        return check_profile(self)

    @property
    def headroom(self) -> float:
        """Seconds saved per inference if every layer reached its roof (profiled time scale).

        A layer's roof includes the dispatch floor: an overhead-bound layer saves only what it
        takes beyond the floor (see :attr:`overhead` for what the floor itself costs)."""
        return sum(la.time - la.roof_time for la in self.layers)

    @property
    def overhead(self) -> dict[str, float]:
        """What the dispatch floor costs the model (profiled time scale).

        ``share``: of the kernel time, the share in layers bound by the floor (``overhead``);
        ``seconds``: what the model would gain without the floor, every overhead-bound layer
        running at its compute or memory roof instead; ``layers``: how many they are;
        ``dispatch_floor``: the floor, seconds a kernel (0: the roofline has none).

        An overhead-bound layer that read 0 on its timer (``Layer.time_below``: it ran under one
        step) is no 0 s: ``under_step`` counts them, ``under_step_seconds`` is the most they took
        together, and ``share_at_most`` / ``seconds_at_most`` are the share and the gain with
        each at its step (equal to ``share`` / ``seconds`` when there is none).
        """
        roof = self.roofline
        bound = [la for la in self.layers if la.bound == "overhead" and la.time > 0]
        under = [la for la in self.layers if la.bound == "overhead" and la.time <= 0 and la.time_below > 0]
        total, below = self.kernel_time, sum(la.time_below for la in under)

        def saved(la: Layer, seconds: float) -> float:  # the layer's time beyond its other roofs
            if roof is None:
                return 0.0
            dtype = la.roof_dtype or roof_dtype(roof, self.precision)
            times = roof.roof_times(la.flops, la.bytes, dtype, la.memory_bandwidth)
            return max(seconds - max(times["compute"], times["memory"]), 0.0)

        gain = sum((saved(la, la.time) for la in bound), 0.0)
        gain_below = sum((saved(la, la.time_below) for la in under), 0.0)
        bound_time = sum(la.time for la in bound)
        return {
            "share": bound_time / total if total > 0 else 0.0,
            "seconds": gain,
            "layers": float(len(bound)),
            "dispatch_floor": roof.dispatch_floor if roof is not None else 0.0,
            "under_step": float(len(under)),
            "under_step_seconds": below,
            "share_at_most": (bound_time + below) / (total + below) if total + below > 0 else 0.0,
            "seconds_at_most": gain + gain_below,
        }

    def to_dict(self, include_samples: bool = True) -> dict[str, Any]:
        """JSON-ready dict following the ``roofline profile --format json`` contract.

        When the roofline check finds impossible figures, ``efficiency`` is null and
        ``roofline_check`` says why (its ``efficiency`` keeps the raw figure, labelled invalid).
        """
        check = self.roofline_check
        return {
            "schema_version": PROFILE_SCHEMA,
            "model": self.model_name,
            "model_path": self.model_path,
            "model_hash": self.model_hash,
            "backend": self.backend,
            "backend_version": self.backend_version,
            "options": dict(self.options),
            "batch": self.batch,
            "dims": dict(self.dims),
            "input_shapes": {k: list(v) for k, v in self.input_shapes.items()},
            "precision": self.precision,
            "shape_method": self.shape_method,
            "latency": self.latency.to_dict(include_samples),
            "throughput": self.throughput,
            "total": {"flops": self.total_flops, "macs": self.total_macs, "bytes": self.total_bytes},
            "achieved_flops": self.achieved_flops,
            "efficiency": known_fraction(self.efficiency),
            "roofline_check": check.to_dict(),
            "layer_timing": self.layer_timing,
            "headroom": self.headroom,
            "overhead": self.overhead,
            "attributed_fraction": self.attributed_fraction,
            "layers": [layer.to_dict(include_samples) for layer in self.layers],
            "roofline": self.roofline.to_dict() if self.roofline else None,
            "fingerprint": dict(self.fingerprint),
            "spans": {k: v.to_dict(include_samples) for k, v in self.spans.items()},
            "extra": dict(self.extra),
            "memory": self.memory.to_dict() if self.memory is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelProfile:
        """Inverse of :meth:`to_dict`."""
        return cls(
            model_name=data["model"],
            model_path=data.get("model_path"),
            model_hash=data.get("model_hash", ""),
            backend=data["backend"],
            backend_version=data.get("backend_version", ""),
            options=dict(data.get("options", {})),
            batch=data["batch"],
            input_shapes={k: tuple(v) for k, v in data.get("input_shapes", {}).items()},
            latency=LatencyStats.from_dict(data["latency"]),
            layers=tuple(Layer.from_dict(la) for la in data.get("layers", [])),
            attributed_fraction=data.get("attributed_fraction", 0.0),
            total_flops=data.get("total", {}).get("flops", 0),
            total_macs=data.get("total", {}).get("macs", 0),
            total_bytes=data.get("total", {}).get("bytes", 0),
            precision=data.get("precision", "fp32"),
            roofline=DeviceRoofline.from_dict(data["roofline"]) if data.get("roofline") else None,
            dims=dict(data.get("dims", {})),
            shape_method=data.get("shape_method", ""),
            fingerprint=dict(data.get("fingerprint", {})),
            spans={k: LatencyStats.from_dict(v) for k, v in data.get("spans", {}).items()},
            extra=dict(data.get("extra", {})),
            layer_timing=str(data.get("layer_timing") or "device"),
            memory=_model_memory(data.get("memory")),
        )
