"""Shared reading of the run-results JSON for every report format.

Reports take the results dict (``RunResults.to_dict()``, see docs/results-schema.md), never live
objects, so a saved JSON can be rendered again later.  This module loads that dict, formats units
at the edge and derives the views several formats share (labels, status words, sweeps, headroom).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_roofline.errors import RooflineError

__all__ = [
    "FLOP_CONVENTION",
    "fmt_bytes",
    "fmt_count",
    "fmt_pct",
    "fmt_rate",
    "fmt_ratio",
    "fmt_seconds",
    "layer_headroom",
    "load_results",
    "result_label",
    "status_word",
    "sweeps",
    "worst_layers",
]

FLOP_CONVENTION = "FLOPs count 2 per multiply-accumulate (MAC); MACs are reported alongside."

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


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


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _si(value: Any, unit: str, digits: int = 3) -> str:
    if not _finite(value):
        return "–"
    magnitude = abs(value)
    for scale, prefix in _PREFIXES:
        if magnitude >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def fmt_seconds(value: Any) -> str:
    """``0.01234`` → ``12.3 ms``."""
    if not _finite(value):
        return "–"
    magnitude = abs(value)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if magnitude >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns" if value else "0 s"


def fmt_count(value: Any, unit: str = "") -> str:
    """``4.1e9`` → ``4.1 G`` (FLOPs, MACs, params)."""
    return _si(value, unit).rstrip()


def fmt_rate(value: Any, unit: str = "FLOP/s") -> str:
    """``1.2e11`` → ``120 GFLOP/s``."""
    return _si(value, unit)


def fmt_bytes(value: Any) -> str:
    """Decimal bytes: ``25e6`` → ``25 MB``."""
    return _si(value, "B")


def fmt_pct(value: Any, digits: int = 1) -> str:
    """``0.123`` → ``12.3%``."""
    return f"{100 * value:.{digits}f}%" if _finite(value) else "–"


def fmt_ratio(value: Any) -> str:
    """``1.083`` → ``1.083x``."""
    return f"{value:.3f}x" if _finite(value) else "–"


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
    if not _finite(fraction) or fraction <= 0:
        return 0.0
    return time * (1.0 - min(fraction, 1.0))


def worst_layers(result: dict[str, Any], limit: int = 5, threshold: float = 1.0) -> list[dict[str, Any]]:
    """Layers of the verdict whose time ratio exceeds ``threshold``, slowest-grown first."""
    layers = (result.get("verdict") or {}).get("layers") or []
    slower = [la for la in layers if _finite(la.get("ratio")) and la["ratio"] > threshold]
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
        if not _finite(latency.get("median")) or not isinstance(profile.get("batch"), int):
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
