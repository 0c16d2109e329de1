"""The device roofline: its value types, calibration through a backend, and the roof probes.

Importing this package is cheap (the value types only); :mod:`.calibrate` and :mod:`.probes`
import onnx and numpy when they run.
"""

from __future__ import annotations

from pytest_roofline.roofline.roofs import CacheLevel, DeviceRoofline, Probe

__all__ = ["CacheLevel", "DeviceRoofline", "Probe"]
