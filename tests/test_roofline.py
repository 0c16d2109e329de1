"""Roofline arithmetic of DeviceRoofline, flat and hierarchical."""

from __future__ import annotations

import pytest

from pytest_roofline.roofline import CacheLevel, DeviceRoofline
from pytest_roofline.roofline.roofs import MemoryRoof

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
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.profile import Layer, ModelProfile

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


def test_a_body_kernel_keeps_its_time_less_its_events_profiler_cost() -> None:
    """A Loop body's MatMul (16 events a run, 624 us profiled) beside its tiny body kernels and the
    container (its own time holds the body's 64 events' bookkeeping): one factor made the MatMul
    53 % of a 520 us run where removing it showed 81 %, and its fraction read 108 % of the roof.
    Each event is charged the excess's even share; a kernel left with under a timer step per event
    keeps none; the rest adds up to the unprofiled run."""
    from pytest_roofline.backends.base import KernelProfile, KernelRecord
    from pytest_roofline.profile import profiler_scale, profiler_scales

    def kernel(name: str, micros: float, events: float | None) -> KernelRecord:
        extra = {} if events is None else {"events_per_run": events}
        return KernelRecord(name, "Op", (), (micros * 1e-6,) * 3, extra=extra)

    body = (
        kernel("matmul", 624.5, 16),
        kernel("loop", 345.5, 1 + 64),
        kernel("tanh", 120.0, 16),
        kernel("scan_out", 66.0, 16),
        kernel("keep_going", 63.0, 16),
    )
    profile = KernelProfile(body)
    uniform = profiler_scale(profile, 520e-6)
    assert uniform == pytest.approx(520 / 1219)
    per_event = (1219 - 520) / 129  # us charged to each of the 129 events a run
    scales = profiler_scales(profile, 520e-6)
    kept = [624.5 - 16 * per_event, 0.0, 120 - 16 * per_event, 0.0, 0.0]  # the loop: all bookkeeping
    down = 520 / sum(kept)  # the MatMul and Tanh left 571 us of a 520 us run
    times = [s * k.times[0] * 1e6 for s, k in zip(scales, body, strict=True)]
    assert times == pytest.approx([t * down for t in kept]) and sum(times) == pytest.approx(520)
    assert scales[0] > 1.5 * uniform  # the MatMul regains its time: 94 % of the run, not 51 %
    short = profiler_scales(KernelProfile((kernel("matmul", 624.5, 16), kernel("loop", 400.0, 65))), 900e-6)
    assert [s * t for s, t in zip(short, (624.5, 400.0), strict=True)] == pytest.approx(
        [624.5 - 16 * 124.5 / 81, 400 - 65 * 124.5 / 81]
    )  # none left under a step: the kept times add up to the run as they are
    plain = KernelProfile((kernel("conv", 300.0, 1), kernel("relu", 100.0, 1)))
    assert profiler_scales(plain, 200e-6) == pytest.approx(
        (201 / 300 * 200 / 202, 1 / 100 * 200 / 202)
    )  # one event each: charged what the Relu read less a step (99 us), the rest scaled down
    unknown = KernelProfile((kernel("conv", 300.0, None), kernel("loop", 100.0, 65)))
    assert profiler_scales(unknown, 200e-6) == pytest.approx((0.5, 0.5))  # counts missing: one factor
    assert profiler_scales(profile, 2e-3) == (1.0,) * 5  # kernels under the run: never stretched


def test_many_small_kernels_charge_the_profiler_per_event_not_the_big_one() -> None:
    """GPT-2 (transformers, 2 layers of width 64, one thread): 210 kernels, one event each, added
    up to 700 us profiled against a 133 us run (a Shape read 2.5 us).  One factor (0.19) left a
    Gemm that read 11 us profiled at 2.0 us, above the one-thread compute roof; charged per event
    what the cheapest kernel read less a step (1.5 us), then scaled down, it keeps 3.7 us and each
    view a step's worth, before the scale."""
    from pytest_roofline.backends.base import KernelProfile, KernelRecord
    from pytest_roofline.profile import profiler_scale, profiler_scales

    def kernel(name: str, micros: float) -> KernelRecord:
        return KernelRecord(name, "Op", (), (micros * 1e-6,) * 3, extra={"events_per_run": 1})

    gemms = [kernel(f"gemm{i}", 11.0) for i in range(8)]
    views = [kernel(f"shape{i}", 2.5) for i in range(202)]
    profile = KernelProfile((*gemms, *views))
    e2e = 133e-6
    total = 8 * 11.0 + 202 * 2.5
    assert profiler_scale(profile, e2e) == pytest.approx(133 / total)
    scales = profiler_scales(profile, e2e)
    charge = 2.5 - 1.0  # the even share, 2.19 us, is more than a view's 2.5 us less one step
    down = 133 / (total - 210 * charge)
    assert scales[0] * 11.0 == pytest.approx((11.0 - charge) * down)  # 3.7 us, not 11 x 0.22 = 2.5 us
    assert scales[8] * 2.5 == pytest.approx(1.0 * down)  # a view keeps a time: the floor prices it
    assert scales[0] * 11.0 > 1.5 * profiler_scale(profile, e2e) * 11.0
    floor = 0.5  # us: a view charged 1.5 us and scaled down would end at 0.48 us, under the floor
    floored = profiler_scales(profile, e2e, floor * 1e-6)
    assert scales[8] * 2.5 < floor and floored[8] * 2.5 == pytest.approx(floor)
    assert floored[0] * 11.0 > 1.5 * profiler_scale(profile, e2e) * 11.0  # the Gemm still gains


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


