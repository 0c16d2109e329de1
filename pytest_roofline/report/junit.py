"""JUnit XML properties: the figures a CI test view shows next to each test.

The plugin adds them to the test item (``item.user_properties``); JUnit XML (``--junitxml``)
then carries them as ``<property name="roofline_..." value="..."/>``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_roofline.results import ProfileRecord

__all__ = ["properties"]


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def properties(record: ProfileRecord) -> list[tuple[str, str]]:
    """``(name, value)`` pairs of one profiled model in one test.

    Seconds and ratios are plain numbers (seconds, not milliseconds) so CI tools can chart them;
    figures that are unknown are left out rather than written as empty strings.
    """
    profile, verdict = record.profile, record.verdict
    latency = profile.latency
    pairs: list[tuple[str, Any]] = [
        ("roofline_model", profile.model_name),
        ("roofline_batch", profile.batch),
        ("roofline_backend", profile.backend),
        ("roofline_latency_median_s", latency.median),
        ("roofline_latency_ci_low_s", latency.ci_low),
        ("roofline_latency_ci_high_s", latency.ci_high),
        ("roofline_latency_p90_s", latency.p90),
        ("roofline_throughput", profile.throughput),
        ("roofline_efficiency", profile.efficiency),
        ("roofline_attributed_fraction", profile.attributed_fraction),
        ("roofline_verdict", verdict.status),
        ("roofline_ratio", verdict.ratio),
    ]
    if verdict.ci:
        pairs.append(("roofline_ratio_ci", f"{_fmt(verdict.ci[0])}..{_fmt(verdict.ci[1])}"))
    return [(name, _fmt(value)) for name, value in pairs if value is not None and is_finite_or_text(value)]


def is_finite_or_text(value: Any) -> bool:
    """Whether a property value is worth writing (NaN figures are left out)."""
    return not isinstance(value, float) or math.isfinite(value)
