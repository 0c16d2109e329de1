"""Serving scenarios: real onnxruntime answering real MLPerf LoadGen on a tiny model.

Nothing here asserts what a live run measured: the figures are checked against LoadGen's own
summary of the same run, and the bounds judged are ones no real run can miss (10 s) or meet (1 ns).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from _plugin_helpers import matmul_chain

from pytest_roofline.errors import OptionError, RooflineError
from pytest_roofline.pipeline import ModelCall, PreparedModel, prepare
from pytest_roofline.serving.logs import read_detail, read_summary
from pytest_roofline.serving.runner import SEARCH_STEPS, run_scenario
from pytest_roofline.serving.types import ScenarioResult, ScenarioSettings

pytest.importorskip("mlperf_loadgen")

SHORT = {"min_duration": 0.3, "min_query_count": 16}  # LoadGen runs of a fraction of a second


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> PreparedModel:
    path = matmul_chain(tmp_path_factory.mktemp("serving") / "mm.onnx", blocks=2, size=32)
    return prepare(ModelCall(str(path), options={"intra_op_threads": "1"}))


def _summary_seconds(summary: dict[str, str], percentile: str) -> float:
    return int(summary[f"{percentile} percentile latency (ns)"]) * 1e-9


@pytest.mark.parametrize(
    ("scenario", "extra", "qps_line"),
    [
        ("single-stream", {}, "QPS w/ loadgen overhead"),
        ("multi-stream", {"samples_per_query": 4}, None),
        ("server", {"target_qps": 200.0}, "Completed samples per second"),
        ("offline", {}, "Samples per second"),
    ],
)
def test_each_scenario_reports_loadgens_own_summary(
    prepared: PreparedModel, tmp_path: Path, scenario: str, extra: dict[str, float], qps_line: str | None
) -> None:
    settings = ScenarioSettings(scenario, **SHORT, **extra)  # type: ignore[arg-type]
    result = run_scenario(prepared, settings, tmp_path)

    assert result.scenario == scenario and result.settings == settings
    assert Path(result.summary_log).parent == tmp_path and Path(result.detail_log).is_file()
    summary = read_summary(Path(result.summary_log))
    assert summary["Scenario"] == settings.loadgen_scenario
    for name, percentile in (("p50", "50.00"), ("p90", "90.00"), ("p99", "99.00"), ("p999", "99.90")):
        assert getattr(result, name) == pytest.approx(_summary_seconds(summary, percentile), abs=1e-12)
    assert result.mean == pytest.approx(int(summary["Mean latency (ns)"]) * 1e-9, abs=1e-12)
    if qps_line is None:
        assert result.achieved_qps is None  # LoadGen reports no QPS for MultiStream
    else:
        assert result.achieved_qps == float(summary[qps_line])
    assert result.valid == (summary["Result is"] == "VALID")
    assert 0 < result.p50 <= result.p90 <= result.p99 <= result.p999
    if result.tail_percentile is not None and result.early_stopping_met:
        percentile = f"{result.tail_percentile * 100:.1f}"
        key = f"Early stopping {percentile}th percentile estimate"
        assert result.early_stopping_estimate == pytest.approx(int(summary[key]) * 1e-9, abs=1e-12)
    assert result.constraint_met is None  # no bound was given
    assert ScenarioResult.from_dict(result.to_dict()) == result


def test_server_constraint_is_loadgens_judgement_of_the_bound(
    prepared: PreparedModel, tmp_path: Path
) -> None:
    loose = run_scenario(
        prepared, ScenarioSettings("server", target_qps=100.0, p99_bound=10.0, **SHORT), tmp_path / "a"
    )
    tight = run_scenario(
        prepared, ScenarioSettings("server", target_qps=100.0, p99_bound=1e-9, **SHORT), tmp_path / "b"
    )
    assert loose.constraint_met is True
    assert tight.constraint_met is False
    assert "Performance constraints satisfied" in read_summary(Path(tight.summary_log))
    assert read_summary(Path(tight.summary_log))["Performance constraints satisfied"] == "NO"


def test_other_scenarios_judge_the_p99_bound_on_loadgens_p99(prepared: PreparedModel, tmp_path: Path) -> None:
    met = run_scenario(prepared, ScenarioSettings("single-stream", p99_bound=10.0, **SHORT), tmp_path / "a")
    missed = run_scenario(prepared, ScenarioSettings("offline", p99_bound=1e-9, **SHORT), tmp_path / "b")
    assert (met.constraint_met, missed.constraint_met) == (True, False)


def test_qps_search_stays_within_its_steps_and_budget(prepared: PreparedModel, tmp_path: Path) -> None:
    settings = ScenarioSettings("server", p99_bound=10.0, min_duration=0.2, min_query_count=8)
    found = run_scenario(prepared, settings, tmp_path, budget=4.0)
    rates = [qps for qps, _ in found.searched]
    assert found.searched and all(met for _, met in found.searched)  # nothing misses a 10 s bound
    assert rates == sorted(rates) and all(
        b == pytest.approx(2 * a, rel=1e-3) for a, b in zip(rates, rates[1:], strict=False)
    )
    assert found.settings.target_qps == rates[-1] and found.constraint_met
    assert len(rates) <= SEARCH_STEPS  # bounded by its steps (a budget too small for one run: below)


def test_qps_search_that_meets_nothing_returns_its_lowest_rate(
    prepared: PreparedModel, tmp_path: Path
) -> None:
    settings = ScenarioSettings("server", p99_bound=1e-9, min_duration=0.2, min_query_count=8)
    found = run_scenario(prepared, settings, tmp_path, budget=3.0)
    rates = [qps for qps, _ in found.searched]
    assert len(rates) >= 2 and not any(met for _, met in found.searched)
    assert rates == sorted(rates, reverse=True)  # halving down
    assert found.settings.target_qps == min(rates) and found.constraint_met is False


def test_qps_search_without_time_for_one_run_says_so(prepared: PreparedModel, tmp_path: Path) -> None:
    with pytest.raises(RooflineError, match="needs at least"):
        run_scenario(
            prepared, ScenarioSettings("server", p99_bound=0.01, min_duration=2.0), tmp_path, budget=1.0
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scenario": "batch"}, "is not one of"),
        ({"scenario": "server"}, "needs --qps"),
        ({"scenario": "server", "target_qps": -1.0}, "--qps must be positive"),
        ({"min_duration": 0.0}, "--duration"),
        ({"concurrency": 0}, "at least 1"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        ScenarioSettings(**kwargs)  # type: ignore[arg-type]


def test_settings_round_trip_and_ignore_unknown_keys() -> None:
    settings = ScenarioSettings("server", target_qps=50.0, p99_bound=0.01, concurrency=2, seed=7)
    assert ScenarioSettings.from_dict({**settings.to_dict(), "future": 1}) == settings
    assert dataclasses.replace(settings, seed=8) != settings


def test_offline_samples_are_run_in_chunks_and_timed(prepared: PreparedModel, tmp_path: Path) -> None:
    """Offline's one query of thousands is answered in chunks (one LoadGen completion call and one
    backend call per chunk, as a bare loop runs), every sample timed for the report's series, and
    LoadGen writes no per-sample trace (a third of a microsecond model's throughput)."""
    from pytest_roofline.serving.runner import MAX_CHUNK, Workers, chunk_size, load_loadgen, run_window

    assert [chunk_size(n, 1) for n in (1, 8, 160, 10_000)] == [1, 1, 10, MAX_CHUNK]
    assert chunk_size(160, 2) == 5  # every worker still takes at least 16 chunks
    settings = ScenarioSettings("offline", **SHORT)
    with Workers(prepared, 1, load_loadgen()) as workers:
        result = run_window(workers, prepared, settings, tmp_path, workers.expected_latency())
        sizes = [count for _, _, count in workers.timings]
    samples = int(read_detail(Path(result.detail_log))["generated_samples_per_query"])
    assert sum(sizes) == samples and max(sizes) == chunk_size(samples, 1) > 1
    quantiles = list(result.latency_quantiles)
    assert len(quantiles) == 101 and quantiles == sorted(quantiles)
    assert len(result.timeline) == 50
    assert (tmp_path / "mlperf_log_trace.json").stat().st_size == 0  # LoadGen's per-sample trace: off
    assert sum(result.timeline) * result.timeline_step == pytest.approx(samples)
