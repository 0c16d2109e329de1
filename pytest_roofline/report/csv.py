"""CSV export: one row per layer per result, for spreadsheets and pandas.

Named after the extension it writes; inside the package the stdlib module is still ``csv``
(absolute imports), so nothing is shadowed.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from pytest_roofline.fmt import csv_cell
from pytest_roofline.report.view import layer_headroom

__all__ = ["COLUMNS", "render", "write"]

COLUMNS = (
    "test",
    "model",
    "batch",
    "backend",
    "precision",
    "layer",
    "op_type",
    "onnx_nodes",
    "kind",
    "time_s",
    "share",
    "flops",
    "bytes",
    "intensity",
    "achieved_flops",
    "achieved_bandwidth",
    "attainable_flops",
    "roofline_fraction",
    "bound",
    "headroom_s",
    "verdict",
)

_LAYER_KEYS = (
    "op_type",
    "kind",
    "share",
    "flops",
    "bytes",
    "intensity",
    "achieved_flops",
    "achieved_bandwidth",
    "attainable_flops",
    "roofline_fraction",
    "bound",
)


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows as dicts keyed by :data:`COLUMNS` (ONNX nodes joined with ``;``)."""
    out = []
    for entry in results.get("results") or []:
        profile = entry.get("profile") or {}
        verdict = (entry.get("verdict") or {}).get("status", "")
        for layer in profile.get("layers") or []:
            row = {
                "test": entry.get("test", ""),
                "model": profile.get("model", ""),
                "batch": profile.get("batch"),
                "backend": profile.get("backend", ""),
                "precision": profile.get("precision", ""),
                "layer": layer.get("name", ""),
                "onnx_nodes": ";".join(layer.get("onnx_nodes") or []),
                "time_s": layer.get("time"),
                "headroom_s": layer_headroom(layer),
                "verdict": verdict,
            }
            row.update({key: layer.get(key) for key in _LAYER_KEYS})
            out.append(row)
    return out


def render(results: dict[str, Any]) -> str:
    """The CSV text (header row first; empty cells for unknown figures; text cells that a
    spreadsheet would run as a formula are neutralized by :func:`~pytest_roofline.fmt.csv_cell`)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows(results):
        writer.writerow({k: ("" if v is None else csv_cell(v)) for k, v in row.items()})
    return buffer.getvalue()


def write(results: dict[str, Any], path: Path) -> None:
    """Write the CSV to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results), encoding="utf-8", newline="")
