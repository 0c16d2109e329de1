"""pytest-roofline: roofline performance regression testing of ONNX model inference."""

from __future__ import annotations

from pytest_roofline.roofline import DeviceRoofline
from pytest_roofline.roofline.calibrate import calibrate

from .analysis import analyze
from .analysis.types import ModelAnalysis, NodeCost
from .api import profile_model, profile_sweep
from .backends.base import Backend, get_backend
from .check import check_outputs
from .errors import RooflineError
from .profile import Layer, ModelProfile
from .stats import LatencyStats

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "DeviceRoofline",
    "Layer",
    "LatencyStats",
    "ModelAnalysis",
    "ModelProfile",
    "NodeCost",
    "RooflineError",
    "__version__",
    "analyze",
    "calibrate",
    "check_outputs",
    "get_backend",
    "profile_model",
    "profile_sweep",
]
