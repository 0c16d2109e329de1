"""Terminal summary lines of a run (printed by the plugin's ``pytest_terminal_summary``).

Works on the results-schema dict, so the plugin and the CLI print the same lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_roofline.fmt import fmt_pct, fmt_seconds_fixed, text_table
from pytest_roofline.gate import Verdict, verdict_table

__all__ = ["summary_lines"]


def summary_lines(
    results: Mapping[str, Any],
    *,
    reports: Sequence[str] = (),
    baseline_files: Sequence[str] = (),
) -> list[str]:
    """One line per profiled model, regression tables, spans, stale entries, files written."""
    lines: list[str] = []
    header = ("test", "model", "batch", "median", "efficiency", "verdict", "vs baseline")
    rows: list[tuple[str, ...]] = []
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
                fmt_seconds_fixed((prof.get("latency") or {}).get("median")),
                fmt_pct(prof.get("efficiency"), missing="-"),
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
        model_median = fmt_seconds_fixed((prof.get("latency") or {}).get("median"))
        for name, stats in (prof.get("spans") or {}).items():
            spans.append(
                f"  {item['test']} span {name}: median {fmt_seconds_fixed(stats.get('median'))} "
                f"(n={stats.get('n')}) beside model {model_median}"
            )
    if rows:
        lines.extend(text_table(header, rows, left=len(header)))
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
