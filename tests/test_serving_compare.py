"""Paired serving comparisons: the order-statistic intervals, the rule, and real LoadGen windows
both models answer in turn."""

from __future__ import annotations

import math
import random
import statistics
import threading
import time

import pytest
from _plugin_helpers import matmul_chain

from pytest_roofline.device.load import MachineLoad
from pytest_roofline.errors import OptionError
from pytest_roofline.pipeline import ModelCall, PreparedModel, prepare
from pytest_roofline.serving.compare import (
    IN_THREAD,
    ScenarioComparison,
    _metric,
    compare_models,
    in_thread_share,
    order_interval,
    pooled_metric,
    quantile_interval,
    side_samples,
    tail_clock,
)
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
    logs = [math.log(r) for r in (1.5, 1.6, 1.4, 1.55, 1.45, 1.5)]
    mean, sd = sum(logs) / 6, statistics.stdev(logs)
    half = math.hypot(2.571 * sd / math.sqrt(6), 1.96 * 0.003)  # t(5) and the floor in quadrature
    assert slower.ratio == pytest.approx(math.exp(mean)) and slower.low == pytest.approx(
        math.exp(mean - half)
    )
    loud = _metric("p99", [1.0, 1.01, 0.99, 1.0, 1.005, 0.995], floor=0.2, tolerance=0.10)
    assert loud.status == "inconclusive"  # the load's floor alone rules out a pass


def _window_ratios(rng: random.Random, ratio: float, spread: float, windows: int = 20) -> list[float]:
    """``windows`` per-window throughput ratios around ``ratio``, each off by a lognormal ``spread``
    (a window's draw of slow samples and its share of the load)."""
    return [ratio * math.exp(rng.gauss(0.0, spread)) for _ in range(windows)]


def test_a_thirteen_percent_throughput_loss_is_caught_beside_a_busy_process() -> None:
    # the Offline variant's loss (1/0.87 = 1.149 old/new) over 20 windows that each read it within
    # ±4 % (sd), at the paired floor of one busy process (0.03): a t interval of the window ratios
    # and the floor in quadrature decide it; the sign test's interval (the 6th to the 15th of 20)
    # and the floor added on top read every one inconclusive
    rng = random.Random(5)
    verdicts = [
        _metric("qps", _window_ratios(rng, 1 / 0.87, 0.04), floor=0.03, tolerance=0.05) for _ in range(100)
    ]
    caught = sum(v.status == "regression" for v in verdicts)
    assert caught >= 80, [
        f"{v.ratio:.3f} [{v.low:.3f}, {v.high:.3f}]" for v in verdicts if v.status != "regression"
    ]
    quiet = [
        _metric("qps", _window_ratios(rng, 1 / 0.87, 0.04), floor=0.0048, tolerance=0.05) for _ in range(100)
    ]
    assert all(v.status == "regression" for v in quiet)


def test_aa_window_ratios_raise_no_false_regression() -> None:
    rng = random.Random(13)
    statuses = [
        _metric("qps", _window_ratios(rng, 1.0, spread), floor=floor, tolerance=0.05).status
        for spread in (0.01, 0.02, 0.04)
        for floor in (0.0048, 0.03)
        for _ in range(100)
    ]
    assert statuses.count("regression") == 0 and statuses.count("pass") >= 250  # the quiet floor: pass


def test_a_window_where_a_side_served_nothing_leaves_the_throughput_undecided() -> None:
    verdict = _metric("qps", [1.2] * 19 + [math.inf], floor=0.0048, tolerance=0.05)
    assert verdict.status == "inconclusive" and verdict.coverage == 0.0


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[PreparedModel, PreparedModel]:
    root = tmp_path_factory.mktemp("compare")
    small = matmul_chain(root / "small.onnx", blocks=1, size=16)
    large = matmul_chain(root / "large.onnx", blocks=8, size=1024)  # 17 MFLOP a query, ~100x the small one
    options = {"intra_op_threads": "1"}
    return prepare(ModelCall(str(small), options=options)), prepare(ModelCall(str(large), options=options))


