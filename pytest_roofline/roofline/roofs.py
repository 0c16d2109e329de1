"""The device roofline: measured compute and memory roofs, and the dispatch floor.

Calibration probes live in :mod:`pytest_roofline.roofline.calibrate`; this module holds the value type
and the roofline arithmetic: a kernel's attainable time is
max(FLOPs / compute roof, bytes / memory roof, dispatch floor), the floor being the least time one
kernel takes through the backend at its options (:data:`OVERHEAD`: the bound it sets).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "BOUNDS",
    "DRAM",
    "OVERHEAD",
    "CacheLevel",
    "DeviceRoofline",
    "MemoryRoof",
    "Probe",
    "roof_dtype",
    "roofline_data_problem",
]

DRAM = "DRAM"  # the last level's name (a GPU's HBM too)
OVERHEAD = "overhead"  # the bound of a kernel the dispatch floor limits (not FLOPs, not bytes)
BOUNDS = ("compute", "memory", OVERHEAD)
PROBE_KINDS = ("compute", "memory", "dispatch")


@dataclass(frozen=True)
class Probe:
    """One calibration measurement: what ran, its size, and the figure it reached."""

    name: str  # e.g. "gemm-1024-float32", "stream-256MiB"
    kind: str  # "compute" | "memory" | "dispatch"
    dtype: str
    size: int  # problem size: GEMM n, working-set bytes, or a dispatch chain's kernels
    value: float  # FLOP/s for compute probes, byte/s for memory probes, kernels/s for dispatch
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
    capacity: int = 0  # bytes the hardware level holds for the calibrated threads (0: unknown, use size)

    @property
    def holds(self) -> int:
        """Bytes that stay resident in this level: its capacity, else the largest measured working set."""
        return self.capacity or self.size


@dataclass(frozen=True)
class MemoryRoof:
    """The memory roof a layer is judged against: where its bytes live and the bandwidth there.

    ``level`` is the level its bytes take the most time from; ``bandwidth`` is the effective
    bandwidth over all its bytes (weights from one level, activations from another:
    bytes / sum(bytes_i / bandwidth_i)).
    """

    level: str
    bandwidth: float


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
    theoretical_peak_bandwidth: float = 0.0  # byte/s on paper (GPUs: bus width x memory clock)
    float32_mode: str = ""  # how the backend runs float32 on this device: "tf32" | "fp32" | "" (CPU)
    spread: dict[str, float] = field(default_factory=dict, hash=False)  # per roof: |a-b|/max of 2 sessions
    load: dict[str, Any] | None = field(default=None, hash=False)  # MachineLoad.to_dict() while measured
    warnings: tuple[str, ...] = ()  # why these roofs may be off (measured under load, ...)
    threads: int = 0  # threads the calibrated backend runs (0: not recorded)
    clock: float = 0.0  # Hz the theoretical CPU peak assumes (max boost: cpufreq or measured)
    dispatch_floor: float = 0.0  # seconds: the least time one kernel takes (0: not calibrated)

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

    @property
    def levels(self) -> tuple[CacheLevel, ...]:
        """The memory levels, fastest first, DRAM last (only DRAM for a roofline without levels)."""
        caches = tuple(lvl for lvl in self.cache_levels if lvl.name != DRAM and lvl.holds > 0)
        return (*sorted(caches, key=lambda lvl: lvl.holds), CacheLevel(DRAM, 0, self.peak_bandwidth))

    def memory_roof(
        self, weight_bytes: float, activation_bytes: float, footprint: float | None
    ) -> MemoryRoof:
        """Where a layer's bytes live between and within runs, and the bandwidth it gets there.

        The rule (cache-aware roofline): weights are read once a run, with the rest of the model's
        ``footprint`` (its weights and live activations) passing through the caches in between, so
        a level of capacity C holds at most C / footprint of them when they are read (all of them
        when the model fits): each level serves that share beyond the faster levels, DRAM the
        rest.  A layer's activations were just written by the layer before it: they come from the
        smallest level holding ``activation_bytes``.  The memory roof is the effective bandwidth
        over all its bytes, its level the one its bytes take the most time from.  A level's
        bandwidth is the best of it and the larger levels (a roof no kernel should beat).
        ``footprint`` None: the whole working set is placed by its size (:meth:`bandwidth_for`).
        """
        if footprint is None:
            return self._placed(weight_bytes + activation_bytes)
        levels = self.levels
        times = dict.fromkeys((lvl.name for lvl in levels), 0.0)
        covered = 0.0  # share of the weights the faster levels serve
        for index, level in enumerate(levels):
            share = 1.0 if level.name == DRAM or footprint <= 0 else min(1.0, level.holds / footprint)
            if share > covered:
                bandwidth = max(lvl.bandwidth for lvl in levels[index:])
                times[level.name] += weight_bytes * (share - covered) / bandwidth
                covered = share
        acts = self._placed(activation_bytes)
        times[acts.level] += activation_bytes / acts.bandwidth
        total, seconds = weight_bytes + activation_bytes, sum(times.values())
        if total <= 0 or seconds <= 0:
            return acts
        return MemoryRoof(max(times, key=lambda name: times[name]), total / seconds)

    def _placed(self, nbytes: float) -> MemoryRoof:
        """The smallest level holding ``nbytes``, with the best bandwidth of it and the levels above."""
        levels = self.levels
        for index, level in enumerate(levels[:-1]):
            if nbytes <= level.holds:
                return MemoryRoof(level.name, max(lvl.bandwidth for lvl in levels[index:]))
        return MemoryRoof(DRAM, self.peak_bandwidth)

    def attainable(
        self,
        intensity: float,
        dtype: str | None = None,
        working_set: float | None = None,
        bandwidth: float | None = None,
    ) -> float:
        """Attainable FLOP/s at ``intensity``: min(peak, intensity × bandwidth).

        The bandwidth is ``bandwidth`` when given (a layer's :class:`MemoryRoof`), else DRAM's, or
        the roof of the cache level holding ``working_set`` bytes.
        """
        peak = self.peak_flops.get(dtype or self.dtype, self.peak)
        return min(peak, intensity * (bandwidth or self.bandwidth_for(working_set)))

    def bound(self, intensity: float, working_set: float | None = None) -> str:
        """``"compute"`` at or above the ridge point of the level holding ``working_set``."""
        return "compute" if intensity >= self.peak / self.bandwidth_for(working_set) else "memory"

    def roof_times(
        self, flops: float, nbytes: float, dtype: str | None = None, bandwidth: float | None = None
    ) -> dict[str, float]:
        """Seconds each roof allows a kernel: ``compute`` (FLOPs / its dtype's peak), ``memory``
        (bytes / ``bandwidth``, else the level holding ``nbytes``) and ``overhead`` (the dispatch
        floor; 0 when not calibrated)."""
        peak = self.peak_flops.get(dtype or self.dtype, self.peak)
        return {
            "compute": flops / peak if flops > 0 else 0.0,
            "memory": nbytes / (bandwidth or self.bandwidth_for(nbytes)) if nbytes > 0 else 0.0,
            OVERHEAD: self.dispatch_floor,
        }

    def attainable_time(
        self, flops: float, nbytes: float, dtype: str | None = None, bandwidth: float | None = None
    ) -> float:
        """The least time a kernel of ``flops`` and ``nbytes`` can take: the slowest of its roofs."""
        return max(self.roof_times(flops, nbytes, dtype, bandwidth).values())

    def limit(
        self, flops: float, nbytes: float, dtype: str | None = None, bandwidth: float | None = None
    ) -> str:
        """The roof that sets a kernel's attainable time: ``compute``, ``memory`` or ``overhead``.

        Between compute and memory the ridge point decides (a kernel without FLOPs is memory-bound);
        ``overhead`` when the dispatch floor is longer than both.
        """
        times = self.roof_times(flops, nbytes, dtype, bandwidth)
        if times[OVERHEAD] > max(times["compute"], times["memory"]):
            return OVERHEAD
        return "compute" if flops > 0 and times["compute"] >= times["memory"] else "memory"

    def fraction(
        self,
        flops: float,
        nbytes: float,
        seconds: float,
        dtype: str | None = None,
        bandwidth: float | None = None,
    ) -> float:
        """Roofline fraction of a kernel: attainable time / measured time, against ``bandwidth``
        when given, else the level holding ``nbytes``.

        Without a dispatch floor this is achieved / attainable FLOP/s (a kernel without FLOPs:
        achieved byte/s over its memory roof); with one, no kernel is priced under the floor.
        """
        if seconds <= 0:
            return 0.0
        return self.attainable_time(flops, nbytes, dtype, bandwidth) / seconds

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
            "levels": [  # the memory roofs layers are placed on, fastest first (memory_level)
                {"name": lvl.name, "bandwidth": lvl.bandwidth, "capacity": lvl.holds or None}
                for lvl in self.levels
            ],
            "threads": self.threads,
            "clock": self.clock,
            "dispatch_floor": self.dispatch_floor,
            "probes": [probe.to_dict() for probe in self.probes],
            "theoretical_peak_flops": dict(self.theoretical_peak_flops),
            "measured_at": self.measured_at,
            "duration": self.duration,
            "theoretical_peak_bandwidth": self.theoretical_peak_bandwidth,
            "float32_mode": self.float32_mode,
            "spread": dict(self.spread),
            "load": dict(self.load) if self.load is not None else None,
            "warnings": list(self.warnings),
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
            theoretical_peak_bandwidth=float(data.get("theoretical_peak_bandwidth") or 0.0),
            float32_mode=str(data.get("float32_mode") or ""),
            spread=dict(data.get("spread") or {}),
            load=dict(data["load"]) if isinstance(data.get("load"), Mapping) else None,
            warnings=tuple(str(w) for w in data.get("warnings") or ()),
            threads=int(data.get("threads") or 0),
            clock=float(data.get("clock") or 0.0),
            dispatch_floor=float(data.get("dispatch_floor") or 0.0),
        )


def _positive(value: Any) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


def _non_negative(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def roofline_data_problem(data: Any) -> str | None:
    """Why ``data`` (a :meth:`DeviceRoofline.to_dict`) cannot be trusted as roofs, or None.

    A roof must be a finite positive number; a zero, negative, NaN or infinite peak, a string in
    place of a number or a missing key would otherwise become a ZeroDivisionError or TypeError
    later, or a silently wrong fraction.  Returns the first problem, for a one-line message.
    """
    if not isinstance(data, Mapping):
        return f"roofline is a {type(data).__name__}, not an object"
    peaks = data.get("peak_flops_by_dtype")
    if not isinstance(peaks, Mapping) or not peaks:
        return "peak_flops_by_dtype is missing or empty"
    for dtype, value in peaks.items():
        if not _positive(value):
            return f"peak of {dtype} is {value!r}, not a positive number"
    if not _positive(data.get("peak_bandwidth")):
        return f"peak_bandwidth is {data.get('peak_bandwidth')!r}, not a positive number"
    if data.get("dtype", "float32") not in peaks:
        return f"default dtype {data.get('dtype', 'float32')!r} has no peak"
    if not isinstance(data.get("fingerprint"), Mapping):
        return "fingerprint is missing"
    for level in data.get("cache_levels") or []:
        if not isinstance(level, Mapping) or not _positive(level.get("bandwidth")):
            return f"cache level {level!r} has no positive bandwidth"
        if not isinstance(level.get("name"), str) or not _non_negative(level.get("size")):
            return f"cache level {level!r} is malformed"
        if not _non_negative(level.get("capacity", 0)) or set(level) - {
            "name",
            "size",
            "bandwidth",
            "capacity",
        }:
            return f"cache level {level!r} is malformed"
    for probe in data.get("probes") or []:
        if not isinstance(probe, Mapping) or not _positive(probe.get("value")):
            return f"probe {probe!r} has no positive figure"
        if probe.get("kind") not in PROBE_KINDS or not isinstance(probe.get("name"), str):
            return f"probe {probe.get('name')!r} is malformed"
        if not _non_negative(probe.get("size")) or not _non_negative(probe.get("seconds", 0.0)):
            return f"probe {probe.get('name')!r} has a bad size or time"
    theory = data.get("theoretical_peak_flops") or {}
    if not isinstance(theory, Mapping) or not all(_non_negative(v) for v in theory.values()):
        return "theoretical_peak_flops holds a value that is not a number >= 0"
    for key in ("theoretical_peak_bandwidth", "duration", "threads", "clock", "dispatch_floor"):
        if key in data and not _non_negative(data[key] or 0):
            return f"{key} is {data[key]!r}, not a number >= 0"
    spread = data.get("spread") or {}
    if not isinstance(spread, Mapping) or not all(_non_negative(v) for v in spread.values()):
        return "spread holds a value that is not a number >= 0"
    if data.get("load") is not None and not isinstance(data.get("load"), Mapping):
        return "load is not an object"
    warnings = data.get("warnings") or []
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        return "warnings is not a list of strings"
    return None


_PRECISION_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "int8"}


def roof_dtype(roofline: DeviceRoofline, precision: str) -> str:
    """The roof a model of ``precision`` is judged against: the highest its data may run at.

    That is the higher of its own dtype's roof and float32's: a backend may compute fp16 in fp32
    (onnxruntime's CPU EP inserts Casts around Conv; measured: a ResNet-50 fp16 "reached" 134 % of
    the CPU's fp16 roof), and on a GPU the fp16 roof is the higher one.  ``mixed`` takes the
    highest float roof.  A precision without a calibrated roof falls back to float32's, which the
    physical sanity check (:mod:`pytest_roofline.profile.sanity`) names when it yields impossible
    figures (fp16 tensor cores against a TF32 roof).
    """
    peaks = roofline.peak_flops
    default = roofline.dtype
    candidates: list[str]
    if precision == "mixed":
        candidates = [d for d in ("float32", "float16", "bfloat16") if d in peaks]
    else:
        candidates = [d for d in (_PRECISION_DTYPES.get(precision, default), default) if d in peaks]
    return max(candidates, key=lambda d: peaks[d], default=default)
