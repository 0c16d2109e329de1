"""A FAKE ``pynvml`` serving the NVML answers recorded on an H200 (tests/data/gpu-h200/identity.txt).

Put this folder first on ``sys.path`` to test that pytest-roofline reads NVML's answers right.
It is never evidence that NVML works.  ``FAKE_NVML=absent`` makes ``nvmlInit`` fail as it does
on a machine without the NVIDIA driver.  NVML calls the recording holds no answer for raise
``NVMLError`` (NVML's "not supported").
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

_DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "gpu-h200" / "identity.txt").read_text())
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
_UUID = "GPU-00000000-fake-h200"
calls: list[str] = []  # what the code under test asked, in order


class NVMLError(Exception):
    """NVML's error type."""


def _log(name: str) -> None:
    calls.append(name)


def nvmlInit() -> None:
    _log("nvmlInit")
    if os.environ.get("FAKE_NVML") == "absent":
        raise NVMLError("NVML Shared Library Not Found")


def nvmlShutdown() -> None:
    _log("nvmlShutdown")


def nvmlDeviceGetCount() -> int:
    return 1


def nvmlDeviceGetHandleByIndex(index: int) -> object:
    _log(f"nvmlDeviceGetHandleByIndex({index})")
    if index != 0:
        raise NVMLError("Invalid Argument")
    return "handle-0"


def nvmlDeviceGetHandleByUUID(uuid: str) -> object:
    _log(f"nvmlDeviceGetHandleByUUID({uuid})")
    if uuid != _UUID:
        raise NVMLError("Not Found")
    return "handle-0"


def nvmlDeviceGetName(handle: object) -> str:
    return _DATA["nvml_name"]


def nvmlDeviceGetMemoryInfo(handle: object) -> SimpleNamespace:
    return SimpleNamespace(total=_DATA["memory_total"], free=_DATA["memory_total"], used=0)


def nvmlDeviceGetCudaComputeCapability(handle: object) -> tuple[int, int]:
    major, minor = _DATA["compute_capability"]
    return major, minor


def nvmlDeviceGetMaxClockInfo(handle: object, clock: int) -> int:
    return _DATA["max_sm_clock_mhz"] if clock == NVML_CLOCK_SM else _DATA["max_mem_clock_mhz"]


def nvmlDeviceGetMemoryBusWidth(handle: object) -> int:
    return _DATA["bus_width_bits"]


def nvmlDeviceGetPowerManagementLimit(handle: object) -> int:
    return _DATA["power_limit_mw"]


def nvmlSystemGetDriverVersion() -> str:
    return _DATA["driver"]


def nvmlSystemGetCudaDriverVersion() -> int:
    return _DATA["cuda_driver"]


def nvmlDeviceGetNumGpuCores(handle: object) -> int:
    raise NVMLError("Not Supported")  # not in the recording: the SM count comes from elsewhere
