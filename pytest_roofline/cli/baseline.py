"""``roofline baseline {update,show,diff,prune}``: stored baselines without pytest."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_roofline.cli.common import add_format_argument
from pytest_roofline.errors import BaselineError, RooflineError
from pytest_roofline.fmt import fmt_seconds_fixed, printable, text_table
from pytest_roofline.gate import compare, verdict_table
from pytest_roofline.gate.baseline import BaselineEntry, BaselineStore
from pytest_roofline.options import parse_percent

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
        "diff", help="compare a results JSON with stored baselines (exit 1 on regression)"
    )
    diff.add_argument("results", metavar="RESULTS.json")
    diff.add_argument(
        "--tolerance",
        type=parse_percent,
        default=0.05,
        metavar="PERCENT",
        help="allowed slowdown in percent (default 5)",
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


def _load_results(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RooflineError(f"{path}: no such file; write one with pytest --roofline-report {path}") from None
    except (OSError, ValueError) as exc:
        raise RooflineError(f"{path}: not a results JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict) or "results" not in data:
        raise RooflineError(f"{path}: not a pytest-roofline results JSON (no 'results')")
    return data


def _entries(data: dict[str, Any]) -> list[BaselineEntry]:
    entries = []
    for item in data["results"]:
        if item.get("entry"):
            try:
                entries.append(BaselineEntry.from_dict(item["entry"]))
            except (KeyError, TypeError, ValueError) as exc:
                raise BaselineError(f"results entry {item.get('key')!r} is malformed ({exc})") from None
    return entries


def _update(args: argparse.Namespace, store: BaselineStore) -> int:
    entries = _entries(_load_results(args.results))
    if not entries:
        print("no stored-mode figures in the results (paired or disabled runs store nothing)")
        return 0
    written = store.write(entries, force=args.force)
    print(f"updated {len(entries)} entries in {len(written)} files:")
    for path in written:
        print(f"  {path}")
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
    rows = [
        ("test", "model", "batch", "backend", "device", "figure", "median", "sessions", "history", "commit")
    ]
    for key in sorted(entries):
        e = entries[key]
        rows.append(
            (
                e.test,
                e.model,
                str(e.batch),
                e.backend,
                e.device_class,
                f"{e.figure:.4g}",
                fmt_seconds_fixed(e.latency.get("median")),
                str(len(e.sessions)),
                str(len(e.history)),
                (e.commit or "-")[:10],
            )
        )
    for line in text_table(rows[0], rows[1:], left=len(rows[0])):
        print(line)
    return 0


def _diff(args: argparse.Namespace, store: BaselineStore) -> int:
    regressions = 0
    for entry in _entries(_load_results(args.results)):
        stored = store.get(entry.key, entry.test)
        if stored is None:
            print(f"new         {printable(entry.key)}")
            continue
        verdict = compare(
            entry.sessions,
            stored.sessions,
            tolerance=args.tolerance,
            raw={"baseline": stored.latency.get("gate_p25"), "current": entry.latency.get("gate_p25")},
        )
        print(f"{verdict.status:<12}{printable(entry.key)}  x{verdict.ratio:.3f}")
        if verdict.status == "regression":
            regressions += 1
            for line in verdict_table(verdict):
                print(f"    {printable(line)}")
    return 1 if regressions else 0


def _prune(args: argparse.Namespace, store: BaselineStore) -> int:
    keys = list(args.keys)
    if args.results:
        keys.extend(_load_results(args.results).get("stale", []))
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
