"""The plugin's settings: option parsers (argparse ``type=``), the option table, :class:`Settings`.

Each ``--roofline-*`` option is also an ini key ``roofline_*``; the command line wins.  Parsers
raise ``argparse.ArgumentTypeError`` so that a bad value is a one-line usage error.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

__all__ = [
    "OPTIONS",
    "Settings",
    "backend_options",
    "history_option",
    "history_setting",
    "parse_bool",
    "parse_budget",
    "parse_key_value",
    "parse_option",
    "parse_percent",
    "parse_timeout",
    "parse_byte_count",
    "settings_from_config",
]


# --- option values (argparse type= functions: errors become one-line usage errors) -------------


def parse_percent(text: str | float) -> float:
    """``"5"`` or ``"2.5%"`` (percent) → 0.05 / 0.025."""
    try:
        value = float(str(text).strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5 or 2.5, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or value >= 100:
        raise argparse.ArgumentTypeError(f"tolerance must be between 0 and 100 percent, got {text!r}")
    return value / 100.0


def parse_byte_count(text: str | int) -> int:
    """A number of bytes: ``"65536"``, ``"64k"``, ``"1.5M"``, ``"2G"`` (binary multiples)."""
    value = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(value[-1:], 1)
    try:
        count = float(value[:-1] if scale > 1 else value) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected bytes such as 65536, 64k or 2M, got {text!r}") from None
    if not math.isfinite(count) or count < 0 or count > 1 << 50:
        raise argparse.ArgumentTypeError(f"bytes must be between 0 and 1P, got {text!r}")
    return round(count)


#: The longest budget or timeout accepted (a week): beyond it a wait cannot even be scheduled.
MAX_SECONDS = 7 * 86400.0


def _seconds(text: str | float, what: str, example: str) -> float:
    """A positive, finite number of seconds, or a one-line usage error naming ``what``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds such as {example}, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{what} must be a positive number of seconds, got {text!r}")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{what} {text} is out of range (at most {MAX_SECONDS:.0f} s, a week)"
        )
    return value


def parse_budget(text: str | float) -> float:
    """Seconds a measurement may take (> 0)."""
    return _seconds(text, "budget", "10 or 2.5")


def parse_timeout(text: str | float) -> float:
    """Seconds one measurement may run before its test fails (> 0)."""
    return _seconds(text, "timeout", "900 or 60")


def parse_key_value(text: str) -> tuple[str, str]:
    """``K=V`` → (K, V), for ``--option`` and ``--roofline-option``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def parse_option(text: str) -> tuple[str, str]:
    """``K=V`` or ``BACKEND:K=V`` for ``--roofline-option``."""
    return parse_key_value(text)


def backend_options(options: dict[str, str], backend: str) -> dict[str, str]:
    """The options that apply to ``backend``: plain ``K=V`` ones and ``<backend>:K=V`` ones.

    A scoped option (``onnxruntime:intra_op_threads=1``) lets one ini file serve every backend:
    it is dropped when another backend runs, instead of being an unknown option there.
    """
    chosen: dict[str, str] = {}
    for key, value in options.items():
        scope, sep, name = key.partition(":")
        if not sep:
            chosen.setdefault(key, value)
        elif scope == backend:
            chosen[name] = value
    return chosen


def parse_bool(text: str | bool) -> bool:
    """An ini boolean (true/false/1/0/yes/no)."""
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


@dataclass(frozen=True)
class Settings:
    """The plugin's options after command line and ini merge (command line wins)."""

    backend: str = "onnxruntime"
    options: dict[str, str] = field(default_factory=dict)
    baseline_dir: Path = Path(".roofline")
    update: bool = False
    tolerance: float = 0.05
    budget: float = 10.0
    compare_ref: str | None = None
    recalibrate: bool = False
    reports: tuple[str, ...] = ()
    disable: bool = False
    strict: bool = False
    timeout: float = 900.0
    retime: bool = False
    history: str | None = None  # None: no history; "": the embedded store; else its URL or folder
    memory_tolerance: float = 0.01  # the memory verdict's allowed growth of the peak, a share ...
    memory_tolerance_bytes: int = 0  # ... or bytes, whichever is larger


