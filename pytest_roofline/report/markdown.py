"""Compact Markdown summary for ``$GITHUB_STEP_SUMMARY`` and pull-request comments.

No emoji: every status is a word (PASS, REGRESSION, INCONCLUSIVE, ...), so the table reads the same
in a terminal, a PR comment and a screen reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pytest_roofline.fmt import fmt_pct, fmt_ratio, fmt_seconds, markdown_code, markdown_text
from pytest_roofline.profile.sanity import warning_line
from pytest_roofline.report.serving import keep_logs
from pytest_roofline.report.view import accepted_message, peak_memory, status_word, was_accepted, worst_layers

if TYPE_CHECKING:
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.results import ProfileRecord, RunResults

__all__ = ["render", "write"]

_ORDER = {"REGRESSION": 0, "FAILED": 0, "ERROR": 0, "INCONCLUSIVE": 1, "INCOMPARABLE": 1}
_SAID = {"REGRESSION": "regressed", "INCONCLUSIVE": "was inconclusive", "INCOMPARABLE": "is incomparable"}
_FAILED = ("failed", "error")
#: pytest outcomes in the order a summary names them: what needs looking at first
_OUTCOME_ORDER = {"failed": 0, "error": 1, "skipped": 3}


def _outcomes(results: RunResults) -> dict[str, str]:
    """Every test's pytest outcome: the run's record of them, else what its results carry."""
    if results.outcomes:
        return dict(results.outcomes)
    return {record.test: record.outcome for record in results.records}


def _outcome_line(outcomes: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    ordered = sorted(counts.items(), key=lambda kv: (_OUTCOME_ORDER.get(kv[0], 2), kv[0]))
    return ", ".join(f"{n} {outcome}" for outcome, n in ordered)


_cell = markdown_text  # every name written to Markdown: inert text (no link, image, HTML, cell break)


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
    outcomes = _outcomes(results)
    counts: dict[str, int] = {}
    for record in records:
        counts[record.verdict.status] = counts.get(record.verdict.status, 0) + 1
    verdicts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items(), key=lambda kv: kv[0]))
    commit = (results.commit or "")[:10]
    lines = [
        "### pytest-roofline" + (f" · `{commit}`" if commit else ""),
        "",
        f"Tests: {_outcome_line(outcomes) or 'none'}. Gate verdicts: {verdicts or 'none'}.",
        "",
    ]
    failed = sorted(test for test, outcome in outcomes.items() if outcome in _FAILED)
    if failed:
        verdict_of = {record.test: status_word(record) for record in records}
        lines.append(f"**{len(failed)} test(s) failed:**")
        lines += [
            f"- {markdown_code(test)} {outcomes[test]}"
            + (f" (gate: {verdict_of[test]})" if test in verdict_of else " (no gate verdict)")
            for test in failed
        ]
        lines.append("")
    if results.accepted:
        written = ", ".join(markdown_code(path) for path in results.baselines_written) or "nothing"
        lines += [f"Baselines accepted (`--roofline-update`): this run's figures were written to {written}."]
        lines.append("")
    if records:
        lines += [
            "| Status | Test | Outcome | Model | Batch | Median | Ratio | Ratio 95% CI | Efficiency "
            "| Peak memory |",
            "| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |",
        ]
        for record in sorted(records, key=_row_order):
            profile, verdict = record.profile, record.verdict
            cells = (
                status_word(record),
                _cell(record.test),
                record.outcome,
                _cell(profile.model_name),
                profile.batch,
                fmt_seconds(profile.latency.median),
                fmt_ratio(verdict.ratio),
                _ci(verdict),
                fmt_pct(profile.efficiency),
                peak_memory(profile),
            )
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        lines.append("")
    warned = [(record, warning_line(record.profile)) for record in records]
    lines += [f"- **{_cell(record.test)}**: {_cell(w)}" for record, w in warned if w]
    if any(w for _, w in warned):
        lines.append("")
    for record in sorted(records, key=_row_order):
        status = status_word(record)
        if was_accepted(results, record):
            lines += [f"**{_cell(record.test)}** accepted: {_cell(accepted_message(record.verdict))}", ""]
            continue
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
    lines += _serving_lines(results)
    if results.stale:
        lines += [f"{len(results.stale)} baseline entr(y/ies) no test produced any more.", ""]
    link = artifact or results.artifacts.get("html")
    if link:
        lines += [f"Full report (roofline charts, per-layer tables, history): {_cell(link)}", ""]
    return "\n".join(lines)


def _serving_lines(results: RunResults) -> list[str]:
    """The serving scenarios' table (LoadGen's figures, the verdict per metric), then why each
    verdict that is not a pass was reached."""
    from pytest_roofline.report.serving import serving_row

    if not results.serving:
        return []
    lines = [
        "**Serving scenarios (MLPerf LoadGen)**",
        "",
        "| Test | Model | Scenario | p50 | p99 | p99.9 | QPS | Verdict |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    notes = []
    for record in results.serving:
        row = serving_row(record)
        qps = "–" if row["qps"] is None else f"{row['qps']:.1f}"
        cells = (
            _cell(row["test"]),
            _cell(f"{row['model']} b{row['batch']}"),
            row["scenario"],
            fmt_seconds(row["p50_s"]),
            fmt_seconds(row["p99_s"]),
            fmt_seconds(row["p999_s"]),
            qps,
            row["serving_verdict"],
        )
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        notes += [
            f"**{_cell(record.test)}** {v.status}: {_cell(v.message)}"
            for v in record.verdicts
            if v.status in ("regression", "inconclusive", "improved", "not-compared")
        ]
    return [*lines, "", *(f"{n}\n" for n in notes)]


def _row_order(record: ProfileRecord) -> tuple[int, int]:
    """Failed tests first, then regressions, then the undecided, then the rest."""
    return (0 if record.outcome in _FAILED else 1, _ORDER.get(status_word(record), 2))


def write(results: RunResults, path: Path, artifact: str | None = None) -> None:
    """Write the Markdown summary to ``path``."""
    from pytest_roofline.report import save_report

    save_report(Path(path), render(results, artifact), "markdown")
    keep_logs(results, Path(path))  # LoadGen's own logs beside the report, as its artifacts
