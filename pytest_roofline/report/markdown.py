"""Compact Markdown summary for ``$GITHUB_STEP_SUMMARY`` and pull-request comments.

No emoji: every status is a word (PASS, REGRESSION, INCONCLUSIVE, ...), so the table reads the same
in a terminal, a PR comment and a screen reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.fmt import fmt_pct, fmt_ratio, fmt_seconds
from pytest_roofline.report.view import status_word, worst_layers
from pytest_roofline.roofline.sanity import warning_line

if TYPE_CHECKING:
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.results import RunResults

__all__ = ["render", "write"]

_ORDER = {"REGRESSION": 0, "FAILED": 0, "ERROR": 0, "INCONCLUSIVE": 1, "INCOMPARABLE": 1}
_SAID = {"REGRESSION": "regressed", "INCONCLUSIVE": "was inconclusive", "INCOMPARABLE": "is incomparable"}


def _cell(text: Any) -> str:
    """Table-safe text: pipes escaped, newlines flattened, HTML-looking brackets neutralised."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _ci(verdict: Verdict) -> str:
    return f"{fmt_ratio(verdict.ci[0])} – {fmt_ratio(verdict.ci[1])}" if verdict.ci else "–"


def render(results: RunResults, artifact: str | None = None, worst: int = 5) -> str:
    """The Markdown summary of a run.

    Args:
        results: the run's results.
        artifact: name or URL of the HTML report to point to (default ``results.artifacts["html"]``).
        worst: layers listed per regressed result.
    """
    records = list(results.records)
    counts: dict[str, int] = {}
    for record in records:
        counts[status_word(record)] = counts.get(status_word(record), 0) + 1
    summary = ", ".join(f"{n} {word.lower()}" for word, n in sorted(counts.items(), key=lambda kv: kv[0]))
    commit = (results.commit or "")[:10]
    lines = [
        "### pytest-roofline" + (f" · `{commit}`" if commit else ""),
        "",
        f"{len(records)} result(s): {summary or 'none'}.",
        "",
    ]
    if records:
        lines += [
            "| Status | Test | Model | Batch | Median | Ratio | Ratio 95% CI | Efficiency |",
            "| --- | --- | --- | ---: | ---: | ---: | --- | ---: |",
        ]
        for record in sorted(records, key=lambda r: _ORDER.get(status_word(r), 2)):
            profile, verdict = record.profile, record.verdict
            cells = (
                status_word(record),
                _cell(record.test),
                _cell(profile.model_name),
                profile.batch,
                fmt_seconds(profile.latency.median),
                fmt_ratio(verdict.ratio),
                _ci(verdict),
                fmt_pct(profile.efficiency),
            )
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        lines.append("")
    warned = [(record, warning_line(record.profile)) for record in records]
    lines += [f"- **{_cell(record.test)}**: {_cell(w)}" for record, w in warned if w]
    if any(w for _, w in warned):
        lines.append("")
    for record in records:
        status = status_word(record)
        if status not in _SAID:
            continue
        message = record.verdict.message
        reason = f": {_cell(message)}" if message else "."
        lines.append(f"**{_cell(record.test)}** {_SAID[status]}{reason}")
        layers = worst_layers(record, worst) if status == "REGRESSION" else []
        if layers:
            lines += ["", "| Layer | Baseline | Current | Ratio |", "| --- | ---: | ---: | ---: |"]
            lines += [
                f"| {_cell(la.name)} | {fmt_seconds(la.baseline_time)} "
                f"| {fmt_seconds(la.current_time)} | {fmt_ratio(la.ratio)} |"
                for la in layers
            ]
        lines.append("")
    if results.stale:
        lines += [f"{len(results.stale)} baseline entr(y/ies) no test produced any more.", ""]
    link = artifact or results.artifacts.get("html")
    if link:
        lines += [f"Full report (roofline charts, per-layer tables, history): {_cell(link)}", ""]
    return "\n".join(lines)


def write(results: RunResults, path: Path, artifact: str | None = None) -> None:
    """Write the Markdown summary to ``path``."""
    from pytest_roofline.report import save_report

    save_report(Path(path), render(results, artifact), "markdown")
