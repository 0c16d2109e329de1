"""Assertion helpers whose failure messages name the model, layer, value, threshold and roof.

>>> assert_fraction(prof, "conv1", above=0.4)  # doctest: +SKIP
AssertionError: layer 'conv1' (Conv) of resnet50 (batch 8, onnxruntime) reaches 31.2% of its
roof, not above 40%: 12.1 GFLOP/s of 38.9 GFLOP/s attainable (memory-bound, 2.10 FLOP/byte) ...
"""

from __future__ import annotations

import math
from typing import Any

from pytest_roofline.fmt import fmt_pct
from pytest_roofline.fmt import fmt_seconds_fixed as format_seconds
from pytest_roofline.measure.stats import LatencyStats
from pytest_roofline.profile import Layer, ModelProfile, NoFraction, known_fraction

__all__ = [
    "MEMORY_FIGURES",
    "assert_efficiency",
    "assert_fraction",
    "assert_latency",
    "assert_memory",
    "describe",
    "explain_compare",
]

STATS = ("median", "mean", "min", "max", "p25", "p75", "p90", "p99")


def _flops(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for unit, scale in (("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} FLOP/s"


def _pct(value: float | None) -> str:
    return fmt_pct(value, missing="-")


def _who(prof: ModelProfile) -> str:
    return f"{prof.model_name} (batch {prof.batch}, {prof.backend})"


def _roof(prof: ModelProfile) -> str:
    roof = prof.roofline
    if roof is None:
        return "no device roofline"
    return (
        f"roofs: {_flops(roof.peak)} compute, {roof.peak_bandwidth / 1e9:.1f} GB/s memory, "
        f"ridge {roof.ridge_point:.1f} FLOP/byte"
    )


def describe_layer(layer: Layer) -> str:
    """One line about a layer: time, FLOPs, achieved vs attainable, bound."""
    bound = f"{layer.bound}-bound, " if layer.bound else ""
    return (
        f"layer {layer.name!r} ({layer.op_type}, {len(layer.onnx_nodes)} ONNX nodes): "
        f"{format_seconds(layer.time)}, {_flops(layer.achieved_flops)} achieved of "
        f"{_flops(layer.attainable_flops)} attainable ({bound}{layer.intensity:.2f} FLOP/byte), "
        f"roofline fraction {_pct(layer.roofline_fraction)}"
    )


def describe(value: Any) -> list[str]:
    """Explanation lines for a Layer, ModelProfile or LatencyStats ([] for anything else)."""
    if isinstance(value, Layer):
        return [describe_layer(value)]
    if isinstance(value, ModelProfile):
        lat = value.latency
        lines = [
            f"{_who(value)}: median {format_seconds(lat.median)} (p25 {format_seconds(lat.p25)}, "
            f"p90 {format_seconds(lat.p90)}, n={lat.n}), efficiency {_pct(value.efficiency)}",
            _roof(value),
        ]
        top = sorted(value.layers, key=lambda la: la.time, reverse=True)[:3]
        lines.extend("  " + describe_layer(layer) for layer in top)
        return lines
    if isinstance(value, LatencyStats):
        return [
            f"latency: median {format_seconds(value.median)}, p25 {format_seconds(value.p25)}, "
            f"p90 {format_seconds(value.p90)}, min {format_seconds(value.min)}, n={value.n}"
        ]
    return []


def explain_compare(op: str, left: Any, right: Any) -> list[str] | None:
    """``pytest_assertrepr_compare`` body: explain layers, profiles and latency stats."""
    lines = describe(left) + describe(right)
    if not lines:
        return None
    head = f"{type(left).__name__} {op} {type(right).__name__}"
    return [head, *lines]


def _fail(message: str) -> None:
    __tracebackhide__ = True
    raise AssertionError(message)


def assert_latency(prof: ModelProfile, below: float, stat: str = "median") -> None:
    """Assert that the latency statistic ``stat`` (seconds) is below ``below``."""
    __tracebackhide__ = True
    if stat not in STATS:
        raise ValueError(f"stat must be one of {', '.join(STATS)}, got {stat!r}")
    value = getattr(prof.latency, stat)
    if not value < below:
        _fail(
            f"latency {stat} of {_who(prof)} is {format_seconds(value)}, not below "
            f"{format_seconds(below)} (median {format_seconds(prof.latency.median)}, "
            f"p90 {format_seconds(prof.latency.p90)}, n={prof.latency.n}); {_roof(prof)}"
        )


#: What :func:`assert_memory` may bound: fields of :class:`~pytest_roofline.memory.MemoryProfile`.
MEMORY_FIGURES = ("peak", "peak_activations", "weights", "arena_held")


def assert_memory(prof: ModelProfile, below: int, figure: str = "peak") -> None:
    """Assert that one inference's memory ``figure`` (bytes; default the peak in use) is below ``below``.

    Fails (never passes silently) when the backend reported no memory for the profile.
    """
    __tracebackhide__ = True
    from pytest_roofline.fmt import fmt_bytes

    if figure not in MEMORY_FIGURES:
        raise ValueError(f"figure must be one of {', '.join(MEMORY_FIGURES)}, got {figure!r}")
    memory = prof.memory
    if memory is None:
        _fail(f"{_who(prof)} has no memory figures: the {prof.backend} backend reported none")
        return
    value = getattr(memory, figure)
    if not value < below:
        allocations = sorted(
            ((la.name, la.memory.allocated) for la in prof.layers if la.memory is not None),
            key=lambda x: -x[1],
        )
        where = ", ".join(f"{name} +{fmt_bytes(size)}" for name, size in allocations[:3] if size > 0)
        _fail(
            f"memory {figure} of {_who(prof)} is {fmt_bytes(value)} ({value} B), "
            f"not below {fmt_bytes(below)} "
            f"(peak {fmt_bytes(memory.peak)}: weights {fmt_bytes(memory.weights)}, activations "
            f"{fmt_bytes(memory.peak_activations)}; from the {memory.source})"
            + (f"; largest allocations: {where}" if where else "")
        )


def assert_fraction(prof: ModelProfile, layer: str, above: float) -> None:
    """Assert that layer ``layer`` reaches more than ``above`` of its roof."""
    __tracebackhide__ = True
    found = prof.layer(layer)
    fraction = found.roofline_fraction
    if fraction is None or isinstance(fraction, NoFraction):
        why = f": {fraction.reason}" if isinstance(fraction, NoFraction) else ""
        _fail(f"{describe_layer(found)} of {_who(prof)} has no roofline fraction ({_roof(prof)}){why}")
    if not fraction > above:  # type: ignore[operator]
        _fail(
            f"layer {found.name!r} of {_who(prof)} reaches {_pct(fraction)} of its roof, not above "
            f"{_pct(above)}: {describe_layer(found)}; {_roof(prof)}"
        )


def assert_efficiency(prof: ModelProfile, above: float) -> None:
    """Assert that the model's time-weighted roofline fraction is above ``above``."""
    __tracebackhide__ = True
    value = known_fraction(prof.efficiency)
    if value is None or not value > above:
        worst = sorted(prof.layers, key=lambda la: la.time - la.roof_time, reverse=True)[:3]
        where = "; ".join(
            f"{la.name} {format_seconds(la.time)} at {_pct(la.roofline_fraction)}" for la in worst
        )
        why = prof.efficiency.reason if isinstance(prof.efficiency, NoFraction) else ""
        _fail(
            f"efficiency of {_who(prof)} is {_pct(value)} of the roofline, not above {_pct(above)}; "
            f"most headroom: {where or 'no layers'}; {_roof(prof)}" + (f"; {why}" if why else "")
        )
