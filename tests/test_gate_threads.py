"""Multi-threaded CPU runs: a one-thread gate figure beside the configured one, sampled in a helper
process whose sessions share one thread pool."""

from __future__ import annotations

import json

import pytest
from _plugin_helpers import fixed_calibration, matmul_chain

from pytest_roofline.backends.base import get_backend
from pytest_roofline.gate.isolated import IsolatedSampler, sampler_for
from pytest_roofline.gate.runner import with_configured
from pytest_roofline.gate.verdict import Verdict
from pytest_roofline.measure.rounds import SessionOpener
from pytest_roofline.model import ModelSpec, bind_input_shapes, load_model, make_inputs


def _verdict(status: str, ratio: float, message: str = "latency: x") -> Verdict:
    return Verdict(
        status, "stored", "latency", 1.0, 0.05, 1.0, ratio, (ratio - 0.02, ratio + 0.02), 0.02, message
    )


def test_a_slowdown_only_at_the_configured_threads_is_not_a_pass() -> None:
    verdict = with_configured(
        _verdict("pass", 1.0), _verdict("regression", 1.4, "latency: time +40% exceeds")
    )
    assert (
        verdict.status == "inconclusive" and "at the configured threads time +40% exceeds" in verdict.message
    )
    assert any("judged at one thread" in r and "ratio 1.400" in r for r in verdict.reasons)
    regression = with_configured(_verdict("regression", 1.1), _verdict("pass", 1.0))
    assert regression.status == "regression"  # the steady one-thread figure decides
    # slower at one thread beyond its noise but under the tolerance, and beyond it where users run
    both = with_configured(
        _verdict("inconclusive", 1.04), _verdict("regression", 1.07, "latency: time +7% exceeds")
    )
    assert both.status == "regression" and "slower at one thread (+4.0%" in both.message
    quiet = with_configured(_verdict("pass", 1.0), _verdict("pass", 1.01))
    assert quiet.status == "pass" and quiet.reasons == ()  # nothing worth a line


def test_which_configurations_get_a_one_thread_figure_and_a_shared_pool() -> None:
    default = get_backend("onnxruntime")
    single = default.single_thread()
    assert single is not None and single.intra_op_threads == 1 and single.single_thread() is None
    assert default.shared_pool_threads() == 0 and single.shared_pool_threads() is None
    assert get_backend("onnxruntime", {"intra_op_threads": "1"}).single_thread() is None
    assert get_backend("onnxruntime", {"execution_mode": "parallel"}).shared_pool_threads() is None
    openvino = pytest.importorskip("openvino") and get_backend("openvino")
    assert openvino.single_thread() is not None and openvino.single_thread().options["threads"] == "1"


def test_the_helper_samples_both_sessions_on_one_shared_pool(tmp_path) -> None:
    path = matmul_chain(tmp_path / "mm.onnx", 2, size=64)
    backend = get_backend("onnxruntime", {"intra_op_threads": "2"})
    proto = load_model(str(path))
    opener = SessionOpener(
        backend, ModelSpec.create(str(path), 4), make_inputs(proto, bind_input_shapes(proto, 4))
    )
    sampler = sampler_for(backend)
    assert isinstance(sampler, IsolatedSampler) and sampler_for(backend) is sampler  # one per pool size
    samples = sampler([opener, opener], sessions=2, rounds=3, iterations=1, warmup=1)
    assert [len(s) for s in samples] == [2, 2] and all(len(x) == 3 and min(x) > 0 for s in samples for x in s)
    assert sampler.pids() and all(pid > 0 for pid in sampler.pids())
    sampler.kill()
    assert sampler.broken and sampler_for(backend) is not sampler  # a dead helper is replaced


def test_a_default_threads_run_keeps_both_figures_in_its_baseline(pytester, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ROOFLINE_LOAD_LIMIT", "off")  # the logic under test, not this machine's load
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(fixed_calibration(tmp_path)))  # no real calibration
    matmul_chain(pytester.path / "mm.onnx", 3)
    pytester.makepyfile(
        test_mm="""
        def test_mm(model_profile):
            model_profile("mm.onnx", batch_size=4)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--roofline-budget=2", "--roofline-report=r.json")
    result.assert_outcomes(passed=1)
    profile = json.loads((pytester.path / "r.json").read_text())["results"][0]["profile"]
    assert profile["options"] == {}  # the user's configuration, not the one-thread twin
    entry = next(
        iter(json.loads((pytester.path / ".roofline" / "test_mm.json").read_text())["entries"].values())
    )
    assert (
        entry["conditions"]["figure"] == "one-thread"
        and entry["conditions"]["settings"]["intra_op_threads"] == "0"
    )
    assert entry["configured"]["sessions"] and entry["configured"]["subject_p25"] > 0
    one = pytester.runpytest("-p", "no:cacheprovider", "--roofline-option=intra_op_threads=1")
    one.assert_outcomes(passed=1)
    one.stdout.fnmatch_lines(["*incomparable*", "*intra_op_threads 0 → 1*"])
