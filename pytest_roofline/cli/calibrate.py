"""``roofline calibrate``: the device's measured roofs through a backend (cached)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from pytest_roofline.cli.common import add_backend_arguments, add_format_argument
from pytest_roofline.fmt import fmt_pct, fmt_rate, fmt_seconds, printable
from pytest_roofline.roofline import DeviceRoofline
from pytest_roofline.roofline.calibrate import calibrate
from pytest_roofline.roofline.probes import ALL_DTYPES, size_label

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
        sys.stdout.write(format_table(roofline))
    return 0


def format_table(roofline: DeviceRoofline) -> str:
    """Roofs beside the theoretical ones, ridge point, validity, cache levels, probes."""
    fp = roofline.fingerprint
    lines = [f"Device roofline: {fp.get('backend', '?')} {fp.get('version', '')} on {_device(fp)}", ""]
    lines += _roof_lines(roofline)
    if roofline.spread:
        spread = ", ".join(f"{k} {fmt_pct(v)}" for k, v in sorted(roofline.spread.items()))
        lines.append(f"  spread between two sessions: {spread}")
    for warning in roofline.warnings:
        lines.append(f"  WARNING: {warning}; re-measure on a quiet machine (--force)")
    if roofline.clock or roofline.threads:
        clock = f"{roofline.clock / 1e9:.2f} GHz (max boost: cpufreq or measured)" if roofline.clock else "-"
        lines.append(f"  threads {roofline.threads or '-'}, theoretical clock {clock}")
    if roofline.cache_levels:
        lines += [
            "",
            "  cache levels (bandwidth plateaus seen through the backend; capacity for the threads)",
        ]
        for level in roofline.cache_levels:
            size = f"<= {size_label(level.size)}" if level.size else "beyond caches"
            held = f"holds {size_label(level.capacity)}" if level.capacity else ""
            lines.append(
                f"    {level.name:<5} {size:<15} {fmt_rate(level.bandwidth, 'B/s'):>12}  {held}".rstrip()
            )
    lines += ["", f"  {'probe':<34} {'kind':<8} {'dtype':<8} {'figure':>14} {'per run':>10}"]
    for probe in roofline.probes:
        unit = "B/s" if probe.kind == "memory" else ("OP/s" if probe.dtype == "int8" else "FLOP/s")
        lines.append(
            f"  {probe.name:<34} {probe.kind:<8} {probe.dtype:<8} {fmt_rate(probe.value, unit):>14} "
            f"{fmt_seconds(probe.seconds):>10}"
        )
    lines += ["", f"  measured {roofline.measured_at} in {roofline.duration:.1f} s"]
    return "\n".join(map(printable, lines)) + "\n"  # the fingerprint may come from a cache file


def _device(fp: dict[str, Any]) -> str:
    """The device a calibration measured: the GPU with its identity (and host), or the CPU."""
    gpu = fp.get("gpu")
    if not isinstance(gpu, dict):
        return f"{fp.get('cpu_model', '?')} ({fp.get('cpu_cores', '?')} cores)"
    memory = gpu.get("memory")
    size = f", {memory / 1024**3:.0f} GiB" if isinstance(memory, int) and memory else ""
    parts = (
        ("compute capability {}", gpu.get("compute_capability")),
        ("{} SMs", gpu.get("sm_count")),
        ("max {} MHz", gpu.get("max_sm_clock_mhz")),
        ("driver {}", gpu.get("driver")),
        ("CUDA {}", gpu.get("cuda")),
    )
    details = ", ".join(text.format(value) for text, value in parts if value)
    return f"{gpu.get('name', '?')}{size} ({details}); host {fp.get('cpu_model', '?')}"


def _roof_lines(roofline: DeviceRoofline) -> list[str]:
    """One line per roof: measured, theoretical and the share reached; memory roof; ridge point."""
    theory = roofline.theoretical_peak_flops
    on_gpu = isinstance(roofline.fingerprint.get("gpu"), dict)
    lines = []
    for dtype in sorted(roofline.peak_flops, key=_dtype_order):
        peak, paper = roofline.peak_flops[dtype], theory.get(dtype)
        label = dtype
        if dtype == "float32" and roofline.float32_mode == "tf32":
            label, paper = "float32 (runs as TF32)", theory.get("tf32", paper)
        elif dtype == "float32" and roofline.float32_mode == "fp32":
            label = "float32 (strict fp32)"
        unit = "OP/s" if dtype == "int8" else "FLOP/s"
        probes = [p for p in roofline.probes if p.kind == "compute" and p.dtype == dtype]
        best = max(probes, key=lambda p: p.value, default=None)
        if not on_gpu and paper and best is not None and best.value < peak and math.isclose(peak, paper):
            # a CPU's roof is the FMA peak when no probe reaches it: "reached 100 %" would be the
            # roof's share of itself; what a probe reached is the best probe's share
            share = f"best probe {best.name} {fmt_rate(best.value, unit)}, {fmt_pct(best.value / peak)} of it"
            roof = f"{fmt_rate(peak, unit):>14}   the theoretical (FMA) peak"
            lines.append(f"  compute roof {label:<22} {roof}; {share}")
            continue
        lines.append(
            f"  compute roof {label:<22} {fmt_rate(peak, unit):>14}{_reached(peak, paper, unit, on_gpu)}"
        )
    if on_gpu and "float8" in theory:
        lines.append(f"  on paper only: float8 {fmt_rate(theory['float8'], 'FLOP/s')} (no float8 probe)")
    paper_bw = roofline.theoretical_peak_bandwidth or None
    reached = _reached(roofline.peak_bandwidth, paper_bw, "B/s", on_gpu)
    lines.append(f"  memory roof  {'DRAM':<22} {fmt_rate(roofline.peak_bandwidth, 'B/s'):>14}{reached}")
    lines.append(f"  ridge point  {'':<22} {roofline.ridge_point:>10.1f} FLOP/B ({roofline.dtype})")
    return lines


def _reached(measured: float, paper: float | None, unit: str, on_gpu: bool) -> str:
    if not paper:
        return ""
    text = f"   theoretical {fmt_rate(paper, unit)}, reached {fmt_pct(measured / paper)}"
    if measured > paper:
        why = (
            "the clocks run faster than NVML reports"
            if on_gpu
            else "the clock ran faster while the roof was measured than while the clock was"
        )
        text += f" (above: {why})"
    return text


def _dtype_order(dtype: str) -> int:
    return ALL_DTYPES.index(dtype) if dtype in ALL_DTYPES else len(ALL_DTYPES)
