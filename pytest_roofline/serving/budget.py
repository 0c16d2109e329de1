"""Fitting a paired serving comparison into its time budget, from one query's measured time.

A paired run (:func:`pytest_roofline.serving.compare.compare_models`) asks ``windows`` shared LoadGen
tests and the new model's own.  Once the sessions are open and one sample is timed
(``Workers.expected_latency``), :func:`plan_windows` gives each test an equal share of the seconds
left, and each window the queries that share buys at that time — :data:`TAIL_QUERIES` of each model
over the windows where they fit, fewer where they do not.  The share is also each test's LoadGen
maximum duration, so a model slower than its timing said stops being asked at the share's end, and
past the budget the workers answer what is left unrun (``Workers.deadline``).  Where the budget buys
fewer queries of a side than the tail's 95 % order-statistic interval needs (:func:`fewest_queries`:
348 for a p99), the plan is ``short`` and the tail's verdict says so, with the budget that would do.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from typing import Any

from pytest_roofline.serving.types import ScenarioSettings

__all__ = [
    "BUDGET_REMEDY",
    "CLOSING",
    "TAIL_QUERIES",
    "BudgetPlan",
    "fewest_queries",
    "plan_windows",
    "query_seconds",
]

#: The queries of each model a paired run pools where its budget buys them.  A p99's 95 %
#: order-statistic interval needs at least 348 (:func:`fewest_queries`); at 400 its upper end *is*
#: the largest, so one stalled query of the old model (a page fault, a neighbour's stall counted into
#: its CPU time) set the interval alone (einsum_attention's tail variant, 1.604 [0.396, 9.673] under
#: load).  At 1000 the upper end is the 4th largest and the lower the 18th.
TAIL_QUERIES = 1000
#: Seconds one LoadGen test takes beside its queries (starting, ending, writing its logs).
TEST_OVERHEAD = 0.05
#: Seconds kept at a budget's end for closing the sessions and judging (a 100 MB model's four
#: sessions and LoadGen's last end took the paired gate on resnet50 0.1 s past a 30 s budget).
CLOSING = 0.25
#: Words of a serving verdict that names its one remedy (the reports add no other).
BUDGET_REMEDY = "raise the budget to"
#: The shortest minimum duration a window is given (seconds).
SHORTEST_WINDOW = 0.1
#: The tail percentile a paired comparison gates (``serving.gate.GATED_METRICS``).
GATED_TAIL = 0.99


@functools.lru_cache(maxsize=8)
def fewest_queries(q: float = GATED_TAIL, coverage: float = 0.95) -> int:
    """The fewest values whose ``q`` quantile has a distribution-free ``coverage`` interval
    (:func:`pytest_roofline.serving.compare.quantile_interval`, which decides): 348 for a p99.
    Below 367 its upper end is the largest value (``q ** n`` above 2.5 %), the lower end's tail
    then small enough that the two still reach 95 %."""
    from pytest_roofline.serving.compare import quantile_interval

    n = 1
    while quantile_interval(range(n), q, coverage)[2] < coverage:
        n += 1
    return n


def query_seconds(settings: ScenarioSettings, latency: float) -> float:
    """Seconds one query of ``settings`` holds a run whose one sample takes ``latency``: a Server
    query arrives every ``1 / qps`` unless the workers are slower; Offline's unit is one sample."""
    workers = settings.concurrency
    if settings.scenario == "multi-stream":
        return latency * settings.samples_per_query / min(workers, settings.samples_per_query)
    if settings.scenario == "server":
        return max(1.0 / float(settings.target_qps or 1.0), latency / workers)
    if settings.scenario == "offline":
        return latency / min(workers, os.cpu_count() or 1)
    return latency


@dataclass(frozen=True)
class BudgetPlan:
    """How a paired comparison's windows were sized: the seconds it had, one query's measured time,
    and the queries each window asked (both models together)."""

    budget: float  # seconds the comparison was given, from its start
    spent: float  # seconds gone before the windows (opening, warming and timing the sessions)
    query_seconds: float  # one query's expected time, both models' mean (:func:`query_seconds`)
    windows: int
    window_queries: int  # both models' queries a window asks (LoadGen's min query count)
    window_seconds: float  # each LoadGen test's share of what was left (its max duration)
    fewest: int  # queries of each model the tail's interval needs (0: Offline, judged on QPS only)

    @property
    def per_side(self) -> int:
        """The queries of each model the windows ask for, pooled (a fast model answers more: the
        windows' minimum duration)."""
        return self.windows * (self.window_queries // 2)

    @property
    def runnable(self) -> bool:
        """Whether each window buys a query of each model."""
        return self.window_queries >= 2

    @property
    def short(self) -> bool:
        """Whether the budget buys fewer queries of a side than the tail's interval needs."""
        return not self.runnable or self.per_side < self.fewest

    def needed(self) -> float:
        """The budget (seconds, rounded up) that buys the tail's interval at this query time: what
        was spent before the windows, and every test's share of ``fewest`` queries a side."""
        queries = 2 * max(1, math.ceil(self.fewest / self.windows))
        share = queries * self.query_seconds + TEST_OVERHEAD
        last = self.query_seconds + TEST_OVERHEAD + CLOSING
        return float(math.ceil(self.spent + last + (self.windows + 1) * share))

    def shortfall(self, bought: int | None = None) -> str:
        """One line: what the budget bought (``bought`` queries of each model, the plan's if None)
        and the one remedy."""
        count = self.per_side if bought is None else bought
        got = f"{count} queries of each model" if self.runnable else "no window of both models"
        need = f"; a p99's 95 % interval needs {self.fewest} of each" if self.fewest else ""
        return (
            f"the {self.budget:g} s budget bought {got} at {self.query_seconds * 1e3:.3g} ms a query"
            f"{need}: {BUDGET_REMEDY} {self.needed():g} s"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BudgetPlan:
        """Inverse of :meth:`to_dict`."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


def plan_windows(
    settings: ScenarioSettings, budget: float, spent: float, latency: float, windows: int
) -> tuple[ScenarioSettings, BudgetPlan]:
    """Each window's settings and the plan, for ``windows`` shared LoadGen tests and the new
    model's own in the ``budget - spent`` seconds left, one sample taking ``latency``: each test's
    share of that time is its LoadGen maximum duration and caps its minimum duration (not under
    :data:`SHORTEST_WINDOW`); its minimum query count is what :data:`TAIL_QUERIES` of each model
    take over the windows, or what the share buys at :func:`query_seconds` if fewer.  A Server's
    minimum duration is no longer than its queries' schedule, so a rate past the workers does not
    queue more queries than the share buys."""
    each = query_seconds(settings, latency)
    # the last test's query in flight, its end and the closing are kept out of the shares
    share = max(0.0, budget - spent - each - TEST_OVERHEAD - CLOSING) / (windows + 1)
    fits = max(0, math.floor((share - TEST_OVERHEAD) / each)) if each > 0 else 2 * TAIL_QUERIES
    queries = min(2 * math.ceil(TAIL_QUERIES / windows), fits)
    duration = min(settings.min_duration, max(SHORTEST_WINDOW, share))
    if settings.scenario == "server":
        duration = min(duration, max(queries, 1) / float(settings.target_qps or 1.0))
    at = dataclasses.replace(
        settings,
        min_duration=duration,
        max_duration=max(duration, share),
        min_query_count=max(queries, 1),
    )
    fewest = 0 if settings.scenario == "offline" else fewest_queries()
    return at, BudgetPlan(budget, spent, each, windows, queries, share, fewest)
