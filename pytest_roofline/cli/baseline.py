"""``roofline baseline {update,show,diff,prune}``: stored baselines without pytest."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from pytest_roofline.cli.common import add_format_argument
from pytest_roofline.errors import RooflineError
from pytest_roofline.fmt import fmt_pct, fmt_seconds_fixed, printable, text_table
from pytest_roofline.gate.baseline import BaselineEntry
from pytest_roofline.gate.store import BaselineStore
from pytest_roofline.gate.verdict import Verdict, verdict_table
from pytest_roofline.pytest.options import parse_byte_count, parse_percent
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
    update.add_argument(
        "--test",
        action="append",
        default=[],
        metavar="NODEID",
        help="accept only this test (a node id, or a file or folder part of one; repeatable)",
    )
    update.add_argument(
        "-k", metavar="EXPR", default=None, help="accept only the tests pytest's -k EXPR selects"
    )
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
    diff.add_argument(
        "--memory-tolerance",
        type=parse_percent,
        default=None,
        metavar="PERCENT",
        help="re-judge memory at this allowed growth of the peak in percent (default: the run's own)",
    )
    diff.add_argument(
        "--memory-tolerance-bytes",
        type=parse_byte_count,
        default=None,
        metavar="BYTES",
        help="re-judge memory allowing this many bytes of growth (e.g. 64k, 2M; default: the run's own)",
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


def _keyword_matcher(expression: str) -> Callable[[str], bool]:
    """pytest's ``-k`` grammar (``and``/``or``/``not``, parentheses, names matched case-insensitively
    as parts of the node id); raises RooflineError, one line, on a malformed expression."""
    tokens = re.findall(r"\(|\)|[^\s()]+", expression)
    at = 0

    def fail(what: str) -> RooflineError:
        return RooflineError(f"-k {expression!r}: {what}")

    def parse_or() -> Callable[[str], bool]:
        nonlocal at
        terms = [parse_and()]
        while at < len(tokens) and tokens[at] == "or":
            at += 1
            terms.append(parse_and())
        return lambda test: any(t(test) for t in terms)

    def parse_and() -> Callable[[str], bool]:
        nonlocal at
        terms = [parse_not()]
        while at < len(tokens) and tokens[at] == "and":
            at += 1
            terms.append(parse_not())
        return lambda test: all(t(test) for t in terms)

    def parse_not() -> Callable[[str], bool]:
        nonlocal at
        if at >= len(tokens):
            raise fail("a name expected at its end")
        token = tokens[at]
        at += 1
        if token == "not":
            inner = parse_not()
            return lambda test: not inner(test)
        if token == "(":
            inner = parse_or()
            if at >= len(tokens) or tokens[at] != ")":
                raise fail("')' expected")
            at += 1
            return inner
        if token in ("and", "or", ")"):
            raise fail(f"a name expected before {token!r}")
        name = token.lower()
        return lambda test: name in test.lower()

    matcher = parse_or() if tokens else (lambda test: True)
    if at < len(tokens):
        raise fail(f"unexpected {tokens[at]!r}")
    return matcher


def _selector(node_ids: list[str], keyword: str | None) -> Callable[[str], bool]:
    """Which tests ``--test`` (a node id, or the file/folder/class part it starts with) and ``-k``
    (pytest's keyword expression, matched against the node id) pick."""
    prefixes = tuple(p for n in node_ids for p in (n.rstrip("/") + "::", n.rstrip("/") + "/"))
    by_keyword = _keyword_matcher(keyword) if keyword is not None else None

    def chosen(test: str) -> bool:
        if node_ids and not (test in node_ids or test.startswith(prefixes)):
            return False
        return by_keyword is None or by_keyword(test)

    return chosen


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
    if args.test or args.k is not None:
        chosen = _selector(args.test, args.k)
        entries = [e for e in entries if chosen(e.test)]
        if not entries:
            raise RooflineError("no test of the results matches --test/-k: nothing updated")
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
    to be one and with which settings (issue 24: a report of a run shows that run's verdicts).
    Latency and memory each get a row (issue 34: memory shows wherever latency does)."""
    results = load_results(args.results)
    records = [record for record in results.records if record.entry is not None]
    if not records:
        print("no stored-mode figures in the results (paired or disabled runs store nothing)")
        return 0
    header = ("status", "test", "model", "metric", "ratio", "95% CI", "tolerance")
    recorded = [
        (v.status, r.test, _label(r.entry), v.metric, *_figures(v))
        for r in records
        if r.entry
        for v in (r.verdict, *(m for m in r.extra_verdicts if m.metric == "memory"))
    ]
    when = ", ".join(x for x in (results.created, (results.commit or "")[:10]) if x)
    print(
        printable(f"the run's verdicts, as recorded in {args.results}" + (f" ({when})" if when else "") + ":")
    )
    for line in text_table(header, recorded, left=4):
        print(printable(line))
    rows, details = [], []
    for record in records:
        for verdict in _rejudged(record, store, args):
            entry = record.entry
            assert entry is not None
            rows.append((verdict.status, entry.test, _label(entry), verdict.metric, *_figures(verdict)))
            if verdict.status in ("regression", "inconclusive", "incomparable"):
                details.append(f"{entry.test} :: {_label(entry)}: {verdict.message}")
            if verdict.status == "regression" and verdict.metric == "latency":
                details.extend(f"    {line}" for line in verdict_table(verdict))
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
    for line in text_table(header, rows, left=4):
        print(printable(line))
    for line in details:
        print(printable(line))
    return 1 if any(row[0] == "regression" for row in rows) else 0


def _rejudged(record: ProfileRecord, store: BaselineStore, args: argparse.Namespace) -> list[Verdict]:
    """``record``'s entry judged again against the stored one: latency, and memory where the entry
    has it (at the run's memory tolerance unless ``--memory-tolerance[-bytes]`` say otherwise)."""
    from pytest_roofline.gate.judge import compare_entries
    from pytest_roofline.gate.memory import MemoryTolerance, against_entry, compare_memory

    entry = record.entry
    assert entry is not None
    stored = store.get(entry.key, entry.test)
    if stored is None:
        new = Verdict("new", "stored", "latency", entry.figure, record.verdict.tolerance)
        return [new, *([dataclasses.replace(new, metric="memory")] if entry.memory else [])]
    tolerance = record.verdict.tolerance if args.tolerance is None else args.tolerance
    verdicts = [compare_entries(stored, entry, tolerance)]
    if entry.memory is not None:
        ran = next((v for v in record.extra_verdicts if v.metric == "memory"), None)
        share = ran.tolerance if ran is not None else MemoryTolerance.share
        ran_bytes = int((ran.raw.get("tolerance_bytes") or 0) if ran is not None else 0)
        allowed = MemoryTolerance(
            share if args.memory_tolerance is None else args.memory_tolerance,
            ran_bytes if args.memory_tolerance_bytes is None else args.memory_tolerance_bytes,
        )
        differences = stored.conditions.differences(entry.conditions)
        verdicts.append(
            against_entry(compare_memory(entry.memory, stored.memory, allowed), stored, differences, allowed)
        )
    return verdicts


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
