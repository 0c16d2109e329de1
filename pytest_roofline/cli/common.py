"""Argument helpers shared by the subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pytest_roofline.errors import OptionError
from pytest_roofline.options import parse_key_value

__all__ = [
    "INPUTS_HELP",
    "add_backend_arguments",
    "add_format_argument",
    "add_model_arguments",
    "add_shape_arguments",
    "add_trip_argument",
    "parse_batch",
    "parse_key_int",
    "parse_key_value",
    "parse_trip",
]

INPUTS_HELP = "inputs: .npy (single-input model) or .npz by name"


def parse_key_int(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` with a positive integer value, for ``--dim``."""
    key, value = parse_key_value(text)
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"dim {key!r} needs an integer value, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"dim {key!r} must be positive, got {number}")
    return key, number


def add_model_arguments(parser: argparse.ArgumentParser, batch_help: str = "batch size") -> None:
    """MODEL, --dim NAME=VALUE (repeatable) and --batch."""
    parser.add_argument("model", metavar="MODEL", help="path of an .onnx model")
    add_shape_arguments(parser, batch_help)


def add_shape_arguments(parser: argparse.ArgumentParser, batch_help: str = "batch size") -> None:
    """--dim NAME=VALUE (repeatable) and --batch."""
    parser.add_argument(
        "--dim",
        action="append",
        type=parse_key_int,
        default=[],
        metavar="NAME=VALUE",
        help="bind a symbolic input dim (repeatable)",
    )
    parser.add_argument("--batch", metavar="N", help=batch_help)


def parse_trip(text: str) -> tuple[str, int]:
    """``LOOP=N`` with a non-negative integer, for ``--trip``."""
    key, sep, value = text.partition("=")
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not sep or not key.strip() or number < 0:
        raise argparse.ArgumentTypeError(f"--trip needs LOOP=N with N a whole number >= 0, got {text!r}")
    return key.strip(), number


def add_trip_argument(parser: argparse.ArgumentParser) -> None:
    """--trip LOOP=N (repeatable): trip counts of Loops the graph does not fix."""
    parser.add_argument(
        "--trip",
        action="append",
        type=parse_trip,
        default=[],
        metavar="LOOP=N",
        help="trip count of a Loop the graph does not fix, by node or trip-count tensor (repeatable)",
    )


def add_backend_arguments(parser: argparse.ArgumentParser, backend_help: str, option_help: str) -> None:
    """--backend NAME (default onnxruntime) and --option K=V (repeatable, a list of pairs)."""
    parser.add_argument("--backend", default="onnxruntime", help=backend_help)
    parser.add_argument(
        "--option", action="append", type=parse_key_value, default=[], metavar="K=V", help=option_help
    )


def add_format_argument(parser: argparse.ArgumentParser, choices: Sequence[str] = ("table", "json")) -> None:
    """--format, one of ``choices``, default ``table``."""
    parser.add_argument("--format", choices=tuple(choices), default="table", help="output format")


def parse_batch(value: object) -> int | None:
    """``--batch`` as one positive integer (None when not given).

    Raises:
        OptionError: not a positive integer.
    """
    if value is None:
        return None
    try:
        batch = int(str(value))
    except ValueError:
        raise OptionError(f"--batch needs a positive integer, got {value!r}") from None
    if batch < 1:
        raise OptionError(f"--batch needs a positive integer, got {batch}")
    return batch
