"""model_load gated like latency, through pytester with real onnxruntime and real LoadGen.

A first run keeps LoadGen's result in the test's baseline entry; an unchanged model is not run
again (``unchanged``); a changed model runs paired with the baseline's under the same schedules and
a far slower one is a p99 and QPS regression that fails the test; ``--roofline-update`` records it.
Timing verdicts use a model 100x slower (a p99 on a busy 2-core VM swings by the scheduler's stalls,
milliseconds): gate quality under load is benchmarks/load_quality.py's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
from _baselines import make_entry
from _plugin_helpers import fixed_calibration, matmul_chain
from _serving_data import ORT, RESULT

from pytest_roofline.gate.store import BaselineStore
from pytest_roofline.serving.budget import TAIL_QUERIES
from pytest_roofline.serving.compare import pooled_metric
from pytest_roofline.serving.gate import (
    ServingRecord,
    asked,
    matching,
    record_scenarios,
    with_scenarios,
)
from pytest_roofline.serving.types import ScenarioResult, ScenarioSettings

pytest.importorskip("mlperf_loadgen")

TEST = """
import json, os

def test_serve(model_load):
    result = model_load("mm.onnx", "single-stream", duration=0.2, queries=16, batch_size=64)
    with open("seen.json", "w") as out:
        json.dump({"summary_log": result.summary_log, "p99": result.p99}, out)

def test_profile(model_profile):
    model_profile("other.onnx")  # a latency test beside it: this run measured the backend
