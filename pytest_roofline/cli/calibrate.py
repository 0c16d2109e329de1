"""``roofline calibrate``: the device's measured roofs through a backend (cached)."""

from __future__ import annotations

import argparse
import json
import sys

from pytest_roofline.cli.common import add_backend_arguments, add_format_argument
from pytest_roofline.fmt import fmt_pct, fmt_rate, fmt_seconds, printable
from pytest_roofline.roofline import DeviceRoofline
from pytest_roofline.roofline.calibrate import calibrate
from pytest_roofline.roofline.probes import DTYPES, size_label

__all__ = ["add_parser", "format_table", "run"]


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
        choices=DTYPES,
        metavar="DTYPE",
        help=f"dtype to calibrate (repeatable; float32 always; default all of {', '.join(DTYPES)})",
    )
    parser.add_argument("--quick", action="store_true", help="fewer probe sizes (smoke runs; cached apart)")
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
    )
    if args.format == "json":
        sys.stdout.write(json.dumps(roofline.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(format_table(roofline))
    return 0


def format_table(roofline: DeviceRoofline) -> str:
    """Roofs, ridge point, theoretical peak and the share reached, cache levels, probes."""
    fp = roofline.fingerprint
    lines = [
        f"Device roofline: {fp.get('backend', '?')} {fp.get('version', '')} on {fp.get('cpu_model', '?')} "
        f"({fp.get('cpu_cores', '?')} cores)",
        "",
    ]
    for dtype in sorted(roofline.peak_flops, key=_dtype_order):
        peak = roofline.peak_flops[dtype]
        unit = "OP/s" if dtype == "int8" else "FLOP/s"
        theory = roofline.theoretical_peak_flops.get(dtype)
        reached = ""
        if theory:
            reached = f"   theoretical {fmt_rate(theory, unit)}, reached {fmt_pct(peak / theory)}"
        if theory and peak > theory:
            reached += " (above: the clock runs faster than /proc/cpuinfo reports)"
        lines.append(f"  compute roof {dtype:<8} {fmt_rate(peak, unit):>14}{reached}")
    lines.append(f"  memory roof  DRAM     {fmt_rate(roofline.peak_bandwidth, 'B/s'):>14}")
    lines.append(f"  ridge point           {roofline.ridge_point:>10.1f} FLOP/B ({roofline.dtype})")
    if roofline.cache_levels:
        lines += ["", "  cache levels (bandwidth plateaus seen through the backend)"]
        for level in roofline.cache_levels:
            size = f"<= {size_label(level.size)}" if level.size else "beyond caches"
            lines.append(f"    {level.name:<5} {size:<15} {fmt_rate(level.bandwidth, 'B/s'):>12}")
    lines += ["", f"  {'probe':<28} {'kind':<8} {'dtype':<8} {'figure':>14} {'per run':>10}"]
    for probe in roofline.probes:
        unit = "B/s" if probe.kind == "memory" else ("OP/s" if probe.dtype == "int8" else "FLOP/s")
        lines.append(
            f"  {probe.name:<28} {probe.kind:<8} {probe.dtype:<8} {fmt_rate(probe.value, unit):>14} "
            f"{fmt_seconds(probe.seconds):>10}"
        )
    lines += ["", f"  measured {roofline.measured_at} in {roofline.duration:.1f} s"]
    return "\n".join(map(printable, lines)) + "\n"  # the fingerprint may come from a cache file


def _dtype_order(dtype: str) -> int:
    return DTYPES.index(dtype) if dtype in DTYPES else len(DTYPES)
