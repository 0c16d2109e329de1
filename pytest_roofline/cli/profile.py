"""``roofline profile``: end-to-end latency and per-layer times of a model under the roofline.

The table follows MegEngine's ``profile_analyze``: end-to-end statistics on top, then the top-k
layers by time with their share and cumulative share, FLOPs, GFLOP/s, bytes, GB/s, intensity,
roofline fraction and bound; ``--by-type`` aggregates by op type.  ``--format json`` prints one
profile (``ModelProfile.to_dict``), or ``{"profiles": [...]}`` for a batch sweep.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.backends.bounded import run_bounded, set_exit_status
from pytest_roofline.cli.common import (
    INPUTS_HELP,
    add_backend_arguments,
    add_format_argument,
    add_model_arguments,
    add_trip_argument,
)
from pytest_roofline.errors import OptionError
from pytest_roofline.fmt import elide_names, fmt_bytes_fixed, printable, text_table
from pytest_roofline.fmt import fmt_seconds_fixed as _ms

if TYPE_CHECKING:
    from pytest_roofline.api import ProfileRun
    from pytest_roofline.profile import Layer, ModelProfile
    from pytest_roofline.roofline import DeviceRoofline

__all__ = ["add_parser", "format_table", "run"]

SORT_KEYS = ("time", "flops", "fraction", "name")
DEFAULT_TIMEOUT = 900.0  # seconds, the plugin's --roofline-timeout default


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``profile``."""
    parser = subparsers.add_parser(
        "profile",
        help="measure latency and per-layer times, place layers under the device roofline",
        description="Time a model end to end (profiler off, several fresh sessions) and per layer "
        "(profiler on), attribute every kernel to the original ONNX nodes and compare each layer "
        "with the calibrated device roofline.",
    )
    add_model_arguments(parser, batch_help="batch size: N, a list 1,4,16 or a power-of-two range 1-64")
    add_backend_arguments(
        parser,
        backend_help="inference backend (default onnxruntime)",
        option_help="backend option (repeatable), e.g. intra_op_threads=1, graph_optimization_level=basic",
    )
    parser.add_argument("--inputs", metavar="FILE", help=INPUTS_HELP)
    add_trip_argument(parser)
    add_format_argument(parser, ("table", "json", "csv"))
    parser.add_argument("--top", type=int, default=15, metavar="K", help="layers in the table (0 = all)")
    parser.add_argument("--sort", choices=SORT_KEYS, default="time", help="table order (default time)")
    parser.add_argument("--by-type", action="store_true", help="aggregate layers by op type")
    parser.add_argument("--trace", metavar="FILE", help="write a Chrome trace of the profiled run")
    parser.add_argument("--html", metavar="FILE", help="write the HTML report")
    parser.add_argument("--no-roofline", action="store_true", help="no device roofline (no calibration)")
    parser.add_argument("--sessions", type=int, default=5, help="fresh sessions for latency (default 5)")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per session (default 20)")
    parser.add_argument("--iterations", type=int, default=10, help="profiled iterations (default 10)")
    parser.add_argument("--budget", type=float, default=None, metavar="S", help="latency timing cap, seconds")
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"stop a batch's profiling (calibration included) after S seconds: one line, exit status 2 "
        f"(default {DEFAULT_TIMEOUT:g}, like pytest's --roofline-timeout)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(run=run)


def _timeout(text: str) -> float:
    from pytest_roofline.pytest.options import parse_timeout

    return parse_timeout(text)


