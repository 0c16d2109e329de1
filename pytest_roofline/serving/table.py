"""The text table of a scenario result (``roofline load``'s ``--format table``)."""

from __future__ import annotations

from pytest_roofline.fmt import fmt_seconds, printable, text_table
from pytest_roofline.serving.compare import ScenarioComparison
from pytest_roofline.serving.types import ScenarioResult

__all__ = ["comparison_table", "scenario_table"]


def scenario_table(result: ScenarioResult) -> str:
    """LoadGen's figures for one run, then whether it was valid and where its logs are."""
    settings = result.settings
    rate = f" at {settings.target_qps:g} QPS" if settings.scenario == "server" and settings.target_qps else ""
    head = f"{result.model} on {result.backend}: {settings.loadgen_scenario}{rate}"
    head += f", concurrency {settings.concurrency}, {result.query_count} queries"
    per = f" (per query of {settings.samples_per_query})" if settings.scenario == "multi-stream" else ""
    rows = [
        (f"p{name}{per}", fmt_seconds(value))
        for name, value in (("50", result.p50), ("90", result.p90), ("99", result.p99), ("99.9", result.p999))
    ]
    rows.append(("mean", fmt_seconds(result.mean)))
    rows.append(("QPS", "–" if result.achieved_qps is None else f"{result.achieved_qps:.2f}"))
    if result.tail_percentile is not None:
        estimate = result.early_stopping_estimate
        rows.append(
            (
                f"early-stopping p{result.tail_percentile * 100:g}",
                fmt_seconds(estimate) if estimate is not None else "– (too few queries)",
            )
        )
    lines = [printable(head), *text_table(("figure", "LoadGen"), rows)]
    if settings.p99_bound is not None:
        held = "held" if result.constraint_met else "MISSED"
        lines.append(f"p99 bound {fmt_seconds(settings.p99_bound)}: {held}")
    for qps, met in result.searched:
        lines.append(f"  searched {qps:g} QPS: {'met' if met else 'missed'}")
    validity = "VALID" if result.valid else f"INVALID ({result.invalid_reason or 'see the summary'})"
    lines.append(f"LoadGen result: {printable(validity)}")
    lines.append(f"LoadGen logs: {printable(result.summary_log)}, {printable(result.detail_log)}")
    return "\n".join(lines) + "\n"


def comparison_table(found: ScenarioComparison, old: str, new: str) -> str:
    """Per metric: the paired ratio (above 1: ``new`` is worse), its interval and the verdict."""
    settings = found.settings
    head = (
        f"{new} against {old}: {settings.loadgen_scenario}, {len(found.old)} windows of"
        f" {settings.min_duration:g} s both models answered in turn, tolerance {found.tolerance:.0%}"
    )
    rows = [
        (m.metric, f"{m.ratio:.3f}", f"[{m.low:.3f}, {m.high:.3f}]", f"{m.coverage:.1%}", m.status)
        for m in found.metrics
    ]
    lines = [printable(head), *text_table(("metric", "ratio", "interval", "coverage", "verdict"), rows)]
    lines.append(
        f"load: others took {found.pressure:.0%} of our CPUs; the noise floor there {found.floor:.2%}"
        " (ratios: new/old latency, old/new QPS)"
    )
    if found.clock == "cpu":
        lines.append(
            "other processes shared the CPUs: latencies and throughput judged on the workers' CPU time"
        )
    return "\n".join(lines) + "\n"
