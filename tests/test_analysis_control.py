"""Control flow (Loop, Scan, If), honest totals, zero-size dims, bound-dim consistency, quiet logs."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.analysis import analyze
from pytest_roofline.cli import main as cli_main
from pytest_roofline.errors import ShapeError
from pytest_roofline.zoo.control_flow import if_model, loop_model, nested_loop_model, scan_model

F = TensorProto.FLOAT
BODY_MACS = 4 * 64 * 64  # one MatMul of (4, 64) x (64, 64)


def _model(nodes, inputs, outputs, inits=(), opsets=(("", 17),)):  # noqa: ANN001, ANN202
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


@pytest.mark.parametrize("source", ["constant", "shape", "while"])
def test_loop_body_counts_once_per_iteration(source: str) -> None:
    result = analyze(loop_model(5, source))
    flow = result.control_flow[0]
    assert flow.trips == 5 and not flow.assumed
    assert result.node("loop/body/matmul").macs == BODY_MACS  # per execution
    assert result.node("loop/body/matmul").executions == 5
    assert result.total.macs == 5 * BODY_MACS
    assert result.coverage.complete


def test_unknown_trip_count_is_assumed_said_and_bindable() -> None:
    result = analyze(loop_model(5, "input"))
    flow = result.control_flow[0]
    assert flow.source == "assumed" and flow.trips == 1 and result.total.macs == BODY_MACS
    assert not result.coverage.complete and result.coverage.assumed_flops_share > 0.99
    assert any("--trip loop=N" in line for line in result.warnings)
    bound = analyze(loop_model(5, "input"), trips={"loop": 7})
    assert bound.total.macs == 7 * BODY_MACS and bound.control_flow[0].source == "binding"
    by_tensor = analyze(loop_model(5, "input"), trips={"max_trips": 3})
    assert by_tensor.total.macs == 3 * BODY_MACS and by_tensor.coverage.complete


def test_trip_bindings_are_checked() -> None:
    with pytest.raises(ShapeError, match="names no Loop") as err:
        analyze(loop_model(5, "input"), trips={"nope": 3})
    assert "\n" not in str(err.value)
    with pytest.raises(ShapeError, match="runs 5 times"):
        analyze(loop_model(5, "constant"), trips={"loop": 6})
    assert analyze(loop_model(5, "constant"), trips={"loop": 5}).total.macs == 5 * BODY_MACS


def test_nested_loops_multiply() -> None:
    result = analyze(nested_loop_model(outer=3, inner=4, batch=2, width=32))
    matmul = result.node("outer/body/inner/body/matmul")
    assert matmul.executions == 12 and result.total.macs == 12 * 2 * 32 * 32


def test_scan_counts_its_body_per_step() -> None:
    result = analyze(scan_model(steps=10))
    assert result.control_flow[0].trips == 10 and result.control_flow[0].source == "shapes"
    assert result.total.macs == 10 * BODY_MACS
    add = result.node("scan/body/add")
    assert result.total.flops == 10 * (2 * BODY_MACS + add.flops + result.node("scan/body/tanh").flops)


def test_if_costs_the_taken_branch_when_the_condition_folds() -> None:
    result = analyze(if_model("constant"))
    assert result.control_flow[0].branch == "then_branch" and result.control_flow[0].source == "folded"
    assert result.node("cond/else_branch/matmul_0").executions == 0
    assert result.total.macs == 2 * BODY_MACS and result.flops_range is None and result.coverage.complete


@pytest.mark.parametrize("condition", ["input", "data"])
def test_unknown_condition_costs_the_costlier_branch_with_a_range(condition: str) -> None:
    result = analyze(if_model(condition))
    flow = result.control_flow[0]
    assert flow.source == "costlier" and flow.branch == "then_branch"
    assert result.total.macs == 2 * BODY_MACS
    low, high = result.flops_range or (0, 0)
    assert high == result.total.flops and low < high
    assert low == result.total.flops - 2 * BODY_MACS  # the else branch has one MatMul less
    assert result.warnings and not result.coverage.complete
    data = result.to_dict()
    assert data["total"]["coverage"]["flops_low"] == low and data["control_flow"][0]["assumed"]


def test_json_keeps_contract_keys_and_says_coverage(capsys: pytest.CaptureFixture[str], tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "loop.onnx"
    onnx.save(loop_model(5, "input"), path)
    assert cli_main(["analyze", str(path), "--trip", "loop=4", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"flops", "macs", "params", "bytes"} <= set(data["total"])
    assert data["total"]["macs"] == 4 * BODY_MACS and data["uncosted"] == [] and data["nodes"]
    assert data["total"]["coverage"]["complete"] and data["control_flow"][0]["trips"] == 4
    assert cli_main(["analyze", str(path)]) == 0
    table = capsys.readouterr().out
    assert "assumed 1" in table and "--trip loop=N" in table and "incomplete" in table


def test_zero_size_dims_are_legal() -> None:
    nodes = [
        helper.make_node("Add", ["x", "y"], ["z"], name="add"),
        helper.make_node("Relu", ["e"], ["r"], name="relu"),
    ]
    model = _model(
        nodes,
        [
            helper.make_tensor_value_info("x", F, [2, 0, 4]),
            helper.make_tensor_value_info("y", F, [4]),
            helper.make_tensor_value_info("e", F, [0]),
        ],
        [helper.make_tensor_value_info("z", F, None), helper.make_tensor_value_info("r", F, None)],
    )
    result = analyze(model)
    assert result.input_shapes == {"x": (2, 0, 4), "y": (4,), "e": (0,)}
    assert result.tensors["z"].shape == (2, 0, 4) and result.tensors["r"].shape == (0,)
    assert result.node("add").costed and result.node("add").flops == 0 and result.coverage.complete


def test_sequence_inputs_are_not_refused() -> None:
    seq = helper.make_tensor_sequence_value_info("s", F, None)
    node = helper.make_node("SequenceLength", ["s"], ["n"], name="len")
    result = analyze(_model([node], [seq], [helper.make_tensor_value_info("n", TensorProto.INT64, [])]))
    assert result.node("len").costed


def test_no_cost_rule_only_where_there_is_none() -> None:
    model = _model(
        [
            helper.make_node("Det", ["x"], ["d"], name="det"),  # no rule
            # a rule, but a form it cannot read: 3-D input, no num_heads and an empty cos cache
            helper.make_node(
                "RotaryEmbedding", ["r", "pos", "cos", "cos"], ["o"], name="odd", domain="com.microsoft"
            ),
        ],
        [
            helper.make_tensor_value_info("x", F, [3, 3]),
            helper.make_tensor_value_info("r", F, [1, 4, 8]),
            helper.make_tensor_value_info("pos", TensorProto.INT64, [1, 4]),
            helper.make_tensor_value_info("cos", F, [16, 0]),
        ],
        [helper.make_tensor_value_info("d", F, None), helper.make_tensor_value_info("o", F, None)],
        opsets=(("", 17), ("com.microsoft", 1)),
    )
    result = analyze(model)
    assert result.uncosted == (("Det", 1),)
    assert result.node("det").reason == "no cost rule" and result.node("odd").reason == "form not handled"
    assert result.unresolved == (("RotaryEmbedding", "form not handled", 1),)
    assert result.coverage.uncosted_by_reason == {"no cost rule": 1, "form not handled": 1}
    assert result.to_dict()["unresolved"][0]["reason"] == "form not handled"


def _decoder_mask_model() -> onnx.ModelProto:
    """GPT-2's mask arithmetic: scores over past + new keys plus a mask of ``total_len``."""
    nodes = [
        helper.make_node("Concat", ["past_key", "key"], ["keys"], name="concat", axis=2),
        helper.make_node("Transpose", ["keys"], ["keys_t"], name="transpose", perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["query", "keys_t"], ["scores"], name="qk"),
        helper.make_node("Add", ["scores", "mask"], ["masked"], name="add_mask"),
    ]
    inputs = [
        helper.make_tensor_value_info("query", F, [1, 2, "q_len", 8]),
        helper.make_tensor_value_info("key", F, [1, 2, "q_len", 8]),
        helper.make_tensor_value_info("past_key", F, [1, 2, "past_len", 8]),
        helper.make_tensor_value_info("mask", F, [1, 1, 1, "total_len"]),
    ]
    return _model(nodes, inputs, [helper.make_tensor_value_info("masked", F, None)])


