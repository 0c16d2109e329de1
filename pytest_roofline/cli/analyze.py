"""``roofline analyze``: static FLOPs, MACs, bytes and params per node of a model."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys

from pytest_roofline.analysis import ModelAnalysis, analyze, by_op_type, published_macs
from pytest_roofline.cli.common import (
    add_format_argument,
    add_model_arguments,
    add_trip_argument,
    batch_or_default,
)
from pytest_roofline.errors import OptionError
from pytest_roofline.fmt import csv_cell, fmt_bytes_fixed, printable, text_table

__all__ = ["add_parser", "format_csv", "format_table", "run"]

CONVENTION = (
    "FLOPs = 2 x MACs (+1 per bias/elementwise op); bytes = inputs read + outputs written;"
    " totals count every execution of Loop/Scan bodies and the costed If branch"
)
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
    batch = batch_or_default(args.batch, [args.model], dict(args.dim))
    if args.top < 0:
        raise OptionError(f"--top must be >= 0, got {args.top}")
    result = analyze(args.model, batch=batch, dims=dict(args.dim), trips=dict(args.trip))
    if args.format == "json":
        text = json.dumps(result.to_dict(), indent=2) + "\n"
    elif args.format == "csv":
        text = format_csv(result)
    else:
        text = format_table(result, args.top)
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


def format_table(result: ModelAnalysis, top: int = 15) -> str:
    """Totals, the top nodes by FLOPs, an aggregate by op type, shape method, uncosted ops."""
    total = result.total
    inputs = ", ".join(f"{k}[{'x'.join(map(str, v))}]" for k, v in result.input_shapes.items())
    lines = [
        f"model {result.model_name}  inputs {inputs}  shapes resolved by: {result.shape_method}",
        f"total: {total.flops / 1e9:.3f} GFLOPs, {total.macs / 1e9:.3f} GMACs "
        f"(conv+gemm+matmul {published_macs(result) / 1e9:.3f} GMACs, the published-table convention), "
        f"{total.params / 1e6:.3f} M params, {fmt_bytes_fixed(total.bytes)} moved, {len(result.nodes)} nodes",
        f"coverage: {result.coverage.describe()}",
        *(f"warning: {line}" for line in result.warnings),
        f"convention: {CONVENTION}",
        "",
    ]
    nodes = sorted(result.nodes, key=lambda n: (-n.total_flops, -n.total_bytes))[:top]
    if nodes:
        lines.append(f"top {len(nodes)} nodes by FLOPs")
        rows = [
            (
                n.name,
                n.op_type,
                f"{n.total_flops / 1e6:.2f}",
                f"{n.total_macs / 1e6:.2f}",
                fmt_bytes_fixed(n.total_bytes),
                f"{n.intensity:.1f}",
                f"{n.params}",
            )
            for n in nodes
        ]
        lines += text_table(("node", "op", "MFLOPs", "MMACs", "bytes", "FLOP/B", "params"), rows, left=2)
        lines.append("")
    lines.append("by op type")
    op_rows = [
        (
            op,
            str(count),
            f"{t.flops / 1e6:.2f}",
            f"{100 * t.flops / total.flops if total.flops else 0:.1f}%",
            f"{t.macs / 1e6:.2f}",
            fmt_bytes_fixed(t.bytes),
        )
        for op, (count, t) in by_op_type(result).items()
    ]
    lines += text_table(("op", "nodes", "MFLOPs", "share", "MMACs", "bytes"), op_rows)
    if result.uncosted:
        lines += [
            "",
            "no cost rule (bytes only): " + ", ".join(f"{op} x{count}" for op, count in result.uncosted),
        ]
    if result.unresolved:
        lines.append(
            "a rule but not costed (bytes only): "
            + ", ".join(f"{op} x{count} ({reason})" for op, reason, count in result.unresolved)
        )
    return "\n".join(map(printable, lines)) + "\n"  # node and input names come from the model
