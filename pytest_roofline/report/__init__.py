"""Reports of a run, chosen by file extension.

``.json`` is the run-results JSON itself; other formats live in their own module of this package
(``html``, ``markdown``, ``csv``, ``benchmark_json``), each exposing ``write(results, path)`` for a
:class:`~pytest_roofline.results.RunResults`, and imported only when asked for.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import OptionError

if TYPE_CHECKING:
    from pytest_roofline.results import RunResults

__all__ = ["FORMATS", "finite", "format_of", "write_reports"]

#: extension → module of this package that writes it (``None``: written here).
FORMATS: dict[str, str | None] = {
    ".json": None,
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".csv": "csv",
    ".benchmark.json": "benchmark_json",
}


def format_of(path: str) -> str | None:
    """The module writing ``path`` (None for the results JSON).

    Raises:
        OptionError: an extension no format knows.
    """
    name = Path(path).name.lower()
    for ext in sorted(FORMATS, key=len, reverse=True):
        if name.endswith(ext):
            return FORMATS[ext]
    known = ", ".join(sorted(FORMATS))
    raise OptionError(f"report {path}: unknown format; use one of the extensions {known}")


def finite(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def write_reports(results: RunResults, paths: Sequence[str]) -> list[str]:
    """Write ``results`` to every path (format from the extension); returns the paths written."""
    from pytest_roofline.files import atomic_write_json

    written = []
    for path in paths:
        module_name = format_of(path)
        if module_name is None:
            atomic_write_json(Path(path), finite(results.to_dict()))
        else:
            module = importlib.import_module(f"{__name__}.{module_name}")
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            module.write(results, Path(path))
        written.append(str(path))
    return written
