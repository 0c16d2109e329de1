"""Shared reading of the run-results JSON for every report format.

Reports take the results dict (``RunResults.to_dict()``, see docs/results-schema.md), never live
objects, so a saved JSON can be rendered again later.  This module loads that dict and derives
the views several formats share (labels, status words, sweeps, headroom).  The unit formatters
live in :mod:`pytest_roofline.fmt`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_roofline.errors import RooflineError
from pytest_roofline.fmt import is_finite

__all__ = [
    "FLOP_CONVENTION",
    "layer_headroom",
    "load_results",
    "result_label",
    "status_word",
    "sweeps",
    "worst_layers",
]

FLOP_CONVENTION = "FLOPs count 2 per multiply-accumulate (MAC); MACs are reported alongside."


def load_results(path: str | Path) -> dict[str, Any]:
    """Read a run-results JSON file.

    Raises:
        RooflineError: the file is missing, not JSON, or not a run-results document.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RooflineError(f"results file {path} not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RooflineError(f"results file {path} is not readable JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise RooflineError(
            f"{path} is not a pytest-roofline results file (no 'results' list); "
            "write one with `pytest --roofline-report PATH.json`"
        )
    version = data.get("schema_version", 1)
    if version != 1:
        raise RooflineError(f"{path} has results schema_version {version}; this version reads 1")
    return data


def status_word(result: dict[str, Any]) -> str:
    """Upper-case verdict word (PASS, REGRESSION, ...), or the pytest outcome without a verdict."""
    verdict = result.get("verdict") or {}
    status = verdict.get("status")
    if status:
        return str(status).upper()
    return str(result.get("outcome") or "not-compared").upper()


def result_label(result: dict[str, Any]) -> str:
    """``model b8 onnxruntime``: how a result is named in reports."""
    profile = result.get("profile") or {}
    return f"{profile.get('model', '?')} b{profile.get('batch', '?')} {profile.get('backend', '')}".strip()


def layer_headroom(layer: dict[str, Any]) -> float:
    """Seconds this layer would save at its roof (0 when no roof is known)."""
    fraction = layer.get("roofline_fraction")
    time = layer.get("time") or 0.0
    if not is_finite(fraction) or fraction <= 0:
        return 0.0
    return time * (1.0 - min(fraction, 1.0))


def worst_layers(result: dict[str, Any], limit: int = 5, threshold: float = 1.0) -> list[dict[str, Any]]:
    """Layers of the verdict whose time ratio exceeds ``threshold``, slowest-grown first."""
    layers = (result.get("verdict") or {}).get("layers") or []
    slower = [
        la
        for la in layers
        if la.get("status") == "new" or (is_finite(la.get("ratio")) and la["ratio"] > threshold)
    ]
    slower.sort(key=lambda la: (la["current_time"] or 0) - (la["baseline_time"] or 0), reverse=True)
    return slower[:limit]


def sweeps(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results of one model and backend at several batch sizes (a batch sweep).

    Returns one entry per sweep: ``model``, ``backend``, ``points`` (batch, median s,
    throughput samples/s, p25, p75), ordered by batch.
    """
    groups: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = {}
    for result in results:
        profile = result.get("profile") or {}
        latency = profile.get("latency") or {}
        if not is_finite(latency.get("median")) or not isinstance(profile.get("batch"), int):
            continue
        key = (str(profile.get("model")), str(profile.get("backend")), str(profile.get("precision", "")))
        groups.setdefault(key, {})[profile["batch"]] = {
            "batch": profile["batch"],
            "median": latency["median"],
            "p25": latency.get("p25", latency["median"]),
            "p75": latency.get("p75", latency["median"]),
            "throughput": profile.get("throughput") or profile["batch"] / latency["median"],
        }
    return [
        {"model": model, "backend": backend, "precision": precision, "points": [p[b] for b in sorted(p)]}
        for (model, backend, precision), p in groups.items()
        if len(p) > 1
    ]
