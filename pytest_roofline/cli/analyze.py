"""``roofline analyze``: static FLOPs, MACs, bytes and params per node of a model."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys

from pytest_roofline.analysis import ModelAnalysis, analyze
from pytest_roofline.cli.common import (
    add_format_argument,
    add_model_arguments,
    add_trip_argument,
    batch_or_default,
    model_dims,
)
from pytest_roofline.errors import OptionError
from pytest_roofline.fmt import csv_cell
from pytest_roofline.report.tables import CONVENTION, analysis_table

__all__ = ["add_parser", "format_csv", "run"]

CSV_FIELDS = (
    "name",
    "op_type",
    "domain",
    "graph",
    "flops",
    "macs",
    "bytes_read",
    "bytes_written",
    "bytes",
    "params",
    "executions",
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``analyze``."""
    parser = subparsers.add_parser(
        "analyze",
        help="static cost of every node: FLOPs, MACs, bytes, params",
        description=f"Static cost model of an ONNX model at bound shapes. {CONVENTION}.",
    )
    add_model_arguments(parser, batch_help="bind the first dim of every input whose first dim is symbolic")
    add_format_argument(parser, ("table", "json", "csv"))
    parser.add_argument(
        "--top", type=int, default=15, metavar="K", help="nodes listed in the table (default 15)"
    )
    add_trip_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Analyze ``args.model`` and print it in ``args.format``."""
    batch = batch_or_default(args.batch, [args.model], model_dims(args))
    if args.top < 0:
        raise OptionError(f"--top must be >= 0, got {args.top}")
    result = analyze(args.model, batch=batch, dims=model_dims(args), trips=dict(args.trip))
    if args.format == "json":
        text = json.dumps(result.to_dict(), indent=2) + "\n"
    elif args.format == "csv":
        text = format_csv(result)
    else:
        text = analysis_table(result, args.top)
    sys.stdout.write(text)
    return 0


def format_csv(result: ModelAnalysis) -> str:
    """One row per node (text cells formula-safe, see :func:`~pytest_roofline.fmt.csv_cell`)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for node in result.nodes:
        writer.writerow([csv_cell(getattr(node, name)) for name in CSV_FIELDS])
    return out.getvalue()
