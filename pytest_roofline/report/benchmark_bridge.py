"""Feed our model timings into pytest-benchmark when it is active in the same run.

Teams already on pytest-benchmark keep their tools (``--benchmark-autosave``, ``compare``,
``--benchmark-json``, histograms, ``--benchmark-compare-fail``): each profiled model appears there
as one benchmark whose rounds are our end-to-end latency samples, in runs that ask pytest-benchmark
to save, write, compare or plot.  Nothing here imports
pytest-benchmark unless its plugin is registered, and nothing changes its options or hooks, so
both plugins run side by side without conflict.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from pytest_roofline.results import ProfileRecord

__all__ = [
    "PLUGIN_NAME",
    "active_benchmark_session",
    "feed_pytest_benchmark",
    "new_benchmark_storage",
    "remove_if_empty",
]

PLUGIN_NAME = "pytest-benchmark"  # the name pytest-benchmark registers its session plugin under


def active_benchmark_session(config: pytest.Config) -> Any | None:
    """pytest-benchmark's session when the run asked it to keep or show results; else None.

    Installed is not enough: pytest-benchmark loads in every run of a project that has it, and
    feeding it then would print its table in runs that never asked for one.  The run must ask it
    to write (``--benchmark-json``, ``--benchmark-save``, ``--benchmark-autosave``), compare
    (``--benchmark-compare``) or plot (``--benchmark-histogram``), and not have it off.
    """
    session = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if session is None or not hasattr(session, "benchmarks"):
        return None
    if getattr(session, "disabled", False) or getattr(session, "skip", False):
        return None
    asked = ("json", "save", "autosave", "compare", "histogram")
    if not any(getattr(session, name, None) for name in asked):
        return None
    return session


def feed_pytest_benchmark(config: pytest.Config, record: ProfileRecord) -> bool:
    """Add one profiled model to pytest-benchmark's run (the plugin calls it after each profile).

    Call it while the test runs (right after the profile is measured), not at session end:
    pytest-benchmark saves and displays in its own ``pytest_sessionfinish`` /
    ``pytest_terminal_summary``.  Returns True when the timings were fed, False when
    pytest-benchmark is absent, disabled (``--benchmark-disable``, xdist) or skipping, or when
    the profile holds no latency samples.
    """
    session = active_benchmark_session(config)
    samples = record.profile.latency.samples
    if session is None or not samples:
        return False
    from pytest_benchmark.stats import Metadata

    from pytest_roofline.report.benchmark_json import benchmark_entry

    entry = benchmark_entry(record)
    fixture = SimpleNamespace(
        name=entry["name"],
        fullname=entry["fullname"],
        group=entry["group"],
        param=entry["param"],
        params=entry["params"],
        extra_info=entry["extra_info"],
        cprofile_stats=None,
        has_error=False,
    )
    metadata = Metadata(fixture, iterations=1, options=dict(entry["options"]))
    for sample in samples:
        metadata.stats.update(float(sample))
    session.benchmarks.append(metadata)
    return True


def new_benchmark_storage(config: pytest.Config) -> Path | None:
    """pytest-benchmark's storage folder when this run is about to create it; else None.

    pytest-benchmark makes its file storage (``./.benchmarks`` by default) in its own
    ``pytest_configure`` whether or not any test benchmarks anything, so a run of only
    pytest-roofline's tests (or of this project's own suite) leaves an empty ``.benchmarks/`` in
    the working directory.  Call this from a ``pytest_configure`` that runs before pytest-benchmark's
    (it is ``trylast``) and pass the result to :func:`remove_if_empty` at ``pytest_unconfigure``.
    Returns None when pytest-benchmark is not installed, its storage is not a folder
    (``elasticsearch+http://...``) or the folder exists already (then it is not ours to remove).
    """
    try:
        storage = config.getoption("benchmark_storage")
    except ValueError:  # pytest-benchmark is not installed or was disabled with -p no:benchmark
        return None
    text = str(storage or "")
    if "://" in text and not text.startswith("file://"):
        return None
    folder = Path(text.removeprefix("file://")).expanduser()
    folder = folder if folder.is_absolute() else Path(os.getcwd()) / folder
    return None if folder.exists() else folder


def remove_if_empty(folder: Path | None) -> bool:
    """Remove ``folder`` if it exists and is empty (nothing pytest-benchmark saved is ever lost)."""
    if folder is None:
        return False
    with contextlib.suppress(OSError):  # not empty, gone, or not ours: leave it
        folder.rmdir()
        return True
    return False
