"""What device a run measures: the host CPU, or the GPU that computes.

Identity is read cheaply (no subprocess) for fingerprints, calibration caches and the device
class that keys baselines.  GPU identity (:mod:`.gpu`) imports NVML's bindings only when asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_roofline.device.cpu import CpuInfo, cpu_info

__all__ = ["CpuInfo", "cpu_info", "device_class", "device_name"]

_GIB = 1024**3


def device_class(fingerprint: Mapping[str, Any]) -> str:
    """The device class of a fingerprint: the GPU (name and memory), else CPU model and core count.

    A GPU run's fingerprint keeps the host too (``cpu``/``cores``), but its class is the GPU:
    baselines recorded on an H200 compare with H200 runs whatever host carries the card.
    """
    gpu = fingerprint.get("gpu")
    if isinstance(gpu, Mapping) and isinstance(gpu.get("name"), str) and gpu["name"]:
        memory = gpu.get("memory")
        if isinstance(memory, int) and not isinstance(memory, bool) and memory > 0:
            return f"{gpu['name']} {round(memory / _GIB)}GiB"
        return str(gpu["name"])
    for key in ("gpu", "device_name", "accelerator"):
        value = fingerprint.get(key)
        if isinstance(value, str) and value:
            return value
    cpu = fingerprint.get("cpu")
    if isinstance(cpu, Mapping):
        return f"{cpu.get('model', 'cpu')} x{cpu.get('cores', '?')}"
    info = cpu_info()
    return f"{info.model} x{info.cores}"


def device_name(fingerprint: Mapping[str, Any]) -> str:
    """The computing device a fingerprint names, for messages: the GPU's name, else the CPU model.

    Unlike :func:`device_class` it reads only the fingerprint (never this host), so two stored
    fingerprints can be compared: a backend's (``cpu``) and a calibration's (``cpu_model``).
    """
    gpu = fingerprint.get("gpu")
    if isinstance(gpu, Mapping) and gpu.get("name"):
        return str(gpu["name"])
    device = fingerprint.get("device")
    if isinstance(device, str) and device and device.upper() != "CPU":
        return device
    for key in ("cpu", "cpu_model"):
        value = fingerprint.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, Mapping) and value.get("model"):
            return str(value["model"])
    return "unknown device"
