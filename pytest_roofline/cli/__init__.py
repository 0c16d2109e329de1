"""The ``roofline`` command: one subcommand module per verb.

Each module in :data:`SUBCOMMANDS` exposes ``add_parser(subparsers)`` and ``run(args) -> int``.
Errors a user can cause are :class:`~pytest_roofline.errors.RooflineError`: printed as one line on
stderr, exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING

from pytest_roofline.errors import RooflineError
from pytest_roofline.fmt import printable

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]

SUBCOMMANDS = (
    "analyze",
    "profile",
    "calibrate",
    "baseline",
    "report",
    "check",
    "diff",
    "history",
    "bisect",
    "load",
)


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The parser with every available subcommand."""
    from pytest_roofline.stamp import __version__

    parser = _Parser(prog="roofline", description="Roofline profiling and regression gating of ONNX models.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            continue
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.run(args) or 0)
    except RooflineError as exc:
        sys.stderr.write(f"roofline: error: {printable(exc)}\n")  # messages quote names from models
        return 2
    except KeyboardInterrupt:
        from pytest_roofline.backends.bounded import set_exit_status

        set_exit_status(130)  # kept when a measurement the interrupt stopped exits past native teardown
        sys.stderr.write("roofline: interrupted\n")
        return 130


def entry_point() -> None:
    """Console-script entry: ``roofline``."""
    raise SystemExit(main())
