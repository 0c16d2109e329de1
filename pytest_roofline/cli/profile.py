"""``roofline profile``: end-to-end latency and per-layer times of a model under the roofline.

The table follows MegEngine's ``profile_analyze``: end-to-end statistics on top, then the top-k
layers by time with their share and cumulative share, FLOPs, GFLOP/s, bytes, GB/s, intensity,
roofline fraction and bound; ``--by-type`` aggregates by op type.  ``--format json`` prints one
profile (``ModelProfile.to_dict``), or ``{"profiles": [...]}`` for a batch sweep.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    model_dims,
)
from pytest_roofline.errors import OptionError
from pytest_roofline.fmt import printable
from pytest_roofline.report.tables import profile_table

if TYPE_CHECKING:
    from pytest_roofline.pipeline import ProfileRun

__all__ = ["add_parser", "run"]

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
    from pytest_roofline import pipeline
    from pytest_roofline.pipeline import ModelCall, parse_batches

    for name, value in (
        ("--top", args.top),
        ("--sessions", args.sessions - 1),
        ("--rounds", args.rounds - 1),
        ("--iterations", args.iterations - 1),
    ):
        if value < 0:
            raise OptionError(f"{name} is too small")
    batches: list[int | None] = [b for b in parse_batches(args.batch)] if args.batch else [None]
    call = ModelCall(
        args.model,
        dims=model_dims(args),
        inputs=args.inputs,
        backend=args.backend,
        options=dict(args.option),
        trips=dict(args.trip),
        roofline=None if args.no_roofline else "auto",
        sessions=args.sessions,
        rounds=args.rounds,
        profile_iterations=args.iterations,
        budget=args.budget,
    )

    def say(message: str) -> None:
        if not args.quiet:
            sys.stderr.write(f"roofline: {printable(message)}\n")
            sys.stderr.flush()

    runs: list[ProfileRun] = []
    set_exit_status(2)  # if a runaway model cannot be stopped, the process still exits 2, not 134
    for batch in batches:
        at_batch = dataclasses.replace(call, batch=batch)

        def work(at_batch: ModelCall = at_batch) -> ProfileRun:
            return pipeline.run(at_batch, say)

        what = args.model if batch is None else f"{args.model} (batch {batch})"
        runs.append(run_bounded(work, args.timeout, what, hint="raise --timeout if the model is that slow"))
        # calibrate once per sweep
        call = dataclasses.replace(call, roofline=runs[-1].profile.roofline or call.roofline)
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
        sys.stdout.write("\n".join(profile_table(p, args.top, args.sort, args.by_type) for p in profiles))
    return 0


def _per_batch(path: Path, batch: int, count: int) -> Path:
    return path if count == 1 else path.with_name(f"{path.stem}-b{batch}{path.suffix}")