"""


@pytest.fixture
def project(pytester, monkeypatch, tmp_path_factory):
    """A project of one serving test and one latency test, on a fixed roofline (no calibration)."""
    cache = fixed_calibration(tmp_path_factory.mktemp("calibration"), {"intra_op_threads": "1"})
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(cache))
    matmul_chain(pytester.path / "mm.onnx", 1, size=256)  # ~0.1 ms at batch 64
    matmul_chain(pytester.path / "other.onnx", 1, size=64)
    pytester.makepyfile(test_gated_serving=TEST)  # a name no module of tests/ has
    return pytester


def _serving(project, name: str = "r.json") -> list[dict]:
    return json.loads((project.path / name).read_text())["serving"]


def _stored(project) -> list[dict]:
    data = json.loads((project.path / ".roofline" / "test_gated_serving.json").read_text())
    (entry,) = [e for e in data["entries"].values() if e["model"] == "mm.onnx"]
    return entry.get("scenarios", [])


def test_first_run_records_then_unchanged_runs_nothing_then_slower_is_a_regression(project):
    first = project.runpytest(*ORT, "--roofline-report", "r.json")
    first.assert_outcomes(passed=2)
    (record,) = _serving(project)
    assert [v["status"] for v in record["verdicts"]] == ["new", "new"]  # p99, QPS
    assert [v["metric"] for v in record["verdicts"]] == ["single-stream p99", "single-stream qps"]
    (stored,) = _stored(project)
    assert stored["p99"] == record["result"]["p99"] and stored["summary_log"] == ""  # LoadGen's figure
    first.stdout.fnmatch_lines(
        ["*serving scenarios (MLPerf LoadGen)*", "*test_serve*mm.onnx b64*single-stream*"]
    )

    second = project.runpytest(*ORT, "--roofline-report", "r.json")
    second.assert_outcomes(passed=2)
    (record,) = _serving(project)
    assert [v["status"] for v in record["verdicts"]] == ["unchanged", "unchanged"]
    assert json.loads((project.path / "r.json").read_text())["stale"] == []  # judged, so not stale
    seen = json.loads((project.path / "seen.json").read_text())
    assert seen == {"summary_log": "", "p99": stored["p99"]}  # the baseline's figures, LoadGen not run

    matmul_chain(project.path / "mm.onnx", 100, size=256)  # 100x the work, milliseconds past any stall
    third = project.runpytest(*ORT, "--roofline-tolerance", "10", "--roofline-report", "r.json")
    third.assert_outcomes(passed=1, failed=1)
    (record,) = _serving(project)
    statuses = {v["metric"]: v["status"] for v in record["verdicts"]}
    assert statuses == {"single-stream p99": "regression", "single-stream qps": "regression"}, record
    p99 = record["verdicts"][0]
    assert p99["mode"] == "paired" and p99["ci"][0] > 1.10 and p99["ratio"] > 1.10
    assert len(record["comparison"]["old"]) == len(record["comparison"]["new"]) == 20
    third.stdout.fnmatch_lines(["*roofline regression: mm.onnx single-stream (batch 64) single-stream p99*"])
    third.stdout.fnmatch_lines(["*REGRESSION*test_serve*single-stream p99*worse than the baseline's model*"])
    assert _stored(project)[0]["p99"] == stored["p99"]  # a regression is not written

    fourth = project.runpytest(*ORT, "--roofline-update")
    fourth.assert_outcomes(passed=2)
    assert _stored(project)[0]["p99"] > 1.5 * stored["p99"]  # the slower model's figures, accepted


def test_disable_runs_the_scenario_ungated(project):
    result = project.runpytest(*ORT, "--roofline-disable", "--roofline-report", "r.json")
    result.assert_outcomes(passed=2)
    (record,) = _serving(project)
    assert {v["status"] for v in record["verdicts"]} == {"not-compared"}
    assert not (project.path / ".roofline").exists()


# --- the pieces, without LoadGen -------------------------------------------------------------------


def test_the_queries_a_paired_window_asks_decide_a_p99_past_a_few_stalled_queries() -> None:
    # each model's pooled queries at the gate's window size: 1 ms with a lognormal spread, the old
    # model's two slowest stalled to 5 ms, the new one's 3 % twice as slow.  At 400 a side (the
    # former size) the p99's upper end was the old model's largest query, the stall: inconclusive
    rng = random.Random(3)
    per_side = TAIL_QUERIES

    def draws(n: int, slow_share: float) -> list[float]:
        return [
            (2.0 if rng.random() < slow_share else 1.0) * 1e-3 * math.exp(rng.gauss(0, 0.1)) for _ in range(n)
        ]

    old = sorted([*draws(per_side - 2, 0.0), 5e-3, 5e-3])
    new = sorted(draws(per_side, 0.03))
    verdict = pooled_metric("p99", old, new, floor=0.0048, tolerance=0.05)
    assert verdict.status == "regression" and verdict.low > 1.05, verdict


def test_a_searched_result_matches_the_search_it_answers() -> None:
    search = ScenarioSettings("server", p99_bound=0.01)
    assert asked(RESULT) == search  # it ran at the rate found, but was asked for a search
    entry = with_scenarios(make_entry(), [RESULT])
    assert matching(entry, search) == RESULT.stored()
    assert matching(entry, dataclasses.replace(search, p99_bound=0.02)) is None
    (kept,) = entry.scenarios
    assert kept.summary_log == "" and kept.latency_quantiles == () and kept.timeline == ()
    assert "latency_quantiles" not in kept.to_dict() and "latency_quantiles" in RESULT.to_dict()
    assert ScenarioResult.from_dict(RESULT.to_dict()) == RESULT


def test_scenario_results_join_the_entry_without_a_history_point(tmp_path) -> None:
    store = BaselineStore(tmp_path)
    entry = make_entry()
    store.write([entry])
    before = store.get(entry.key, entry.test)
    assert before is not None
    record = ServingRecord(entry.test, entry.key, "mm", 1, RESULT, (), record=True)
    paths, errors = record_scenarios(BaselineStore(tmp_path), [record])
    assert paths and not errors
    after = BaselineStore(tmp_path).get(entry.key, entry.test)
    assert after is not None and after.scenarios == (RESULT.stored(),)
    assert after.history == before.history  # the same measurement rewritten: no point added
    missing = dataclasses.replace(record, key="other|key")
    assert record_scenarios(BaselineStore(tmp_path), [missing])[1] == [
        "serving results not kept: no baseline entry other|key (its latency was not recorded)"
    ]


def test_a_serving_record_round_trips_through_results_and_the_worker_payload() -> None:
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.report.merge import WorkerPayload
    from pytest_roofline.results import RunResults, parse_results

    verdict = Verdict("regression", "paired", "server p99", 0.004, 0.1, 0.002, 2.0, (1.5, 2.5), 0.2)
    record = ServingRecord("t.py::t", "k", "mm", 1, RESULT, (verdict,), outcome="failed")
    results = RunResults(records=(), backend="onnxruntime", serving=(record,))
    assert parse_results(results.to_dict()).serving == (record,)
    assert "serving" not in RunResults(records=(), backend="onnxruntime").to_dict()
    payload = WorkerPayload(serving=(record,))
    assert WorkerPayload.from_json(payload.to_json()).serving == (record,)
