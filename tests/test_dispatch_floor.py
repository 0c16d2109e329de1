"""The dispatch floor: a third roof, so every timed layer gets a fraction and a bound (issue 33).

The roofs are fixed (``levelled_roofline`` with a floor set here): what is checked is what the code
decides from them, never what a live calibration measures on this busy machine.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from _calibration_helpers import levelled_roofline
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.analysis.views import RUNTIME_VIEW_OPS
from pytest_roofline.api import profile_model
from pytest_roofline.profile import ModelProfile
from pytest_roofline.roofline import DeviceRoofline
from pytest_roofline.roofline.roofs import OVERHEAD, roofline_data_problem

FLOOR = 0.05e-6  # below any kernel onnxruntime times here (its timer keeps 0.5-1 µs steps)


def _floored(floor: float = FLOOR) -> DeviceRoofline:
    return dataclasses.replace(levelled_roofline(), dispatch_floor=floor)


def test_a_kernel_is_priced_at_the_slowest_of_its_three_roofs() -> None:
    roof = _floored(1e-6)  # 200 GFLOP/s, DRAM 20 GB/s, a 1 µs floor
    # a big GEMM: its FLOPs take longest
    assert roof.limit(2e9, 12e6) == "compute"
    assert roof.attainable_time(2e9, 12e6) == pytest.approx(2e9 / 200e9)
    # a large elementwise op: its bytes
    assert roof.limit(1e6, 400e6) == "memory"
    # a view or a one-float Relu: the floor, whatever it moves
    assert roof.limit(0, 0) == OVERHEAD and roof.limit(4, 8) == OVERHEAD
    assert roof.fraction(0, 0, 4e-6) == pytest.approx(0.25)  # 1 µs of floor in a 4 µs layer
    assert roof.fraction(4, 8, 1e-6) == pytest.approx(1.0)
    # without a floor the fraction is achieved / attainable FLOP/s, as before
    plain = levelled_roofline()
    seconds, flops, nbytes = 3e-3, 2e8, 4e6
    attainable = plain.attainable(flops / nbytes, working_set=nbytes)
    assert plain.fraction(flops, nbytes, seconds) == pytest.approx(flops / seconds / attainable)
    assert plain.fraction(0, 0, 1e-6) == 0.0 and plain.limit(0, 0) == "memory"


def test_the_floor_travels_in_the_calibration_json_and_is_checked() -> None:
    roof = _floored(0.4e-6)
    data = roof.to_dict()
    assert data["dispatch_floor"] == 0.4e-6 and {"peak_flops", "peak_bandwidth", "ridge_point"} <= set(data)
    assert DeviceRoofline.from_dict(data) == roof
    assert roofline_data_problem(data) is None
    assert (
        roofline_data_problem({**data, "dispatch_floor": -1.0}) == "dispatch_floor is -1.0, not a number >= 0"
    )
    old = {k: v for k, v in data.items() if k != "dispatch_floor"}  # a cache from before the floor
    assert DeviceRoofline.from_dict(old).dispatch_floor == 0.0


def _decode_step(path: Path) -> Path:
    """A decode-step-like graph: one small MatMul between many view ops of a handful of floats
    (the GPT-2-with-KV-cache shape the issue measured: ~100 Reshape/Unsqueeze of 0 bytes)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["h0"])]
    shapes = [numpy_helper.from_array(np.array(s, np.int64), f"s{i}") for i, s in enumerate(([1, 64], [64]))]
    previous = "h0"
    for index in range(24):
        out = f"h{index + 1}"
        if index % 3 == 2:
            nodes.append(helper.make_node("Unsqueeze", [previous, "axis"], [f"u{index}"]))
            nodes.append(helper.make_node("Squeeze", [f"u{index}", "axis"], [out]))
        else:
            nodes.append(helper.make_node("Reshape", [previous, f"s{index % 2}"], [f"r{index}"]))
            nodes.append(helper.make_node("Reshape", [f"r{index}", "s0"], [out]))
        previous = out
    nodes.append(helper.make_node("Relu", [previous], ["Y"]))
    graph = helper.make_graph(
        nodes,
        "decode_step",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 64])],
        initializer=[
            numpy_helper.from_array(rng.random((64, 64), dtype=np.float32), "W"),
            numpy_helper.from_array(np.array([0], np.int64), "axis"),
            *shapes,
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    target = path / "decode_step.onnx"
    onnx.save(model, target)
    return target


def _profile(tmp_path: Path, roofline: DeviceRoofline) -> ModelProfile:
    """The decode step's profile against ``roofline`` (graph optimizations off: onnxruntime would
    fold the view chain away, and the point is its kernels)."""
    options = {"graph_optimization_level": "disable"}
    return profile_model(
        _decode_step(tmp_path), options=options, roofline=roofline, sessions=1, rounds=2, profile_iterations=5
    )


def test_every_timed_layer_of_a_decode_step_gets_a_fraction_and_a_bound(tmp_path: Path) -> None:
    prof = _profile(tmp_path, _floored())
    timed = [la for la in prof.layers if la.time > 0 and la.kind != "folded"]
    views = [la for la in timed if la.op_type in RUNTIME_VIEW_OPS]
    assert len(views) >= 24, [la.op_type for la in timed]
    for layer in timed:
        assert layer.roofline_fraction is not None and layer.bound in ("compute", "memory", OVERHEAD), layer
    for layer in views:  # a view moves nothing: only the floor prices it
        assert layer.bytes == 0 and layer.bound == OVERHEAD
        assert layer.roofline_fraction == pytest.approx(FLOOR / layer.time)
    assert prof.layer(views[0].name).roofline_fraction == views[0].roofline_fraction  # no NoFraction
    overhead = prof.overhead
    bound = [la for la in timed if la.bound == OVERHEAD]
    assert overhead["layers"] == len(bound) and overhead["dispatch_floor"] == FLOOR
    assert overhead["share"] == pytest.approx(sum(la.time for la in bound) / prof.kernel_time)
    # without the floor, an overhead-bound layer would run at its compute or memory roof: a view's
    # roofs are 0 s, so the model gains at least the views' whole time
    assert overhead["seconds"] >= sum(la.time for la in views) * 0.999
    data = prof.to_dict()
    assert data["overhead"] == overhead and data["roofline"]["dispatch_floor"] == FLOOR
    assert {la["bound"] for la in data["layers"] if la["name"] in {v.name for v in views}} == {OVERHEAD}


def test_without_a_floor_views_keep_no_fraction(tmp_path: Path) -> None:
    """A roofline calibrated before the floor (0.0) prices no view: the profile says so, as before."""
    prof = _profile(tmp_path, levelled_roofline())
    views = [la for la in prof.layers if la.op_type in RUNTIME_VIEW_OPS and la.time > 0]
    assert views and all(la.roofline_fraction is None for la in views)
    assert prof.overhead == {
        "share": 0.0,
        "seconds": 0.0,
        "layers": 0.0,
        "dispatch_floor": 0.0,
        "under_step": 0.0,
        "under_step_seconds": 0.0,
        "share_at_most": 0.0,
        "seconds_at_most": 0.0,
    }


def test_the_reports_show_the_floor_and_what_it_costs(tmp_path: Path) -> None:
    from pytest_roofline.report import html
    from pytest_roofline.report.tables import calibration_table, profile_table
    from pytest_roofline.results import RunResults
    from pytest_roofline.roofline import Probe

    prof = _profile(tmp_path, _floored())
    overhead = prof.overhead
    line = (
        f"dispatch floor 50 ns a kernel: {overhead['layers']:.0f} layers overhead-bound, "
        f"{100 * overhead['share']:.1f}% of kernel time; without the floor"
    )
    assert line in profile_table(prof)  # `roofline profile`'s table
    page = html.render(RunResults.of_profiles([prof]))
    assert line.capitalize() in page  # the what-if section
    assert '"floor":5e-08' in page.replace(" ", "")  # the chart's roofs (report.js draws its label)
    views = {la.op_type for la in prof.layers if la.op_type in RUNTIME_VIEW_OPS and la.time > 0}
    assert (
        '<th title="share of the op type\'s time in layers bound by the dispatch floor">At the floor</th>'
        in page
    )
    assert '<td class="floor">100.0%</td>' in page and len(views) >= 2  # the what-if table: views all at it
    probe = Probe("dispatch-chain-32", "dispatch", "float32", 32, 1 / FLOOR, FLOOR)
    table = calibration_table(dataclasses.replace(prof.roofline, probes=(probe,)))
    assert "dispatch floor" in table and "50 ns   the least time of one kernel (dispatch-chain-32)" in table
    assert "kernel/s" in table  # the probe's figure: kernels per second


def test_the_gpu_launch_floor_from_the_recorded_h200_traces() -> None:
    """The recorded onnxruntime 1.31 CUDA profiles (H200, profiler on) bound the launch floor: the least
    host time around a node's launch, after the autotuning run (what gpu_check's step 5 compares)."""
    import gzip
    import json

    from pytest_roofline.roofline.probes import trace_launch_floor

    data = Path(__file__).resolve().parent / "data" / "gpu-h200"
    floors = {
        path.name: trace_launch_floor(json.loads(gzip.decompress(path.read_bytes())))
        for path in sorted(data.glob("ort-cuda-*.json.gz"))
    }
    assert floors == {
        "ort-cuda-encoder_seq128.json.gz": pytest.approx(7.0e-6),  # a Reshape
        "ort-cuda-resnet50_b1.json.gz": pytest.approx(12.5e-6),  # the Flatten
        "ort-cuda-resnet50_fp16_b8.json.gz": pytest.approx(12.5e-6),
    }
    assert trace_launch_floor([{"cat": "Session", "name": "model_run", "dur": 5}]) == 0.0
