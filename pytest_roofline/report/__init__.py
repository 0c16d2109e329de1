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

__all__ = ["FORMATS", "finite", "format_of", "save_report", "writable_target", "write_reports"]

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


def write_reports(results: RunResults, paths: Sequence[str], failed: list[str] | None = None) -> list[str]:
    """Write ``results`` to every path (format from the extension); returns the paths written.

    One report that cannot be written does not stop the others: its one-line reason is appended
    to ``failed`` (raised as a :class:`RooflineError` after the others when ``failed`` is None).
    """
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.files import atomic_write_json

    written, reasons = [], []
    for path in paths:
        try:
            module_name = format_of(path)
            if module_name is None:
                target = writable_target(Path(path), None)
                try:
                    atomic_write_json(target, finite(results.to_dict()))
                except OSError as exc:
                    raise RooflineError(_cannot_write(path, exc)) from None
                from pytest_roofline.report.serving import keep_logs

                keep_logs(results, Path(path))  # LoadGen's own logs beside the report, as its artifacts
            else:
                module = importlib.import_module(f"{__name__}.{module_name}")
                module.write(results, Path(path))
        except RooflineError as exc:
            reasons.append(str(exc))
            continue
        written.append(str(path))
    if failed is not None:
        failed.extend(reasons)
    elif reasons:
        raise RooflineError("; ".join(reasons))
    return written


def _cannot_write(path: str | Path, exc: OSError) -> str:
    return f"report {path} cannot be written: {exc.strerror or exc}"


def save_report(path: Path, text: str, module_name: str, newline: str | None = None) -> None:
    """Write report ``text`` to ``path`` atomically (a reader, a full disk or a kill leaves the old
    file or the new one, never half of one), through a symbolic link to its target.

    Raises:
        RooflineError: one line naming the file: it is a folder, a file this tool did not write as
            a report (a baseline, anything else), or it cannot be written.
    """
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.files import atomic_write_text

    target = writable_target(path, module_name)
    try:
        atomic_write_text(target, text, newline)
    except OSError as exc:
        raise RooflineError(_cannot_write(path, exc)) from None


def writable_target(path: Path, module_name: str | None) -> Path:
    """The file a report at ``path`` is written to: ``path``, or the file its symbolic links name
    (every format writes through a link); refused when it holds something that is not a report of
    this format, so a mistyped path never replaces a baseline or another file.

    Raises:
        RooflineError: one line naming the file and what it holds.
    """
    import os
    import stat

    from pytest_roofline.errors import RooflineError

    target = Path(os.path.realpath(path))
    try:
        info = target.stat()
    except FileNotFoundError:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RooflineError(_cannot_write(path, exc)) from None
        return target
    except OSError as exc:
        raise RooflineError(_cannot_write(path, exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise RooflineError(f"report {path} is a directory; name a file")
    if not stat.S_ISREG(info.st_mode):
        raise RooflineError(f"report {path} is not a regular file; name a file")
    held = _holds(target, module_name, info.st_size)
    if held is not None:
        raise RooflineError(f"report {path} would replace {held}; remove it or choose another path")
    return target


#: What the start of each text format's report holds (a file without it is not one of ours).
_SIGNATURES = {"html": "pytest-roofline report", "markdown": "pytest-roofline", "csv": "test,"}


def _holds(path: Path, module_name: str | None, size: int) -> str | None:
    """What ``path`` holds when it is not a report of ``module_name``'s format; None when it is
    one (or empty)."""
    from pytest_roofline.files import read_document
    from pytest_roofline.schema import SchemaError, check_kind, loads

    if size == 0:
        return None
    if module_name in _SIGNATURES:
        with open(path, "rb") as handle:
            head = handle.read(4096).decode("utf-8", "replace")
        if module_name == "csv":
            ours = head.startswith(_SIGNATURES["csv"])
        else:
            ours = _SIGNATURES[module_name] in head
        return None if ours else _foreign(head)
    try:
        data = loads(read_document(path))
    except (OSError, UnicodeDecodeError, SchemaError):
        return "a file that is not a report of pytest-roofline"
    if not isinstance(data, dict):
        return "a JSON file that is not a report of pytest-roofline"
    if module_name == "benchmark_json":
        ours = "benchmarks" in data and "machine_info" in data and "entries" not in data
        return None if ours else _foreign(data)
    try:
        check_kind(data, "results", "a results file")
    except SchemaError:
        return "a baseline file of pytest-roofline" if _is_baseline(data) else _foreign(data)
    if not isinstance(data.get("results"), list):
        return "a JSON file that is not a report of pytest-roofline"
    return None


def _is_baseline(data: Any) -> bool:
    return isinstance(data, dict) and (data.get("kind") == "baseline" or "entries" in data)


def _foreign(content: Any) -> str:
    """How to name a file that is not a report of the format asked for (a document or a text head)."""
    if isinstance(content, str):
        head = content.lstrip()
        baseline = head.startswith("{") and ('"entries"' in head or '"kind": "baseline"' in head)
    else:
        baseline = _is_baseline(content)
    if baseline:
        return "a baseline file of pytest-roofline"
    return "a file that is not a report of pytest-roofline in this format"
