"""``roofline baseline {update,show,diff,prune}``: stored baselines without pytest."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pytest_roofline.cli.common import add_format_argument
from pytest_roofline.fmt import fmt_pct, fmt_seconds_fixed, printable, text_table
from pytest_roofline.gate.baseline import BaselineEntry
from pytest_roofline.gate.store import BaselineStore
from pytest_roofline.gate.verdict import Verdict
from pytest_roofline.pytest.options import parse_percent
from pytest_roofline.results import ProfileRecord, RunResults, load_results

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``baseline`` and its verbs."""
    parser = subparsers.add_parser(
        "baseline",
        help="show, update, diff and prune stored baselines",
        description="Manage the baseline JSON files that `pytest --roofline-update` writes.",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=type(parser))

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--baseline-dir",
            default=".roofline",
            metavar="DIR",
            help="baseline directory (default .roofline)",
        )

    update = verbs.add_parser("update", help="accept the figures of a results JSON as baselines")
    update.add_argument("results", metavar="RESULTS.json", help="written by pytest --roofline-report X.json")
    update.add_argument("--force", action="store_true", help="rewrite corrupt or unknown-schema files")
    common(update)

    show = verbs.add_parser("show", help="list stored entries")
    add_format_argument(show)
    common(show)

    diff = verbs.add_parser(
        "diff",
        help="the run's verdicts, and a re-judgement against stored baselines (exit 1 on regression)",
    )
    diff.add_argument("results", metavar="RESULTS.json")
    diff.add_argument(
        "--tolerance",
        type=parse_percent,
        default=None,
        metavar="PERCENT",
        help="re-judge at this allowed slowdown in percent (default: each result's own, as the run judged)",
    )
    common(diff)

    prune = verbs.add_parser("prune", help="remove stale entries")
    prune.add_argument(
        "results",
        metavar="RESULTS.json",
        nargs="?",
        help="results of a full run: its stale entries are removed",
    )
    prune.add_argument("--keys", nargs="+", default=[], metavar="KEY", help="entry keys to remove")
    prune.add_argument("--dry-run", action="store_true", help="list what would be removed")
    common(prune)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Dispatch to the verb."""
    store = BaselineStore(Path(args.baseline_dir))
    return {"update": _update, "show": _show, "diff": _diff, "prune": _prune}[args.verb](args, store)


def _entries(results: RunResults) -> list[BaselineEntry]:
    return [record.entry for record in results.records if record.entry is not None]


def _label(entry: BaselineEntry) -> str:
    dims = "".join(f" {k}={v}" for k, v in sorted(entry.dims.items()))
    return f"{entry.model} b{entry.batch}{dims}"


def not_written(record: ProfileRecord) -> str:
    """Why ``record`` carries no baseline entry to write: the real reason, from its verdict."""
    verdict = record.verdict
    if verdict.status == "unchanged":
        return "unchanged: nothing that runs changed since its baseline, which stands as it is"
    if verdict.status == "not-compared":
        return "not timed (--roofline-disable or an analysis-only run)"
    if verdict.mode == "paired":
        return "a paired run (old model beside new) stores no figure; a run without the reference records one"
    if verdict.status == "incomparable":
        why = "; ".join(verdict.reasons) or verdict.message
        return f"incomparable with its baseline ({why}): a run under the new conditions records one"
    if record.outcome not in ("passed", "failed"):
        return f"the test {record.outcome} before the gate measured it"
    return "the gate produced no figures for it"


def _update(args: argparse.Namespace, store: BaselineStore) -> int:
    results = load_results(args.results)
    entries = _entries(results)
    skipped = [record for record in results.records if record.entry is None]
    for record in skipped:
        name = f"{printable(record.test)} {printable(record.profile.model_name)}"
        print(f"not written: {name}: {not_written(record)}")
    if not entries:
        print(f"nothing to write: none of the {len(results.records)} results carries a baseline entry")
        return 0
    written = store.write(entries, force=args.force)
    print(f"updated {len(entries)} entries in {len(written)} files:")
    for path in written:
        print(f"  {path}")
    for note in store.notes:
        print(f"note: {note}")
    return 0


def _show(args: argparse.Namespace, store: BaselineStore) -> int:
    entries = store.all_entries()
    if args.format == "json":
        json.dump({k: entries[k].to_dict() for k in sorted(entries)}, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    if not entries:
        print(f"no baselines under {store.directory}")
        return 0
    header = ("test", "model", "backend", "device", "figure", "median", "sessions", "history", "commit")
    rows = [
        (
            e.test,
            _label(e),
            e.backend,
            e.device_class,
            f"{e.figure:.4g}",
            fmt_seconds_fixed(e.latency.median),
            str(len(e.sessions)),
            str(len(e.history)),
            (e.commit or "-")[:10],
        )
        for e in (entries[key] for key in sorted(entries))
    ]
    for line in text_table(header, rows, left=len(header)):
        print(line)
    return 0


def _diff(args: argparse.Namespace, store: BaselineStore) -> int:
    """The run's own verdicts as recorded, then a re-judgement against the stored baselines, said
    to be one and with which settings (issue 24: a report of a run shows that run's verdicts)."""
    from pytest_roofline.gate.judge import compare_entries
    from pytest_roofline.gate.verdict import verdict_table

    results = load_results(args.results)
    records = [record for record in results.records if record.entry is not None]
    if not records:
        print("no stored-mode figures in the results (paired or disabled runs store nothing)")
        return 0
    header = ("status", "test", "model", "ratio", "95% CI", "tolerance")
    recorded = [(r.verdict.status, r.test, _label(r.entry), *_figures(r.verdict)) for r in records if r.entry]
    when = ", ".join(x for x in (results.created, (results.commit or "")[:10]) if x)
    print(
        printable(f"the run's verdicts, as recorded in {args.results}" + (f" ({when})" if when else "") + ":")
    )
    for line in text_table(header, recorded, left=3):
        print(printable(line))
    rows, details, regressions = [], [], 0
    for record in records:
        entry = record.entry
        assert entry is not None
        stored = store.get(entry.key, entry.test)
        if stored is None:
            rows.append(("new", entry.test, _label(entry), "-", "-", "-"))
            continue
        tolerance = record.verdict.tolerance if args.tolerance is None else args.tolerance
        verdict = compare_entries(stored, entry, tolerance)
        rows.append((verdict.status, entry.test, _label(entry), *_figures(verdict)))
        if verdict.status == "regression":
            regressions += 1
            details.append(f"{entry.test} :: {_label(entry)}: {verdict.message}")
            details.extend(f"    {line}" for line in verdict_table(verdict))
        elif verdict.status in ("inconclusive", "incomparable"):
            details.append(f"{entry.test} :: {_label(entry)}: {verdict.message}")
    at = (
        "each result's own tolerance (the run's)"
        if args.tolerance is None
        else f"{_pct(args.tolerance)} tolerance"
    )
    print(
        printable(
            f"re-judged against the baselines in {store.directory} now, at {at}, from the figures the run "
            "recorded (the run's load check and configured-threads check are not repeated):"
        )
    )
    for line in text_table(header, rows, left=3):
        print(printable(line))
    for line in details:
        print(printable(line))
    return 1 if regressions else 0


def _figures(verdict: Verdict) -> tuple[str, str, str]:
    """Ratio, CI and tolerance cells of a verdict."""
    ratio = f"x{verdict.ratio:.3f}" if verdict.ratio is not None else "-"
    ci = f"{verdict.ci[0]:.3f}-{verdict.ci[1]:.3f}" if verdict.ci else "-"
    return ratio, ci, _pct(verdict.tolerance)


def _pct(value: float) -> str:
    return fmt_pct(value, 2, trim=True)


def _prune(args: argparse.Namespace, store: BaselineStore) -> int:
    keys = list(args.keys)
    if args.results:
        keys.extend(load_results(args.results).stale)
    if not keys:
        print("nothing to prune: give a results JSON of a full run or --keys")
        return 0
    if args.dry_run:
        present = set(store.all_entries())
        for key in sorted(set(keys) & present):
            print(f"would remove {printable(key)}")
        return 0
    removed = store.remove(keys)
    for key in removed:
        print(f"removed {printable(key)}")
    print(f"{len(removed)} entries removed")
    return 0