def run(args: argparse.Namespace) -> int:
    """Profile ``args.model`` at each requested batch and print the result."""
    from pytest_roofline.api import parse_batches, run_profile

    for name, value in (
        ("--top", args.top),
        ("--sessions", args.sessions - 1),
        ("--rounds", args.rounds - 1),
        ("--iterations", args.iterations - 1),
    ):
        if value < 0:
            raise OptionError(f"{name} is too small")
    batches: list[int | None] = [b for b in parse_batches(args.batch)] if args.batch else [None]
    roofline: DeviceRoofline | str | None = None if args.no_roofline else "auto"

    def say(message: str) -> None:
        if not args.quiet:
            sys.stderr.write(f"roofline: {printable(message)}\n")
            sys.stderr.flush()

    runs: list[ProfileRun] = []
    set_exit_status(2)  # if a runaway model cannot be stopped, the process still exits 2, not 134
    for batch in batches:

        def work(batch: int | None = batch, roofline: Any = roofline) -> ProfileRun:
            return run_profile(
                args.model,
                backend=args.backend,
                batch=batch,
                dims=dict(args.dim),
                inputs=args.inputs,
                options=dict(args.option),
                roofline=roofline,
                sessions=args.sessions,
                rounds=args.rounds,
                profile_iterations=args.iterations,
                budget=args.budget,
                trips=dict(args.trip),
                progress=say,
            )

        what = args.model if batch is None else f"{args.model} (batch {batch})"
        runs.append(run_bounded(work, args.timeout, what, hint="raise --timeout if the model is that slow"))
        roofline = runs[-1].profile.roofline or roofline  # calibrate once per sweep
    profiles = [r.profile for r in runs]
    if args.trace:
        from pytest_roofline.report.trace import write_trace

        for item in runs:
            path = _per_batch(Path(args.trace), item.profile.batch, len(runs))
            write_trace(item.kernels, path, {"model": item.profile.model_name, "batch": item.profile.batch})
            say(f"trace written to {path}")
    if args.html:
        from pytest_roofline.report import html
        from pytest_roofline.results import RunResults

        html.write(RunResults.of_profiles(profiles), Path(args.html))
        say(f"HTML report written to {args.html}")
    if args.format == "json":
        data: Any = [p.to_dict() for p in profiles]
        data = data[0] if len(data) == 1 else {"profiles": data}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif args.format == "csv":  # the same layer columns as --roofline-report=PATH.csv
        from pytest_roofline.report import csv as csv_report
        from pytest_roofline.results import RunResults

        sys.stdout.write(csv_report.render(RunResults.of_profiles(profiles)))
    else:
        sys.stdout.write("\n".join(format_table(p, args.top, args.sort, args.by_type) for p in profiles))
    return 0


def _per_batch(path: Path, batch: int, count: int) -> Path:
    return path if count == 1 else path.with_name(f"{path.stem}-b{batch}{path.suffix}")


def _sorted_layers(profile: ModelProfile, key: str) -> list[Layer]:
    layers = [la for la in profile.layers if la.kind != "folded"]
    if key == "flops":
        return sorted(layers, key=lambda la: (-la.flops, -la.time))
    if key == "fraction":
        return sorted(layers, key=lambda la: (la.roofline_fraction is None, la.roofline_fraction or 0.0))
    if key == "name":
        return sorted(layers, key=lambda la: la.name)
    return sorted(layers, key=lambda la: -la.time)


