"""Physical sanity of roofline figures: no layer above its roof, no model above 100 %.

A roofline fraction above 1 is impossible by definition; one far above means the roof does not
describe what ran: a calibration measured while the machine was busy (roofs too low), a roof
from another device (a host CPU's roof for a GPU run), or a precision/math mode the roof does not
cover (fp16 tensor cores against an fp32 roof).  :func:`check_profile` applies the rule to a
:class:`~pytest_roofline.profile.ModelProfile` on every device, the CPU included, and names the
likely cause; reports print :func:`warning_line` instead of the impossible percentages.

The rule: a layer above ``LAYER_LIMIT`` × its roof, or a model efficiency above ``MODEL_LIMIT``.
A layer's time is read with the timer's resolution in its favour (a 3 µs layer timed at 1 µs steps
may have run 4 µs), so quantization alone never trips the rule.  View ops (``Reshape``,
``Squeeze``...) are exempt: the cost model counts their bytes, but a runtime may alias their
output and move nothing (measured: onnxruntime's CPU Reshape "reaches" 300 % of its roof).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_roofline.analysis.views import RUNTIME_VIEW_OPS
from pytest_roofline.device import device_name

if TYPE_CHECKING:
    from pytest_roofline.profile import ModelProfile

__all__ = ["LAYER_LIMIT", "MODEL_LIMIT", "RooflineCheck", "check_profile", "warning_line"]

LAYER_LIMIT = 1.15  # a layer above this many times its roof is impossible, not noise
MODEL_LIMIT = 1.0  # a model's time-weighted fraction cannot exceed its roofs
SPREAD_LIMIT = 0.15  # two sessions of a roof probe further apart than this: a disturbed calibration
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
    resolution = _number(profile.extra.get("timer_resolution"), 1e-6)
    problems: list[str] = []
    worst: tuple[str, float] | None = None
    impossible = 0
    for layer in profile.layers:
        fraction = layer.roofline_fraction
        if fraction is None or layer.time <= 0 or layer.kind == "folded" or layer.op_type in RUNTIME_VIEW_OPS:
            continue
        at_worst = fraction * layer.time / (layer.time + resolution)  # the timer's step in its favour
        if at_worst > LAYER_LIMIT:
            impossible += 1
            if worst is None or fraction > worst[1]:
                worst = (layer.name, fraction)
    if worst is not None:
        more = f" (and {impossible - 1} more)" if impossible > 1 else ""
        problems.append(f"layer {worst[0]!r} at {worst[1]:.0%} of its roof{more}")
    efficiency = profile.raw_efficiency
    if efficiency is not None and efficiency > MODEL_LIMIT + 1e-9:
        problems.append(f"model efficiency {efficiency:.0%}")
    if not problems:
        return RooflineCheck("valid", efficiency=efficiency)
    return RooflineCheck(
        "invalid",
        problems=tuple(problems),
        causes=tuple(_causes(profile)),
        efficiency=efficiency,
        worst_layer=worst[0] if worst else None,
        worst_fraction=worst[1] if worst else None,
    )


def _causes(profile: ModelProfile) -> list[str]:
    """Likely causes, most specific first; a generic one when nothing specific is found."""
    roof = profile.roofline
    assert roof is not None
    causes: list[str] = []
    measured, calibrated = device_name(profile.fingerprint), device_name(roof.fingerprint)
    run_providers, roof_providers = profile.fingerprint.get("providers"), roof.fingerprint.get("providers")
    if profile.fingerprint and calibrated != measured:
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
    busy = [w for w in roof.warnings if w]
    spread = max(roof.spread.values(), default=0.0)
    if busy or spread > SPREAD_LIMIT:
        detail = busy[0] if busy else f"its two sessions differ by {spread:.0%}"
        causes.append(
            f"a busy calibration ({detail}); re-measure with `roofline calibrate --force` when quiet"
        )
    if not causes:
        causes.append(
            f"a stale or busy calibration (measured {roof.measured_at or 'at an unknown time'}): "
            "re-measure with `roofline calibrate --force` (pytest: --roofline-recalibrate) on a quiet machine"
        )
    return causes


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
