"""CSV export: one row per layer per result, then one per serving scenario, for spreadsheets and pandas.

Named after the extension it writes; inside the package the stdlib module is still ``csv``
(absolute imports), so nothing is shadowed.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.fmt import csv_cell
from pytest_roofline.report.serving import keep_logs
from pytest_roofline.report.view import layer_headroom

if TYPE_CHECKING:
    from pytest_roofline.results import RunResults

__all__ = ["COLUMNS", "render", "rows", "write"]

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
    "memory_level",
    "memory_allocated_bytes",
    "memory_live_bytes",
    "model_peak_memory_bytes",
    # a serving scenario's row (model_load: layer columns empty), LoadGen's figures
    "scenario",
    "target_qps",
    "p50_s",
    "p90_s",
    "p99_s",
    "p999_s",
    "qps",
    "queries",
    "loadgen_valid",
    "serving_verdict",
)


def rows(results: RunResults) -> list[dict[str, Any]]:
    """The rows as dicts keyed by :data:`COLUMNS` (ONNX nodes joined with ``;``)."""
    out = []
    for record in results.records:
        profile = record.profile
        for layer in profile.layers:
            out.append(
                {
                    "test": record.test,
                    "model": profile.model_name,
                    "batch": profile.batch,
                    "backend": profile.backend,
                    "precision": profile.precision,
                    "layer": layer.name,
                    "op_type": layer.op_type,
                    "onnx_nodes": ";".join(layer.onnx_nodes),
                    "kind": layer.kind,
                    "time_s": layer.time,
                    "share": layer.share,
                    "flops": layer.flops,
                    "bytes": layer.bytes,
                    "intensity": layer.intensity,
                    "achieved_flops": layer.achieved_flops,
                    "achieved_bandwidth": layer.achieved_bandwidth,
                    "attainable_flops": layer.attainable_flops,
                    "roofline_fraction": layer.roofline_fraction,
                    "bound": layer.bound,
                    "headroom_s": layer_headroom(layer),
                    "verdict": record.verdict.status,
                    "memory_level": layer.memory_level,
                    "memory_allocated_bytes": layer.memory.allocated if layer.memory is not None else None,
                    "memory_live_bytes": layer.memory.live if layer.memory is not None else None,
                    "model_peak_memory_bytes": profile.memory.peak if profile.memory is not None else None,
                }
            )
    if results.serving:
        from pytest_roofline.report.serving import serving_row

        out += [{**dict.fromkeys(COLUMNS), **serving_row(record)} for record in results.serving]
    return out


def render(results: RunResults) -> str:
    """The CSV text (header row first; empty cells for unknown figures; text cells that a
    spreadsheet would run as a formula are neutralized by :func:`~pytest_roofline.fmt.csv_cell`)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows(results):
        writer.writerow({k: ("" if v is None else csv_cell(v)) for k, v in row.items()})
    return buffer.getvalue()


def write(results: RunResults, path: Path) -> None:
    """Write the CSV to ``path``."""
    from pytest_roofline.report import save_report

    save_report(Path(path), render(results), "csv", newline="")
    keep_logs(results, Path(path))  # LoadGen's own logs beside the report, as its artifacts
