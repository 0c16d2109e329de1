"""Hooks pytest-roofline calls, for a ``conftest.py`` or a plugin to implement.

Registered through ``pytest_addhooks``; see docs/plugin.md ("Hooks") for examples.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_roofline.results import RunResults

__all__ = ["pytest_roofline_device_class", "pytest_roofline_update_results"]


@pytest.hookspec(firstresult=True)
def pytest_roofline_device_class(fingerprint: Mapping[str, Any]) -> str | None:
    """The device class that keys baselines, for a device ``fingerprint``; None for the default.

    Baselines are stored per device class (by default the accelerator's name, else the CPU model
    and core count).  Runners that share a device class can say so, e.g. in a conftest.py::

        def pytest_roofline_device_class(fingerprint):
            if str(fingerprint.get("cpu", "")).startswith("AMD EPYC"):
                return "ci-epyc"

    The first implementation that returns a string wins.
    """


@pytest.hookspec(firstresult=True)
def pytest_roofline_update_results(config: pytest.Config, results: RunResults) -> RunResults | None:
    """Replace the run's results before they are reported; None keeps them.

    ``results`` is frozen: return ``dataclasses.replace(results, ...)`` (e.g. a ``project`` name
    or ``artifacts={"html": url}`` for the Markdown summary).  Called once, on the controller,
    after baselines are written and before ``--roofline-report`` files are.
    """
