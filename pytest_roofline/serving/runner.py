"""Serving scenarios driven by MLPerf LoadGen through the backend's sessions.

LoadGen issues the queries (its own SingleStream, MultiStream, Server and Offline schedules);
this module only answers them: each sample is one inference of the prepared model, run by one of
``concurrency`` worker threads, each holding its own backend session opened at the run's options.
The figures are read back from LoadGen's detail and summary logs (:mod:`pytest_roofline.serving.logs`),
so they are LoadGen's report, not a second computation of it.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import statistics
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import BackendUnavailable, RooflineError
from pytest_roofline.serving.logs import (
    DETAIL_LOG,
    SUMMARY_LOG,
    early_stopping_estimates,
    read_detail,
    read_summary,
)
from pytest_roofline.serving.types import TAIL_PERCENTILES, ScenarioResult, ScenarioSettings

if TYPE_CHECKING:
    from collections.abc import Callable

    from pytest_roofline.backends.base import Backend, BackendSession
    from pytest_roofline.pipeline import ModelCall, PreparedModel

__all__ = [
    "DEFAULT_SEARCH_BUDGET",
    "QPS_LINES",
    "Workers",
    "load_loadgen",
    "run_model",
    "run_scenario",
    "run_window",
]

#: Seconds one serving run may spend: a scenario's, a Server QPS search's (all its LoadGen runs
#: together), a gated call's paired comparison (serving.gate).
DEFAULT_SEARCH_BUDGET = 30.0
SEARCH_STEPS = 8  # LoadGen runs in one search at most
SEARCH_RESOLUTION = 0.05  # stop when the QPS bracket is this narrow, relative to its top
QSL_SAMPLES = 64  # every sample runs the same bound inputs
#: What answering one sample costs beside the inference (a thread hand-off and LoadGen's
#: completion call under the GIL: 15-30 us measured here); added to the latency LoadGen sizes
#: its queries by, so a microsecond model's Offline query is not ten times too long.
SAMPLE_OVERHEAD = 25e-6
_LOADGEN_LOCK = threading.Lock()  # LoadGen keeps one test per process
_PERCENTILES = ("50.00", "90.00", "99.00", "99.90")  # LoadGen's spelling of p50, p90, p99, p99.9
#: The summary's QPS line per scenario (printed to two decimals; the detail log rounds to six digits).
QPS_LINES = {
    "single-stream": "QPS w/ loadgen overhead",
    "server": "Completed samples per second",
    "offline": "Samples per second",
}


def load_loadgen() -> Any:
    """``mlperf_loadgen``, or a one-line error naming the extra that installs it."""
    try:
        import mlperf_loadgen
    except ImportError:
        raise BackendUnavailable(
            'serving scenarios need MLPerf LoadGen: pip install "pytest-roofline[serving]"'
        ) from None
    return mlperf_loadgen


class Workers:
    """``concurrency`` threads, each with its own session, answering LoadGen's samples.

    A query's samples are queued in chunks (:func:`chunk_size`): one sample each where LoadGen
    issues one at a time (SingleStream, Server) or a few (MultiStream), many where it issues them
    all at once (Offline), so a worker runs a chunk back to back as a bare loop does and completes
    it in one LoadGen call.  Each chunk's issue and completion times are kept (:attr:`timings`):
    the latency distribution and the completions over time that the reports draw.

    With ``other``, each thread holds a session of both models and the two answer the same LoadGen
    test in turn (:mod:`pytest_roofline.serving.compare`): whole queries alternate, or with
    ``alternate_chunks`` (Offline's one query) its chunks do; each chunk's side, issue and
    completion times and inference seconds are kept in :attr:`served`.
    """

    def __init__(
        self,
        prepared: PreparedModel,
        concurrency: int,
        lg: Any,
        other: PreparedModel | None = None,
        alternate_chunks: bool = False,
    ) -> None:
        self.lg = lg
        self.concurrency = concurrency
        models = (prepared,) if other is None else (prepared, other)
        self.sessions: list[BackendSession] = []
        rows: list[tuple[BackendSession, ...]] = []
        try:
            for _ in range(concurrency):
                row = tuple(model.open() for model in models)
                self.sessions.extend(row)
                rows.append(row)
                for session in row:
                    session.time(3)  # warm: first runs allocate
        except BaseException:
            self.close()
            raise
        self.rows = rows
        self.sides = len(models)
        self.alternate_chunks = alternate_chunks
        #: the side the next query (or chunk) goes to; the comparison sets it per window
        self.turn = 0
        #: the one side every query goes to (the new model's own test after a comparison's windows)
        self.only: int | None = None
        #: ``time.monotonic()`` past which samples are answered unrun (a run's budget spent)
        self.deadline: float | None = None
        #: the sizes of the chunks answered unrun past :attr:`deadline` in the current LoadGen test
        self.cut: list[int] = []
        self.samples: queue.SimpleQueue[tuple[int, int, list[int]] | None] = queue.SimpleQueue()
        self.errors: list[BaseException] = []
        #: (issued ns, completed ns, samples) per chunk of the current LoadGen test
        self.timings: list[tuple[int, int, int]] = []
        #: (side, issued ns, completed ns, inference seconds, the worker thread's CPU seconds,
        #: samples) per chunk, with ``other``
        self.served: list[tuple[int, int, int, float, float, int]] = []
        self.threads = [threading.Thread(target=self._work, args=(row,), daemon=True) for row in rows]
        for thread in self.threads:
            thread.start()

    def expected_latencies(self) -> list[float]:
        """Each model's expected time of one sample (seconds), how LoadGen sizes its pre-generated
        queries: a short median of one inference plus :data:`SAMPLE_OVERHEAD`."""
        return [statistics.median(s.time(16)) + SAMPLE_OVERHEAD for s in self.rows[0]]

    def expected_latency(self) -> float:
        """One sample's expected time (seconds): :meth:`expected_latencies`' mean over the models."""
        return statistics.mean(self.expected_latencies())

    def _work(self, row: tuple[BackendSession, ...]) -> None:
        lg, take, clock, timings = self.lg, self.samples.get, time.perf_counter_ns, self.timings
        response, served, paired, cpu = (
            lg.QuerySampleResponse,
            self.served,
            self.sides > 1,
            time.thread_time_ns,
        )
        while (chunk := take()) is not None:
            side, issued, ids = chunk
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self.cut.append(len(ids))  # the budget is spent: answered, not run, not timed
                lg.QuerySamplesComplete([response(sample_id, 0, 0) for sample_id in ids])
                continue
            busy, began = 0.0, cpu()
            if not self.errors:
                try:
                    busy = sum(row[side].time(len(ids)))
                except BaseException as exc:  # reported after LoadGen's test ends
                    self.errors.append(exc)
            done = clock()
            timings.append((issued, done, len(ids)))
            if paired:
                served.append((side, issued, done, busy, (cpu() - began) * 1e-9, len(ids)))
            lg.QuerySamplesComplete([response(sample_id, 0, 0) for sample_id in ids])

    def issue(self, ids: list[int], indices: list[int]) -> None:
        """LoadGen's issue callback (its *fast* SUT's: the samples' ids as plain integers, no
        QuerySample objects made): queue them in chunks, return at once.  The responses are made
        by the worker that ran the chunk: made here, they held the GIL against the workers (5 ms
        switch interval) while a query of thousands was issued."""
        issued, put = time.perf_counter_ns(), self.samples.put
        size = chunk_size(len(ids), self.concurrency)
        for start in range(0, len(ids), size):
            put((self.turn if self.only is None else self.only, issued, ids[start : start + size]))
            if self.alternate_chunks:
                self.turn = (self.turn + 1) % self.sides
        if not self.alternate_chunks:
            self.turn = (self.turn + 1) % self.sides

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the threads and close the sessions."""
        for _ in getattr(self, "threads", ()):
            self.samples.put(None)
        for thread in getattr(self, "threads", ()):
            thread.join()
        for session in self.sessions:
            session.close()


