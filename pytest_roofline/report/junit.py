"""JUnit XML properties: the figures a CI test view shows next to each test.

The plugin engineer adds them to the test item (``item.user_properties`` or the
``record_property`` fixture); JUnit XML (``--junitxml``) then carries them as
``<property name="roofline_..." value="..."/>``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["properties", "record"]


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def properties(result: dict[str, Any]) -> list[tuple[str, str]]:
    """``(name, value)`` pairs of one results entry (``{"profile": ..., "verdict": ...}``).

    Seconds and ratios are plain numbers (seconds, not milliseconds) so CI tools can chart them;
    figures that are unknown are left out rather than written as empty strings.
    """
    profile, verdict = result.get("profile") or {}, result.get("verdict") or {}
    latency = profile.get("latency") or {}
    pairs: list[tuple[str, Any]] = [
        ("roofline_model", profile.get("model")),
        ("roofline_batch", profile.get("batch")),
        ("roofline_backend", profile.get("backend")),
        ("roofline_latency_median_s", latency.get("median")),
        ("roofline_latency_ci_low_s", latency.get("ci_low")),
        ("roofline_latency_ci_high_s", latency.get("ci_high")),
        ("roofline_latency_p90_s", latency.get("p90")),
        ("roofline_throughput", profile.get("throughput")),
        ("roofline_efficiency", profile.get("efficiency")),
        ("roofline_attributed_fraction", profile.get("attributed_fraction")),
        ("roofline_verdict", verdict.get("status")),
        ("roofline_ratio", verdict.get("ratio")),
    ]
    ci = verdict.get("ci")
    if ci and len(ci) == 2:
        pairs.append(("roofline_ratio_ci", f"{_fmt(ci[0])}..{_fmt(ci[1])}"))
    return [(name, _fmt(value)) for name, value in pairs if value is not None]


def record(record_property: Any, result: dict[str, Any]) -> None:
    """Call ``record_property(name, value)`` (the pytest fixture, or a test item's
    ``user_properties.append`` adapted) for every property of ``result``."""
    for name, value in properties(result):
        record_property(name, value)
