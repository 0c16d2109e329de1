"""What the host CPU is, read cheaply (no subprocess) for fingerprints and rooflines."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["CpuInfo", "cpu_info"]


@dataclass(frozen=True)
class CpuInfo:
    """The host CPU: model name, feature flags, logical cores usable by this process."""

    model: str
    flags: frozenset[str]
    cores: int
    machine: str
    physical_cores: int = 0  # distinct physical cores among them (0: unknown)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (flags reduced to the SIMD ones that decide kernel choice)."""
        simd = sorted(f for f in self.flags if f.startswith(("avx", "sse4", "fma", "amx", "neon", "sve")))
        return {"model": self.model, "cores": self.cores, "machine": self.machine, "simd": simd}


@lru_cache(maxsize=1)
def cpu_info() -> CpuInfo:
    """The host CPU, from ``/proc/cpuinfo`` where it exists, else from :mod:`platform`."""
    model, flags = "", frozenset[str]()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model", "cpu model") and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = frozenset(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return CpuInfo(
        model=model or platform.processor() or platform.machine() or "unknown",
        flags=flags,
        cores=cores,
        machine=platform.machine(),
        physical_cores=_physical_cores(),
    )


def _physical_cores() -> int:
    """Distinct (package, core) pairs among this process's CPUs, from sysfs; 0 where unknown.

    What onnxruntime's ``intra_op_threads=0`` and OpenVINO's default thread count follow (one
    thread per physical core: hyperthread siblings share one).
    """
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return 0
    seen: set[tuple[str, str]] = set()
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/physical_package_id", encoding="ascii") as package:
                with open(f"{topology}/core_id", encoding="ascii") as core:
                    seen.add((package.read().strip(), core.read().strip()))
        except OSError:
            return 0
    return len(seen)
