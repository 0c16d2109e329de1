"""What the calibration and GPU tests share: a counting backend wrapper and the fake NVML."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_roofline.backends.base import Backend, BackendSession
from pytest_roofline.device.gpu import gpu_info
from pytest_roofline.errors import BackendError

FAKE_NVML = Path(__file__).resolve().parent / "fake_pynvml"


class Counting(Backend):
    """A real backend wrapped to count ``open`` calls, optionally with a changed fingerprint."""

    def __init__(self, inner: Backend, extra: dict[str, Any] | None = None, refuse: str = "") -> None:
        self.inner, self.extra_fp, self.refuse = inner, dict(extra or {}), refuse
        self.name = inner.name  # type: ignore[misc]
        self.options = inner.options
        self.opened: list[str] = []

    @classmethod
    def available(cls) -> bool:
        return True

    def version(self) -> str:
        return self.inner.version()

    def fingerprint(self) -> dict[str, Any]:
        return {**self.inner.fingerprint(), **self.extra_fp}

    def open(self, spec: Any, inputs: Any) -> BackendSession:
        self.opened.append(spec.name)
        if self.refuse and self.refuse in spec.name:
            raise BackendError(f"no kernel for {spec.name}")
        return self.inner.open(spec, inputs)


def use_fake_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import pynvml`` give the FAKE one (the recorded H200), with clean caches and env.

    Call ``gpu_info.cache_clear()`` after the test (the fixtures using this do).
    """
    monkeypatch.syspath_prepend(str(FAKE_NVML))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("FAKE_NVML", raising=False)
    gpu_info.cache_clear()


def levelled_roofline() -> Any:
    """A CPU roofline with cache levels (L2 1 MiB at 60 GB/s, L3 32 MiB at 50, DRAM 20) for tests
    of where a layer's bytes live: fixed figures, no calibration."""
    from pytest_roofline.roofline import CacheLevel, DeviceRoofline

    gb, mib = 1e9, 1 << 20
    return DeviceRoofline(
        peak_flops={"float32": 200 * gb},
        peak_bandwidth=20 * gb,
        fingerprint={},
        cache_levels=(
            CacheLevel("L2", 512 << 10, 60 * gb, capacity=1 * mib),
            CacheLevel("L3", 16 * mib, 50 * gb, capacity=32 * mib),
            CacheLevel("DRAM", 0, 20 * gb),
        ),
        threads=2,
    )