#: option name → (ini key, parser, default, help)
OPTIONS: dict[str, tuple[Callable[[Any], Any], Any, str]] = {
    "backend": (str, "onnxruntime", "backend that runs the models (default onnxruntime)"),
    "option": (parse_option, [], "backend option K=V, or BACKEND:K=V for one backend only (repeatable)"),
    "baseline_dir": (
        str,
        ".roofline",
        "directory of baseline JSON files (default .roofline/ at the rootdir)",
    ),
    "update": (parse_bool, False, "accept this run's figures as the new baselines of the tests that ran"),
    "tolerance": (parse_percent, 0.05, "allowed slowdown in percent before a regression (default 5)"),
    "memory_tolerance": (
        parse_percent,
        0.01,
        "allowed growth of the memory peak in percent before a memory regression (default 1)",
    ),
    "memory_tolerance_bytes": (
        parse_byte_count,
        0,
        "allowed growth of the memory peak in bytes (64k, 2M); the larger tolerance applies (default 0)",
    ),
    "budget": (
        parse_budget,
        10.0,
        "seconds a measurement may take before answering inconclusive (default 10)",
    ),
    "compare_ref": (str, None, "paired mode: compare each model with its file at this git reference"),
    "recalibrate": (parse_bool, False, "measure the device roofline again instead of using the cache"),
    "report": (
        str,
        [],
        "write a report; format from the extension: .json .html .md .csv .benchmark.json (repeatable)",
    ),
    "disable": (parse_bool, False, "static analysis only: no timing, no gate"),
    "strict": (parse_bool, False, "a missing baseline or an inconclusive gate fails the test"),
    "retime": (
        parse_bool,
        False,
        "time and compare even when nothing that runs changed (default: such a test is 'unchanged')",
    ),
    "timeout": (
        parse_timeout,
        900.0,
        "seconds one measurement may take before its test fails (default 900; the backend is "
        "stopped, or abandoned in a background thread when it cannot be)",
    ),
    "history": (
        str,
        None,
        "append every measured result to a history: the embedded store (.roofline/history/) when no "
        "URL is given, a folder, or postgresql://... (env ROOFLINE_HISTORY)",
    ),
}

#: Values of ``roofline_history`` / ``ROOFLINE_HISTORY`` that name the embedded default store.
HISTORY_DEFAULT = ("", "1", "on", "true", "yes", "default")


def history_setting(option: str | None, ini: str | None, env: str | None) -> str | None:
    """The history store asked for: the option (``""`` for ``--roofline-history`` alone), else the
    ini key, else ``ROOFLINE_HISTORY``; ``"0"``/``off`` there turn it off; None when none asks."""
    for value in (option, ini or None, env or None):
        if value is None:
            continue
        text = str(value).strip()
        if text.lower() in ("0", "off", "false", "no"):
            return None
        return "" if text.lower() in HISTORY_DEFAULT else text
    return None


def history_option(config: pytest.Config) -> str | None:
    """``--roofline-history-url``, else ``--roofline-history``'s value; raises ``pytest.UsageError``
    when that value is a test path (``pytest --roofline-history test_perf.py``: the optional value took
    the path pytest was to collect)."""
    import pytest

    url = config.getoption("roofline_history_url")
    if url:
        return str(url)
    value = config.getoption("roofline_history")
    if not value:
        return value
    args = [str(a) for a in config.invocation_params.args]
    spelled_apart = any(
        a == "--roofline-history" and b == value for a, b in zip(args, args[1:], strict=False)
    )
    path = Path(config.invocation_params.dir) / value
    if path.is_file() or (spelled_apart and path.is_dir()):
        raise pytest.UsageError(
            f"--roofline-history took the test path {value!r} as its store: write the store as "
            "--roofline-history=URL or --roofline-history-url URL, or put the test paths first"
        )
    return str(value)


def settings_from_config(config: pytest.Config) -> Settings:
    """Merge command line and ini keys into :class:`Settings` (raises ``pytest.UsageError``)."""
    import pytest

    values: dict[str, Any] = {}
    for name, (parse, default, _help) in OPTIONS.items():
        if name == "history":
            continue
        value = config.getoption(f"roofline_{name}")
        if value in (None, [], False):
            ini = config.getini(f"roofline_{name}")
            if ini not in (None, "", []):
                try:
                    if isinstance(default, list):
                        value = [parse(v) for v in (ini if isinstance(ini, list) else str(ini).split())]
                    else:
                        value = parse(ini)
                except argparse.ArgumentTypeError as exc:
                    raise pytest.UsageError(f"ini key roofline_{name}: {exc}") from None
        values[name] = default if value is None else value
    rootdir = Path(str(config.rootpath))
    baseline_dir = Path(values["baseline_dir"])
    return Settings(
        backend=values["backend"],
        options=dict(values["option"]),
        baseline_dir=baseline_dir if baseline_dir.is_absolute() else rootdir / baseline_dir,
        update=bool(values["update"]),
        tolerance=float(values["tolerance"]),
        budget=float(values["budget"]),
        compare_ref=values["compare_ref"],
        recalibrate=bool(values["recalibrate"]),
        reports=tuple(values["report"]),
        disable=bool(values["disable"]),
        strict=bool(values["strict"]),
        timeout=float(values["timeout"]),
        retime=bool(values["retime"]),
        memory_tolerance=float(values["memory_tolerance"]),
        memory_tolerance_bytes=int(values["memory_tolerance_bytes"]),
        history=history_setting(
            history_option(config),
            config.getini("roofline_history"),
            os.environ.get("ROOFLINE_HISTORY"),
        ),
    )
