"""The compact structural summary: contents, size, round trips, bad input."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from _diff_models import Variant, conv_net
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline import zoo
from pytest_roofline.analysis import analyze
from pytest_roofline.diff import ModelSummary, summarize
from pytest_roofline.diff.summary import qualified, scope_from_name
from pytest_roofline.errors import ModelError


def test_summary_holds_costs_shapes_and_edges_of_every_node() -> None:
    model = conv_net()
    summary = summarize(model)
    analysis = analyze(model)
    assert [n.name for n in summary.nodes] == [n.name for n in analysis.nodes]
    assert summary.total_flops == analysis.total.flops
    assert summary.total_bytes == analysis.total.bytes
    first = summary.nodes[0]
    assert (first.op_type, first.shapes, first.weights) == ("Conv", "1x8x16x16", "8x3x3x3,8")
    assert first.inputs == (0,) and summary.graph_inputs == (("input", 0, "1x3x16x16"),)
    assert summary.nodes[1].inputs == first.outputs  # the Relu reads the Conv's output


def test_weight_values_do_not_enter_the_summary_but_shapes_and_constants_do() -> None:
    assert summarize(conv_net(seed=1)) == summarize(conv_net(seed=2))
    assert summarize(conv_net()) != summarize(conv_net(Variant(widen=(0, 0))))
    base, other = _reshape_model([4, 8]), _reshape_model([8, 4])
    assert summarize(base).nodes[0].attrs != summarize(other).nodes[0].attrs  # the target shape is hashed


def test_constants_and_identities_of_weights_fold_into_their_consumers() -> None:
    """The legacy exporter de-duplicates equal weights through Identity nodes; Constant nodes
    hold small inputs: neither is graph structure."""
    weight = numpy_helper.from_array(np.zeros((8, 8), dtype=np.float32), "w")
    nodes = [
        helper.make_node("Identity", ["w"], ["w_copy"], name="Identity_3"),
        helper.make_node("Constant", [], ["axes"], name="/Constant", value=_ints([1])),
        helper.make_node("MatMul", ["x", "w_copy"], ["y"], name="/fc/MatMul"),
        helper.make_node("ReduceSum", ["y", "axes"], ["z"], name="/ReduceSum", keepdims=1),
    ]
    model = _model(nodes, [weight], [2, 8], [2, 1])
    summary = summarize(model)
    assert [n.op_type for n in summary.nodes] == ["MatMul", "ReduceSum"]
    assert summary.nodes[0].weights == "8x8"
    assert summary.nodes[1].inputs == summary.nodes[0].outputs


def test_round_trip_plain_and_packed_and_size() -> None:
    summary = summarize(zoo.resnet50(), batch=1)
    for packed in (False, True):
        data = json.loads(json.dumps(summary.to_dict(packed=packed)))
        assert ModelSummary.from_dict(data) == summary
    packed_size = len(json.dumps(summary.to_dict(packed=True)))
    assert packed_size < 8_000, packed_size  # 123 nodes: small enough for a baseline entry
    assert len(json.dumps(summary.to_dict())) < 20_000


def test_scopes_from_legacy_names_and_dynamo_metadata() -> None:
    assert scope_from_name("/layer1/layer1.0/conv1/Conv") == "layer1.0.conv1"
    assert scope_from_name("/Relu") == "" and scope_from_name("Conv_3") == ""
    assert qualified(["layers", "layers.2", "layers.2.ffn", "layers.2.ffn.fc1"]) == "layers.2.ffn.fc1"
    node = helper.make_node("Relu", ["x"], ["y"], name="node_relu_4")
    entry = node.metadata_props.add()
    entry.key = "namespace"
    entry.value = ": m.Net/layer1: Sequential/layer1.0: m.Block/relu_4: aten.relu.default"
    summary = summarize(_model([node], [], [1, 4], [1, 4]))
    assert summary.nodes[0].scope == "layer1.0"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"schema_version": 99}, "schema 99"),
        (
            {"schema_version": 1, "nodes": [["only a name"]], "graph_inputs": [], "graph_outputs": []},
            "malformed",
        ),
        (
            {"schema_version": 1, "packed": "not base64 zlib", "graph_inputs": [], "graph_outputs": []},
            "malformed",
        ),
    ],
)
def test_bad_summaries_are_one_line_errors(data: dict, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        ModelSummary.from_dict(data)


def _ints(values: list[int]) -> onnx.TensorProto:
    return helper.make_tensor("value", TensorProto.INT64, [len(values)], values)


def _reshape_model(target: list[int]) -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array(target, dtype=np.int64), "shape")
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="Reshape_0")
    return _model([node], [shape], [32], target)


def _model(nodes: list, inits: list, in_shape: list[int], out_shape: list[int]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, out_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
