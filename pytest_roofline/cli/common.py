"""Argument helpers shared by the subcommands."""

from __future__ import annotations

import argparse

__all__ = ["add_model_arguments", "parse_key_value", "parse_key_int"]


def parse_key_value(text: str) -> tuple[str, str]:
    """``K=V`` → (K, V) for ``--option``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


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
    parser.add_argument(
        "--dim", action="append", type=parse_key_int, default=[], metavar="NAME=VALUE",
        help="bind a symbolic input dim (repeatable)",
    )
    parser.add_argument("--batch", metavar="N", help=batch_help)