def test_quantile_interval_is_the_sign_tests_at_the_median_and_binomial_in_the_tail() -> None:
    for n in (6, 10, 12, 20, 41):
        values = [float(i) for i in range(1, n + 1)]
        assert quantile_interval(values, 0.5, 0.95) == pytest.approx(order_interval(values))
    n = 1000
    values = [float(i) for i in range(1, n + 1)]
    low, high, coverage = quantile_interval(values, 0.99, 0.95)
    # exact binomial ranks: P(B < l) <= 2.5 % and P(B >= u) <= 2.5 %, B ~ Binomial(1000, 0.99),
    # in integers: each probability times 100**n
    pmf = [math.comb(n, k) * 99**k for k in range(n + 1)]
    whole, alpha = 100**n, 100**n // 40
    below, above = sum(pmf[: int(low)]), sum(pmf[int(high) :])
    assert below <= alpha < below + pmf[int(low)] and above <= alpha < above + pmf[int(high) - 1]
    assert coverage == pytest.approx(1 - (below + above) / whole) and coverage >= 0.95
    few = [float(i) for i in range(1, 201)]  # p99 of 200: no upper bound, and it says so
    assert quantile_interval(few, 0.99, 0.95)[1:] == (200.0, pytest.approx(1 - 0.99**200, abs=0.03))


def _draws(rng: random.Random, n: int, slow_share: float = 0.0) -> list[float]:
    """A service-time-like sample: 1 ms and a lognormal spread, ``slow_share`` of it twice as long."""
    return sorted(
        (2.0 if rng.random() < slow_share else 1.0) * 1e-3 * math.exp(rng.gauss(0.0, 0.1)) for _ in range(n)
    )


def test_a_pooled_tail_twice_as_slow_on_three_percent_is_a_regression_and_its_median_is_not() -> None:
    rng = random.Random(7)
    old, new = _draws(rng, 20000), _draws(rng, 20000, slow_share=0.03)
    p99 = pooled_metric("p99", old, new, floor=0.03, tolerance=0.05)
    p50 = pooled_metric("p50", old, new, floor=0.03, tolerance=0.05)
    assert p99.status == "regression" and p99.low > 1.05 and p99.ratio > 1.3, p99
    assert p50.status != "regression" and p50.ratio < 1.05, p50
    assert (p99.old, p99.new) == (old[19799], new[19799])  # LoadGen's nearest rank
    # a few hundred queries cannot bound a p99: never a verdict, whatever the ratio
    short = pooled_metric("p99", old[::100], new[::100], floor=0.03, tolerance=0.05)
    assert short.status == "inconclusive" and short.coverage < 0.95


def test_pooled_aa_tails_raise_no_false_regression() -> None:
    rng = random.Random(11)
    statuses = [
        pooled_metric("p99", _draws(rng, 4000), _draws(rng, 4000), floor=0.003, tolerance=0.05).status
        for _ in range(200)
    ]
    assert statuses.count("regression") == 0 and statuses.count("pass") > 100


