"""Self-contained HTML report: one file, no network, charts drawn offline.

The page is a Jinja2 template (``templates/report.html.j2``, autoescaped) with the tables rendered
here in Python, so every figure is readable without JavaScript; a small vanilla script
(``static/report.js``, inlined) draws the SVG charts from a JSON blob embedded in the page, makes
tables sortable and recomputes the what-if latency.  No third-party chart library, no CDN, no
fonts: the file opens from a CI artifact with the network off.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_roofline.errors import RooflineError
from pytest_roofline.fmt import fmt_bytes, fmt_count, fmt_pct, fmt_rate, fmt_ratio, fmt_seconds
from pytest_roofline.profile import ModelProfile
from pytest_roofline.report import finite
from pytest_roofline.report.view import (
    FLOP_CONVENTION,
    layer_headroom,
    result_label,
    status_word,
    sweeps,
)
from pytest_roofline.roofline.sanity import warning_line

__all__ = ["render", "script_json", "write"]

_HERE = Path(__file__).resolve().parent
_STATUS_CLASS = {
    "PASS": "ok",
    "IMPROVED": "ok",
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


def _roof_view(roofline: dict[str, Any] | None) -> dict[str, Any] | None:
    if not roofline:
        return None
    peaks = roofline.get("peak_flops_by_dtype") or {
        roofline.get("dtype", "float32"): roofline.get("peak_flops")
    }
    return {
        "dtype": roofline.get("dtype", "float32"),
        "peaks": {k: _num(v) for k, v in peaks.items() if _num(v)},
        "bw": _num(roofline.get("peak_bandwidth")),
        "ridge": _num(roofline.get("ridge_point")),
        "caches": [
            [str(level.get("name")), _num(level.get("bandwidth")), level.get("size", 0)]
            for level in roofline.get("cache_levels") or []
            if _num(level.get("bandwidth"))
        ],
    }


def _layer_rows(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Executed layers, most time first, with cumulative share and formatted cells."""
    executed = [la for la in layers if la.get("kind") != "folded"]
    executed.sort(key=lambda la: -(la.get("time") or 0))
    rows, cumulative = [], 0.0
    for rank, la in enumerate(executed, 1):
        cumulative += la.get("share") or 0.0
        rows.append(
            {
                "rank": rank,
                "layer": la,
                "cumulative": cumulative,
                "headroom": layer_headroom(la),
                "nodes": ", ".join(la.get("onnx_nodes") or []),
            }
        )
    return rows


def _what_if(profile: dict[str, Any], by_op: list[Any]) -> dict[str, Any]:
    median = (profile.get("latency") or {}).get("median") or 0.0
    kernel = sum(row.time for row in by_op)
    at_roof = kernel - (profile.get("headroom") or 0.0)
    scale = median / kernel if kernel > 0 else 1.0
    return {"kernel": kernel, "scale": scale, "at_roof_latency": at_roof * scale if kernel > 0 else None}


def _result_view(index: int, result: dict[str, Any], session_roof: dict[str, Any] | None) -> dict[str, Any]:
    profile = result.get("profile") or {}
    verdict = result.get("verdict") or {}
    roofline = profile.get("roofline") or session_roof
    roofline_warning = warning_line(profile)
    if (profile.get("roofline_check") or {}).get("status") == "invalid":  # impossible: not shown as fact
        profile = {
            **profile,
            "layers": [{**la, "roofline_fraction": None} for la in profile.get("layers") or []],
        }
    try:
        by_op = ModelProfile.from_dict(profile).by_op_type() if profile.get("layers") else []
    except (KeyError, TypeError, ValueError):
        by_op = []
    layers = profile.get("layers") or []
    rows = _layer_rows(layers)
    status = status_word(result)
    what_if = _what_if(profile, by_op)
    # what grew the most first: layers new since the baseline count with their whole time
    slower = sorted(
        verdict.get("layers") or [],
        key=lambda la: -((_num(la.get("current_time")) or 0.0) - (_num(la.get("baseline_time")) or 0.0)),
    )
    data = {
        "id": f"r{index}",
        "label": result_label(result),
        "median": _num((profile.get("latency") or {}).get("median")),
        "scale": what_if["scale"],
        "roof": _roof_view(roofline),
        "layers": [
            [
                la.get("name", ""),
                la.get("op_type", ""),
                r["nodes"],
                la.get("kind", ""),
                _num(la.get("time")) or 0.0,
                _num(la.get("share")) or 0.0,
                _num(la.get("flops")) or 0,
                _num(la.get("bytes")) or 0,
                _num(la.get("roofline_fraction")),
                la.get("bound"),
            ]
            for r in rows
            for la in (r["layer"],)
        ],
        "ops": [[row.op_type, row.time] for row in by_op],
        "history": [
            {
                "commit": h.get("commit"),
                "time": h.get("time"),
                "median": _num(h.get("median")),
                "value": _num(h.get("value")),
            }
            for h in result.get("history") or []
        ],
    }
    return {
        "id": data["id"],
        "test": result.get("test", ""),
        "label": data["label"],
        "profile": profile,
        "verdict": verdict,
        "status": status,
        "status_class": _STATUS_CLASS.get(status, "info"),
        "outcome": result.get("outcome"),
        "rows": rows,
        "folded": len(layers) - len(rows),
        "by_op": by_op,
        "what_if": what_if,
        "slower": slower,
        "data": data,
        "history": result.get("history") or [],
        "extra_verdicts": [x for x in result.get("verdicts") or [] if isinstance(x, dict)],
        "roofline_warning": roofline_warning,
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
    )
    return env


def _static(name: str) -> str:
    return (_HERE / "static" / name).read_text(encoding="utf-8")


def render(results: dict[str, Any], artifact: str | None = None) -> str:
    """The report page for a run-results dict, as one HTML string."""
    session_roof = results.get("roofline")
    views = [_result_view(i, r, session_roof) for i, r in enumerate(results.get("results") or [])]
    payload = {"results": [v["data"] for v in views], "sweeps": sweeps(results.get("results") or [])}
    precisions = sorted({str((v["profile"] or {}).get("precision", "fp32")) for v in views}) or ["fp32"]
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
            roof=_roof_view(session_roof),
            artifact=artifact,
        )
    )


def write(results: dict[str, Any], path: Path) -> None:
    """Write the HTML report of ``results`` to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results), encoding="utf-8")
