"""What device a run measures: the host CPU (and, when one computes, the accelerator).

Identity is read cheaply (no subprocess) for fingerprints, calibration caches and the device
class that keys baselines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_roofline.device.cpu import CpuInfo, cpu_info

__all__ = ["CpuInfo", "cpu_info", "device_class"]


def device_class(fingerprint: Mapping[str, Any]) -> str:
    """The device class of a fingerprint: accelerator name, else CPU model and core count."""
    for key in ("gpu", "device_name", "accelerator"):
        value = fingerprint.get(key)
        if isinstance(value, str) and value:
            return value
    cpu = fingerprint.get("cpu")
    if isinstance(cpu, Mapping):
        return f"{cpu.get('model', 'cpu')} x{cpu.get('cores', '?')}"
    info = cpu_info()
    return f"{info.model} x{info.cores}"
