"""What every report shows of the run's serving scenarios (``model_load``), and LoadGen's logs kept.

Each format renders the same figures: LoadGen's p50 / p90 / p99 / p99.9, QPS and the verdict per
metric (:func:`serving_row`); the HTML report also draws each run's latency distribution and its
completions over time (:func:`cdf_view`, :func:`timeline_view`: SVG drawn here, readable without
JavaScript).  LoadGen's own summary and detail logs are copied beside the report
(:func:`keep_logs`, into ``<report name>-loadgen/``), so the report's artifact carries them.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_roofline.results import RunResults
    from pytest_roofline.serving.gate import ServingRecord
    from pytest_roofline.serving.types import ScenarioResult

__all__ = [
    "LOG_FOLDER_SUFFIX",
    "cdf_view",
    "keep_logs",
    "log_folder",
    "log_links",
    "serving_row",
    "timeline_view",
    "verdict_text",
]

LOG_FOLDER_SUFFIX = "-loadgen"
WIDTH, HEIGHT = 480, 160  # each chart's drawing area, SVG units
#: LoadGen's percentiles, marked on the latency distribution.
MARKS = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99.9", 0.999))


def log_folder(report: Path) -> Path:
    """Where the logs of ``report`` go: ``run.html`` and ``run.json`` share ``run-loadgen/``."""
    stem = report.name.split(".", 1)[0] or "report"
    return report.parent / f"{stem}{LOG_FOLDER_SUFFIX}"


def _run_folder(index: int, record: ServingRecord) -> str:
    return f"{index:02d}-{record.result.scenario}"


def log_links(results: RunResults, report: Path) -> list[tuple[str, str] | None]:
    """Per serving record, the summary's and detail log's paths relative to ``report``'s folder
    (None for a record that ran no LoadGen test: its figures came from the baseline)."""
    from pytest_roofline.serving.logs import DETAIL_LOG, SUMMARY_LOG

    folder = log_folder(report).name
    links: list[tuple[str, str] | None] = []
    for index, record in enumerate(results.serving):
        if not record.result.summary_log:
            links.append(None)
            continue
        base = f"{folder}/{_run_folder(index, record)}"
        links.append((f"{base}/{SUMMARY_LOG}", f"{base}/{DETAIL_LOG}"))
    return links


def keep_logs(results: RunResults, report: Path) -> None:
    """Copy each serving record's LoadGen summary and detail log beside ``report`` (every format's
    ``write`` calls this after writing; a log already gone, its temp dir cleaned, is skipped).

    Raises:
        RooflineError: one line naming the first log that could not be copied.
    """
    from pytest_roofline.errors import RooflineError

    problems = []
    target = log_folder(report)
    for index, record in enumerate(results.serving):
        result = record.result
        for source in (result.summary_log, result.detail_log):
            if not source:
                continue
            folder = target / _run_folder(index, record)
            try:
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, folder / Path(source).name)
            except FileNotFoundError:
                continue  # a results file read back after its run's temp dir was cleaned
            except OSError as exc:
                problems.append(f"LoadGen log {source} not kept beside {report}: {exc.strerror or exc}")
    if problems:
        raise RooflineError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


def verdict_text(record: ServingRecord) -> str:
    """``p99 pass, qps regression``: each gated metric's status."""
    return ", ".join(f"{v.metric.split()[-1]} {v.status}" for v in record.verdicts) or "-"


def serving_row(record: ServingRecord) -> dict[str, Any]:
    """The figures every format shows of one ``model_load`` call (seconds, queries/s)."""
    result = record.result
    return {
        "test": record.test,
        "model": record.model,
        "batch": record.batch,
        "backend": result.backend,
        "scenario": result.scenario,
        "target_qps": result.settings.target_qps,
        "p50_s": result.p50,
        "p90_s": result.p90,
        "p99_s": result.p99,
        "p999_s": result.p999,
        "qps": result.achieved_qps,
        "queries": result.query_count,
        "loadgen_valid": result.valid,
        "serving_verdict": verdict_text(record),
    }


def _points(pairs: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in pairs)


def cdf_view(result: ScenarioResult) -> dict[str, Any] | None:
    """The latency distribution as an SVG polyline (x: latency from 0 to the largest, y: the share
    of samples at or under it) with LoadGen's own percentiles marked; None without samples."""
    quantiles = result.latency_quantiles
    if len(quantiles) < 2 or quantiles[-1] <= 0:
        return None
    top = max(quantiles[-1], result.p999)
    count = len(quantiles) - 1
    line = [(WIDTH * q / top, HEIGHT * (1 - i / count)) for i, q in enumerate(quantiles)]
    marks = [
        {"name": name, "value": value, "x": round(WIDTH * value / top, 1), "share": share}
        for name, share in MARKS
        if (value := getattr(result, name.replace(".", ""))) <= top
    ]
    return {"points": _points(line), "marks": marks, "width": WIDTH, "height": HEIGHT, "top": top}


def timeline_view(result: ScenarioResult) -> dict[str, Any] | None:
    """Samples completed per second over the run, as the outline of an SVG area (a step per
    :data:`~pytest_roofline.serving.runner.TIMELINE_STEPS` part of the run); None without a series."""
    rates, step = result.timeline, result.timeline_step
    if not rates or step <= 0:
        return None
    top = 1.1 * max(rates) or 1.0  # the highest step just under the frame
    area = [(0.0, float(HEIGHT))]
    for i, rate in enumerate(rates):
        y = HEIGHT * (1 - rate / top)
        area += [(WIDTH * i / len(rates), y), (WIDTH * (i + 1) / len(rates), y)]
    area.append((float(WIDTH), float(HEIGHT)))
    return {
        "points": _points(area),
        "width": WIDTH,
        "height": HEIGHT,
        "top": top,
        "seconds": step * len(rates),
        "mean": sum(rates) / len(rates),
    }