def test_bound_dims_are_checked_against_the_graphs_arithmetic() -> None:
    good = analyze(_decoder_mask_model(), dims={"q_len": 1, "past_len": 8, "total_len": 9})
    assert good.tensors["masked"].shape == (1, 2, 1, 9)
    with pytest.raises(ShapeError, match="contradict the graph's shape arithmetic.*add_mask") as err:
        analyze(_decoder_mask_model(), dims={"q_len": 1, "past_len": 8, "total_len": 10})
    assert "\n" not in str(err.value) and "total_len=10" in str(err.value)


def test_value_dependent_shapes_give_no_dim_hint() -> None:
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")
    model = _model(
        [node],
        [
            helper.make_tensor_value_info("x", F, [2, 3]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
    )
    model.graph.input[1].type.tensor_type.elem_type = TensorProto.INT64
    with pytest.raises(ShapeError) as err:
        analyze(model)
    assert "--dim" not in str(err.value) and "values of 'shape'" in str(err.value)


def test_onnxruntime_log_lines_stay_quiet(capfd: pytest.CaptureFixture[str]) -> None:
    # the onnxruntime fallback runs a graph whose Slice fails: onnxruntime logs an error natively
    nodes = [
        helper.make_node("NonZero", ["x"], ["idx"], name="nonzero"),
        helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"], name="slice"),
    ]
    inits = [
        numpy_helper.from_array(np.array([v], np.int64), n)
        for n, v in (("starts", 0), ("ends", 1), ("axes", 0), ("steps", 0))
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [3, 3])],
        [
            helper.make_tensor_value_info("idx", TensorProto.INT64, None),
            helper.make_tensor_value_info("y", F, None),
        ],
        inits,
    )
    with pytest.raises(ShapeError):
        analyze(model)
    captured = capfd.readouterr()
    assert "onnxruntime" not in captured.err and captured.out == ""


