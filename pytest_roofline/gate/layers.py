"""Per-layer comparison with a baseline: which layers grew, which are new, which are gone."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pytest_roofline.errors import OptionError
from pytest_roofline.gate.sampling import control_drift_noise, load_floor
from pytest_roofline.gate.verdict import LayerDelta, Verdict, compare, new_verdict

if TYPE_CHECKING:
    from pytest_roofline.device.load import MachineLoad
    from pytest_roofline.gate.baseline import BaselineEntry, LayerRecord
    from pytest_roofline.profile import ModelProfile

__all__ = ["layer_deltas", "layer_verdicts"]


def layer_deltas(
    baseline_layers: Mapping[str, LayerRecord], current: Mapping[str, float]
) -> list[LayerDelta]:
    """Per-layer raw time deltas: layers in both, layers new since the baseline, layers gone."""
    deltas = []
    for name, now in current.items():
        record = baseline_layers.get(name)
        before = record.time if record else None
        if before and now:
            deltas.append(LayerDelta(name, float(before), float(now), float(now) / float(before)))
        elif now and name not in baseline_layers:
            deltas.append(LayerDelta(name, 0.0, float(now), None, status="new"))
    for name, record in baseline_layers.items():
        if record.time and name not in current:
            deltas.append(LayerDelta(name, float(record.time), 0.0, None, status="gone"))
    return deltas


def layer_verdicts(
    metrics: Sequence[str],
    profile: ModelProfile,
    baseline: BaselineEntry | None,
    control_p25: float,
    tolerance: float,
    baseline_control_p25: float | None = None,
    load: MachineLoad | None = None,
    baseline_pressure: float = 0.0,
) -> list[Verdict]:
    """A verdict per ``layer:<name>`` metric: the layer's time normalized by the control probe.

    ``control_p25`` and ``baseline_control_p25`` are the probe's p25 at the threads the layer
    times were measured at, now and in the baseline (default: the baseline's gate control).  The
    same rules as the model's verdict apply: a probe at another speed than at baseline time widens
    the noise, and the load now (``load``) or when the baseline was recorded (``baseline_pressure``)
    widens it by the noise model's layer floor.

    Raises:
        OptionError: a metric names a layer the model does not have.
    """
    verdicts = []
    for metric in metrics:
        if not metric.startswith("layer:"):
            continue
        name = metric.split(":", 1)[1]
        try:
            layer = profile.layer(name)
        except LookupError as exc:  # LayerNotFound: the marker names a layer the model lacks
            raise OptionError(f"roofline marker metric {metric!r}: {exc}") from None
        current = layer.time / control_p25 if control_p25 > 0 else math.nan
        stored = baseline.layers.get(layer.name) if baseline else None
        if baseline is None or stored is None or not stored.time:
            verdicts.append(new_verdict([current], tolerance=tolerance, metric=metric))
            continue
        base_control = baseline_control_p25 or baseline.control.p25
        verdicts.append(
            compare(
                [current],
                [stored.time / base_control],
                tolerance=tolerance,
                metric=metric,
                drift=load_floor("layer", load, baseline_pressure),
                raw={"baseline": stored.time, "current": layer.time},
                extra_noise=control_drift_noise(control_p25, base_control),
            )
        )
    return verdicts
