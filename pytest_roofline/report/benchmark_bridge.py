"""Feed our model timings into pytest-benchmark when it is active in the same run.

Teams already on pytest-benchmark keep their tools (``--benchmark-autosave``, ``compare``,
``--benchmark-json``, histograms, ``--benchmark-compare-fail``): each profiled model appears there
as one benchmark whose rounds are our end-to-end latency samples, in runs that ask pytest-benchmark
to save, write, compare or plot.  Nothing here imports
pytest-benchmark unless its plugin is registered, and nothing changes its options or hooks, so
both plugins run side by side without conflict.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from pytest_roofline.results import ProfileRecord

__all__ = ["PLUGIN_NAME", "active_benchmark_session", "feed_pytest_benchmark"]

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
