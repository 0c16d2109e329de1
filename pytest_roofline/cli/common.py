"""Argument helpers shared by the subcommands."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pytest_roofline.errors import OptionError
from pytest_roofline.pytest.options import parse_key_value

__all__ = [
    "INPUTS_HELP",
    "add_backend_arguments",
    "add_format_argument",
    "add_model_arguments",
    "add_shape_arguments",
    "add_trip_argument",
    "parse_batch",
    "batch_or_default",
    "model_dims",
    "parse_key_int",
    "parse_shape",
    "parse_key_value",
    "parse_trip",
]

INPUTS_HELP = "inputs: .npy (single-input model) or .npz by name"


def parse_key_int(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` with a positive integer value up to :data:`~pytest_roofline.model.MAX_DIM`,
    for ``--dim``."""
    from pytest_roofline.model import MAX_DIM

    key, value = parse_key_value(text)
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"dim {key!r} needs an integer value, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"dim {key!r} must be positive, got {number}")
    if number > MAX_DIM:
        raise argparse.ArgumentTypeError(f"dim {key!r}={number} is beyond any real input (at most {MAX_DIM})")
    return key, number


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=1x3x48x192`` (trtexec's ``--shapes`` spelling) for ``--shape``; ``NAME=`` is a 0-d
    (scalar) input. The name may hold ``=`` and ``:`` (``input_1:0``): the last ``=`` splits."""
    from pytest_roofline.model import MAX_DIM

    key, sep, value = text.rpartition("=")
    try:
        sizes = tuple(int(part) for part in value.split("x")) if value.strip() else ()
    except ValueError:
        sizes = (-1,)
    if not sep or not key.strip() or any(not 0 <= size <= MAX_DIM for size in sizes):
        raise argparse.ArgumentTypeError(
            f"--shape needs NAME=AxBxC with whole sizes (e.g. x=1x3x224x224), got {text!r}"
        )
    return key.strip(), sizes


def model_dims(args: argparse.Namespace) -> dict[str, int]:
    """``--dim`` and ``--shape`` as one dims mapping (a shape binds each of its input's axes)."""
    from pytest_roofline.model import with_shapes

    return with_shapes(dict(args.dim), dict(args.shape)) or {}


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
        help="bind a symbolic input dim by name, or one input axis as INPUT[AXIS]=VALUE (repeatable)",
    )
    parser.add_argument(
        "--shape",
        action="append",
        type=parse_shape,
        default=[],
        metavar="INPUT=AxBx...",
        help="bind every axis of one input, as trtexec's --shapes: x=1x3x48x192 (repeatable)",
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
    from pytest_roofline.model import MAX_DIM

    if not 1 <= batch <= MAX_DIM:
        raise OptionError(f"--batch needs a positive integer up to {MAX_DIM}, got {batch}")
    return batch


def batch_or_default(value: object, models: list[str], dims: dict[str, int]) -> int | None:
    """``--batch``, else 1 where a model's leading batch dim is symbolic and unbound (as ``roofline
    profile`` and the ``model_profile`` fixture do), else None (the model's own)."""
    batch = parse_batch(value)
    if batch is not None:
        return batch
    from pytest_roofline.model import load_model, needs_batch

    return 1 if any(needs_batch(load_model(model), dims) for model in models) else None