def format_table(profile: ModelProfile, top: int = 15, sort: str = "time", by_type: bool = False) -> str:
    """End-to-end statistics, then the top layers (or op types) with roofline figures."""
    lat = profile.latency
    inputs = ", ".join(f"{k}[{'x'.join(map(str, v))}]" for k, v in profile.input_shapes.items())
    folded = [la for la in profile.layers if la.kind == "folded"]
    unattributed = [la for la in profile.layers if la.kind == "unattributed"]
    lines = [
        f"model {profile.model_name}  backend {profile.backend} {profile.backend_version}  "
        f"batch {profile.batch}{' (default)' if profile.extra.get('batch_default') else ''}  "
        f"inputs {inputs}  precision {profile.precision}",
        f"latency: median {_ms(lat.median)}  p90 {_ms(lat.p90)}  p99 {_ms(lat.p99)}  mean {_ms(lat.mean)}  "
        f"min {_ms(lat.min)}  std {_ms(lat.std)}  ({lat.n} samples, {len(lat.session_medians)} sessions, "
        f"95% CI of median {_ms(lat.ci_low)}-{_ms(lat.ci_high)})",
        f"throughput {profile.throughput:.1f}/s  total {profile.total_flops / 1e9:.3f} GFLOPs "
        f"{profile.total_macs / 1e9:.3f} GMACs  achieved {profile.achieved_flops / 1e9:.2f} GFLOP/s",
    ]
    if profile.roofline is not None:
        roof = profile.roofline
        check = profile.roofline_check
        from pytest_roofline.profile import known_fraction

        eff = known_fraction(profile.efficiency)
        lines.append(
            f"roofline: peak {roof.peak / 1e9:.1f} GFLOP/s, {roof.peak_bandwidth / 1e9:.1f} GB/s, ridge "
            f"{roof.ridge_point:.1f} FLOP/B; efficiency {'-' if eff is None else f'{100 * eff:.1f}%'}, "
            f"headroom {_ms(profile.headroom)}"
        )
        lines.append(memory_levels_line(roof))
        if not check.valid:
            lines.append(check.message())
    else:
        lines.append("roofline: none (run `roofline calibrate`, or drop --no-roofline)")
    lines.append(
        f"profiled kernel time {_ms(profile.kernel_time)} over {len(profile.layers) - len(folded)} layers; "
        f"attributed {100 * profile.attributed_fraction:.1f}%"
        + (f", {len(unattributed)} unattributed" if unattributed else "")
        + f"; {len(folded)} ONNX nodes folded at load ({sum(la.flops for la in folded) / 1e6:.2f} MFLOPs)"
    )
    lines.append("")
    if by_type:
        type_rows = [
            (
                s.op_type,
                str(s.count),
                _ms(s.time),
                f"{100 * s.share:.1f}%",
                f"{s.flops / 1e6:.2f}",
                f"{s.achieved_flops / 1e9:.2f}",
                fmt_bytes_fixed(s.bytes),
            )
            for s in profile.by_op_type()
        ]
        lines.append("by op type")
        lines += text_table(("op", "layers", "time", "share", "MFLOPs", "GFLOP/s", "bytes"), type_rows)
        return "\n".join(map(printable, lines)) + "\n"
    layers = _sorted_layers(profile, sort)
    valid = profile.roofline_check.status != "invalid"  # impossible fractions are not printed
    shown = layers if top == 0 else layers[:top]
    rows, cumulative = [], 0.0
    names = elide_names([printable(layer.name) for layer in layers])  # unique among all, not just shown
    for layer, name in zip(shown, names, strict=False):
        cumulative += layer.share
        nodes = ",".join(layer.onnx_nodes)
        if layer.kind == "layout":
            nodes = f"layout->{layer.serves or '?'}"
        rows.append(
            (
                name,
                layer.op_type,
                nodes[:48] + ("..." if len(nodes) > 48 else ""),
                _ms(layer.time),
                f"{100 * layer.share:.1f}%",
                f"{100 * cumulative:.1f}%",
                f"{layer.flops / 1e6:.2f}",
                f"{layer.achieved_flops / 1e9:.2f}",
                fmt_bytes_fixed(layer.bytes),
                f"{layer.achieved_bandwidth / 1e9:.2f}",
                f"{layer.intensity:.1f}",
                "-"
                if layer.roofline_fraction is None or not valid
                else f"{100 * layer.roofline_fraction:.1f}%",
                layer.bound or ("-" if layer.kind == "compute" else layer.kind),
                layer.memory_level or "-",
            )
        )
    lines.append(f"{'top ' + str(len(shown)) if top else 'all'} layers by {sort}")
    lines += text_table(
        (
            "layer",
            "op",
            "onnx nodes",
            "time",
            "share",
            "cum",
            "MFLOPs",
            "GFLOP/s",
            "bytes",
            "GB/s",
            "FLOP/B",
            "fraction",
            "bound",
            "level",
        ),
        rows,
        left=3,
    )
    return "\n".join(map(printable, lines)) + "\n"


def memory_levels_line(roof: DeviceRoofline) -> str:
    """The memory roofs layers are placed on (their ``level`` column), or why there is only DRAM."""
    levels = roof.levels
    if len(levels) == 1:
        return (
            f"memory levels: DRAM only, {roof.peak_bandwidth / 1e9:.1f} GB/s (this calibration has no "
            "cache levels: every layer is judged against DRAM; `roofline calibrate --force` measures them)"
        )
    shown = []
    for lvl in levels:
        size = f" {fmt_bytes_fixed(lvl.holds).strip()}" if lvl.holds else ""
        shown.append(f"{lvl.name}{size} {lvl.bandwidth / 1e9:.1f} GB/s")
    return "memory levels: " + ", ".join(shown) + " (a layer's level: where its weights and activations live)"
