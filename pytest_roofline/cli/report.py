"""``roofline report RESULTS.json -o OUT``: render a saved run again, in any report format."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from pytest_roofline.errors import OptionError, RooflineError
from pytest_roofline.report import format_of
from pytest_roofline.results import load_results

__all__ = ["FORMAT_MODULES", "add_parser", "run"]

#: ``--format`` value → module of pytest_roofline.report that writes it.
FORMAT_MODULES = {
    "html": "html",
    "markdown": "markdown",
    "csv": "csv",
    "pytest-benchmark": "benchmark_json",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``report``."""
    parser = subparsers.add_parser(
        "report",
        help="render a run-results JSON as HTML, Markdown, CSV or pytest-benchmark JSON",
        description="Render the run-results JSON written by `pytest --roofline-report PATH.json`. "
        "The format follows OUT's extension (.html, .md, .csv, .benchmark.json); a plain .json "
        "output needs --format pytest-benchmark.",
    )
    parser.add_argument(
        "results",
        nargs="+",
        metavar="RESULTS.json",
        help="run-results JSON file; or `merge A.json B.json...` to merge CI shards into one -o results JSON",
    )
    parser.add_argument(
        "-o",
        "--output",
        action="append",
        required=True,
        metavar="OUT",
        help="report file to write (repeatable)",
    )
    parser.add_argument(
        "--format",
        choices=sorted(FORMAT_MODULES),
        default=None,
        help="format of every OUT (default: from its extension)",
    )
    parser.add_argument(
        "--artifact",
        metavar="NAME_OR_URL",
        default=None,
        help="where the HTML report will be found, named in the Markdown summary",
    )
    parser.set_defaults(run=run)


def _module_for(path: str, fmt: str | None) -> str:
    if fmt:
        return FORMAT_MODULES[fmt]
    module = format_of(path)
    if module is None:
        raise OptionError(
            f"{path}: a .json output is ambiguous (the input is the run-results JSON); "
            "pass --format pytest-benchmark or name it *.benchmark.json"
        )
    return module


def run(args: argparse.Namespace) -> int:
    """Write every ``-o`` report of ``args.results`` (or merge shards: ``report merge A B -o ALL``)."""
    if args.results[0] == "merge":
        return _merge(args.results[1:], args.output)
    if len(args.results) > 1:
        raise OptionError(
            "one RESULTS.json to render; to merge shards: roofline report merge A.json B.json -o ALL.json"
        )
    results = load_results(args.results[0])
    html_out = next((o for o in args.output if _module_for(o, args.format) == "html"), None)
    artifact = args.artifact or (Path(html_out).name if html_out else None)
    failed = 0
    for out in args.output:  # one that cannot be written does not stop the others
        name = _module_for(out, args.format)
        module = importlib.import_module(f"pytest_roofline.report.{name}")
        try:
            if name == "markdown":
                module.write(results, Path(out), artifact=artifact)
            else:
                module.write(results, Path(out))
        except RooflineError as exc:
            sys.stderr.write(f"roofline: error: {exc}\n")
            failed += 1
            continue
        sys.stdout.write(f"{name} report written to {out}\n")
    return 2 if failed else 0


def _merge(paths: list[str], outputs: list[str]) -> int:
    """Write the merged results to each ``-o`` (results JSON, or a report format by extension)."""
    from pytest_roofline.report import write_reports
    from pytest_roofline.report.merge import merge_results

    merged = merge_results(paths)
    for out in write_reports(merged, outputs):
        sys.stdout.write(f"{len(merged.records)} results of {len(paths)} shards written to {out}\n")
    return 0
