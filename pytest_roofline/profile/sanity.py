"""Physical sanity of roofline figures: no layer above its roof, no model above 100 %.

A roofline fraction above 1 is impossible by definition; one far above means the roof does not
describe what ran: a calibration measured while the machine was busy (roofs too low), a roof
from another device (a host CPU's roof for a GPU run), or a precision/math mode the roof does not
cover (fp16 tensor cores against an fp32 roof), a roof the probes set below what some kernel
reaches, or a cost rule that counts more FLOPs or bytes than the kernel touches.
:func:`check_profile` applies the rule to a :class:`~pytest_roofline.profile.ModelProfile` on
every device, the CPU included, and names the causes it can show: another device, a precision,
a busy calibration only when the calibration's own record (warnings, machine load; the session
spread where no load was recorded) says so, then the worst layer's roof (and the probe that set
it; an unsteady one where its two quiet sessions differ) and its cost rule (op, bytes or FLOPs
counted, the rule).  Reports print :func:`warning_line` instead of the impossible
percentages.

The rule: a layer above its roof (``LAYER_LIMIT`` = 1), or a model efficiency above
``MODEL_LIMIT``.  The only allowance is the timer's resolution, per layer: its time is read with one
timer step in its favour (a 3 µs layer timed at 1 µs steps may have run 4 µs), so quantization
alone never trips the rule, and nothing else does either: a 2 ms layer at 101 % of its roof means
the roof or the cost rule is wrong, and the causes name which (the probe that set the roof: a
compute, memory or dispatch probe; the cost rule that priced the layer).  View ops (``Reshape``,
``Squeeze``...) move nothing: only the dispatch floor prices them, and where the roofline has no
floor they carry no fraction (measured: onnxruntime's CPU Reshape "reached" 300 % of a memory roof).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_roofline.device import device_name
from pytest_roofline.roofline.probes import crowded
from pytest_roofline.roofline.roofs import OVERHEAD

if TYPE_CHECKING:
    from pytest_roofline.profile import Layer, ModelProfile
    from pytest_roofline.roofline.roofs import DeviceRoofline

__all__ = [
    "LAYER_LIMIT",
    "MODEL_LIMIT",
    "RooflineCheck",
    "busy_calibration",
    "check_profile",
    "fraction_interval",
    "layers_above_roof",
    "unresolved_layers",
    "roof_of",
    "warning_line",
]

LAYER_LIMIT = 1.0  # a layer above its roof (the timer's step in its favour) is impossible, not noise
MODEL_LIMIT = 1.0  # a model's time-weighted fraction cannot exceed its roofs
UNKNOWN_DEVICE = "unknown device"  # what device_name says of a fingerprint naming none
SPREAD_LIMIT = 0.15  # two sessions of a roof probe further apart than this: a disturbed calibration
UNSTEADY_ROOF = "unsteady roof"  # a calibration warning about one roof (probes.UNSTEADY_ROOF)
_DTYPE_OF = {"fp16": "float16", "bf16": "bfloat16", "int8": "int8"}


@dataclass(frozen=True)
class RooflineCheck:
    """The verdict on one profile's roofline figures.

    ``status``: ``valid``; ``invalid`` (impossible figures: ``problems`` says which, ``causes``
    the likely reasons); ``host-timed`` (layer times are host-side launch times of an
    accelerator: no fraction was computed); ``no-roofline``.
    """

    status: str
    problems: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()
    efficiency: float | None = None  # the raw time-weighted fraction, possible or not
    worst_layer: str | None = None
    worst_fraction: float | None = None
    #: What the calibration's own record says against it (busy, not settled: :func:`busy_calibration`),
    #: valid or not: a profile judged against an unsettled roof says so, never silently.
    calibration: str = ""

    @property
    def valid(self) -> bool:
        """Whether the roofline figures may be printed as fact."""
        return self.status == "valid"

    def message(self) -> str:
        """One line: what is impossible and the likely cause (empty when valid)."""
        if self.status == "invalid":
            cause = "; ".join(self.causes) or "unknown"
            return f"roofline invalid for this run: {', '.join(self.problems)}; likely cause: {cause}"
        if self.status == "host-timed":
            return "; ".join(self.problems)
        return ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``ModelProfile.to_dict()["roofline_check"]``)."""
        return {
            "status": self.status,
            "valid": self.valid,
            "problems": list(self.problems),
            "causes": list(self.causes),
            "efficiency": self.efficiency,
            "worst_layer": self.worst_layer,
            "worst_fraction": self.worst_fraction,
            "calibration": self.calibration,
            "message": self.message(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RooflineCheck:
        """Inverse of :meth:`to_dict`."""
        return cls(
            status=str(data.get("status", "valid")),
            problems=tuple(str(p) for p in data.get("problems") or ()),
            causes=tuple(str(c) for c in data.get("causes") or ()),
            efficiency=data.get("efficiency"),
            worst_layer=data.get("worst_layer"),
            worst_fraction=data.get("worst_fraction"),
            calibration=str(data.get("calibration") or ""),
        )


HOST_TIMED = (
    "layer times are host-side launch times (no GPU timer: install cupti-python, "
    'pip install "pytest-roofline[gpu]"); no roofline fraction computed'
)


def check_profile(profile: ModelProfile) -> RooflineCheck:
    """Apply the physical-sanity rule to ``profile`` and name the likely causes."""
    roof = profile.roofline
    if roof is None:
        return RooflineCheck("no-roofline")
    if profile.layer_timing == "host":
        return RooflineCheck("host-timed", problems=(HOST_TIMED,))
    problems: list[str] = []
    above = layers_above_roof(profile)  # the furthest above first: the layer to explain
    worst = above[0] if above else None
    if worst is not None:
        more = f" (and {len(above) - 1} more)" if len(above) > 1 else ""
        problems.append(f"layer {worst.name!r} at {worst.roofline_fraction:.0%} of its roof{more}")
    efficiency = profile.raw_efficiency
    if efficiency is not None and efficiency > MODEL_LIMIT + 1e-9:
        problems.append(f"model efficiency {efficiency:.0%}")
    if not problems:
        return RooflineCheck("valid", efficiency=efficiency, calibration=busy_calibration(roof))
    return RooflineCheck(
        "invalid",
        problems=tuple(problems),
        causes=tuple(_causes(profile, worst)),
        efficiency=efficiency,
        worst_layer=worst.name if worst else None,
        worst_fraction=worst.roofline_fraction if worst else None,
        calibration=busy_calibration(roof),
    )


def layers_above_roof(profile: ModelProfile) -> list[Layer]:
    """The layers :func:`check_profile` finds above their roof (the timer's step in their favour),
    furthest above first: what a report names when a profile is invalid."""
    above = [layer for layer, least in _intervals(profile) if least > LAYER_LIMIT]
    return sorted(above, key=lambda la: -(la.roofline_fraction or 0.0))


def _intervals(profile: ModelProfile) -> list[tuple[Layer, float]]:
    """Each timed layer with a fraction (views priced by the floor too; not folded ones) and the
    least its fraction can be (:func:`fraction_interval`)."""
    resolution = _number(profile.extra.get("timer_resolution"), 1e-6)
    return [
        (layer, fraction_interval(layer.roofline_fraction, layer.time, resolution)[0])
        for layer in profile.layers
        if layer.roofline_fraction is not None
        and (layer.time > 0 or layer.time_below > 0)
        and layer.kind != "folded"
    ]


def fraction_interval(fraction: float, seconds: float, resolution: float) -> tuple[float, float]:
    """What a layer's roofline fraction can be, given its timer: (least, as read).

    A layer timed at ``seconds`` by a timer of ``resolution`` steps (onnxruntime's profiler and
    OpenVINO's counters: whole µs) ran anywhere from ``seconds`` to one step longer, so its
    fraction lies between ``fraction * seconds / (seconds + resolution)`` and ``fraction``.  A layer
    is above its roof only when the least end is (:data:`LAYER_LIMIT`); one whose interval spans
    100 % is not resolved by its timer, never "above its roof" (an OpenVINO kernel under 1 µs
    read 108-1069 % on the point).  For a 2 ms layer the interval is 0.05 % wide: nothing else is
    allowed.  A layer that read 0 (it ran under one step: ``Layer.time_below``) has its fraction
    priced at the step, the least it can be: (``fraction``, unbounded)."""
    if seconds <= 0:
        return fraction, math.inf
    return fraction * seconds / (seconds + resolution), fraction


def unresolved_layers(profile: ModelProfile) -> list[Layer]:
    """Layers whose fraction reads above 100 % on the point but whose timer interval
    (:func:`fraction_interval`) reaches 100 %: too short for their timer to tell, not above it."""
    return [
        layer
        for layer, least in _intervals(profile)
        if (layer.roofline_fraction or 0.0) > LAYER_LIMIT >= least
    ]


def roof_of(profile: ModelProfile, layer: Layer) -> str:
    """The roof ``layer`` was judged against, in words: ``compute 472.6 GFLOP/s bfloat16 (the
    theoretical peak)``, ``memory L3 79.4 GB/s (probe stream-4MiB)`` or ``dispatch floor 0.21 µs``."""
    roof = profile.roofline
    if roof is None:
        return "no roofline"
    if layer.bound == OVERHEAD:
        return f"dispatch floor {roof.dispatch_floor * 1e6:.3g} µs a kernel"
    if layer.bound == "compute":
        dtype = layer.roof_dtype or _roof_dtype(profile)
        peak = roof.peak_flops.get(dtype, roof.peak)
        return f"compute {peak / 1e9:.1f} GFLOP/s {dtype} ({_probe(roof, 'compute', peak, dtype)})"
    bandwidth = layer.memory_bandwidth or roof.bandwidth_for(layer.bytes)
    level = layer.memory_level or _level(roof, bandwidth)
    return f"memory {level} {bandwidth / 1e9:.1f} GB/s ({_probe(roof, 'memory', bandwidth)})"


def _causes(profile: ModelProfile, worst: Layer | None) -> list[str]:
    """Likely causes, most specific first: the device, the precision, a busy calibration (only when
    its own spread or load record says so), then what the worst layer can show: its roof or its cost
    rule."""
    roof = profile.roofline
    assert roof is not None
    causes: list[str] = []
    measured, calibrated = device_name(profile.fingerprint), device_name(roof.fingerprint)
    run_providers, roof_providers = profile.fingerprint.get("providers"), roof.fingerprint.get("providers")
    known = UNKNOWN_DEVICE not in (measured, calibrated)  # a fingerprint naming no device proves nothing
    if profile.fingerprint and known and calibrated != measured:
        causes.append(
            f"another device: the roofline was calibrated on {calibrated}, the model ran on {measured}"
        )
    elif run_providers and roof_providers and run_providers != roof_providers:
        causes.append(
            f"another device: the roofline was calibrated with {', '.join(map(str, roof_providers))}, "
            f"the model ran with {', '.join(map(str, run_providers))}"
        )
    dtype = _DTYPE_OF.get(profile.precision)
    if dtype and dtype not in roof.peak_flops:
        causes.append(
            f"a precision mode: the model runs {profile.precision} but the roofline has no {dtype} roof "
            f"(judged against {roof.dtype}); calibrate with --dtype {dtype}"
        )
    busy = busy_calibration(roof)
    if busy:
        causes.append(f"a busy calibration ({busy}); re-measure with `roofline calibrate --force` when quiet")
    if worst is not None:
        causes.extend(_unsteady_roof(profile, worst, spread=not busy))
        causes.extend(_layer_causes(profile, worst))
    return causes


def busy_calibration(roof: DeviceRoofline) -> str:
    """What the calibration's own record says against it (warnings, load; the session spread only
    where no load was recorded), or ``""``.

    A spread between the two sessions of a roof probe says the figure moved, not why.  Where the
    load record says the machine was quiet, the spread is the probe's own variance, and
    :func:`_unsteady_roof` names it where the layer was judged against that roof.  Measured on
    this project's 2-core KVM guest, other processes under 2 % of the CPUs in every calibration:
    the DRAM streams' two sessions differed by 42 % (onnxruntime) and 17 % (OpenVINO), a float32
    GEMM's by 18 % (OpenVINO, one thread); every OpenVINO profile then blamed "a busy
    calibration".  A DRAM stream shares the host's memory with other guests, whom this guest's
    load record does not see.
    """
    busy = [w for w in roof.warnings if w and not w.startswith(UNSTEADY_ROOF)]  # a roof's own note
    if busy:
        return busy[0]
    load = _load(roof)
    if load is not None:  # on the CPUs its probes ran on (a one-thread roof beside one busy process: quiet)
        return f"measured while {load.describe()}" if crowded(load, roof.threads) else ""
    spread = max((v for k, v in roof.spread.items() if k != "dispatch"), default=0.0)  # roofs, not the floor
    if spread > SPREAD_LIMIT:
        return f"its two sessions differ by {spread:.0%}"
    return ""


def _load(roof: DeviceRoofline) -> Any:
    """The calibration's recorded :class:`~pytest_roofline.device.load.MachineLoad`, or None."""
    if not roof.load:
        return None
    from pytest_roofline.device.load import MachineLoad

    try:
        load = MachineLoad.from_dict(dict(roof.load))
    except (TypeError, ValueError, KeyError):
        return None
    return load if load.available else None


def _unsteady_roof(profile: ModelProfile, layer: Layer, spread: bool = True) -> list[str]:
    """The roof ``layer`` was judged against, when the calibration says it stayed unsteady (its
    ``unsteady roof (<roof>)`` warning: a memory level for a memory-bound layer, the dtype for a
    compute-bound one) or, with ``spread`` (no load explains it), its probe's two quiet sessions
    differed."""
    roof = profile.roofline
    assert roof is not None
    memory = not layer.flops or (layer.bound or roof.bound(layer.intensity, layer.bytes)) == "memory"
    dtype = layer.roof_dtype or _roof_dtype(profile)
    noted = [
        f"an {warning}; re-measure with `roofline calibrate --force`"
        for warning in roof.warnings
        if warning.startswith(UNSTEADY_ROOF) and (_warned_roof(warning) == dtype) != memory
    ]
    if noted or not spread:
        return noted
    if memory and _level(roof, roof.bandwidth_for(layer.bytes)) != "DRAM":
        return []  # the spread is recorded for the float32 and DRAM roofs only
    key = "dram" if memory else "float32"
    apart = roof.spread.get(key, 0.0)
    if apart <= SPREAD_LIMIT:
        return []
    return [
        f"an unsteady {'DRAM' if memory else 'float32'} roof: its probe's two sessions differ by "
        f"{apart:.0%} on a quiet machine; re-measure with `roofline calibrate --force`"
    ]


def _warned_roof(warning: str) -> str:
    """The roof an ``unsteady roof (<roof>): ...`` warning is about (a dtype or a memory level)."""
    head = warning[len(UNSTEADY_ROOF) :].strip()
    return head[1 : head.index(")")] if head.startswith("(") and ")" in head else ""


def _layer_causes(profile: ModelProfile, layer: Layer) -> list[str]:
    """The roof the layer beat (and which probe set it), and the cost rule that priced the layer."""
    from pytest_roofline.analysis.traffic import byte_rule

    roof = profile.roofline
    assert roof is not None
    dtype = layer.roof_dtype or _roof_dtype(profile)
    peak = roof.peak_flops.get(dtype, roof.peak)
    bandwidth = layer.memory_bandwidth or roof.bandwidth_for(layer.bytes)  # the roof it was judged against
    nodes = f"layer {layer.name!r} ({layer.op_type})"
    if layer.bound == OVERHEAD:
        return [_floor_cause(roof, layer, nodes)]
    memory = not layer.flops or (layer.bound or roof.bound(layer.intensity, layer.bytes)) == "memory"
    counted = f"{_mb(layer.bytes)} counted as moved"
    rule = (
        f"the cost rule of {layer.op_type}: {nodes} has {counted} (rule: {byte_rule(layer.op_type)}); "
        "a kernel that touches fewer bytes runs above a roof it does not reach"
    )
    if memory:
        level = layer.memory_level or _level(roof, bandwidth)
        reached = layer.bytes / layer.time / 1e9 if layer.time > 0 else 0.0
        at_roof = (
            f"the memory roof: {nodes} moved {reached:.1f} GB/s against {bandwidth / 1e9:.1f} GB/s ({level}, "
            f"set by {_probe(roof, 'memory', bandwidth)}); a working set held in a faster cache beats it, "
            "or the roofs were measured on a slower machine: `roofline calibrate --force`"
        )
        return [rule, at_roof]
    reached = layer.flops / layer.time / 1e9 if layer.time > 0 else 0.0
    at_roof = (
        f"the compute roof: {nodes} reached {reached:.1f} GFLOP/s against {peak / 1e9:.1f} GFLOP/s "
        f"of {dtype} (set by {_probe(roof, 'compute', peak, dtype)}; "
        f"rule: {_precision_rule(profile, dtype)}); "
        "a kernel beats the probes (a shape, precision or clock they miss, or roofs measured on a slower "
        "machine: `roofline calibrate --force`)"
    )
    shown = ", ".join(layer.onnx_nodes[:3]) + (", ..." if len(layer.onnx_nodes) > 3 else "")
    flops_rule = (
        f"the FLOPs counted: {nodes} is priced at {layer.flops / 1e6:.3g} MFLOP from its "
        f"{len(layer.onnx_nodes)} ONNX nodes ({shown}); a kernel running fewer of them is attributed too many"
    )
    return [at_roof, flops_rule]


def _precision_rule(profile: ModelProfile, dtype: str) -> str:
    """Why a layer was judged in ``dtype``: the precision its kernel reported, or the model's."""
    if dtype != _roof_dtype(profile):
        return f"its kernel ran in {dtype} (the backend's runtime precision)"
    return f"the model's precision {profile.precision}, its kernel reported no other"


def _floor_cause(roof: DeviceRoofline, layer: Layer, nodes: str) -> str:
    """The dispatch floor a layer beat: the probe that set it (a kernel cannot take less)."""
    probe = next((f"probe {p.name}" for p in roof.probes if p.kind == "dispatch"), "no recorded probe")
    return (
        f"the dispatch floor: {nodes} took {layer.time * 1e6:.3g} µs against a floor of "
        f"{roof.dispatch_floor * 1e6:.3g} µs a kernel (set by {probe}); "
        "the floor was measured slow (a busy calibration: `roofline calibrate --force`), or the "
        "backend ran this node inside another kernel"
    )


def _roof_dtype(profile: ModelProfile) -> str:
    from pytest_roofline.roofline.roofs import roof_dtype

    assert profile.roofline is not None
    return roof_dtype(profile.roofline, profile.precision)


def _level(roof: DeviceRoofline, bandwidth: float) -> str:
    for level in roof.cache_levels:
        if (
            level.size
            and math.isclose(level.bandwidth, bandwidth, rel_tol=1e-9)
            and bandwidth > roof.peak_bandwidth
        ):
            return level.name
    return "DRAM"


def _probe(roof: DeviceRoofline, kind: str, value: float, dtype: str | None = None) -> str:
    """The calibration probe whose figure is the roof ``value``, or where the roof came from."""
    probes = [p for p in roof.probes if p.kind == kind and (dtype is None or p.dtype == dtype)]
    closest = min(probes, key=lambda p: abs(p.value - value), default=None)
    if closest is not None and math.isclose(closest.value, value, rel_tol=0.01):
        return f"probe {closest.name}"
    theory = roof.theoretical_peak_flops.get(dtype or "") if kind == "compute" else None
    if theory and math.isclose(theory, value, rel_tol=0.01):
        return "the theoretical peak"
    return f"{closest.name}, the nearest probe" if closest is not None else "no recorded probe"


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.3g} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.3g} kB"


def _number(value: Any, default: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return default


def warning_line(profile: ModelProfile | Mapping[str, Any], label: str = "") -> str | None:
    """The one-line warning a report prints for ``profile`` (a ModelProfile or its ``to_dict``).

    None when its roofline figures stand (valid, or no roofline).  ``label`` (a test id or model
    name) prefixes the line.  For the pytest terminal summary, print one per profiled test.
    """
    if isinstance(profile, Mapping):
        data = profile.get("roofline_check")
        if not isinstance(data, Mapping):
            return None
        check = RooflineCheck.from_dict(data)
    else:
        check = profile.roofline_check
    if check.status not in ("invalid", "host-timed"):
        return None
    prefix = f"{label}: " if label else ""
    word = "ROOFLINE INVALID" if check.status == "invalid" else "roofline not applied"
    return f"{word} {prefix}{check.message()}"
