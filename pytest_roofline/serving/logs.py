"""LoadGen's own logs read back: the detail log's MLLOG records and the summary's lines.

The figures a :class:`~pytest_roofline.serving.types.ScenarioResult` carries are read here from
``mlperf_log_detail.txt`` (one JSON record per line, the values LoadGen prints into
``mlperf_log_summary.txt``); :func:`read_summary` reads the summary itself so the two can be
checked against each other (tests, benchmarks/load_quality.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pytest_roofline.errors import RooflineError

__all__ = ["DETAIL_LOG", "SUMMARY_LOG", "early_stopping_estimates", "read_detail", "read_summary"]

SUMMARY_LOG = "mlperf_log_summary.txt"
DETAIL_LOG = "mlperf_log_detail.txt"
_MLLOG = ":::MLLOG "
_ESTIMATE = re.compile(r"Early stopping (\d+(?:\.\d+)?)th percentile estimate: (\d+)")


def read_detail(path: Path) -> dict[str, Any]:
    """The detail log's records by key (the last one wins)."""
    records: dict[str, Any] = {}
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise RooflineError(f"LoadGen wrote no detail log at {path}: {exc.strerror}") from None
    for line in lines:
        if line.startswith(_MLLOG):
            try:
                record = json.loads(line[len(_MLLOG) :])
            except json.JSONDecodeError:
                continue  # LoadGen truncates nothing it reports; a torn line is not a figure
            records[str(record.get("key"))] = record.get("value")
    return records


def read_summary(path: Path) -> dict[str, str]:
    """The summary's ``name : value`` lines by name (spaces collapsed; the first one wins)."""
    figures: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise RooflineError(f"LoadGen wrote no summary log at {path}: {exc.strerror}") from None
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and not line.startswith((" *", "=")):
            figures.setdefault(" ".join(name.split()), value.strip())
    for percentile, value in _ESTIMATE.findall(text):
        figures.setdefault(f"Early stopping {percentile}th percentile estimate", value)
    return figures


def early_stopping_estimates(text: str) -> dict[float, float]:
    """LoadGen's early-stopping percentile estimates in seconds, by percentile (0.9, 0.99)."""
    return {round(float(p) / 100, 6): int(ns) * 1e-9 for p, ns in _ESTIMATE.findall(text or "")}
