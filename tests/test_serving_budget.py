"""A serving run decides within its time budget for any model speed (serving.budget).

The plan sizes a paired comparison's windows from one query's measured time; a budget too short
for the tail's 95 % interval leaves the p99 ``inconclusive`` and names the budget that would do.
A model slower than its timing said is stopped at the budget (LoadGen's maximum duration, and the
workers answering the rest unrun).  The LoadGen tests use the fake backend's ``sleep`` (a fixed,
real 40 ms query: the decision and the wall time are then known) and, through pytester, real
onnxruntime on a MatMul chain.
"""

from __future__ import annotations

import json
import time
import types

import pytest
from _plugin_helpers import fixed_calibration, matmul_chain, relu_chain
from _serving_data import ORT

from pytest_roofline.backends.fake import FakeBackend
from pytest_roofline.pipeline import ModelCall, PreparedModel, prepare
from pytest_roofline.serving.budget import (
    CLOSING,
    TAIL_QUERIES,
    BudgetPlan,
    fewest_queries,
    plan_windows,
    query_seconds,
)
from pytest_roofline.serving.compare import COVERAGE, compare_models, quantile_interval
from pytest_roofline.serving.gate import paired_verdicts
from pytest_roofline.serving.runner import run_scenario
from pytest_roofline.serving.types import ScenarioSettings

SINGLE = ScenarioSettings("single-stream", min_duration=2.0)
#: Seconds a run may end past its budget: LoadGen ending its test and the query in flight.
GRACE = 0.5


# --- the plan, without LoadGen ---------------------------------------------------------------------


def test_fewest_queries_is_where_a_p99_interval_first_reaches_95_percent() -> None:
    fewest = fewest_queries()
    assert fewest == 348  # the largest query is its upper end up to 366; the lower end's tail is small
    assert quantile_interval(list(range(fewest - 1)), 0.99, COVERAGE)[2] < COVERAGE
    for n in range(fewest, 1100, 7):  # and it stays there
        assert quantile_interval(list(range(n)), 0.99, COVERAGE)[2] >= COVERAGE


def test_a_fast_model_is_asked_the_tail_queries_within_each_share() -> None:
    at, plan = plan_windows(SINGLE, budget=30.0, spent=0.0, latency=1e-3, windows=20)
    assert at.min_query_count == plan.window_queries == 100  # 50 each a window: 1000 of each model
    assert plan.per_side == TAIL_QUERIES and not plan.short
    share = (30.0 - 1e-3 - 0.05 - CLOSING) / 21
    assert at.max_duration == pytest.approx(share) == plan.window_seconds  # LoadGen stops there
    assert at.min_duration == pytest.approx(share)
    server = ScenarioSettings("server", target_qps=20.0, min_duration=2.0)
    slow_rate, _ = plan_windows(server, budget=30.0, spent=0.0, latency=1e-3, windows=20)
    assert slow_rate.min_query_count == 27  # what 20 QPS brings in a share, less LoadGen's own time
    assert plan_windows(server, budget=120.0, spent=0.0, latency=1e-3, windows=20)[0].min_query_count == 100


def test_a_slow_model_is_asked_what_its_share_buys_and_the_budget_that_would_do_is_named() -> None:
    at, plan = plan_windows(SINGLE, budget=30.0, spent=2.0, latency=0.04, windows=20)
    share = (28.0 - 0.04 - 0.05 - CLOSING) / 21  # the last query, LoadGen's end and the closing kept out
    assert plan.window_queries == at.min_query_count == int((share - 0.05) / 0.04) == 31
    assert plan.per_side == 300 < plan.fewest == 348 and plan.short
    assert at.min_query_count * 0.04 + 0.05 <= at.max_duration  # each window's queries fit its share
    needed = plan.needed()
    assert plan_windows(SINGLE, needed, 2.0, 0.04, 20)[1].per_side >= 348  # the remedy is enough
    assert plan_windows(SINGLE, needed - 2.0, 2.0, 0.04, 20)[1].short  # and not far above it
    assert plan.shortfall() == (
        "the 30 s budget bought 300 queries of each model at 40 ms a query;"
        f" a p99's 95 % interval needs 348 of each: raise the budget to {needed:g} s"
    )
    assert BudgetPlan.from_dict(plan.to_dict()) == plan
    _, none = plan_windows(SINGLE, budget=30.0, spent=2.0, latency=1.0, windows=20)
    assert not none.runnable and none.short  # a query a side does not fit a window


def test_a_server_past_its_workers_queues_no_more_than_its_share_buys() -> None:
    server = ScenarioSettings("server", target_qps=100.0, min_duration=2.0)
    assert query_seconds(server, 0.04) == 0.04  # the workers, not the arrivals, set the pace
    at, plan = plan_windows(server, budget=30.0, spent=2.0, latency=0.04, windows=20)
    # LoadGen schedules max(min queries, rate x min duration) queries: no more than the share buys
    assert at.min_duration * 100.0 <= at.min_query_count == plan.window_queries
    assert plan.window_queries * 0.04 <= plan.window_seconds


# --- a fixed 40 ms query: the fake backend's sleep, real LoadGen ---------------------------------


@pytest.fixture(scope="module")
def sleepy(tmp_path_factory: pytest.TempPathFactory) -> PreparedModel:
    path = relu_chain(tmp_path_factory.mktemp("budget") / "chain.onnx", 3)
    return prepare(ModelCall(str(path), backend=FakeBackend({"sleep": "0.04"})))


