"""Self-contained HTML report: one file, no network, charts drawn offline.

The page is a Jinja2 template (``templates/report.html.j2``, autoescaped) with the tables rendered
here in Python, so every figure is readable without JavaScript; a small vanilla script
(``static/report.js``, inlined) draws the SVG charts from a JSON blob embedded in the page, makes
tables sortable and recomputes the what-if latency.  No third-party chart library, no CDN, no
fonts: the file opens from a CI artifact with the network off.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import RooflineError
from pytest_roofline.fmt import fmt_bytes, fmt_count, fmt_pct, fmt_rate, fmt_ratio, fmt_seconds, plural
from pytest_roofline.profile.sanity import warning_line
from pytest_roofline.report import finite
from pytest_roofline.report.serving import keep_logs
from pytest_roofline.report.view import (
    FLOP_CONVENTION,
    layer_headroom,
    overhead_line,
    result_label,
    status_word,
    sweeps,
)

if TYPE_CHECKING:
    from pytest_roofline.profile import Layer, ModelProfile, OpTypeSummary
    from pytest_roofline.results import ProfileRecord, RunResults
    from pytest_roofline.roofline import DeviceRoofline

__all__ = ["render", "script_json", "write"]

_HERE = Path(__file__).resolve().parent
_STATUS_CLASS = {
    "PASS": "ok",
    "IMPROVED": "ok",
    "UNCHANGED": "ok",
    "NEW": "info",
    "NOT-COMPARED": "info",
    "PASSED": "ok",
    "REGRESSION": "bad",
    "FAILED": "bad",
    "ERROR": "bad",
    "INCONCLUSIVE": "warn",
    "SKIPPED": "info",
}


def script_json(data: Any) -> str:
    """JSON safe to embed in a ``<script>`` element (no ``</script>``, ``<!--`` or line separators)."""
    text = json.dumps(finite(data), separators=(",", ":"), allow_nan=False, default=_jsonable)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _jsonable(value: Any) -> Any:
    return str(value)


def _num(value: Any) -> float | None:
    """A finite float or None (JSON has no NaN/inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def _roof_view(roofline: DeviceRoofline | None) -> dict[str, Any] | None:
    if roofline is None:
        return None
    return {
        "dtype": roofline.dtype,
        "peaks": {k: _num(v) for k, v in roofline.peak_flops.items() if _num(v)},
        "bw": _num(roofline.peak_bandwidth),
        "ridge": _num(roofline.ridge_point),
        "floor": _num(roofline.dispatch_floor) or None,  # the dispatch floor, seconds a kernel
        "caches": [  # the levels layers are placed on (Layer.memory_level), DRAM last
            [level.name, _num(level.bandwidth), level.holds]
            for level in roofline.levels
            if _num(level.bandwidth)
        ],
    }


def _layer_rows(layers: Sequence[Layer]) -> list[dict[str, Any]]:
    """Executed layers, most time first, with cumulative share and formatted cells."""
    executed = sorted((la for la in layers if la.kind != "folded"), key=lambda la: -la.time)
    rows, cumulative = [], 0.0
    for rank, la in enumerate(executed, 1):
        cumulative += la.share
        rows.append(
            {
                "rank": rank,
                "layer": la,
                "cumulative": cumulative,
                "headroom": layer_headroom(la),
                "nodes": ", ".join(la.onnx_nodes),
            }
        )
    return rows


def _what_if(profile: ModelProfile, by_op: Sequence[OpTypeSummary]) -> dict[str, Any]:
    median = _num(profile.latency.median) or 0.0
    kernel = sum(row.time for row in by_op)
    at_roof = kernel - profile.headroom
    scale = median / kernel if kernel > 0 else 1.0
    under = [la.time_below for la in profile.layers if la.time <= 0 and la.time_below > 0]
    return {
        "kernel": kernel,
        "scale": scale,
        "at_roof_latency": at_roof * scale if kernel > 0 else None,
        # layers that read 0 on their timer count 0 s above: the estimates are off by up to their steps
        "under_step": len(under),
        "under_step_seconds": sum(under),
        "overhead": overhead_line(profile),  # what the dispatch floor costs (its roof included above)
        "floor_share": _floor_share(profile),  # per op type: the share of its time bound by the floor
    }


def _floor_share(profile: ModelProfile) -> dict[str, float]:
    """Op type -> share of its time in overhead-bound layers ({} without a dispatch floor)."""
    if profile.roofline is None or not profile.roofline.dispatch_floor:
        return {}
    times: dict[str, list[float]] = {}
    for la in profile.layers:
        pair = times.setdefault(la.op_type, [0.0, 0.0])
        pair[0] += la.time if la.bound == "overhead" else 0.0
        pair[1] += la.time
    return {op: bound / total for op, (bound, total) in times.items() if total > 0}


def _result_view(index: int, record: ProfileRecord, session_roof: DeviceRoofline | None) -> dict[str, Any]:
    profile, verdict = record.profile, record.verdict
    roofline_warning = warning_line(profile)
    headroom = profile.headroom  # before an invalid roofline's fractions are hidden: what the terminal says
    if profile.roofline_check.status == "invalid":  # impossible figures are not shown as fact
        unroofed = tuple(dataclasses.replace(la, roofline_fraction=None) for la in profile.layers)
        profile = dataclasses.replace(profile, layers=unroofed)
    by_op = profile.by_op_type() if profile.layers else []
    rows = _layer_rows(profile.layers)
    status = status_word(record)
    what_if = _what_if(profile, by_op)
    # what grew the most first: layers new since the baseline count with their whole time
    slower = sorted(verdict.layers, key=lambda la: -la.growth)
    data = {
        "id": f"r{index}",
        "label": result_label(record),
        "median": _num(profile.latency.median),
        "scale": what_if["scale"],
        "roof": _roof_view(profile.roofline or session_roof),
        "layers": [
            [
                la.name,
                la.op_type,
                r["nodes"],
                la.kind,
                _num(la.time) or 0.0,
                _num(la.share) or 0.0,
                la.flops,
                la.bytes,
                _num(la.roofline_fraction),
                la.bound,
                la.memory_level,
            ]
            for r in rows
            for la in (r["layer"],)
        ],
        "ops": [[row.op_type, row.time] for row in by_op],
        "history": [
            {"commit": h.commit, "time": h.time, "median": _num(h.median), "value": _num(h.value)}
            for h in record.history
        ],
    }
    return {
        "id": data["id"],
        "test": record.test,
        "label": data["label"],
        "profile": profile,
        "verdict": verdict,
        "status": status,
        "status_class": _STATUS_CLASS.get(status, "info"),
        "outcome": record.outcome,
        "rows": rows,
        "folded": len(profile.layers) - len(rows),
        "by_op": by_op,
        "what_if": what_if,
        "slower": slower,
        "data": data,
        "history": record.history,
        "extra_verdicts": record.extra_verdicts,
        "change": _change_view(record),
        "memory": _memory_view(profile),
        "roofline_warning": roofline_warning,
        "headroom": headroom,
        "compared": verdict.status not in ("", "not-compared") or verdict.ratio is not None,
    }


#: The live-memory timeline's drawing box (SVG user units).
TIMELINE_WIDTH, TIMELINE_HEIGHT = 800, 160


def _memory_view(profile: ModelProfile) -> dict[str, Any] | None:
    """The "Memory per inference" section: the figures and a per-layer live-memory timeline (an
    SVG drawn here, readable without JavaScript: one bar per layer in execution order, its height
    the bytes live at the layer's end, the peak a line, each bar titled with its figures)."""
    memory = profile.memory
    if memory is None:
        return None
    layers = [la for la in profile.layers if la.memory is not None]
    # 5 % headroom above the highest figure, so that the peak's line is drawn inside the box
    top = (
        1.05 * max([memory.peak, *(la.memory.live for la in layers if la.memory is not None)], default=0) or 1
    )
    width = TIMELINE_WIDTH / max(len(layers), 1)
    bars = []
    for position, la in enumerate(layers):
        assert la.memory is not None
        height = TIMELINE_HEIGHT * la.memory.live / top
        bars.append(
            {
                "name": la.name,
                "live": la.memory.live,
                "allocated": la.memory.allocated,
                "x": round(position * width, 2),
                "y": round(TIMELINE_HEIGHT - height, 2),
                "width": round(max(width - 1, 0.5), 2),
                "height": round(height, 2),
            }
        )
    return {
        "memory": memory,
        "bars": bars,
        "peak_y": round(TIMELINE_HEIGHT * (1 - memory.peak / top), 2),
        "width": TIMELINE_WIDTH,
        "height": TIMELINE_HEIGHT,
    }


def _change_view(record: ProfileRecord) -> dict[str, Any] | None:
    """The "What changed" section: the explanation, the changed blocks and their predicted time."""
    change = record.change
    if change is None:
        return None
    explanation = change.explanation
    deltas: dict[int, float] = {}
    prediction = change.prediction or {}
    for node in prediction.get("nodes") or []:
        block = int(node.get("block", -1))
        deltas[block] = deltas.get(block, 0.0) + float(node.get("delta") or 0.0)
    blocks = [
        {**block, "predicted": deltas.get(index) if prediction.get("available") else None}
        for index, block in enumerate((change.diff or {}).get("blocks") or [])
    ]
    agreement = explanation.get("agreement")
    return {
        "text": change.text,
        "css": "warn" if agreement == "inconsistent" else "",
        "blocks": blocks,
        "assumptions": list(prediction.get("assumptions") or []),
    }


def _environment() -> Any:
    try:
        import jinja2
    except ImportError:
        raise RooflineError('the HTML report needs jinja2: pip install "pytest-roofline[reports]"') from None
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        seconds=fmt_seconds,
        count=fmt_count,
        rate=fmt_rate,
        nbytes=fmt_bytes,
        pct=fmt_pct,
        ratio=fmt_ratio,
        num=_num,
        plural=plural,
    )
    return env


