"""The device roofline: measured compute and memory roofs.

Calibration probes live in :mod:`pytest_roofline.roofline.calibrate`; this module holds the value type
and the roofline arithmetic: attainable = min(peak FLOP/s, intensity × bandwidth).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CacheLevel", "DeviceRoofline", "Probe"]


@dataclass(frozen=True)
class Probe:
    """One calibration measurement: what ran, its size, and the figure it reached."""

    name: str  # e.g. "gemm-1024-float32", "stream-256MiB"
    kind: str  # "compute" | "memory"
    dtype: str
    size: int  # problem size: GEMM n, or working-set bytes
    value: float  # FLOP/s for compute probes, byte/s for memory probes
    seconds: float = 0.0  # the probe's measured time per run

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class CacheLevel:
    """A memory level seen on the bandwidth curve (hierarchical roofline)."""

    name: str  # "L1", "L2", "L3", "DRAM"
    size: int  # working-set bytes up to which this bandwidth holds (0 for DRAM)
    bandwidth: float  # byte/s


@dataclass(frozen=True)
class DeviceRoofline:
    """Calibrated roofs of one device through one backend configuration."""

    peak_flops: dict[str, float] = field(hash=False)  # by dtype name: {"float32": 1.2e11, ...}
    peak_bandwidth: float  # DRAM byte/s
    fingerprint: dict[str, Any] = field(hash=False)
    cache_levels: tuple[CacheLevel, ...] = ()
    probes: tuple[Probe, ...] = ()
    theoretical_peak_flops: dict[str, float] = field(default_factory=dict, hash=False)
    measured_at: str = ""  # ISO time
    duration: float = 0.0  # seconds calibration took
    dtype: str = "float32"  # the dtype whose roof is the default

    @property
    def peak(self) -> float:
        """Compute roof of the default dtype, FLOP/s."""
        return self.peak_flops[self.dtype]

    @property
    def ridge_point(self) -> float:
        """Intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.peak / self.peak_bandwidth

    def bandwidth_for(self, working_set: float | None = None) -> float:
        """Memory roof for a kernel moving ``working_set`` bytes (hierarchical roofline).

        The fastest measured level that holds the working set; DRAM when it is unknown or larger
        than every measured cache.
        """
        if working_set is None:
            return self.peak_bandwidth
        holding = [lvl.bandwidth for lvl in self.cache_levels if lvl.size and working_set <= lvl.size]
        return max([self.peak_bandwidth, *holding])

    def attainable(
        self, intensity: float, dtype: str | None = None, working_set: float | None = None
    ) -> float:
        """Attainable FLOP/s at ``intensity``: min(peak, intensity × bandwidth).

        The bandwidth is DRAM's, or the roof of the cache level holding ``working_set`` bytes.
        """
        peak = self.peak_flops.get(dtype or self.dtype, self.peak)
        return min(peak, intensity * self.bandwidth_for(working_set))

    def bound(self, intensity: float, working_set: float | None = None) -> str:
        """``"compute"`` at or above the ridge point of the level holding ``working_set``."""
        return "compute" if intensity >= self.peak / self.bandwidth_for(working_set) else "memory"

    def fraction(self, flops: float, nbytes: float, seconds: float, dtype: str | None = None) -> float:
        """Roofline fraction of a kernel: achieved / attainable, against the level holding ``nbytes``.

        A kernel without FLOPs is judged on bandwidth: achieved byte/s over its memory roof.
        """
        if seconds <= 0:
            return 0.0
        if flops <= 0:
            return (nbytes / seconds) / self.bandwidth_for(nbytes) if nbytes else 0.0
        intensity = flops / nbytes if nbytes else float("inf")
        return (flops / seconds) / self.attainable(intensity, dtype, working_set=nbytes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``roofline calibrate --format json`` contract)."""
        return {
            "peak_flops": self.peak,
            "peak_flops_by_dtype": dict(self.peak_flops),
            "peak_bandwidth": self.peak_bandwidth,
            "ridge_point": self.ridge_point,
            "dtype": self.dtype,
            "fingerprint": dict(self.fingerprint),
            "cache_levels": [asdict(level) for level in self.cache_levels],
            "probes": [probe.to_dict() for probe in self.probes],
            "theoretical_peak_flops": dict(self.theoretical_peak_flops),
            "measured_at": self.measured_at,
            "duration": self.duration,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceRoofline:
        """Inverse of :meth:`to_dict`."""
        return cls(
            peak_flops=dict(data["peak_flops_by_dtype"]),
            peak_bandwidth=float(data["peak_bandwidth"]),
            fingerprint=dict(data["fingerprint"]),
            cache_levels=tuple(CacheLevel(**level) for level in data.get("cache_levels", [])),
            probes=tuple(Probe(**probe) for probe in data.get("probes", [])),
            theoretical_peak_flops=dict(data.get("theoretical_peak_flops", {})),
            measured_at=data.get("measured_at", ""),
            duration=float(data.get("duration", 0.0)),
            dtype=data.get("dtype", "float32"),
        )
