"""Paired comparison of two models answering the same LoadGen tests in turn.

Both models answer each LoadGen test (a *window*): each worker thread holds a session of each, and
LoadGen's queries go to them in turn (Offline's one query: its chunks do), the first side
alternating from window to window.  A neighbour's burst, a frequency step or a busy sibling then
lands on both sides of a window alike, where two windows run one after the other caught it on
one side only (the ±20-200 % intervals of the first design, under load).  Each side's figures
come from the workers' own times of its queries (issue to completion: p50, p99; the backend's
inference seconds per sample: the throughput ``qps``), since LoadGen's figures of a shared window
are of both models together.

Throughput is judged on the ratio old/new of each window (so that above 1 is always worse): their
geometric mean with a t interval of the mean log ratio; the latency percentiles on each side's
queries pooled over the windows, with order-statistic intervals.  Each interval is combined in
quadrature with the gate's noise floor at the load measured around the windows
(:func:`pytest_roofline.gate.noise.noise_model`), as the latency gate combines its own, and the
gate's decision rule (:func:`pytest_roofline.gate.verdict.judge_ratio`) gives the verdict.
Offline is judged on its throughput only (its latencies are the completion times of one query of
thousands).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import OptionError
from pytest_roofline.serving.budget import CLOSING, TEST_OVERHEAD, BudgetPlan
from pytest_roofline.serving.types import ScenarioResult, ScenarioSettings

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_roofline.backends.base import BackendSession
    from pytest_roofline.device.load import MachineLoad
    from pytest_roofline.pipeline import PreparedModel

__all__ = [
    "MetricVerdict",
    "ScenarioComparison",
    "SideFigures",
    "compare_models",
    "in_thread_share",
    "order_interval",
    "pooled_metric",
    "quantile_interval",
    "side_samples",
]

#: Windows of a comparison: 20 ratios give the throughput's t interval 19 degrees of freedom (its
#: quantile 2.09, near the normal's 1.96), and a burst that favoured one side in a window moves
#: their mean by a twentieth of its size.
DEFAULT_WINDOWS = 20
#: Coverage the order-statistic interval must reach.
COVERAGE = 0.95
Z95 = 1.96


@dataclass(frozen=True)
class SideFigures:
    """One model's figures in one shared window, from the workers' times of its queries."""

    queries: int
    p50: float  # seconds, a query's issue to its last sample's completion
    p99: float
    cpu_p50: float  # seconds of the worker threads' CPU time a query took
    cpu_p99: float
    qps: float  # samples per second of the backend's inference time (one worker's throughput)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SideFigures:
        """Inverse of :meth:`to_dict`."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class SideSamples:
    """One model's per-query times in one shared window (kept in memory, pooled over windows)."""

    wall: tuple[float, ...]  # seconds, issue to completion, ascending
    cpu: tuple[float, ...]  # seconds of worker-thread CPU time, ascending
    rates: tuple[float, ...]  # samples/s of inference time, each block of BLOCK_SAMPLES
    samples: int = 0
    cpu_total: float = 0.0  # worker-thread CPU seconds of all the side's chunks

    def throughput(self, clock: str) -> float:
        """Samples per second: of CPU time over the whole window (``cpu``: a time slice taken by
        another process is not in it), else the median rate of the blocks of inference time."""
        if clock == "cpu":
            return self.samples / self.cpu_total if self.cpu_total > 0 else 0.0
        return statistics.median(self.rates)

    def figures(self) -> SideFigures:
        """The window's figures of this side."""
        return SideFigures(
            len(self.wall),
            _rank(self.wall, 0.50),
            _rank(self.wall, 0.99),
            _rank(self.cpu, 0.50),
            _rank(self.cpu, 0.99),
            statistics.median(self.rates),
        )


