"""Judging stored entries against each other: the rules the plugin and ``roofline baseline diff`` share."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_roofline.fmt import printable
from pytest_roofline.gate.verdict import Verdict, compare, new_verdict, verdict_table

if TYPE_CHECKING:
    from pytest_roofline.gate.baseline import BaselineEntry

__all__ = ["compare_entries", "failure_messages", "incomparable", "missing_baseline"]


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


def failure_messages(
    verdicts: Sequence[Verdict], *, model: str, batch: int, key: str, baseline_file: Path, strict: bool
) -> list[str]:
    """A test's failure messages for the verdicts of one profiled model: regressions, and under
    ``strict`` (``--roofline-strict``) the undecided and the missing baselines."""
    messages = []
    for verdict in verdicts:
        head = printable(f"roofline {verdict.status}: {model} (batch {batch}) {verdict.message}")
        if verdict.explanation:
            head += f"\n  why: {printable(verdict.explanation)}"
        table = [printable(line) for line in verdict_table(verdict)]
        if verdict.status == "regression":
            messages.append("\n".join([head, *table]))
        elif strict and verdict.status in ("inconclusive", "incomparable"):
            messages.append("\n".join([f"{head} [--roofline-strict]", *table]))
        elif strict and verdict.status == "new" and verdict.mode == "paired":
            messages.append(f"{head} [--roofline-strict]")
        elif strict and verdict.status == "new":
            messages.append(printable(f"roofline: {missing_baseline(key, baseline_file)}"))
    return messages


def missing_baseline(key: str, baseline_file: Path) -> str:
    """Why ``--roofline-strict`` fails a test without a baseline (before measuring, when known)."""
    return f"no baseline for {key} in {baseline_file} [--roofline-strict]; record one with --roofline-update"
