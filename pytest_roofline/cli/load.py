"""``roofline load``: a serving scenario under MLPerf LoadGen (docs/serving.md).

LoadGen issues the queries of SingleStream, MultiStream, Server (Poisson arrivals at ``--qps``)
or Offline; the model answers them through the backend's sessions at the run's options.  A Server
with ``--p99`` and no ``--qps`` searches for the highest QPS meeting the bound; a run ends within
``--budget`` seconds (LoadGen issues no query past it, the rest is answered unrun and counted).
``--format json`` prints one ``ScenarioResult.to_dict``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.cli.common import add_backend_arguments, add_format_argument, add_model_arguments
from pytest_roofline.cli.common import parse_batch as _parse_batch
from pytest_roofline.fmt import printable

if TYPE_CHECKING:
    from pytest_roofline.serving.types import ScenarioResult

__all__ = ["add_parser", "run"]

DEFAULT_TIMEOUT = 900.0  # seconds, like roofline profile's


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"needs a number, got {text!r}") from None
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``load``."""
    from pytest_roofline.serving.compare import DEFAULT_WINDOWS
    from pytest_roofline.serving.types import SCENARIOS

    parser = subparsers.add_parser(
        "load",
        help="tail latency and throughput under an MLPerf LoadGen serving scenario",
        description="Drive a model with MLPerf LoadGen's own scenarios and print its p50/p90/p99/p99.9 "
        "latency, QPS, early-stopping tail estimate and whether the p99 bound held.",
    )
    add_model_arguments(parser)
    add_backend_arguments(
        parser,
        backend_help="inference backend (default onnxruntime)",
        option_help="backend option (repeatable), e.g. intra_op_threads=1",
    )
    parser.add_argument("--scenario", choices=tuple(SCENARIOS), default="single-stream")
    parser.add_argument("--qps", type=_positive, metavar="Q", help="Server: Poisson arrival rate, queries/s")
    parser.add_argument(
        "--p99", type=_positive, metavar="S", help="p99 bound, seconds (Server without --qps: search the QPS)"
    )
    parser.add_argument("--duration", type=_positive, default=2.0, metavar="S", help="LoadGen's min duration")
    parser.add_argument("--queries", type=int, default=64, metavar="N", help="LoadGen's min query count")
    parser.add_argument("--concurrency", type=int, default=1, metavar="N", help="worker sessions")
    parser.add_argument("--samples-per-query", type=int, default=8, metavar="N", help="MultiStream")
    parser.add_argument("--seed", type=int, default=0, help="LoadGen's schedule seed")
    parser.add_argument(
        "--budget", type=_positive, default=30.0, metavar="S", help="the run's time (a QPS search's too)"
    )
    parser.add_argument(
        "--log-dir", metavar="DIR", help="where LoadGen writes its logs (default: a temp dir)"
    )
    parser.add_argument(
        "--against",
        metavar="OLD",
        help="compare MODEL with the OLD model, paired: the same schedules in interleaved windows",
    )
    parser.add_argument(
        "--windows", type=int, default=DEFAULT_WINDOWS, metavar="N", help="--against: window pairs"
    )
    parser.add_argument(
        "--tolerance", type=_positive, default=10.0, metavar="PCT", help="--against: allowed slowdown, %%"
    )
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"stop the run (a QPS search too) after S seconds: one line, exit status 2 (default "
        f"{DEFAULT_TIMEOUT:g})",
    )
    add_format_argument(parser)
    parser.set_defaults(run=run)


def _timeout(text: str) -> float:
    from pytest_roofline.pytest.options import parse_timeout

    return parse_timeout(text)


def run(args: argparse.Namespace) -> int:
    """Run the scenario and print LoadGen's figures."""
    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.serving.runner import run_model
    from pytest_roofline.serving.table import scenario_table

    if args.against:
        return _compare(args)

    keywords = _keywords(args)
    backend = get_backend(args.backend, dict(args.option))
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="roofline-load-"))

    def say(message: str) -> None:
        sys.stderr.write(f"roofline: {printable(message)}\n")

    from pytest_roofline.backends.bounded import run_bounded, set_exit_status

    def work() -> ScenarioResult:
        return run_model(args.model, args.scenario, backend, log_dir, keywords, progress=say)

    set_exit_status(2)  # if a runaway model cannot be stopped, the process still exits 2
    result = run_bounded(work, args.timeout, args.model, hint="raise --timeout if the model is that slow")
    if args.format == "json":
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(scenario_table(result))
    return 0


def _keywords(args: argparse.Namespace) -> dict[str, Any]:
    """The options as :func:`~pytest_roofline.serving.runner.scenario_request`'s keywords."""
    return {
        "qps": args.qps,
        "p99": args.p99,
        "duration": args.duration,
        "queries": args.queries,
        "concurrency": args.concurrency,
        "samples_per_query": args.samples_per_query,
        "seed": args.seed,
        "budget": args.budget,
        "batch_size": _parse_batch(args.batch),
        "dims": dict(args.dim),
    }


def _compare(args: argparse.Namespace) -> int:
    """``--against OLD``: the paired comparison of OLD and MODEL."""
    import dataclasses

    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.errors import OptionError
    from pytest_roofline.pipeline import prepare
    from pytest_roofline.serving.compare import compare_models
    from pytest_roofline.serving.runner import scenario_request
    from pytest_roofline.serving.table import comparison_table

    if args.tolerance >= 100:
        raise OptionError(f"--tolerance is a percentage below 100, got {args.tolerance:g}")
    backend = get_backend(args.backend, dict(args.option))
    call, settings, _ = scenario_request(args.model, args.scenario, backend, _keywords(args))
    old, new = prepare(dataclasses.replace(call, model=args.against)), prepare(call)
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="roofline-load-"))
    found = compare_models(old, new, settings, log_dir, windows=args.windows, tolerance=args.tolerance / 100)
    if args.format == "json":
        sys.stdout.write(json.dumps(found.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(comparison_table(found, old.spec.name, new.spec.name))
    return 0
