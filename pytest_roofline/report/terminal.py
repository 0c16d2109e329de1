"""Terminal summary lines of a run (printed by the plugin's ``pytest_terminal_summary``).

Works on the results-schema dict, so the plugin and the CLI print the same lines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_roofline.gate import Verdict, verdict_table

__all__ = ["format_seconds", "summary_lines"]


def format_seconds(value: float | None) -> str:
    """Seconds in a readable unit."""
    if value is None or not math.isfinite(value):
        return "-"
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    return f"{value * 1e6:.1f} us"


def _percent(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value * 100:.1f}%"


def summary_lines(
    results: Mapping[str, Any],
    *,
    reports: Sequence[str] = (),
    baseline_files: Sequence[str] = (),
) -> list[str]:
    """One line per profiled model, regression tables, spans, stale entries, files written."""
    lines: list[str] = []
    rows = [("test", "model", "batch", "median", "efficiency", "verdict", "vs baseline")]
    tables: list[str] = []
    spans: list[str] = []
    for item in results.get("results", []):
        prof, verdict = item["profile"], item["verdict"]
        ratio = verdict.get("ratio")
        rows.append(
            (
                item["test"],
                prof.get("model", "?"),
                str(prof.get("batch", "")),
                format_seconds((prof.get("latency") or {}).get("median")),
                _percent(prof.get("efficiency")),
                verdict["status"],
                f"x{ratio:.3f}" if ratio is not None else "-",
            )
        )
        for extra in [verdict, *item.get("verdicts", [])]:
            if extra["status"] == "regression":
                tables.append(
                    f"REGRESSION {item['test']} :: {prof.get('model')} — {extra.get('message', '')}"
                )
                tables.extend("  " + line for line in verdict_table(Verdict.from_dict(extra)))
        model_median = format_seconds((prof.get("latency") or {}).get("median"))
        for name, stats in (prof.get("spans") or {}).items():
            spans.append(
                f"  {item['test']} span {name}: median {format_seconds(stats.get('median'))} "
                f"(n={stats.get('n')}) beside model {model_median}"
            )
    if len(rows) > 1:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines.extend(
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows
        )
    lines.extend(tables)
    if spans:
        lines.append("application spans:")
        lines.extend(spans)
    stale = results.get("stale") or []
    if stale:
        lines.append(
            f"{len(stale)} stale baseline entries (no test produced them; remove with "
            "`roofline baseline prune`):"
        )
        lines.extend(f"  {key}" for key in stale)
    for path in baseline_files:
        lines.append(f"baseline written: {path}")
    for path in reports:
        lines.append(f"report written: {path}")
    return lines
