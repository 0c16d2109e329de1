"""Compact Markdown summary for ``$GITHUB_STEP_SUMMARY`` and pull-request comments.

No emoji: every status is a word (PASS, REGRESSION, INCONCLUSIVE, ...), so the table reads the same
in a terminal, a PR comment and a screen reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_roofline.fmt import fmt_pct, fmt_ratio, fmt_seconds
from pytest_roofline.report.view import status_word, worst_layers
from pytest_roofline.roofline.sanity import warning_line

__all__ = ["render", "write"]

_ORDER = {"REGRESSION": 0, "FAILED": 0, "ERROR": 0, "INCONCLUSIVE": 1}


def _cell(text: Any) -> str:
    """Table-safe text: pipes escaped, newlines flattened, HTML-looking brackets neutralised."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _ci(verdict: dict[str, Any]) -> str:
    ci = verdict.get("ci")
    return f"{fmt_ratio(ci[0])} – {fmt_ratio(ci[1])}" if ci and len(ci) == 2 else "–"


def _artifact(results: dict[str, Any], artifact: str | None) -> str | None:
    if artifact:
        return artifact
    artifacts = results.get("artifacts") or {}
    if isinstance(artifacts, dict):
        return artifacts.get("html")
    return next((a for a in artifacts if str(a).endswith(".html")), None)


def render(results: dict[str, Any], artifact: str | None = None, worst: int = 5) -> str:
    """The Markdown summary of a run-results dict.

    Args:
        results: the run-results dict.
        artifact: name or URL of the HTML report to point to (default ``results["artifacts"]``).
        worst: layers listed per regressed result.
    """
    entries = list(results.get("results") or [])
    counts: dict[str, int] = {}
    for entry in entries:
        counts[status_word(entry)] = counts.get(status_word(entry), 0) + 1
    summary = ", ".join(f"{n} {word.lower()}" for word, n in sorted(counts.items(), key=lambda kv: kv[0]))
    commit = (results.get("commit") or "")[:10]
    lines = [
        "### pytest-roofline" + (f" · `{commit}`" if commit else ""),
        "",
        f"{len(entries)} result(s): {summary or 'none'}.",
        "",
    ]
    if entries:
        lines += [
            "| Status | Test | Model | Batch | Median | Ratio | Ratio 95% CI | Efficiency |",
            "| --- | --- | --- | ---: | ---: | ---: | --- | ---: |",
        ]
        ordered = sorted(entries, key=lambda e: _ORDER.get(status_word(e), 2))
        for entry in ordered:
            profile, verdict = entry.get("profile") or {}, entry.get("verdict") or {}
            cells = (
                status_word(entry),
                _cell(entry.get("test", "")),
                _cell(profile.get("model", "")),
                profile.get("batch", ""),
                fmt_seconds((profile.get("latency") or {}).get("median")),
                fmt_ratio(verdict.get("ratio")),
                _ci(verdict),
                fmt_pct(profile.get("efficiency")),
            )
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        lines.append("")
    warned = [(e, warning_line(e.get("profile") or {})) for e in entries]
    lines += [f"- **{_cell(e.get('test', ''))}**: {_cell(w)}" for e, w in warned if w]
    if any(w for _, w in warned):
        lines.append("")
    for entry in entries:
        if status_word(entry) != "REGRESSION":
            continue
        layers = worst_layers(entry, worst)
        message = (entry.get("verdict") or {}).get("message")
        reason = f": {_cell(message)}" if message else "."
        lines.append(f"**{_cell(entry.get('test', ''))}** regressed{reason}")
        if layers:
            lines += ["", "| Layer | Baseline | Current | Ratio |", "| --- | ---: | ---: | ---: |"]
            lines += [
                f"| {_cell(la['name'])} | {fmt_seconds(la.get('baseline_time'))} "
                f"| {fmt_seconds(la.get('current_time'))} | {fmt_ratio(la.get('ratio'))} |"
                for la in layers
            ]
        lines.append("")
    if results.get("stale"):
        lines += [f"{len(results['stale'])} baseline entr(y/ies) no test produced any more.", ""]
    link = _artifact(results, artifact)
    if link:
        lines += [f"Full report (roofline charts, per-layer tables, history): {_cell(link)}", ""]
    return "\n".join(lines)


def write(results: dict[str, Any], path: Path, artifact: str | None = None) -> None:
    """Write the Markdown summary to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, artifact), encoding="utf-8")