# --- cache-aware memory roofs: where a layer's bytes live (issue 21 item 3) -----------------------

MIB = 1 << 20


def test_a_model_resident_in_a_cache_reads_its_weights_there(roof: DeviceRoofline) -> None:
    # the whole model (weights + live activations) fits L2: every byte comes from L2
    assert roof.memory_roof(200_000, 100_000, footprint=600_000).level == "L2"
    assert roof.memory_roof(200_000, 100_000, footprint=600_000).bandwidth == pytest.approx(100 * GB)
    # fits L3 only: the 1 MiB L2 holds 1/8 of the weights when read, L3 the rest; the small
    # activation set comes from L2; the weights' time in L3 dominates
    placed = roof.memory_roof(4 * MIB, 64 << 10, footprint=8 * MIB)
    assert placed.level == "L3"
    seconds = (MIB / 2 + (64 << 10)) / (100 * GB) + (7 * MIB / 2) / (50 * GB)
    assert placed.bandwidth == pytest.approx((4 * MIB + (64 << 10)) / seconds)


def test_a_model_larger_than_the_last_cache_reads_its_weights_from_dram(roof: DeviceRoofline) -> None:
    footprint = 100 * MIB
    big = roof.memory_roof(64 * MIB, 32 << 10, footprint)
    # at most C / footprint of the weights are in a cache of C bytes when read: 1 % L2, 31 % L3
    seconds = 64 * MIB * (0.01 / (100 * GB) + 0.31 / (50 * GB) + 0.68 / (25 * GB)) + (32 << 10) / (100 * GB)
    assert big.level == "DRAM" and big.bandwidth == pytest.approx((64 * MIB + (32 << 10)) / seconds)
    assert 25 * GB < big.bandwidth < 30 * GB
    # a model just above the last cache reads most weights from it: no cliff at the cache size
    assert roof.memory_roof(8 * MIB, 0, 33 * MIB).level == "L3"
    # no weights, activations just written by the layer before: they stay in the cache holding them
    assert roof.memory_roof(0, 512 << 10, footprint).level == "L2"
    assert roof.memory_roof(0, 8 * MIB, footprint).level == "L3"
    assert roof.memory_roof(0, 256 * MIB, footprint).level == "DRAM"
    # no footprint: the whole working set is placed by its size (bandwidth_for)
    assert roof.memory_roof(0, 8 * MIB, None).bandwidth == roof.bandwidth_for(8 * MIB)


def test_a_level_never_gets_less_than_a_larger_one() -> None:
    """A plateau measured below DRAM (a busy moment) must not lower a cache-resident layer's roof."""
    odd = DeviceRoofline(
        {"float32": 1e11},
        46 * GB,
        {},
        cache_levels=(CacheLevel("L3", 64 * MIB, 44 * GB), CacheLevel("DRAM", 0, 46 * GB)),
    )
    assert odd.memory_roof(0, MIB, 2 * MIB) == MemoryRoof("L3", 46 * GB)


def test_levels_use_the_hardware_capacity_and_travel_in_json(roof: DeviceRoofline) -> None:
    import dataclasses

    # the measured plateau ended at 1 MiB, but two cores' L2s hold 2 MiB
    l2 = dataclasses.replace(roof.cache_levels[0], capacity=2 * MIB)
    sized = dataclasses.replace(roof, cache_levels=(l2, *roof.cache_levels[1:]), threads=2, clock=3.2e9)
    assert roof.memory_roof(0, int(1.5 * MIB), None).level == "L3"
    assert sized.memory_roof(0, int(1.5 * MIB), 0).level == "L2"
    data = sized.to_dict()
    assert [lv["name"] for lv in data["levels"]] == ["L2", "L3", "DRAM"]
    assert data["levels"][0]["capacity"] == 2 * MIB and data["levels"][-1]["capacity"] is None
    assert {"peak_flops", "peak_bandwidth", "ridge_point", "cache_levels"} <= set(data)
    assert DeviceRoofline.from_dict(data) == sized