def _rank(ordered: Sequence[float], q: float) -> float:
    """LoadGen's nearest-rank percentile ``q`` of an ascending sequence."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


#: Samples a throughput block holds at least: a side's ``qps`` is the median of its blocks' rates,
#: so the few chunks a neighbour's time slice landed in move it no more than any other block.
BLOCK_SAMPLES = 32


def side_samples(served: list[tuple[int, int, int, float, float, int]], side: int) -> SideSamples:
    """``side``'s times from a shared window's chunks (``Workers.served``): a query's latency is
    its issue to the completion of its last chunk, its CPU time its chunks' together; its
    throughput the rates of consecutive blocks of at least :data:`BLOCK_SAMPLES` samples of
    inference time (as the backend timed it), and all its samples over its CPU time."""
    ends: dict[int, int] = {}
    cpu: dict[int, float] = {}
    rates: list[float] = []
    block_busy = cpu_total = 0.0
    block = samples = 0
    for chunk_side, issued, done, seconds, cpu_seconds, count in served:
        if chunk_side != side:
            continue
        ends[issued] = max(ends.get(issued, done), done)
        cpu[issued] = cpu.get(issued, 0.0) + cpu_seconds
        samples, cpu_total = samples + count, cpu_total + cpu_seconds
        block_busy, block = block_busy + seconds, block + count
        if block >= BLOCK_SAMPLES:
            rates.append(_rate(block, block_busy))
            block_busy, block = 0.0, 0
    if not ends:
        raise OptionError("a shared window ended before both models answered a query; lengthen --duration")
    if block and not rates:  # a short window's one block, short of BLOCK_SAMPLES
        rates.append(_rate(block, block_busy))
    wall = tuple(sorted((done - issued) * 1e-9 for issued, done in ends.items()))
    return SideSamples(wall, tuple(sorted(cpu.values())), tuple(rates), samples, cpu_total)


def _rate(samples: int, seconds: float) -> float:
    return samples / seconds if seconds > 0 else 0.0


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
    old: float = math.nan  # the figure of each side the ratio is of (pooled percentile, median rate)
    new: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricVerdict:
        """Inverse of :meth:`to_dict`."""
        known = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: data[name] for name in known if name in data})


@dataclass(frozen=True)
class ScenarioComparison:
    """A paired old/new comparison: LoadGen's result of each shared window, each side's figures
    per window, the load, the verdict per metric, the new model's own LoadGen run (``alone``:
    what a test gets back) where one was asked for, and how a time budget sized the windows
    (``plan``).  ``settings`` are a window's (its query count and durations the plan's)."""

    settings: ScenarioSettings
    tolerance: float
    pressure: float  # others' share of our CPUs around the windows (gate.noise.pressure)
    floor: float  # the noise model's paired floor at that pressure
    windows: tuple[ScenarioResult, ...]
    old: tuple[SideFigures, ...]
    new: tuple[SideFigures, ...]
    metrics: tuple[MetricVerdict, ...]
    alone: ScenarioResult | None = None
    clock: str = "wall"  # what p50/p99 were judged on: "wall" (issue to completion) or "cpu" (CPU time)
    plan: BudgetPlan | None = None  # how the windows were sized to a time budget, where one was given

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
            "windows": [r.to_dict() for r in self.windows],
            "old": [f.to_dict() for f in self.old],
            "new": [f.to_dict() for f in self.new],
            "metrics": [m.to_dict() for m in self.metrics],
            "alone": self.alone.to_dict() if self.alone is not None else None,
            "clock": self.clock,
            "plan": self.plan.to_dict() if self.plan is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioComparison:
        """Inverse of :meth:`to_dict`."""
        alone, plan = data.get("alone"), data.get("plan")
        return cls(
            ScenarioSettings.from_dict(data["settings"]),
            float(data["tolerance"]),
            float(data["pressure"]),
            float(data["floor"]),
            tuple(ScenarioResult.from_dict(r) for r in data["windows"]),
            tuple(SideFigures.from_dict(f) for f in data["old"]),
            tuple(SideFigures.from_dict(f) for f in data["new"]),
            tuple(MetricVerdict.from_dict(m) for m in data["metrics"]),
            ScenarioResult.from_dict(alone) if alone else None,
            str(data.get("clock", "wall")),
            BudgetPlan.from_dict(plan) if plan else None,
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


def quantile_interval(ordered: Sequence[float], q: float, coverage: float) -> tuple[float, float, float]:
    """The distribution-free interval for the ``q`` quantile of the ascending ``ordered``: the
    order statistics ``X(l)`` and ``X(u)`` (1-based) with ``l`` the largest and ``u`` the smallest
    ranks whose binomial tails ``P(B < l)`` and ``P(B >= u)``, ``B ~ Binomial(n, q)``, stay within
    ``(1 - coverage) / 2`` each.  Where ``u`` would pass ``n`` (too few values for the quantile) the
    largest value stands in and the achieved coverage says how much less it holds.

    Returns ``(low, high, achieved coverage)``.
    """
    n = len(ordered)
    if not n:
        raise OptionError("a paired comparison needs at least one query of each model")
    alpha, log_q, log_r = (1.0 - coverage) / 2.0, math.log(q), math.log1p(-q)
    head = math.lgamma(n + 1)
    cdf, low_rank, high_rank, below_low = 0.0, 0, n + 1, 0.0
    for k in range(n + 1):  # cdf: P(B <= k)
        cdf += math.exp(head - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q + (n - k) * log_r)
        if cdf <= alpha:
            low_rank, below_low = k + 1, cdf  # P(B < k + 1) within alpha: X(k + 1) may be the low end
        if cdf >= 1.0 - alpha:
            high_rank = k + 1  # P(B >= k + 1) within alpha: X(k + 1) may be the high end
            break
    above_high = max(0.0, 1.0 - cdf) if high_rank <= n else 0.0
    beyond_all = q**n if high_rank > n else 0.0  # P(B = n): the quantile above every value
    achieved = 1.0 - below_low - above_high - beyond_all
    low = ordered[low_rank - 1] if low_rank >= 1 else 0.0
    high = ordered[min(high_rank, n) - 1]
    return low, high, max(achieved, 0.0)


def _widened(
    name: str, ratio: float, bounds: tuple[float, float], coverage: float, floor: float, tolerance: float
) -> MetricVerdict:
    """A ratio's verdict: each side of its statistical interval (its log distance from the ratio)
    combined in quadrature with the noise floor's 95 % half-width, as the latency gate folds its
    drift into a bootstrap's interval (:func:`pytest_roofline.gate.verdict.compare`), judged by the
    gate's rule; ``inconclusive`` where the interval could not reach :data:`COVERAGE`."""
    from pytest_roofline.gate.verdict import judge_ratio

    spread = Z95 * floor

    def side(bound: float, sign: float) -> float:
        gap = sign * math.log(bound / ratio) if bound > 0 and ratio > 0 else math.inf
        return math.hypot(max(gap, 0.0), spread)

    below, above = side(bounds[0], -1.0), side(bounds[1], 1.0)
    low, high = ratio * math.exp(-below), ratio * math.exp(above)
    # the interval's half-width in log space, as the gate's compare() takes a bootstrap's
    noise = (below + above) / 2.0
    status = judge_ratio(ratio, (low, high), noise, tolerance) if coverage >= COVERAGE else "inconclusive"
    return MetricVerdict(name, ratio, low, high, coverage, noise, status)


