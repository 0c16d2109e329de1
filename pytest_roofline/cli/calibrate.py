"""``roofline calibrate``: the device's measured roofs through a backend (cached)."""

from __future__ import annotations

import argparse
import json
import sys

from pytest_roofline.cli.common import add_backend_arguments, add_format_argument
from pytest_roofline.fmt import printable
from pytest_roofline.report.tables import calibration_table
from pytest_roofline.roofline.calibrate import calibrate
from pytest_roofline.roofline.probes import ALL_DTYPES

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``calibrate``."""
    parser = subparsers.add_parser(
        "calibrate",
        help="measure the device's compute and memory roofs through a backend (cached)",
        description="Measure peak FLOP/s per dtype (GEMM ladder, conv) and bandwidth (stream ladder "
        "from cache-sized to beyond the last-level cache) through a backend; cached per device "
        "fingerprint in the user's cache dir ($ROOFLINE_CACHE_DIR overrides).",
    )
    add_backend_arguments(
        parser,
        backend_help="backend to calibrate (default onnxruntime)",
        option_help="backend option, e.g. intra_op_threads=2 (repeatable)",
    )
    add_format_argument(parser)
    parser.add_argument(
        "--force", action="store_true", help="measure again even when a cached calibration exists"
    )
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="cache directory (default: $ROOFLINE_CACHE_DIR or the user's cache dir)",
    )
    parser.add_argument(
        "--dtype",
        action="append",
        choices=ALL_DTYPES,
        metavar="DTYPE",
        help=f"dtype to calibrate (repeatable; float32 always; default every one the device's plan has: "
        f"{', '.join(ALL_DTYPES)}; bfloat16 on GPUs only)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer probe sizes (smoke runs; cached apart)")
    parser.add_argument(
        "--spot-check",
        action="store_true",
        help="re-run two cheap probes against a cached roofline; re-measure when off by more than 15%%",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Calibrate (or read the cache) and print the roofline; progress goes to stderr."""
    from pytest_roofline.backends.base import get_backend

    backend = get_backend(args.backend, dict(args.option))

    def progress(message: str) -> None:
        sys.stderr.write(f"roofline: {printable(message)}\n")
        sys.stderr.flush()

    roofline = calibrate(
        backend,
        force=args.force,
        cache_dir=args.cache_dir,
        progress=progress,
        dtypes=args.dtype,
        quick=args.quick,
        spot_check=args.spot_check,
    )
    if args.format == "json":
        sys.stdout.write(json.dumps(roofline.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(calibration_table(roofline))
    return 0