def test_a_roofline_without_levels_places_every_layer_in_dram() -> None:
    """An older calibration (no cache levels, no capacity) still reads: DRAM for every layer."""
    old = {
        "peak_flops_by_dtype": {"float32": 1e11},
        "peak_bandwidth": 2e10,
        "fingerprint": {},
        "cache_levels": [
            {"name": "L3", "size": 16 * MIB, "bandwidth": 5e10},
            {"name": "DRAM", "size": 0, "bandwidth": 2e10},
        ],
    }
    roofline = DeviceRoofline.from_dict(old)
    assert roofline.memory_roof(0, MIB, 4 * MIB).level == "L3"  # no capacity: the measured size holds
    bare = DeviceRoofline.from_dict({**old, "cache_levels": []})
    assert [lv.name for lv in bare.levels] == ["DRAM"]
    assert bare.memory_roof(0, 1024, 2048) == MemoryRoof("DRAM", 2e10)


def test_a_view_layer_carries_no_fraction_and_says_why(roof: DeviceRoofline) -> None:
    """A Reshape kernel hands out a buffer in microseconds: priced at its tensors' bytes it read
    at 297 % of the L3 roof in BERT-base (issue 21); a view has no fraction, and asking names why."""
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.profile import Layer, ModelProfile, apply_roofline

    view = apply_roofline(Layer("Reshape_359", "Reshape", ("Reshape_359",), 8e-6, 0, 786_456), roof)
    copy = apply_roofline(Layer("Transpose_1", "Transpose", ("Transpose_1",), 80e-6, 0, 786_456), roof)
    assert view.roofline_fraction is None and view.memory_level is not None
    assert copy.roofline_fraction is not None
    profile = ModelProfile(
        model_name="bert",
        model_path=None,
        model_hash="",
        backend="onnxruntime",
        backend_version="",
        options={},
        batch=1,
        input_shapes={},
        latency=LatencyStats.from_samples([1e-4, 2e-4]),
        layers=(view, copy),
        attributed_fraction=1.0,
        total_flops=0,
        total_macs=0,
        total_bytes=786_456,
        roofline=roof,
    )
    with pytest.raises(RooflineError, match=r"a view \(Reshape\) moves no data a roof can price"):
        assert profile.layer("Reshape_359").roofline_fraction > 0.1


def test_one_factor_without_event_counts_scales_no_kernel_below_the_dispatch_floor() -> None:
    """OpenVINO records no events per kernel, so its kernels get one factor.  Its counters keep
    whole microseconds: a sub-microsecond primitive that ticked once in 3 inferences reads 0.33 us,
    and the one factor took GPT-2's small primitives to 0.05-0.2 us, 119-596 % of a 0.28 us floor.
    Scaled down, none goes below the floor; one read under it keeps its time (nothing stretched)."""
    from pytest_roofline.backends.base import KernelProfile, KernelRecord
    from pytest_roofline.profile import profiler_scale, profiler_scales

    def kernel(name: str, micros: float) -> KernelRecord:
        return KernelRecord(name, "Op", (), (micros * 1e-6,), extra={"statistic": "mean"})

    floor = 0.28e-6
    profile = KernelProfile(
        (kernel("fc", 30.0), *(kernel(f"add{i}", 1 / 3) for i in range(6)), kernel("cvt", 0.2))
    )
    e2e = 10e-6
    assert profiler_scale(profile, e2e) == pytest.approx(10 / 32.2)  # 0.33 us -> 0.10 us, under the floor
    times = [
        s * k.times[0] for s, k in zip(profiler_scales(profile, e2e, floor), profile.kernels, strict=True)
    ]
    assert all(t >= floor for t in times[1:7]) and times[1] == pytest.approx(floor)
    assert times[7] == pytest.approx(0.2e-6)  # under the floor as read: kept, not stretched
    assert sum(times) == pytest.approx(e2e) and times[0] == pytest.approx(e2e - 6 * floor - 0.2e-6)
    assert profiler_scales(profile, e2e) == pytest.approx((profiler_scale(profile, e2e),) * 8)  # no floor