def _metric(name: str, ratios: list[float], floor: float, tolerance: float) -> MetricVerdict:
    """A metric judged on its window ratios: their geometric mean, with Student's t interval of
    the mean log ratio (:func:`pytest_roofline.gate.verdict.small_sample_half`).  The sign test's
    interval of their median (:func:`order_interval`), used before, drops the five most extreme of
    20 ratios on each side, and with the floor added on top read about ±10 % under load, so a 13 %
    throughput loss stayed inside the band.  A window where a side served nothing leaves the metric
    undecided."""
    from pytest_roofline.gate.verdict import small_sample_half

    if len(ratios) < 2 or not all(0 < r < math.inf for r in ratios):
        low, high, _ = order_interval(ratios)
        return _widened(name, statistics.median(ratios), (low, high), 0.0, floor, tolerance)
    logs = [math.log(r) for r in ratios]
    ratio, half = math.exp(statistics.fmean(logs)), small_sample_half(ratios)
    return _widened(
        name, ratio, (ratio * math.exp(-half), ratio * math.exp(half)), COVERAGE, floor, tolerance
    )


#: The percentile each pooled latency metric is.
PERCENTILES = {"p50": 0.50, "p99": 0.99}


def pooled_metric(
    name: str, old: Sequence[float], new: Sequence[float], floor: float, tolerance: float
) -> MetricVerdict:
    """A latency percentile judged on all windows' queries of each side pooled: the ratio of the
    two percentiles; its interval from each side's 95 % order-statistic interval, their log
    distances from the percentile (below, above) added in quadrature as two independent
    estimates' errors are (a load both sides shared makes their errors agree, which the sum of
    squares then overstates)."""
    q = PERCENTILES[name]
    old_q, new_q = _rank(old, q), _rank(new, q)
    old_low, old_high, old_coverage = quantile_interval(old, q, COVERAGE)
    new_low, new_high, new_coverage = quantile_interval(new, q, COVERAGE)
    ratio = new_q / old_q

    def log_gap(figure: float, bound: float) -> float:
        return abs(math.log(figure / bound)) if figure > 0 and bound > 0 else math.inf

    below = math.hypot(log_gap(new_q, new_low), log_gap(old_q, old_high))
    above = math.hypot(log_gap(new_q, new_high), log_gap(old_q, old_low))
    widest = (new[0] / old[-1] if old[-1] > 0 else 0.0, new[-1] / old[0] if old[0] > 0 else 1e9)
    # too few queries for a bound: the data's whole range stands in (its coverage says so)
    bounds = (
        ratio * math.exp(-below) if math.isfinite(below) else widest[0],
        ratio * math.exp(above) if math.isfinite(above) else widest[1],
    )
    verdict = _widened(name, ratio, bounds, min(old_coverage, new_coverage), floor, tolerance)
    return dataclasses.replace(verdict, old=old_q, new=new_q)