def test_a_40ms_model_is_decided_within_its_budget_and_its_p99_says_what_would_do(sleepy, tmp_path) -> None:
    began = time.monotonic()
    found = compare_models(sleepy, sleepy, SINGLE, tmp_path, windows=4, budget=6.0)
    took = time.monotonic() - began
    assert took <= 6.0 + GRACE, took  # 100 queries a window as before: 4 x 100 x 40 ms, 16 s
    plan = found.plan
    assert plan is not None and plan.query_seconds == pytest.approx(0.04, rel=0.25)
    assert plan.short and found.alone is not None
    assert found.verdict("p99").status == "inconclusive"
    verdicts = {v.metric: v for v in paired_verdicts(found, ())}
    p99 = verdicts["single-stream p99"]
    assert "raise the budget to" in p99.message and "a p99's 95 % interval needs 348 of each" in p99.message
    asked = min(sum(f.queries for f in side) for side in (found.old, found.new))  # the side with fewer
    assert f"bought {asked} queries of each model" in p99.message
    assert verdicts["single-stream qps"].status != "regression"  # A/A: the throughput is judged


def test_a_budget_that_buys_no_window_leaves_every_metric_open_and_still_serves_the_model(
    sleepy, tmp_path
) -> None:
    began = time.monotonic()
    found = compare_models(sleepy, sleepy, SINGLE, tmp_path, windows=4, budget=2.5)  # 1.8 s to time them
    took = time.monotonic() - began
    assert took <= 2.5 + GRACE, took
    assert found.plan is not None and not found.plan.runnable and found.windows == ()
    assert found.alone is not None and found.alone.query_count >= 1  # what the test gets back
    verdicts = paired_verdicts(found, ())
    assert [v.status for v in verdicts] == ["inconclusive", "inconclusive"]
    for verdict in verdicts:
        assert "bought no window of both models" in verdict.message, verdict.message
        assert "raise the budget to" in verdict.message
    json.dumps([v.to_dict() for v in verdicts], allow_nan=False)  # the results file stays JSON


class _Slowing:
    """A session whose inferences take 10 ms while the run times them, then 100 ms."""

    def __init__(self) -> None:
        self.calls = 0

    def time(self, iterations: int) -> list[float]:
        self.calls += iterations
        seconds = 0.01 if self.calls <= 60 else 0.1
        time.sleep(seconds * iterations)
        return [seconds] * iterations

    def close(self) -> None:
        pass


def _slowing_model() -> PreparedModel:
    return types.SimpleNamespace(  # type: ignore[return-value]
        open=_Slowing, spec=types.SimpleNamespace(name="slowing"), engine=types.SimpleNamespace(name="fake")
    )


def test_a_model_slower_than_its_timing_is_stopped_at_the_budget(tmp_path) -> None:
    model = _slowing_model()
    began = time.monotonic()
    found = compare_models(model, model, SINGLE, tmp_path, windows=4, budget=4.0)
    took = time.monotonic() - began
    assert took <= 4.0 + GRACE, took  # planned at 10 ms a query, run at 100 ms
    assert found.plan is not None and found.plan.query_seconds < 0.05
    assert found.verdict("p99").status == "inconclusive"


def test_a_server_run_past_its_workers_ends_at_its_budget_and_counts_what_it_did_not_run(
    sleepy, tmp_path
) -> None:
    settings = ScenarioSettings("server", target_qps=100.0, min_duration=2.0)  # 200 queries, 8 s of work
    began = time.monotonic()
    result = run_scenario(sleepy, settings, tmp_path, budget=3.0)
    took = time.monotonic() - began
    assert took <= 3.0 + GRACE, took
    assert result.unrun_samples > 0 and result.settings == settings  # the settings asked, kept
    assert result.query_count >= result.unrun_samples


# --- the gate through pytester, real onnxruntime ----------------------------------------------------

TEST = """
import json, time

def test_serve(model_load):
    began = time.monotonic()
    model_load("mm.onnx", "single-stream", budget=5.0, windows=4, batch_size=256)
    with open("took.json", "w") as out:
        json.dump(time.monotonic() - began, out)
"""


def test_a_changed_model_is_paired_within_the_calls_budget(pytester, monkeypatch, tmp_path_factory) -> None:
    pytest.importorskip("mlperf_loadgen")
    cache = fixed_calibration(tmp_path_factory.mktemp("calibration"), {"intra_op_threads": "1"})
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(cache))
    matmul_chain(pytester.path / "mm.onnx", 1, size=256)
    pytester.makepyfile(test_budget_serving=TEST)
    pytester.runpytest(*ORT).assert_outcomes(passed=1)
    # 64 x 33.5 MFLOP at batch 256: 2.1 GFLOP a query, past 8 ms at any one core's peak, so the
    # two models' mean query is past 4 ms and the budget's windows buy fewer than 348 of each
    matmul_chain(pytester.path / "mm.onnx", 64, size=256)
    result = pytester.runpytest(*ORT, "--roofline-report", "r.json")
    result.assert_outcomes(failed=1)  # 30x the work: its throughput is a regression within the budget
    took = json.loads((pytester.path / "took.json").read_text())
    assert took <= 5.0 + GRACE, took
    (record,) = json.loads((pytester.path / "r.json").read_text())["serving"]
    plan = record["comparison"]["plan"]
    assert plan["budget"] == 5.0
    assert BudgetPlan.from_dict(plan).short
    verdicts = {v["metric"]: v for v in record["verdicts"]}
    p99 = verdicts["single-stream p99"]
    assert p99["status"] == "inconclusive" and "raise the budget to" in p99["message"], p99
    assert verdicts["single-stream qps"]["status"] == "regression"
    result.stdout.fnmatch_lines(
        ["INCONCLUSIVE *single-stream p99: the 5 s budget bought * raise the budget to * s"]
    )
