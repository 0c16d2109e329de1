"""The history as one JSON-ready view: series, their points and change points (the CLI's and the
dashboard's data).  Its keys are the contract of ``roofline history --format json``."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_roofline.history.changepoints import find_changes
from pytest_roofline.history.explain import explain_series
from pytest_roofline.history.points import HistoryPoint, series_of

__all__ = ["build_view", "filter_points"]


def filter_points(
    points: Iterable[HistoryPoint],
    *,
    test: str | None = None,
    device_class: str | None = None,
    commits: set[str] | None = None,
) -> list[HistoryPoint]:
    """The points of one test (exact node id or a substring), one device class, a set of commits."""
    chosen = []
    for point in points:
        if test is not None and point.test != test and test not in point.test:
            continue
        if device_class is not None and point.device_class != device_class:
            continue
        if commits is not None and point.commit not in commits:
            continue
        chosen.append(point)
    return chosen


def _per_commit(points: Sequence[HistoryPoint]) -> list[dict[str, Any]]:
    """One entry per commit in first-seen order: the median figure of its runs."""
    order: list[str] = []
    groups: dict[str, list[HistoryPoint]] = {}
    for point in points:
        name = point.commit or f"run {point.time}"
        if name not in groups:
            order.append(name)
        groups.setdefault(name, []).append(point)
    out = []
    for name in order:
        runs = groups[name]
        layer_names = sorted({n for p in runs for n in p.layers})
        layer_values = [p.layer_values() for p in runs]  # once per run, not once per layer
        out.append(
            {
                "commit": runs[0].commit,
                "time": runs[0].time,
                "value": float(np.median([p.value for p in runs])),
                "runs": len(runs),
                "layers": {
                    n: float(statistics.median(v[n] for v in layer_values if n in v))  # small: no numpy call
                    for n in layer_names
                },
            }
        )
    return out


def build_view(points: Sequence[HistoryPoint], rootdir: Path | None, explain: bool = True) -> dict[str, Any]:
    """``{"series": [...]}`` as the contract says, with ``commits`` and ``layer_changes`` added."""
    series = []
    for name, items in series_of(list(points)).items():
        found = find_changes(items, layer_series=True)
        if explain:
            found = explain_series(found, rootdir)
        first = items[0]
        series.append(
            {
                "test": first.test,
                "key": first.key,
                "device_class": first.device_class,
                "series": name,
                "conditions": first.detail,
                "points": [
                    {
                        "commit": p.commit,
                        "time": p.time,
                        "value": p.value,
                        "ci": list(p.ci) if p.ci else None,
                        "verdict": p.verdict,
                        "mode": p.mode,
                        "median": p.median,
                        "model_hash": p.model_hash,
                        "identity": p.identity,
                        "paired": p.paired.to_dict() if p.paired else None,
                    }
                    for p in items
                ],
                "change_points": [c.to_dict() for c in found.changes],
                "machine_steps": [items[i].commit for i in found.machine_steps],
                "commits": _per_commit(items),
                "layer_changes": {
                    layer: [c.to_dict() for c in changes] for layer, changes in found.layer_changes.items()
                },
                "memory_changes": [c.to_dict() for c in found.memory_changes],
            }
        )
    return {"series": series}
