"""``roofline check``: do the backends compute the same outputs for the same inputs?

Exit status 0 when every output of every backend matches the first backend's within the
tolerances, 1 on a mismatch (each failing output named on stderr with its errors), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from pytest_roofline.cli.common import (
    INPUTS_HELP,
    add_format_argument,
    add_model_arguments,
    batch_or_default,
    model_dims,
    parse_key_value,
)
from pytest_roofline.errors import OptionError
from pytest_roofline.fmt import printable
from pytest_roofline.report.tables import check_table

if TYPE_CHECKING:
    pass

__all__ = ["add_parser", "run"]


def _backend_option(text: str) -> tuple[str, str, str]:
    """``BACKEND:KEY=VALUE`` → (backend, key, value)."""
    backend, sep, rest = text.partition(":")
    if not sep or not backend:
        raise argparse.ArgumentTypeError(f"expected BACKEND:KEY=VALUE, got {text!r}")
    key, value = parse_key_value(rest)
    return backend.strip(), key, value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``check``."""
    parser = subparsers.add_parser(
        "check",
        help="compare a model's outputs across backends (same inputs)",
        description="Run the model on each backend with the same inputs and compare every output "
        "with the first backend's: |candidate - reference| <= atol + rtol * |reference|.",
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--backends",
        default="onnxruntime,openvino",
        help="comma-separated backends, the first is the reference (default onnxruntime,openvino)",
    )
    parser.add_argument("--inputs", metavar="FILE", help=INPUTS_HELP)
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    parser.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (default 1e-4)")
    parser.add_argument(
        "--option",
        action="append",
        type=_backend_option,
        default=[],
        metavar="BACKEND:K=V",
        help="backend option (repeatable), e.g. openvino:device=CPU",
    )
    add_format_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check ``args.model``; 0 all match, 1 mismatch."""
    from pytest_roofline.check import check_outputs

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    options: dict[str, dict[str, str]] = {}
    for backend, key, value in args.option:
        if backend not in backends:
            raise OptionError(f"--option {backend}:{key}=... names no backend of --backends {args.backends}")
        options.setdefault(backend, {})[key] = value
    batch = batch_or_default(args.batch, [args.model], model_dims(args))
    result = check_outputs(
        args.model,
        backends,
        inputs=args.inputs,
        seed=args.seed,
        rtol=args.rtol,
        atol=args.atol,
        options=options,
        batch=batch,
        dims=model_dims(args),
    )
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        print(check_table(result))
    for failure in result.failures:
        detail = printable(failure.describe())
        sys.stderr.write(f"roofline: mismatch: {detail} (rtol={result.rtol:g}, atol={result.atol:g})\n")
    return 0 if result.passed else 1
