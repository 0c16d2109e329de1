"""Terminal summary lines of a run (printed by the plugin's ``pytest_terminal_summary``).

One row per profiled model, then a line for every verdict that is not a plain pass or new
baseline, saying why: a regression names the figure, ratio and interval (with its table), an
inconclusive one the noise, the tolerance and the remedy, an incomparable one each difference of
conditions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_roofline.fmt import fmt_pct, fmt_seconds_fixed, printable, text_table

if TYPE_CHECKING:
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.results import ProfileRecord, RunResults

__all__ = [
    "PAIRED_UPDATE_NOTE",
    "inconclusive_remedy",
    "model_label",
    "serving_lines",
    "session_summary",
    "summary_lines",
    "verdict_reason",
]

#: Said after a paired run asked to update: it compared with the reference and recorded nothing.
PAIRED_UPDATE_NOTE = (
    "roofline: --roofline-update records no baseline in paired mode: --roofline-compare-ref compares "
    "each model with its file at the reference and stores nothing (its verdicts still count); run "
    "without --roofline-compare-ref to record baselines"
)


def inconclusive_remedy(profile: ModelProfile | None = None) -> str:
    """What to do about an inconclusive verdict; the one-thread option only where it is not set."""
    remedy = "measure on a quieter runner, raise --roofline-budget or the tolerance"
    if profile is None or profile.backend != "onnxruntime":
        return remedy
    if str(profile.options.get("intra_op_threads", "")).strip() == "1":
        return remedy
    return f"{remedy}, or set --roofline-option=intra_op_threads=1"


def model_label(profile: ModelProfile) -> str:
    """``edgenet b4 seq=128``: the model, its batch and the dims that tell rows apart."""
    dims = "".join(f" {k}={v}" for k, v in sorted(profile.dims.items()))
    return f"{profile.model_name} b{profile.batch}{dims}"


def verdict_reason(verdict: Verdict, profile: ModelProfile | None = None) -> str | None:
    """Why a verdict is not a plain pass, in one line; None for pass and a first baseline (a paired
    run's ``new`` says why: the model is absent at the reference).

    ``profile`` (the run's, with its backend options) keeps the remedy from advising an option
    that is already set.
    """
    if verdict.status == "pass" or (verdict.status == "new" and verdict.mode != "paired"):
        return None
    if verdict.status == "inconclusive":
        return f"{verdict.message}; {inconclusive_remedy(profile)}"
    if verdict.status in ("regression", "improved") and verdict.ci is not None and verdict.ratio is not None:
        return (
            f"{verdict.message} (ratio {verdict.ratio:.3f}, 95% CI {verdict.ci[0]:.3f}-{verdict.ci[1]:.3f})"
        )
    return verdict.message


def _row(record: ProfileRecord) -> tuple[str, ...]:
    from pytest_roofline.report.view import peak_memory

    prof, verdict = record.profile, record.verdict
    return (
        record.test,
        model_label(prof),
        fmt_seconds_fixed(prof.latency.median),
        fmt_pct(prof.efficiency, missing="invalid" if prof.roofline_check.status == "invalid" else "-"),
        verdict.status,
        f"x{verdict.ratio:.3f}" if verdict.ratio is not None else "-",
        peak_memory(prof),
    )


def summary_lines(
    results: RunResults,
    *,
    reports: Sequence[str] = (),
    baseline_files: Sequence[str] = (),
) -> list[str]:
    """One line per profiled model, verdict reasons and tables, spans, stale entries, files written."""
    from pytest_roofline.gate.verdict import verdict_table
    from pytest_roofline.profile.sanity import warning_line
    from pytest_roofline.report.view import accepted_message, was_accepted

    lines: list[str] = []
    header = ("test", "model", "median", "efficiency", "verdict", "vs baseline", "peak memory")
    rows = [_row(record) for record in results.records]
    reasons: list[str] = []
    spans: list[str] = []
    for record in results.records:
        label = f"{record.test} :: {model_label(record.profile)}"
        warning = warning_line(record.profile, label=label)
        if warning:
            reasons.append(warning)
        accepted = was_accepted(results, record)  # --roofline-update: say what was written
        reasons.extend(f"ACCEPTED {label} — {accepted_message(v)}" for v in record.verdicts if accepted)
        for verdict in () if accepted else record.verdicts:
            why = verdict_reason(verdict, record.profile)
            notes = [] if verdict.status == "incomparable" else list(verdict.reasons)
            if why is None and not notes:
                continue
            reasons.append(f"{verdict.status.upper()} {label} — {why or verdict.message}")
            if verdict.explanation:
                reasons.append(f"  why: {verdict.explanation}")
            if verdict.status == "regression":
                reasons.extend("  " + line for line in verdict_table(verdict))
            reasons.extend(f"  note: {note}" for note in notes)
        model_median = fmt_seconds_fixed(record.profile.latency.median)
        for name, stats in record.profile.spans.items():
            spans.append(
                f"  {record.test} span {name}: median {fmt_seconds_fixed(stats.median)} "
                f"(n={stats.n}) beside model {model_median}"
            )
    if rows:
        lines.extend(text_table(header, rows, left=len(header)))
    lines.extend(reasons)
    lines.extend(serving_lines(results))
    if spans:
        lines.append("application spans:")
        lines.extend(spans)
    if results.stale:
        lines.append(
            f"{len(results.stale)} stale baseline entries (their tests ran on this backend and device "
            "and no longer produce them; remove with `roofline baseline prune`):"
        )
        lines.extend(f"  {key}" for key in results.stale)
    lines.extend(f"baseline written: {path}" for path in baseline_files)
    lines.extend(f"report written: {path}" for path in reports)
    return [printable(line) for line in lines]  # test, model, layer and span names come from users


def serving_lines(results: RunResults) -> list[str]:
    """One row per ``model_load`` call (LoadGen's p50, p99, QPS and the verdict per metric), then a
    line for every verdict that is not a plain pass or first baseline, as the latency rows have."""
    from pytest_roofline.gate.verdict import verdict_table
    from pytest_roofline.report.serving import verdict_text

    if not results.serving:
        return []
    header = ("test", "model", "scenario", "p50", "p99", "QPS", "verdict")
    rows, reasons = [], []
    for record in results.serving:
        result = record.result
        qps = "-" if result.achieved_qps is None else f"{result.achieved_qps:.1f}"
        verdicts = verdict_text(record)
        rows.append(
            (
                record.test,
                f"{record.model} b{record.batch}",
                result.scenario,
                fmt_seconds_fixed(result.p50),
                fmt_seconds_fixed(result.p99),
                qps,
                verdicts,
            )
        )
        label = f"{record.test} :: {record.model} b{record.batch}"
        for verdict in record.verdicts:
            if results.accepted and record.record:
                reasons.append(f"ACCEPTED {label} — {verdict.metric}: written into the baseline entry")
                continue
            why = verdict_reason(verdict)
            from pytest_roofline.serving.budget import BUDGET_REMEDY

            if verdict.status == "inconclusive" and BUDGET_REMEDY in verdict.message:
                why = verdict.message  # its one remedy named: raise the budget
            if why is None and not verdict.reasons:
                continue
            reasons.append(f"{verdict.status.upper()} {label} — {why or verdict.message}")
            if verdict.status == "regression":
                reasons.extend("  " + line for line in verdict_table(verdict))
            reasons.extend(f"  note: {note}" for note in verdict.reasons)
    return ["serving scenarios (MLPerf LoadGen):", *text_table(header, rows, left=len(header)), *reasons]


def session_summary(
    results: RunResults | None,
    *,
    reports: Sequence[str] = (),
    baseline_files: Sequence[str] = (),
    store_notes: Sequence[str] = (),
    paired_update: bool = False,
    history_lines: Sequence[str] = (),
    errors: Sequence[str] = (),
) -> list[str]:
    """The plugin's terminal summary: :func:`summary_lines`, then the notes, then the errors.

    ``results`` is None when the run ended before it had results: then only the errors.
    ``paired_update`` adds :data:`PAIRED_UPDATE_NOTE` (an update asked for in paired mode).
    """
    if results is None:
        return [f"roofline error: {e}" for e in errors]
    lines = summary_lines(results, reports=reports, baseline_files=baseline_files)
    notes = [f"roofline: {n}" for n in store_notes]
    if paired_update:
        notes.append(PAIRED_UPDATE_NOTE)
    notes += [f"roofline: {line}" for line in history_lines]
    return lines + notes + [f"roofline error: {e}" for e in errors]
