"""pytest11 entry point of pytest-roofline (options only at this stage)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the plugin's options (https://docs.pytest.org/en/stable/reference/reference.html)."""
    group = parser.getgroup("roofline", "roofline performance regression testing")
    group.addoption("--roofline-backend", default=None, help="backend that runs the models (default onnxruntime)")