def test_flex_attention_modifier_subgraphs_get_the_score_shape() -> None:
    bias = helper.make_graph(
        [helper.make_node("Add", ["scores", "bias"], ["scores_out"], name="add")],
        "score_mod",
        [helper.make_tensor_value_info("scores", F, ["B", "H", "L", "S"])],
        [helper.make_tensor_value_info("scores_out", F, ["B", "H", "L", "S"])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "bias")],
    )
    node = helper.make_node(
        "FlexAttention", ["q", "k", "v"], ["y"], name="flex", domain="ai.onnx.preview", score_mod=bias
    )
    model = _model(
        [node],
        [helper.make_tensor_value_info(n, F, [1, 2, 3, 4]) for n in ("q", "k", "v")],
        [helper.make_tensor_value_info("y", F, None)],
        opsets=(("", 26), ("ai.onnx.preview", 1)),
    )
    result = analyze(model)
    assert result.tensors["scores_out"].shape == (1, 2, 3, 3)
    assert result.node("flex/score_mod/add").flops == 18
    assert result.node("flex").macs == 1 * 2 * 3 * 3 * (4 + 4)


def test_a_view_writing_a_body_output_is_priced_as_the_copy_it_is() -> None:
    """A Loop/Scan takes its body's outputs out every iteration, so an Identity producing one
    copies (onnxruntime: 10 % of a 16-trip Loop's time, 14 % of a Scan's, that carried no
    fraction).  So does a view writing a graph output, a buffer the caller receives (onnxruntime: an
    Identity and a Flatten of 64 MiB into a graph output took 56 and 84 ms); a main-graph Identity
    feeding another node stays a free view."""
    loop = {n.name: n for n in analyze(loop_model(4, batch=2, width=8)).nodes}
    assert loop["loop/body/scan_out"].bytes == 2 * 2 * 8 * 4  # read and written, float32
    assert loop["loop/body/scan_out"].total_bytes == 4 * loop["loop/body/scan_out"].bytes
    assert loop["loop/body/keep_going"].bytes == 2  # the bool condition, in and out
    scan = {n.name: n for n in analyze(scan_model(steps=4, batch=2, width=8)).nodes}
    assert scan["scan/body/out"].bytes == 2 * 2 * 8 * 4
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["x"], ["t"], name="view"),
            helper.make_node("Relu", ["t"], ["y"], name="relu"),
            helper.make_node("Identity", ["y"], ["z"], name="out"),
        ],
        "g",
        [vi("x", TensorProto.FLOAT, [4])],
        [vi("z", TensorProto.FLOAT, [4])],
    )
    main = {n.name: n for n in analyze(helper.make_model(graph)).nodes}
    assert main["view"].bytes == 0 and main["out"].bytes == 2 * 4 * 4


def test_the_body_copies_carry_a_fraction_on_onnxruntime() -> None:
    """With bytes, the body's Identity layers get a roofline fraction: >= 95 % of the time carries one."""
    from pytest_roofline.api import profile_model
    from pytest_roofline.roofline import DeviceRoofline

    roof = DeviceRoofline({"float32": 200e9}, 20e9, {"backend": "onnxruntime", "cpu_model": "test"})
    prof = profile_model(
        loop_model(16, batch=16, width=64), roofline=roof, sessions=1, rounds=2, profile_iterations=3
    )
    timed = [la for la in prof.layers if la.kind != "folded" and la.time > 0]
    identities = [la for la in prof.layers if la.op_type == "Identity"]
    assert identities and all(la.bytes > 0 for la in identities)  # the copies move bytes
    # a copy timed under one profiler step per event gets no time (and so no fraction): the
    # others carry one
    assert all(la.roofline_fraction is not None for la in identities if la.time > 0)
    carried = sum(la.time for la in timed if la.roofline_fraction is not None)
    assert carried >= 0.95 * sum(la.time for la in timed)


def test_a_reshape_helper_of_a_gemm_stays_a_view_without_a_fraction() -> None:
    """onnxruntime's ``gemm_input_reshape`` kernel lists the Gemm's nodes: it is no body copy, so
    it keeps no bytes and no fraction (it read 116-143 GB/s against a 40-68 GB/s roof when its
    nodes' 1.57 MB counted)."""
    from pytest_roofline.api import profile_model
    from pytest_roofline.roofline import DeviceRoofline
    from pytest_roofline.zoo.precision import convnext_fp16

    roof = DeviceRoofline({"float32": 200e9}, 20e9, {"backend": "onnxruntime", "cpu_model": "test"})
    prof = profile_model(convnext_fp16(), roofline=roof, sessions=1, rounds=2, profile_iterations=3)
    views = [
        la for la in prof.layers if la.op_type in ("Reshape", "Identity", "Flatten", "Squeeze", "Unsqueeze")
    ]
    assert any(la.name.startswith("gemm_input_reshape") for la in views)
    for layer in views:
        assert layer.bytes == 0 and layer.roofline_fraction is None, layer