def compared_metrics(scenario: str) -> tuple[str, ...]:
    """The metrics a comparison of ``scenario`` judges: Offline its throughput only, MultiStream
    its latencies (LoadGen reports it no QPS), the others both."""
    if scenario == "offline":
        return ("qps",)
    return ("p50", "p99") if scenario == "multi-stream" else ("p50", "p99", "qps")


#: The share of this process's CPU time a session's inferences must spend on the calling thread
#: for CPU time to be judged: below it the backend computes in threads of its own (a pool), which
#: the worker thread's clock does not see.
IN_THREAD = 0.8


def in_thread_share(session: BackendSession, runs: int = 4) -> float:
    """The share of this process's CPU time that ``runs`` inferences of ``session`` spent on the
    calling thread (1.0: the backend computes in the caller's thread).  Both clocks count CPU time
    only, so a neighbour's time slice moves neither; the workers are idle meanwhile."""
    thread, process = time.thread_time(), time.process_time()
    session.time(runs)
    spent = time.process_time() - process
    return (time.thread_time() - thread) / spent if spent > 0 else 0.0


def tail_clock(load: MachineLoad, in_thread: Sequence[float]) -> str:
    """What the latency percentiles and throughputs are judged on.  ``wall`` (issue to completion;
    inference time) on a quiet machine; ``cpu`` (the worker thread's CPU time) where other
    processes shared the CPUs and each model computes in the worker's thread (``in_thread``, per
    model: :func:`in_thread_share` at least :data:`IN_THREAD`; one intra-op thread), since a
    neighbour's time slice — milliseconds, on some percent of queries — then sets both models'
    wall-clock p99 and hides the models' own."""
    if not load.disturbed:
        return "wall"
    return "cpu" if all(share >= IN_THREAD for share in in_thread) else "wall"


