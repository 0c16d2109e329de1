"""Assertion helpers and pytest_assertrepr_compare explanations on constructed profiles."""

from __future__ import annotations

import pytest

from pytest_roofline.assertions import assert_efficiency, assert_fraction, assert_latency, explain_compare
from pytest_roofline.measure.stats import LatencyStats
from pytest_roofline.profile import Layer, ModelProfile
from pytest_roofline.roofline import DeviceRoofline

ROOF = DeviceRoofline(peak_flops={"float32": 1e11}, peak_bandwidth=2e10, fingerprint={})


def make_profile() -> ModelProfile:
    conv = Layer(
        "conv1",
        "Conv",
        ("conv1",),
        1e-3,
        2_000_000,
        400_000,
        roofline_fraction=0.3,
        bound="memory",
        attainable_flops=2e10,
    )
    gemm = Layer(
        "fc",
        "Gemm",
        ("fc",),
        2e-4,
        1_000_000,
        100_000,
        roofline_fraction=0.8,
        bound="compute",
        attainable_flops=1e11,
    )
    return ModelProfile(
        model_name="net",
        model_path="net.onnx",
        model_hash="h",
        backend="onnxruntime",
        backend_version="1",
        options={},
        batch=4,
        input_shapes={},
        latency=LatencyStats.from_samples([0.010, 0.011, 0.012]),
        layers=(conv, gemm),
        attributed_fraction=1.0,
        total_flops=3_000_000,
        total_macs=1_500_000,
        total_bytes=500_000,
        roofline=ROOF,
    )


def test_assert_fraction_names_layer_model_value_threshold_and_roof():
    with pytest.raises(AssertionError) as info:
        assert_fraction(make_profile(), "conv1", above=0.4)
    message = str(info.value)
    for part in (
        "'conv1'",
        "net (batch 4, onnxruntime)",
        "30.0%",
        "not above 40.0%",
        "memory-bound",
        "100.00 GFLOP/s compute",
        "20.0 GB/s memory",
    ):
        assert part in message
    assert_fraction(make_profile(), "fc", above=0.5)


def test_assert_latency_and_efficiency_messages():
    prof = make_profile()
    with pytest.raises(AssertionError, match=r"latency median of net \(batch 4, onnxruntime\) is 11.000 ms"):
        assert_latency(prof, below=0.005)
    assert_latency(prof, below=0.02, stat="p90")
    with pytest.raises(ValueError):
        assert_latency(prof, below=1, stat="p42")
    with pytest.raises(AssertionError, match=r"efficiency of net .* not above 90.0%; most headroom: conv1"):
        assert_efficiency(prof, above=0.9)


def test_assertrepr_compare_explains_layers_and_profiles():
    prof = make_profile()
    lines = explain_compare("==", prof.layer("conv1"), prof.layer("fc"))
    assert lines[0] == "Layer == Layer"
    assert "layer 'conv1' (Conv, 1 ONNX nodes)" in lines[1]
    explained = explain_compare("<", prof, 1)
    assert any("net (batch 4, onnxruntime): median 11.000 ms" in line for line in explained)
    assert explain_compare("==", 1, 2) is None


def test_short_reprs_feed_pytest_where_lines():
    prof = make_profile()
    expected = "Layer('conv1', Conv, time=1 ms, roofline_fraction=30.0%, bound=memory)"
    assert repr(prof.layer("conv1")) == expected
    assert repr(prof).startswith("ModelProfile('net', batch=4, backend=onnxruntime, median=11 ms")
