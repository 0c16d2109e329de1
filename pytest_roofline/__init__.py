"""pytest-roofline: roofline performance regression testing of ONNX model inference.

The public names load on first use (PEP 562), so that importing the package — which pytest does
for the plugin at every start — costs no onnx or numpy import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_roofline.analysis import analyze
    from pytest_roofline.analysis.types import ModelAnalysis, NodeCost
    from pytest_roofline.api import profile_model, profile_sweep
    from pytest_roofline.backends.base import Backend, get_backend
    from pytest_roofline.check import check_outputs
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.profile import Layer, ModelProfile
    from pytest_roofline.results import RunResults, load_results
    from pytest_roofline.roofline import DeviceRoofline
    from pytest_roofline.roofline.calibrate import calibrate

from pytest_roofline.stamp import __version__

#: public name → the module that defines it
_EXPORTS = {
    "Backend": "pytest_roofline.backends.base",
    "DeviceRoofline": "pytest_roofline.roofline",
    "Layer": "pytest_roofline.profile",
    "LatencyStats": "pytest_roofline.measure.stats",
    "ModelAnalysis": "pytest_roofline.analysis.types",
    "ModelProfile": "pytest_roofline.profile",
    "NodeCost": "pytest_roofline.analysis.types",
    "RooflineError": "pytest_roofline.errors",
    "RunResults": "pytest_roofline.results",
    "analyze": "pytest_roofline.analysis",
    "calibrate": "pytest_roofline.roofline.calibrate",
    "check_outputs": "pytest_roofline.check",
    "get_backend": "pytest_roofline.backends.base",
    "load_results": "pytest_roofline.results",
    "profile_model": "pytest_roofline.api",
    "profile_sweep": "pytest_roofline.api",
}

__all__ = [
    "Backend",
    "DeviceRoofline",
    "Layer",
    "LatencyStats",
    "ModelAnalysis",
    "ModelProfile",
    "NodeCost",
    "RooflineError",
    "RunResults",
    "__version__",
    "analyze",
    "calibrate",
    "check_outputs",
    "get_backend",
    "load_results",
    "profile_model",
    "profile_sweep",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_roofline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
