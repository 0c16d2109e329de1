"""Root conftest: pytest's own ``pytester`` for the plugin tests; no empty ``.benchmarks/`` left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_roofline.report.benchmark_bridge import new_benchmark_storage, remove_if_empty

pytest_plugins = ["pytester"]

_BENCHMARK_STORAGE = pytest.StashKey[Path | None]()


def pytest_configure(config: pytest.Config) -> None:
    """Note pytest-benchmark's storage folder before its (trylast) configure creates it."""
    config.stash[_BENCHMARK_STORAGE] = new_benchmark_storage(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove that folder again when this run left it empty (the [test] extra has pytest-benchmark)."""
    remove_if_empty(config.stash.get(_BENCHMARK_STORAGE, None))
