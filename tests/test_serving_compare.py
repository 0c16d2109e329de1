"""Paired serving comparisons: the order-statistic interval, the rule, and real LoadGen windows."""

from __future__ import annotations

import math

import pytest
from _plugin_helpers import matmul_chain

from pytest_roofline.errors import OptionError
from pytest_roofline.pipeline import ModelCall, PreparedModel, prepare
from pytest_roofline.serving.compare import ScenarioComparison, _metric, compare_models, order_interval
from pytest_roofline.serving.types import ScenarioSettings

pytest.importorskip("mlperf_loadgen")

SHORT = ScenarioSettings("single-stream", min_duration=0.25, min_query_count=16)


def test_order_interval_is_the_sign_tests() -> None:
    # 6 pairs: only the extremes reach 95 % (1 - 2/64); 10 pairs: the 2nd smallest and largest
    low, high, coverage = order_interval([1.05, 0.9, 1.2, 1.0, 0.95, 1.1])
    assert (low, high) == (0.9, 1.2) and coverage == pytest.approx(1 - 2 / 64)
    low, high, coverage = order_interval([float(i) for i in range(1, 11)])
    assert (low, high) == (2.0, 9.0) and coverage == pytest.approx(1 - 2 * 11 / 1024)
    assert order_interval([1.0, 2.0])[2] == pytest.approx(0.5)  # too few pairs: say so


def test_metric_verdicts_follow_the_gates_rule() -> None:
    slower = _metric("p99", [1.5, 1.6, 1.4, 1.55, 1.45, 1.5], floor=0.003, tolerance=0.10)
    same = _metric("p99", [1.0, 1.01, 0.99, 1.0, 1.005, 0.995], floor=0.003, tolerance=0.10)
    wild = _metric("p99", [0.5, 2.0, 0.6, 1.9, 1.0, 1.1], floor=0.003, tolerance=0.10)
    assert (slower.status, same.status, wild.status) == ("regression", "pass", "inconclusive")
    assert slower.low == pytest.approx(1.4 / math.exp(1.96 * 0.003))  # widened by the floor
    loud = _metric("p99", [1.0, 1.01, 0.99, 1.0, 1.005, 0.995], floor=0.2, tolerance=0.10)
    assert loud.status == "inconclusive"  # the load's floor alone rules out a pass


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[PreparedModel, PreparedModel]:
    root = tmp_path_factory.mktemp("compare")
    small = matmul_chain(root / "small.onnx", blocks=1, size=16)
    large = matmul_chain(root / "large.onnx", blocks=8, size=1024)  # 17 MFLOP a query, ~100x the small one
    options = {"intra_op_threads": "1"}
    return prepare(ModelCall(str(small), options=options)), prepare(ModelCall(str(large), options=options))


def test_windows_pair_the_same_schedule_and_alternate(models, tmp_path) -> None:
    small, _ = models
    found = compare_models(small, small, SHORT, tmp_path, windows=4)
    assert [r.settings.seed for r in found.old] == [r.settings.seed for r in found.new] == [0, 1, 2, 3]
    logs = {r.summary_log for r in (*found.old, *found.new)}
    assert len(logs) == 8 and all(f"/old-{i}/" in found.old[i].summary_log for i in range(4))
    assert [m.metric for m in found.metrics] == ["p50", "p99", "qps"]
    p99 = found.verdict("p99")
    ratios = [n.p99 / o.p99 for o, n in zip(found.old, found.new, strict=True)]
    assert p99.ratio == pytest.approx(sorted(ratios)[1] / 2 + sorted(ratios)[2] / 2)
    assert 0.0 <= found.pressure <= 1.0 and found.floor > 0
    assert ScenarioComparison.from_dict(found.to_dict()) == found


def test_a_far_slower_model_is_a_regression_on_latency_and_throughput(models, tmp_path) -> None:
    small, large = models
    found = compare_models(small, large, SHORT, tmp_path)
    verdicts = [m.to_dict() for m in found.metrics]
    assert found.verdict("p50").status == "regression", verdicts
    assert found.verdict("qps").status == "regression", verdicts
    assert found.verdict("p50").low > 1.10, verdicts  # the whole interval past the tolerance


def test_a_server_comparison_needs_one_schedule(models, tmp_path) -> None:
    small, _ = models
    with pytest.raises(OptionError, match="fixed --qps"):
        compare_models(small, small, ScenarioSettings("server", p99_bound=0.01), tmp_path)
    with pytest.raises(OptionError, match="at least 2 windows"):
        compare_models(small, small, SHORT, tmp_path, windows=1)
