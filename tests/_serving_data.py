"""A serving result the report and gate tests share (a QPS search's, with the report's series),
and the pytester options of their onnxruntime runs."""

from __future__ import annotations

from pytest_roofline.serving.types import ScenarioResult, ScenarioSettings

RESULT = ScenarioResult(
    scenario="server",
    model="mm",
    backend="onnxruntime",
    settings=ScenarioSettings("server", target_qps=40.0, p99_bound=0.01),
    p50=0.001,
    p90=0.002,
    p99=0.004,
    p999=0.005,
    mean=0.0012,
    query_count=120,
    achieved_qps=39.5,
    tail_percentile=0.99,
    early_stopping_estimate=None,
    early_stopping_met=False,
    constraint_met=True,
    valid=False,
    invalid_reason="too few queries",
    summary_log="/tmp/x/mlperf_log_summary.txt",
    detail_log="/tmp/x/mlperf_log_detail.txt",
    searched=((20.0, True), (40.0, True), (80.0, False)),
    latency_quantiles=tuple(0.001 * (1 + i / 100) for i in range(101)),
    timeline=(40.0,) * 50,
    timeline_step=0.04,
)

#: A pytester run on onnxruntime at one intra-op thread, latency timing capped at 3 s.
ORT = (
    "--roofline-backend",
    "onnxruntime",
    "--roofline-option",
    "intra_op_threads=1",
    "--roofline-budget",
    "3",
)