def compare_models(
    old: PreparedModel,
    new: PreparedModel,
    settings: ScenarioSettings,
    log_dir: Path,
    windows: int = DEFAULT_WINDOWS,
    tolerance: float = 0.10,
    alone: bool = True,
    budget: float | None = None,
    started: float | None = None,
) -> ScenarioComparison:
    """Old and new answering ``windows`` LoadGen tests in turn, judged per metric; with ``alone``,
    one more test of the new model by itself (LoadGen's figures of it, for the test).

    With ``budget`` (seconds from ``started``, a ``time.monotonic()``; this call if None) the
    windows are sized to fit it from one query's measured time (``plan`` in the result:
    :func:`pytest_roofline.serving.budget.plan_windows`): no window starts that could not end in
    it, and past it the workers answer what is left unrun.
    Without, each window runs ``settings`` as given."""
    from pytest_roofline.device.load import between, snapshot
    from pytest_roofline.gate.noise import noise_model, pressure
    from pytest_roofline.serving.budget import plan_windows
    from pytest_roofline.serving.runner import Workers, load_loadgen, run_window

    started = time.monotonic() if started is None else started
    if settings.scenario == "server" and settings.target_qps is None:
        raise OptionError("a paired serving comparison needs a fixed --qps (both models under one schedule)")
    if windows < 2:
        raise OptionError("a paired serving comparison needs at least 2 windows")
    lg = load_loadgen()
    shared: list[ScenarioResult] = []
    sides: tuple[list[SideSamples], list[SideSamples]] = ([], [])
    offline = settings.scenario == "offline"
    own, plan, each = None, None, settings
    with Workers(old, settings.concurrency, lg, other=new, alternate_chunks=offline) as workers:
        latencies = workers.expected_latencies()
        latency = statistics.mean(latencies)
        in_thread = [in_thread_share(session) for session in workers.rows[0]]
        end = math.inf
        if budget is not None:
            each, plan = plan_windows(settings, budget, time.monotonic() - started, latency, windows)
            end = started + budget - CLOSING  # what the runs may use; the workers stop at the budget
            workers.deadline = started + budget
        reserve = plan.window_seconds if plan is not None and alone else 0.0  # the new model's own test
        start = snapshot()
        for window in range(windows if plan is None or plan.runnable else 0):
            left = end - reserve - time.monotonic()
            if plan is not None and left < plan.query_seconds + TEST_OVERHEAD:
                break  # the budget has no room for another window
            at = dataclasses.replace(each, seed=settings.seed + window)
            workers.turn = window % 2  # which side answers the window's first query
            result = run_window(workers, new, at, log_dir / f"window-{window}", latency, stop_after=left)
            if plan is not None and {side for side, *_ in workers.served} != {0, 1}:
                break  # cut by the budget before both models answered
            shared.append(result)
            for side, kept in enumerate(sides):
                kept.append(side_samples(workers.served, side))
        load = between(start, snapshot())
        if alone:
            workers.only = 1
            last = plan.query_seconds + TEST_OVERHEAD if plan is not None else 0.0  # the plan kept it
            left = max(end - last - time.monotonic(), 1e-3)
            if not shared:  # nothing else to give back: LoadGen's test of the new model, one query at least
                workers.deadline = None
            own = run_window(workers, new, each, log_dir / "new", latencies[1], stop_after=left)
    at_pressure = pressure(load)
    floor = noise_model().floor("paired", at_pressure)
    clock = tail_clock(load, in_thread)
    old_figures = tuple(w.figures() for w in sides[0])
    new_figures = tuple(w.figures() for w in sides[1])
    metrics = []
    for name in compared_metrics(settings.scenario):
        if len(shared) < 2:
            metrics.append(MetricVerdict(name, math.nan, math.nan, math.nan, 0.0, math.inf, "inconclusive"))
        elif name == "qps":
            per_window = [[w.throughput(clock) for w in windows] for windows in sides]
            ratios = [o / n if n else math.inf for o, n in zip(*per_window, strict=True)]
            judged = _metric(name, ratios, floor, tolerance)
            rates = [statistics.median(figures) for figures in per_window]
            metrics.append(dataclasses.replace(judged, old=rates[0], new=rates[1]))
        else:
            pooled = [sorted(t for w in windows for t in getattr(w, clock)) for windows in sides]
            metrics.append(pooled_metric(name, pooled[0], pooled[1], floor, tolerance))
    return ScenarioComparison(
        each,
        tolerance,
        at_pressure,
        floor,
        tuple(shared),
        old_figures,
        new_figures,
        tuple(metrics),
        own,
        clock,
        plan,
    )