def test_side_samples_keep_each_models_queries_apart() -> None:
    ms = 1_000_000
    served = [
        # side, issued, completed (ns), inference s, CPU s, samples
        (0, 0, 2 * ms, 0.0018, 0.0017, 1),
        (1, 2 * ms, 5 * ms, 0.0029, 0.0028, 1),
        (0, 5 * ms, 6 * ms, 0.0009, 0.0009, 1),
        (1, 6 * ms, 8 * ms, 0.0010, 0.0009, 1),  # a query of two chunks: its last one ends it
        (1, 6 * ms, 9 * ms, 0.0010, 0.0010, 1),
    ]
    old, new = side_samples(served, 0), side_samples(served, 1)
    assert old.wall == pytest.approx((0.001, 0.002)) and new.wall == pytest.approx((0.003, 0.003))
    assert new.cpu == pytest.approx((0.0019, 0.0028))  # a query's chunks' CPU time together
    assert old.rates == pytest.approx((2 / 0.0027,)) and new.throughput("wall") == pytest.approx(3 / 0.0049)
    assert new.throughput("cpu") == pytest.approx(3 / 0.0047) and new.samples == 3
    offline = [(k % 2, 0, ms, 32 * (1.0 + k % 2) * 1e-4, 32e-4, 32) for k in range(8)]
    assert side_samples(offline, 1).rates == pytest.approx((1e4 / 2,) * 4)  # one rate per block
    with pytest.raises(OptionError, match="before both models answered"):
        side_samples(served[:1], 1)


def test_the_tail_is_judged_on_cpu_time_only_where_the_cpus_were_shared_and_the_work_in_thread() -> None:
    quiet = MachineLoad(1.0, other=0.0, steal=0.0, loadavg=0.1, cores=2)
    busy = MachineLoad(1.0, other=0.8, steal=0.0, loadavg=9.0, cores=2)
    assert tail_clock(quiet, [0.99, 0.99]) == "wall"
    assert tail_clock(busy, [0.99, 0.95]) == "cpu"
    assert tail_clock(busy, [0.99, 0.1]) == "wall"  # one model computes in a pool's threads


def _burn(seconds: float = 0.01) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class _Here:
    """A session that computes in the caller's thread (as onnxruntime at one intra-op thread)."""

    def time(self, iterations: int) -> list[float]:
        for _ in range(iterations):
            _burn()
        return [0.01] * iterations


class _Elsewhere:
    """A session whose work runs in a thread of its own (as a backend's pool), the caller waiting."""

    def time(self, iterations: int) -> list[float]:
        worker = threading.Thread(target=lambda: [_burn() for _ in range(iterations)])
        worker.start()
        worker.join()
        return [0.01] * iterations


def test_in_thread_share_tells_a_callers_thread_from_a_pools() -> None:
    assert in_thread_share(_Here()) > 0.9  # type: ignore[arg-type]
    assert in_thread_share(_Elsewhere()) < 0.2  # type: ignore[arg-type]


def test_a_one_thread_onnxruntime_session_computes_in_the_callers_thread(models) -> None:
    small, _ = models
    session = small.open()
    try:
        assert in_thread_share(session, runs=64) > IN_THREAD
    finally:
        session.close()


def test_both_models_answer_each_window_in_turn(models, tmp_path) -> None:
    small, _ = models
    found = compare_models(small, small, SHORT, tmp_path, windows=4)
    assert [r.settings.seed for r in found.windows] == [0, 1, 2, 3]
    assert all(f"/window-{i}/" in found.windows[i].summary_log for i in range(4))
    for old, new in zip(found.old, found.new, strict=True):  # alternating queries: as many each
        assert abs(old.queries - new.queries) <= 1 and old.queries >= 8
    assert found.alone is not None and "/new/" in found.alone.summary_log and found.alone.valid is not None
    assert [m.metric for m in found.metrics] == ["p50", "p99", "qps"]
    assert found.clock in ("wall", "cpu")
    assert 0.0 <= found.pressure <= 1.0 and found.floor > 0
    assert ScenarioComparison.from_dict(found.to_dict()) == found


def test_offline_alternates_the_chunks_of_its_one_query(models, tmp_path) -> None:
    small, _ = models
    settings = ScenarioSettings("offline", min_duration=0.2, min_query_count=16)
    found = compare_models(small, small, settings, tmp_path, windows=2, alone=False)
    assert [m.metric for m in found.metrics] == ["qps"] and found.alone is None
    for old, new in zip(found.old, found.new, strict=True):
        assert old.queries == new.queries == 1 and old.qps > 0 and new.qps > 0


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
