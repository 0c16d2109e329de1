"""Robust latency statistics.

Samples are seconds.  The median's confidence interval is distribution-free (order statistics of
the binomial), so it holds for the skewed, multi-modal latencies of shared machines.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = ["LatencyStats", "median_ci"]


def median_ci(samples: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics."""
    ordered = np.sort(np.asarray(samples, dtype=float))
    n = len(ordered)
    if n == 0:
        return (math.nan, math.nan)
    if n < 6:
        return (float(ordered[0]), float(ordered[-1]))
    z = _z(confidence)
    half = z * math.sqrt(n) / 2.0
    low = max(int(math.floor(n / 2.0 - half)), 0)
    high = min(int(math.ceil(n / 2.0 + half)), n - 1)
    return (float(ordered[low]), float(ordered[high]))


def _z(confidence: float) -> float:
    """Two-sided normal quantile for ``confidence`` (Acklam-free: bisection on erf)."""
    target = confidence
    low, high = 0.0, 10.0
    for _ in range(80):
        mid = (low + high) / 2
        if math.erf(mid / math.sqrt(2)) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@dataclass(frozen=True)
class LatencyStats:
    """Statistics of end-to-end latency samples, in seconds.

    ``session_medians`` holds one median per fresh backend session: the between-session spread
    is where the noise lives on shared machines, so comparisons look at it.
    """

    n: int
    median: float
    mean: float
    min: float
    max: float
    p25: float
    p75: float
    p90: float
    p99: float
    std: float
    mad: float
    ci_low: float
    ci_high: float
    session_medians: tuple[float, ...] = ()
    samples: tuple[float, ...] = field(default=(), repr=False)

    @classmethod
    def from_samples(
        cls, samples: list[float] | np.ndarray, sessions: list[list[float]] | None = None
    ) -> LatencyStats:
        """Compute the statistics of ``samples`` (all sessions pooled)."""
        data = np.asarray(samples, dtype=float)
        if data.size == 0:
            raise ValueError("no latency samples")
        median = float(np.median(data))
        low, high = median_ci(data)
        return cls(
            n=int(data.size),
            median=median,
            mean=float(data.mean()),
            min=float(data.min()),
            max=float(data.max()),
            p25=float(np.percentile(data, 25)),
            p75=float(np.percentile(data, 75)),
            p90=float(np.percentile(data, 90)),
            p99=float(np.percentile(data, 99)),
            std=float(data.std(ddof=1)) if data.size > 1 else 0.0,
            mad=float(np.median(np.abs(data - median))),
            ci_low=low,
            ci_high=high,
            session_medians=tuple(float(np.median(s)) for s in (sessions or []) if len(s)),
            samples=tuple(float(x) for x in data),
        )

    @property
    def cv(self) -> float:
        """Robust coefficient of variation: 1.4826·MAD / median."""
        return 1.4826 * self.mad / self.median if self.median else math.inf

    def to_dict(self, include_samples: bool = True) -> dict[str, Any]:
        """JSON-ready dict."""
        data = asdict(self)
        data["session_medians"] = list(self.session_medians)
        data["samples"] = list(self.samples) if include_samples else []
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyStats:
        """Inverse of :meth:`to_dict`."""
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["session_medians"] = tuple(fields.get("session_medians", ()))
        fields["samples"] = tuple(fields.get("samples", ()))
        return cls(**fields)
