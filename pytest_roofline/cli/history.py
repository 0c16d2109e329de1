"""``roofline history``: the run history, its change points, import, export and the dashboard.

::

    roofline history [--test T] [--since REF] [--device-class D] [--format table|json]
    roofline history import RESULTS.json... [--store URL]
    roofline history export [-o FILE] [--store URL]
    roofline history html OUT [--test T] [--since REF] [--device-class D]

The store is ``--store URL``, else ``ROOFLINE_HISTORY``, else ``.roofline/history/`` in the
current directory (what ``pytest --roofline-history`` writes at the rootdir).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_roofline.errors import RooflineError

__all__ = ["add_parser", "run"]

DEFAULT_DIR = Path(".roofline") / "history"


def _store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="history folder or postgresql://... (default: ROOFLINE_HISTORY, else .roofline/history)",
    )


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--test", default=None, help="only this test (node id, or part of it)")
    parser.add_argument("--since", metavar="REF", default=None, help="only commits from REF to HEAD (git)")
    parser.add_argument("--device-class", default=None, help="only this device class")
    parser.add_argument("--no-explain", action="store_true", help="skip the graph diff of each change point")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``history`` and its actions."""
    parser = subparsers.add_parser(
        "history",
        help="the run history across commits: change points, import, export, dashboard",
        description="List every series (test x device class x conditions) of the history with its change "
        "points, each explained by the graph diff between the models either side.",
    )
    _store_option(parser)
    _filters(parser)
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.set_defaults(run=run, action="list")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    imp = actions.add_parser("import", help="add the results of saved runs (pytest --roofline-report=X.json)")
    imp.add_argument("results", nargs="+", metavar="RESULTS.json")
    _store_option(imp)
    exp = actions.add_parser("export", help="write every point as JSON lines")
    exp.add_argument("-o", "--output", default=None, metavar="FILE", help="file to write (default stdout)")
    _store_option(exp)
    html = actions.add_parser("html", help="write the self-contained dashboard")
    html.add_argument("output", metavar="OUT")
    _store_option(html)
    _filters(html)


def _open(args: argparse.Namespace) -> Any:
    from pytest_roofline.history.store import ENV, open_store

    url = getattr(args, "store", None) or os.environ.get(ENV) or None
    return open_store(url, DEFAULT_DIR)


def _write_output(output: str, write: Callable[[Path], None]) -> None:
    """``write(Path(output))``; a path that cannot be written (under a file, a folder, a full disk,
    ``/proc``) is one line (exit 2), never a traceback."""
    try:
        write(Path(output))
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != output else ""
        raise RooflineError(f"{output} cannot be written: {exc.strerror or exc}{where}") from None


def _print_notes(store: Any) -> None:
    """The store's skipped points and files, one line each on stderr."""
    from pytest_roofline.fmt import printable

    for note in store.notes:
        sys.stderr.write(f"roofline history: {printable(note)}\n")


def _commits_since(ref: str) -> set[str]:
    """Full SHAs from ``ref`` (included) to HEAD in the repository of the current directory."""
    from pytest_roofline.model.gitref import _git

    cwd = Path.cwd()

    def commit_of(name: str) -> str | None:
        done = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}"], cwd)
        return done.stdout.decode().strip() if done.returncode == 0 else None

    base = commit_of(ref)
    if base is None:
        # HEAD~200 in a repository younger than 200 commits: from its first commit on
        start = re.split(r"[~^]", ref, maxsplit=1)[0]
        if start == ref or commit_of(start) is None:
            raise RooflineError(f"--since: git reference {ref!r} does not exist here")
        every = _git(["rev-list", "--end-of-options", start], cwd).stdout.decode().split()
        print(f"--since {ref}: {start} has only {len(every)} commits; from the first one on", file=sys.stderr)
        return set(every)
    listed = _git(["rev-list", f"{base}..HEAD"], cwd)
    return {base, *listed.stdout.decode().split()}


def _view(args: argparse.Namespace) -> dict[str, Any]:
    from pytest_roofline.history.view import build_view, filter_points

    store = _open(args)
    try:
        points = store.points(device_class=args.device_class)
    finally:
        store.close()
    _print_notes(store)
    commits = _commits_since(args.since) if args.since else None
    chosen = filter_points(points, test=args.test, commits=commits)
    return build_view(chosen, Path.cwd(), explain=not args.no_explain)


def _table(view: dict[str, Any]) -> str:
    from pytest_roofline.fmt import printable, text_table

    rows = []
    for series in view["series"]:
        last = series["points"][-1]
        changes = series["change_points"]
        rows.append(
            [
                series["test"],
                series["device_class"],
                str(len(series["points"])),
                f"{last['value']:.4g}",
                last["verdict"],
                str(len(changes)),
            ]
        )
    lines = text_table(["test", "device class", "runs", "last figure", "last verdict", "change points"], rows)
    out = list(lines) if rows else ["no history yet: run pytest --roofline-history"]
    for series in view["series"]:
        for change in series["change_points"]:
            ci = change["ci"]
            ci_text = f" (CI {ci[0] * 100:+.1f} to {ci[1] * 100:+.1f} %)" if ci else ""
            layers = f"; layers {', '.join(change['layers'][:3])}" if change["layers"] else ""
            out.append(
                f"{series['test']}: {change['change'] * 100:+.1f} %{ci_text} "
                f"at {(change['commit'] or '?')[:12]}, "
                f"{change['runs_after']} runs after{layers}; {change['explanation'] or 'not explained'}"
            )
    return "\n".join(printable(line) for line in out)  # stored names: no escape sequence reaches the terminal


def _import(args: argparse.Namespace) -> int:
    from pytest_roofline.history.points import points_of
    from pytest_roofline.results import load_results

    stored_at = time.time()
    points = [
        replace(p, recorded=stored_at)
        for path in args.results
        for p in points_of(load_results(path), rootdir=Path.cwd())
    ]
    store = _open(args)
    try:
        added = store.append(points)
    finally:
        store.close()
    _print_notes(store)
    sys.stdout.write(f"{added} of {len(points)} points added to {store.location}\n")
    return 0


def _export(args: argparse.Namespace) -> int:
    from pytest_roofline.history.points import iter_lines

    store = _open(args)
    try:
        points = store.points()
    finally:
        store.close()
    _print_notes(store)
    text = "".join(line + "\n" for line in iter_lines(points))
    if args.output:
        from pytest_roofline.files import atomic_write_text

        _write_output(args.output, lambda path: atomic_write_text(path, text))
        sys.stdout.write(f"{len(points)} points written to {args.output}\n")
    else:
        sys.stdout.write(text)
    return 0


def run(args: argparse.Namespace) -> int:
    """Dispatch the action."""
    if args.action == "import":
        return _import(args)
    if args.action == "export":
        return _export(args)
    view = _view(args)
    if args.action == "html":
        from pytest_roofline.history.dashboard import write

        view["generated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        _write_output(args.output, lambda path: write(view, path))
        sys.stdout.write(f"dashboard of {len(view['series'])} series written to {args.output}\n")
        return 0
    if args.format == "json":
        from pytest_roofline.report import finite

        sys.stdout.write(json.dumps(finite(view), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(_table(view) + "\n")
    return 0
