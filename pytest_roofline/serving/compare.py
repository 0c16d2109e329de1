"""Paired comparison of two models under the same LoadGen query schedule.

Old and new run in interleaved windows (old-new, new-old, ...), each window's pair under the same
LoadGen seed, so both answer the same schedule of queries.  Per metric (p50, p99, and QPS where
LoadGen reports one) the ratio new/old of each window pair — old/new for QPS, so that above 1 is
always worse — gives a distribution-free interval for the median ratio from the order statistics
of the paired ratios (the sign test's interval), widened by the gate's noise floor at the load
measured around the windows (:func:`pytest_roofline.gate.noise.noise_model`), and the gate's own
decision rule (:func:`pytest_roofline.gate.verdict.judge_ratio`) gives the verdict.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import OptionError
from pytest_roofline.serving.types import ScenarioResult, ScenarioSettings

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_roofline.pipeline import PreparedModel

__all__ = ["MetricVerdict", "ScenarioComparison", "compare_models", "order_interval"]

#: Windows per model in a comparison: with 12 pairs the sign-test interval (96.1 %) drops the two
#: most extreme ratios on each side, so a neighbour's burst in one or two windows moves nothing
#: (6 pairs, the fewest that reach 95 %, keep the extremes themselves).
DEFAULT_WINDOWS = 12
#: Coverage the order-statistic interval must reach.
COVERAGE = 0.95
Z95 = 1.96


@dataclass(frozen=True)
class MetricVerdict:
    """One metric's paired ratio (above 1: the new model is worse), its interval and verdict."""

    metric: str  # "p50" | "p99" | "qps"
    ratio: float
    low: float
    high: float
    coverage: float  # of the order-statistic interval before widening
    noise: float  # the widened interval's half-width in log space
    status: str  # judge_ratio's: pass | regression | improved | inconclusive

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricVerdict:
        """Inverse of :meth:`to_dict`."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class ScenarioComparison:
    """A paired old/new comparison: each window's results, the load, the verdict per metric."""

    settings: ScenarioSettings
    tolerance: float
    pressure: float  # others' share of our CPUs around the windows (gate.noise.pressure)
    floor: float  # the noise model's paired floor at that pressure
    old: tuple[ScenarioResult, ...]
    new: tuple[ScenarioResult, ...]
    metrics: tuple[MetricVerdict, ...]

    def verdict(self, metric: str) -> MetricVerdict:
        """The verdict of ``metric``."""
        for item in self.metrics:
            if item.metric == metric:
                return item
        raise KeyError(metric)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "settings": self.settings.to_dict(),
            "tolerance": self.tolerance,
            "pressure": self.pressure,
            "floor": self.floor,
            "old": [r.to_dict() for r in self.old],
            "new": [r.to_dict() for r in self.new],
            "metrics": [m.to_dict() for m in self.metrics],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioComparison:
        """Inverse of :meth:`to_dict`."""
        return cls(
            ScenarioSettings.from_dict(data["settings"]),
            float(data["tolerance"]),
            float(data["pressure"]),
            float(data["floor"]),
            tuple(ScenarioResult.from_dict(r) for r in data["old"]),
            tuple(ScenarioResult.from_dict(r) for r in data["new"]),
            tuple(MetricVerdict.from_dict(m) for m in data["metrics"]),
        )


def order_interval(ratios: list[float], coverage: float = COVERAGE) -> tuple[float, float, float]:
    """The sign test's interval for the median of ``ratios``: the k-th smallest and k-th largest
    for the largest k whose coverage ``1 - 2 P(Binomial(n, 1/2) < k)`` still reaches ``coverage``.

    Returns ``(low, high, achieved coverage)``; with too few ratios for ``coverage`` the whole
    range and its (lower) coverage.
    """
    ordered, n = sorted(ratios), len(ratios)
    if not n:
        raise OptionError("a paired comparison needs at least one window pair")
    k, tail = 1, 0.0
    while k < n / 2:
        below = tail + math.comb(n, k - 1) / 2**n  # P(B < k)
        extended = below + math.comb(n, k) / 2**n  # P(B < k + 1)
        if 1 - 2 * extended < coverage:
            break
        tail, k = below, k + 1
    achieved = 1 - 2 * (tail + math.comb(n, k - 1) / 2**n)
    return ordered[k - 1], ordered[n - k], max(achieved, 0.0)


def _metric(name: str, ratios: list[float], floor: float, tolerance: float) -> MetricVerdict:
    from pytest_roofline.gate.verdict import judge_ratio

    low, high, coverage = order_interval(ratios)
    widen = math.exp(Z95 * floor)
    low, high = low / widen, high * widen
    ratio = statistics.median(ratios)
    # the interval's half-width in log space, as the gate's compare() takes a bootstrap's: one
    # window whose tail a neighbour's burst inflated widens the side it lies on, not both
    noise = max(math.log(high / low) / 2.0, 0.0)
    return MetricVerdict(
        name, ratio, low, high, coverage, noise, judge_ratio(ratio, (low, high), noise, tolerance)
    )


def compare_models(
    old: PreparedModel,
    new: PreparedModel,
    settings: ScenarioSettings,
    log_dir: Path,
    windows: int = DEFAULT_WINDOWS,
    tolerance: float = 0.10,
) -> ScenarioComparison:
    """Old and new in ``windows`` interleaved window pairs under the same schedules, judged per metric."""
    from pytest_roofline.device.load import between, snapshot
    from pytest_roofline.gate.noise import noise_model, pressure
    from pytest_roofline.serving.runner import Workers, load_loadgen, run_window

    if settings.scenario == "server" and settings.target_qps is None:
        raise OptionError("a paired serving comparison needs a fixed --qps (both models under one schedule)")
    if windows < 2:
        raise OptionError("a paired serving comparison needs at least 2 windows")
    lg = load_loadgen()
    with (
        Workers(old, settings.concurrency, lg) as old_workers,
        Workers(new, settings.concurrency, lg) as new_workers,
    ):
        latency = min(old_workers.expected_latency(), new_workers.expected_latency())
        start = snapshot()
        olds: list[ScenarioResult] = []
        news: list[ScenarioResult] = []
        for window in range(windows):
            at = dataclasses.replace(settings, seed=settings.seed + window)
            order = ((old_workers, old, olds, "old"), (new_workers, new, news, "new"))
            for workers, prepared, results, name in order if window % 2 == 0 else order[::-1]:
                results.append(run_window(workers, prepared, at, log_dir / f"{name}-{window}", latency))
        load = between(start, snapshot())
    at_pressure = pressure(load)
    floor = noise_model().floor("paired", at_pressure)
    metrics = [
        _metric(
            name,
            [getattr(n, name) / getattr(o, name) for o, n in zip(olds, news, strict=True)],
            floor,
            tolerance,
        )
        for name in ("p50", "p99")
    ]
    if all(r.achieved_qps for r in (*olds, *news)):
        qps = [(o.achieved_qps or 0.0) / (n.achieved_qps or 1.0) for o, n in zip(olds, news, strict=True)]
        metrics.append(_metric("qps", qps, floor, tolerance))
    return ScenarioComparison(
        settings, tolerance, at_pressure, floor, tuple(olds), tuple(news), tuple(metrics)
    )