#: The most samples one worker runs before completing them (Offline's one query of thousands).
MAX_CHUNK = 64


def chunk_size(samples: int, concurrency: int) -> int:
    """Samples per chunk of a query of ``samples``: 1 for the one-sample queries of SingleStream
    and Server and a MultiStream frame, up to :data:`MAX_CHUNK` for Offline, small enough that
    every worker takes at least 16 chunks (the last chunk keeps one worker busy alone)."""
    return max(1, min(MAX_CHUNK, samples // (16 * concurrency)))


def _test_settings(lg: Any, settings: ScenarioSettings, latency: float, stop_after: float | None) -> Any:
    """LoadGen's TestSettings for ``settings``; ``latency``: one inference, seconds; ``stop_after``:
    seconds past which LoadGen issues no more queries, if sooner than ``settings.max_duration``."""
    test = lg.TestSettings()
    test.scenario = getattr(lg.TestScenario, settings.loadgen_scenario)
    test.mode = lg.TestMode.PerformanceOnly
    test.min_duration_ms = int(settings.min_duration * 1000)
    longest = settings.max_duration if stop_after is None else min(settings.max_duration, stop_after)
    test.max_duration_ms = max(1, int(longest * 1000))
    test.min_query_count = settings.min_query_count
    test.qsl_rng_seed = test.sample_index_rng_seed = test.schedule_rng_seed = settings.seed
    latency_ns = int(latency * 1e9)
    test.single_stream_expected_latency_ns = latency_ns
    test.multi_stream_samples_per_query = settings.samples_per_query
    per_query = latency * settings.samples_per_query / min(settings.concurrency, settings.samples_per_query)
    test.multi_stream_expected_latency_ns = int(per_query * 1e9)
    test.offline_expected_qps = min(settings.concurrency, os.cpu_count() or 1) / latency
    if settings.scenario == "server":
        test.server_target_qps = float(settings.target_qps or 1.0)
        bound = settings.p99_bound if settings.p99_bound is not None else settings.max_duration
        test.server_target_latency_ns = int(bound * 1e9)
        test.server_target_latency_percentile = 0.99
    return test


def run_window(
    workers: Workers,
    prepared: PreparedModel,
    settings: ScenarioSettings,
    log_dir: Path,
    latency: float,
    stop_after: float | None = None,
) -> ScenarioResult:
    """One LoadGen test of ``settings``, its logs in ``log_dir``; LoadGen issues no query past
    ``stop_after`` seconds (a budget's end) where that is sooner than ``settings.max_duration``."""
    lg = workers.lg
    log_dir.mkdir(parents=True, exist_ok=True)
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(log_dir)
    log_settings.log_output.copy_summary_to_stdout = False
    # LoadGen's trace (an event per sample, megabytes a second written by its logging thread) costs
    # a microsecond model a third of its throughput; its figures come from the summary and detail
    log_settings.enable_trace = False
    with _LOADGEN_LOCK:
        workers.timings.clear()
        workers.served.clear()
        workers.cut.clear()
        sut = lg.ConstructFastSUT(workers.issue, lambda: None)
        qsl = lg.ConstructQSL(QSL_SAMPLES, QSL_SAMPLES, lambda samples: None, lambda samples: None)
        try:
            test = _test_settings(lg, settings, latency, stop_after)
            lg.StartTestWithLogSettings(sut, qsl, test, log_settings)
        finally:
            lg.DestroyQSL(qsl)
            lg.DestroyFastSUT(sut)
    if workers.errors:
        error = workers.errors[0]
        raise error if isinstance(error, RooflineError) else RooflineError(f"serving failed: {error}")
    quantiles, step, timeline = timing_figures(workers.timings)
    return dataclasses.replace(
        _result(prepared, settings, log_dir),
        latency_quantiles=quantiles,
        timeline_step=step,
        timeline=timeline,
        unrun_samples=sum(workers.cut),
    )


#: Steps of a run's completions-over-time series.
TIMELINE_STEPS = 50


def timing_figures(
    timings: list[tuple[int, int, int]],
) -> tuple[tuple[float, ...], float, tuple[float, ...]]:
    """From the workers' (issued ns, completed ns, samples) chunks: each sample's latency at the
    percentiles 0, 1, ..., 100 (seconds), and the samples completed per second in
    :data:`TIMELINE_STEPS` equal steps from the first issue to the last completion (the step in
    seconds, then the rates)."""
    if not timings:
        return (), 0.0, ()
    latencies = sorted((done - issued) * 1e-9 for issued, done, count in timings for _ in range(count))
    last = len(latencies) - 1
    quantiles = tuple(latencies[round(last * q / 100)] for q in range(101))
    start = min(issued for issued, _, _ in timings)
    span = max(max(done for _, done, _ in timings) - start, 1)
    counts = [0] * TIMELINE_STEPS
    for _, done, count in timings:
        counts[min((done - start) * TIMELINE_STEPS // span, TIMELINE_STEPS - 1)] += count
    step = span * 1e-9 / TIMELINE_STEPS
    return quantiles, step, tuple(c / step for c in counts)


def _result(prepared: PreparedModel, settings: ScenarioSettings, log_dir: Path) -> ScenarioResult:
    """The figures LoadGen logged in ``log_dir``."""
    detail = read_detail(log_dir / DETAIL_LOG)
    per_query = "per_query_" if settings.scenario == "multi-stream" else ""

    def seconds(key: str) -> float:
        if not isinstance(detail.get(key), (int, float)):
            raise RooflineError(f"LoadGen's detail log in {log_dir} has no {key}")
        return float(detail[key]) * 1e-9

    p50, p90, p99, p999 = (seconds(f"result_{p}_percentile_{per_query}latency_ns") for p in _PERCENTILES)
    mean = seconds(f"result_mean_{'query_' if per_query else ''}latency_ns")
    qps_line = QPS_LINES.get(settings.scenario)
    qps = read_summary(log_dir / SUMMARY_LOG).get(qps_line or "") if qps_line else None
    tail = TAIL_PERCENTILES[settings.scenario]
    estimate = early_stopping_estimates(str(detail.get("early_stopping_result", ""))).get(tail or -1.0)
    constraint: bool | None = None
    if settings.p99_bound is not None:
        if settings.scenario == "server":
            constraint = bool(detail.get("result_perf_constraints_met"))
        else:
            constraint = p99 <= settings.p99_bound
    return ScenarioResult(
        scenario=settings.scenario,
        model=prepared.spec.name,
        backend=prepared.engine.name,
        settings=settings,
        mean=mean,
        query_count=int(detail.get("result_query_count", 0)),
        achieved_qps=float(qps) if qps else None,
        tail_percentile=tail,
        early_stopping_estimate=estimate,
        early_stopping_met=bool(detail.get("early_stopping_met")),
        constraint_met=constraint,
        valid=detail.get("result_validity") == "VALID",
        invalid_reason=str(detail.get("result_invalid_reason") or "").strip(),
        summary_log=str(log_dir / SUMMARY_LOG),
        detail_log=str(log_dir / DETAIL_LOG),
        p50=p50,
        p90=p90,
        p99=p99,
        p999=p999,
    )


def run_scenario(
    prepared: PreparedModel,
    settings: ScenarioSettings,
    log_dir: Path,
    budget: float = DEFAULT_SEARCH_BUDGET,
    progress: Callable[[str], None] | None = None,
) -> ScenarioResult:
    """Run one LoadGen scenario on ``prepared``, its logs in ``log_dir``.

    A Server with a ``target_qps`` runs at it; one with only a ``p99_bound`` searches for the
    highest QPS meeting the bound (:func:`_search`).  Either way within ``budget`` seconds: LoadGen
    issues no query past it, and the workers answer what is left unrun (the result's
    ``unrun_samples`` counts them).
    """
    started = time.monotonic()
    workers = Workers(prepared, settings.concurrency, load_loadgen())
    workers.deadline = started + budget
    try:
        latency = workers.expected_latency()
        left = budget - (time.monotonic() - started)
        if settings.scenario == "server" and settings.target_qps is None:
            return _search(workers, prepared, settings, log_dir, latency, left, progress)
        return run_window(workers, prepared, settings, log_dir, latency, stop_after=left)
    finally:
        workers.close()


def _search(
    workers: Workers,
    prepared: PreparedModel,
    settings: ScenarioSettings,
    log_dir: Path,
    latency: float,
    budget: float,
    progress: Callable[[str], None] | None,
) -> ScenarioResult:
    """The highest Server QPS whose p99 LoadGen finds within ``settings.p99_bound``.

    A bounded search: the first try is half the workers' capacity (concurrency over one
    sample's expected time), then the rate doubles until one misses the bound and the bracket
    halves until it is ``SEARCH_RESOLUTION`` narrow, ``SEARCH_STEPS`` runs are spent, or another
    run would pass ``budget`` seconds.  Returns the best rate's result (the lowest tried when
    none met the bound), with every step in ``searched``.
    """
    started = time.monotonic()
    low, high = 0.0, float("inf")
    qps = 0.5 * settings.concurrency / latency
    steps: list[tuple[float, bool]] = []
    best: ScenarioResult | None = None
    lowest: ScenarioResult | None = None
    run_time = settings.min_duration * 1.2 + 0.5
    while len(steps) < SEARCH_STEPS and time.monotonic() - started + run_time <= budget:
        at = dataclasses.replace(settings, target_qps=round(qps, 3))
        left = budget - (time.monotonic() - started)
        result = run_window(workers, prepared, at, log_dir / f"qps-{len(steps)}", latency, stop_after=left)
        steps.append((at.target_qps or qps, bool(result.constraint_met)))
        if progress:
            verdict = "met" if result.constraint_met else "missed"
            progress(f"server at {qps:.1f} QPS: p99 {result.p99 * 1e3:.3f} ms, bound {verdict}")
        if result.constraint_met:
            low, best = qps, result
        else:
            high = qps
            if lowest is None or qps < (lowest.settings.target_qps or 0.0):
                lowest = result
        if high != float("inf") and high - low <= SEARCH_RESOLUTION * high:
            break
        qps = qps * 2 if high == float("inf") else (low + high) / 2 if low else high / 2
    chosen = best or lowest
    if chosen is None:
        raise RooflineError(f"a QPS search needs at least {run_time:.1f} s; its budget is {budget:.1f} s")
    return dataclasses.replace(chosen, searched=tuple(steps))


#: ``run_model``'s keywords (the fixture's and the CLI's) and the ScenarioSettings field each sets.
KEYWORDS = {
    "qps": "target_qps",
    "p99": "p99_bound",
    "duration": "min_duration",
    "queries": "min_query_count",
    "concurrency": "concurrency",
    "samples_per_query": "samples_per_query",
    "seed": "seed",
}


def scenario_request(
    model: str, scenario: str, backend: Backend | str | None, keywords: dict[str, Any]
) -> tuple[ModelCall, ScenarioSettings, float]:
    """The model call, the scenario's settings and the run's time budget that ``keywords`` ask for.

    ``keywords``: :data:`KEYWORDS`, and ``budget`` (seconds the run may take: a QPS search's, a
    paired comparison's), ``batch_size`` and
    ``dims`` (how the model's inputs are bound); None values take the defaults.
    """
    from pytest_roofline.errors import OptionError
    from pytest_roofline.pipeline import ModelCall

    given = {k: v for k, v in keywords.items() if v is not None}
    budget = float(given.pop("budget", DEFAULT_SEARCH_BUDGET))
    batch, dims = given.pop("batch_size", None), given.pop("dims", None)
    unknown = sorted(set(given) - set(KEYWORDS))
    if unknown:
        raise OptionError(
            f"model_load has no keyword {unknown[0]!r} (keywords: {', '.join(KEYWORDS)}, budget, windows)"
        )
    values = {KEYWORDS[k]: v for k, v in given.items()}
    duration = float(values.get("min_duration", ScenarioSettings.min_duration))
    settings = ScenarioSettings(
        scenario, max_duration=max(ScenarioSettings.max_duration, 2 * duration), **values
    )
    load_loadgen()  # a missing extra fails before the model loads
    return ModelCall(model, batch=batch, dims=dims, backend=backend), settings, budget


def run_model(
    model: str,
    scenario: str,
    backend: Backend,
    log_dir: Path,
    keywords: dict[str, Any],
    progress: Callable[[str], None] | None = None,
) -> ScenarioResult:
    """Load ``model`` on ``backend`` and run ``scenario`` on it (``keywords``: :func:`scenario_request`)."""
    from pytest_roofline.pipeline import prepare

    call, settings, budget = scenario_request(model, scenario, backend, keywords)
    return run_scenario(prepare(call), settings, log_dir, budget=budget, progress=progress)
