"""A serving objective for EdgeNet: p99 latency at a target query rate, under MLPerf LoadGen.

``model_load`` drives the model with LoadGen's own Server scenario (Poisson arrivals at ``qps``)
through the session's backend and options, and returns LoadGen's figures (docs/serving.md).
The result is gated like latency: kept in the test's baseline entry, not run again while nothing
that runs changed, and run paired with the baseline's model when the model changed (a p99 or QPS
regression fails the test); the test asserts its own objective besides.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mlperf_loadgen", reason='serving scenarios need pip install "pytest-roofline[serving]"')

MODEL = "models/edgenet.onnx"


def test_p99_at_20_qps(model_load):
    """20 queries a second for two seconds: the p99 stays under a loose ceiling for any CI machine."""
    result = model_load(MODEL, "server", qps=20, p99=0.5, duration=2.0, queries=32)

    # LoadGen judged the bound at the 99th percentile of the run's latencies
    assert result.constraint_met, f"p99 {result.p99 * 1e3:.1f} ms at {result.achieved_qps:.1f} QPS"
    assert result.p50 <= result.p99 <= result.p999  # LoadGen's own percentiles
    print(
        f"\nserver at {result.settings.target_qps:g} QPS: p50 {result.p50 * 1e3:.2f} ms, "
        f"p99 {result.p99 * 1e3:.2f} ms; LoadGen's logs: {result.summary_log}"
    )
