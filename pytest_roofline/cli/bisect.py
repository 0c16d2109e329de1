"""``roofline bisect GOOD BAD --test NODEID``: the first commit whose model got slower.

Paired runs in temporary git worktrees (see :mod:`pytest_roofline.history.bisect`).  The model is
``--model PATH`` (relative to the repository's top), else the one the history recorded for the test.
The backend runs with ``--option K=V``, else at the threads the history recorded for the test (the
history pairs a new model with the previous one at the test's configured threads): both time a
change at the same threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pytest_roofline.cli.common import add_backend_arguments
from pytest_roofline.errors import RooflineError
from pytest_roofline.pytest.options import parse_percent

#: The backends' thread options, as the history's conditions record them (0: the backend's default).
THREAD_OPTIONS = ("intra_op_threads", "threads")

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``bisect``."""
    parser = subparsers.add_parser(
        "bisect",
        help="find the first commit whose model is slower than GOOD's (paired runs, git worktrees)",
        description="Walk GOOD..BAD in temporary git worktrees, time each candidate's model paired against "
        "GOOD's (same / different / unknown, more repeats when unknown) and name the first commit slower "
        "than GOOD by more than the threshold, with its graph diff and a command that reproduces it.",
    )
    parser.add_argument("good", metavar="GOOD")
    parser.add_argument("bad", metavar="BAD")
    parser.add_argument("--test", required=True, metavar="NODEID", help="the test whose model to bisect")
    parser.add_argument(
        "--model", default=None, help="model path in the repository (default: from the history)"
    )
    parser.add_argument("--threshold", type=parse_percent, default=0.02, metavar="PCT", help="default 2")
    parser.add_argument(
        "--build", default=None, metavar="CMD", help="command that makes the model at each commit"
    )
    add_backend_arguments(
        parser,
        "backend (default onnxruntime)",
        "backend option (repeatable); default: the threads the history recorded for the test",
    )
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument(
        "--budget", type=float, default=60.0, help="seconds per commit when unknown (default 60)"
    )
    parser.add_argument("--store", default=None, metavar="URL", help="history to find the test's model in")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.set_defaults(run=run)


def _from_history(test: str, url: str | None, root: Path) -> tuple[str, dict[str, str]]:
    """The model the history recorded for ``test`` (relative to ``root``) and the thread option it
    ran at, when not the backend's default."""
    from pytest_roofline.history.store import ENV, open_store

    store = open_store(url or os.environ.get(ENV) or None, root / ".roofline" / "history")
    try:
        points = store.points(test=test)
    finally:
        store.close()
    if not points:
        raise RooflineError(f"the history holds no run of {test}: name its model with --model PATH")
    last = max(points, key=lambda p: p.order)
    settings = last.detail.get("settings")
    recorded = settings.items() if isinstance(settings, dict) else ()
    threads = {k: str(v) for k, v in recorded if k in THREAD_OPTIONS and str(v) not in ("", "0")}
    path = Path(last.model)
    model = (
        path.relative_to(root).as_posix() if path.is_absolute() and path.is_relative_to(root) else last.model
    )
    return model, threads


def run(args: argparse.Namespace) -> int:
    """Bisect and print the culprit."""
    from pytest_roofline.history.bisect import bisect, build_command, repository

    build_command(args.build)  # a bad --build string: one line before the repository is looked at
    root = repository(Path.cwd())
    options, model = dict(args.option), args.model
    if model is None or not options:  # what the history recorded: the model, the threads
        try:
            recorded, threads = _from_history(args.test, args.store, root)
        except RooflineError:
            if model is None:
                raise
            recorded, threads = "", {}
        model, options = model or recorded, options or threads
    quiet = args.format == "json"

    def progress(line: str) -> None:
        if not quiet:
            sys.stderr.write(f"bisect: {line}\n")

    result = bisect(
        args.good,
        args.bad,
        test=args.test,
        model=model,
        cwd=Path.cwd(),
        threshold=args.threshold,
        build=args.build,
        backend=args.backend,
        options=options,
        batch=args.batch,
        budget=args.budget,
        progress=progress,
    )
    if quiet:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
        return 0
    for verdict in result.verdicts:
        sys.stdout.write(f"{verdict.commit[:12]}  {verdict.status:9}  ratio {verdict.ratio:.3f}\n")
    head = f"first slower commit: {result.culprit}" if result.culprit else "no slower commit"
    sys.stdout.write(
        f"{head} ({result.steps} steps of {result.candidates} commits, {result.seconds:.0f} s)\n"
    )
    sys.stdout.write(f"why: {result.explanation}\nrepro: {result.repro}\n")
    for note in result.notes:
        sys.stdout.write(f"note: {note}\n")
    return 0
