"""Judging stored entries against each other: the rules the plugin and ``roofline baseline diff`` share."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_roofline.gate.verdict import Verdict, compare, new_verdict

if TYPE_CHECKING:
    from pytest_roofline.gate.baseline import BaselineEntry

__all__ = ["compare_entries", "incomparable"]


def incomparable(differences: Sequence[str], figures: Sequence[float], tolerance: float) -> Verdict:
    """The verdict of a run whose conditions differ from its baseline's: no verdict on speed."""
    verdict = new_verdict(
        figures,
        tolerance=tolerance,
        status="incomparable",
        message="baseline recorded under other conditions ("
        + "; ".join(differences)
        + "); accept them with --roofline-update",
    )
    return dataclasses.replace(verdict, reasons=tuple(differences))


def compare_entries(stored: BaselineEntry, current: BaselineEntry, tolerance: float) -> Verdict:
    """``current``'s figures against ``stored``'s, after the same conditions check as the plugin,
    with the CI widened by the control probe's drift between the two as the run widened it."""
    from pytest_roofline.gate.layers import layer_deltas
    from pytest_roofline.gate.sampling import control_drift_noise

    differences = stored.conditions.differences(current.conditions)
    if differences:
        return incomparable(differences, current.sessions, tolerance)
    verdict = compare(
        current.sessions,
        stored.sessions,
        tolerance=tolerance,
        raw={"baseline": stored.latency.gate_p25, "current": current.latency.gate_p25},
        extra_noise=control_drift_noise(current.control.p25, stored.control.p25),
    )
    deltas = layer_deltas(stored.layers, {k: v.time for k, v in current.layers.items() if v.time})
    return dataclasses.replace(
        verdict,
        layers=tuple(deltas),
        reasons=(*verdict.reasons, *stored.conditions.notes(current.conditions)),
    )