def _static(name: str) -> str:
    return (_HERE / "static" / name).read_text(encoding="utf-8")


def _serving_views(results: RunResults, report: Path | None) -> list[dict[str, Any]]:
    """Each ``model_load`` call: its figures, verdicts, charts and the links to LoadGen's logs."""
    from pytest_roofline.report.serving import cdf_view, log_links, timeline_view, verdict_text

    links = log_links(results, report) if report is not None else [None] * len(results.serving)
    views = []
    for index, record in enumerate(results.serving):
        statuses = {v.status.upper() for v in record.verdicts}
        worst = next((s for s in ("REGRESSION", "INCONCLUSIVE") if s in statuses), "PASS")
        views.append(
            {
                "id": f"serving-{index}",
                "test": record.test,
                "model": record.model,
                "batch": record.batch,
                "result": record.result,
                "verdicts": [
                    {**v.to_dict(), "status_class": _STATUS_CLASS.get(v.status.upper(), "info")}
                    for v in record.verdicts
                ],
                "verdicts_text": verdict_text(record),
                "status_class": _STATUS_CLASS.get(worst, "info"),
                "cdf": cdf_view(record.result),
                "timeline": timeline_view(record.result),
                "logs": links[index],
            }
        )
    return views


def render(results: RunResults, artifact: str | None = None, report: Path | None = None) -> str:
    """The report page of a run, as one HTML string (``report``: where it is written, so the
    links to LoadGen's logs kept beside it resolve)."""
    views = [_result_view(i, r, results.roofline) for i, r in enumerate(results.records)]
    payload = {"results": [v["data"] for v in views], "sweeps": sweeps(results.records)}
    precisions = sorted({v["profile"].precision for v in views}) or ["fp32"]
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            run=results,
            views=views,
            sweeps=payload["sweeps"],
            data_json=script_json(payload),
            css=_static("report.css"),
            js=_static("report.js"),
            flop_convention=FLOP_CONVENTION,
            precisions=precisions,
            roof=_roof_view(results.roofline),
            artifact=artifact,
            serving=_serving_views(results, report),
        )
    )


def write(results: RunResults, path: Path) -> None:
    """Write the HTML report of ``results`` to ``path``."""
    from pytest_roofline.report import save_report

    save_report(Path(path), render(results, report=Path(path)), "html")
    keep_logs(results, Path(path))  # LoadGen's own logs beside the report, as its artifacts
