"""Roofline arithmetic of DeviceRoofline, flat and hierarchical."""

from __future__ import annotations

import pytest

from pytest_roofline.roofline import CacheLevel, DeviceRoofline

GB = 1e9


@pytest.fixture
def roof() -> DeviceRoofline:
    return DeviceRoofline(
        peak_flops={"float32": 400 * GB},
        peak_bandwidth=25 * GB,
        fingerprint={},
        cache_levels=(
            CacheLevel("L2", 1 << 20, 100 * GB),
            CacheLevel("L3", 32 << 20, 50 * GB),
            CacheLevel("DRAM", 0, 25 * GB),
        ),
    )


def test_flat_roof_without_a_working_set(roof: DeviceRoofline) -> None:
    assert roof.ridge_point == pytest.approx(16.0)
    assert roof.attainable(4.0) == pytest.approx(100 * GB)
    assert roof.attainable(100.0) == pytest.approx(400 * GB)
    assert roof.bound(4.0) == "memory" and roof.bound(16.0) == "compute"


def test_the_level_holding_the_working_set_sets_the_memory_roof(roof: DeviceRoofline) -> None:
    assert roof.bandwidth_for(512 << 10) == pytest.approx(100 * GB)  # fits L2
    assert roof.bandwidth_for(8 << 20) == pytest.approx(50 * GB)  # fits L3 only
    assert roof.bandwidth_for(256 << 20) == pytest.approx(25 * GB)  # DRAM
    assert roof.attainable(2.0, working_set=512 << 10) == pytest.approx(200 * GB)
    # intensity 8 is memory-bound against DRAM (ridge 16) but compute-bound out of L2 (ridge 4)
    assert roof.bound(8.0, working_set=256 << 20) == "memory"
    assert roof.bound(8.0, working_set=512 << 10) == "compute"


def test_fraction_judges_a_cache_resident_kernel_against_its_cache_roof(roof: DeviceRoofline) -> None:
    # 1 MFLOP over 512 KiB in 10 us: 100 GFLOP/s at intensity ~1.9; L2 roof ~191 GFLOP/s
    flops, nbytes, seconds = 1e6, 512 << 10, 10e-6
    assert roof.fraction(flops, nbytes, seconds) == pytest.approx(
        (flops / seconds) / (flops / nbytes * 100 * GB)
    )
    assert roof.fraction(flops, nbytes, seconds) < 1.0
    # a copy with no FLOPs is judged on bandwidth
    assert roof.fraction(0, 64 << 20, 64 * (1 << 20) / (25 * GB)) == pytest.approx(1.0)


def test_round_trip(roof: DeviceRoofline) -> None:
    assert DeviceRoofline.from_dict(roof.to_dict()) == roof


def test_layer_by_node_prefers_the_kernel_carrying_its_flops() -> None:
    from pytest_roofline.profile import Layer, ModelProfile
    from pytest_roofline.stats import LatencyStats

    helper = Layer("Gather_token_1", "Gather", ("Shape_3",), 2e-6, 0, 64)
    main = Layer("Conv_0", "Conv", ("Conv_0", "Shape_3"), 5e-5, 1000, 4096)
    prof = ModelProfile(
        model_name="m",
        model_path=None,
        model_hash="",
        backend="onnxruntime",
        backend_version="",
        options={},
        batch=1,
        input_shapes={},
        latency=LatencyStats.from_samples([1e-4, 2e-4]),
        layers=(helper, main),
        attributed_fraction=1.0,
        total_flops=1000,
        total_macs=500,
        total_bytes=4160,
    )
    assert prof.layer("Shape_3").name == main.name  # a copy whose missing fraction names why
    assert prof.layer("Gather_token_1").name == helper.name


def test_profiled_times_are_scaled_to_the_unprofiled_latency() -> None:
    from pytest_roofline.analysis import analyze
    from pytest_roofline.backends.base import KernelProfile, KernelRecord
    from pytest_roofline.profile import build_layers, profiler_scale
    from pytest_roofline.zoo import tiny_cnn

    analysis = analyze(tiny_cnn(), batch=1)
    names = [node.name for node in analysis.nodes]
    kernels = KernelProfile(
        kernels=(
            KernelRecord("a", "Conv", (names[0],), (30e-6, 30e-6)),
            KernelRecord("b", "Relu", tuple(names[1:]), (10e-6, 10e-6)),
        )
    )
    assert profiler_scale(kernels, 20e-6) == pytest.approx(0.5)  # kernels add up to 40 us
    assert profiler_scale(kernels, 100e-6) == 1.0  # never stretched
    assert profiler_scale(kernels, None) == 1.0
    layers, fraction = build_layers(analysis, kernels, time_scale=0.5)
    by_name = {layer.name: layer for layer in layers}
    assert by_name["a"].time == pytest.approx(15e-6) and by_name["b"].time == pytest.approx(5e-6)
    assert by_name["a"].share == pytest.approx(0.75) and fraction == pytest.approx(1.0)
    assert by_name["a"].times == (30e-6, 30e-6)  # raw profiled samples kept


def test_layer_bytes_follow_the_precision_that_ran() -> None:
    from pytest_roofline.analysis import analyze
    from pytest_roofline.backends.base import KernelProfile, KernelRecord
    from pytest_roofline.profile import build_layers
    from pytest_roofline.zoo import tiny_cnn

    analysis = analyze(tiny_cnn(), batch=1)
    conv = next(node for node in analysis.nodes if node.op_type == "Conv")
    kernel = KernelRecord("k", "Conv", (conv.name,), (1e-5,))
    fp32 = build_layers(analysis, KernelProfile((kernel,), precision="fp32"))[0][0]
    fp16 = build_layers(analysis, KernelProfile((kernel,), precision="fp16"))[0][0]
    assert fp32.bytes == analysis.group([conv.name]).bytes
    assert fp16.bytes == pytest.approx(fp32.bytes / 2, rel=1e-6) and fp16.flops == fp32.flops
