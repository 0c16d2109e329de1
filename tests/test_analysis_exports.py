"""Patterns from real PyTorch exports (TorchScript and dynamo exporters), rebuilt with onnx.helper.

Each model reproduces what an export of torchvision ViT-B/16 or HF BERT contains; the real
exports are checked by ``benchmarks/real_exports.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from reference_macs import reference_macs

from pytest_roofline.analysis import analyze, published_macs
from pytest_roofline.analysis.shapes import _symbolic_inference, _weightless
from pytest_roofline.model import bind_input_shapes, make_inputs

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _const(name: str, values: list[int]) -> onnx.NodeProto:
    """A ``Constant`` node of int64 values, as the TorchScript exporter writes them."""
    return helper.make_node(
        "Constant", [], [name], name=f"/{name}", value=numpy_helper.from_array(np.array(values, np.int64))
    )


def _model(
    nodes: list[onnx.NodeProto], x_dims: list, out_dims: list, inits: list, opset: int = 18
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "export",
        [helper.make_tensor_value_info("x", F, x_dims)],
        [helper.make_tensor_value_info("y", F, out_dims)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _patch_grid_model() -> onnx.ModelProto:
    """ViT's ``x.reshape(n, c, (h // p) * (w // p))`` from the TorchScript exporter.

    ``Shape -> Gather -> Div -> Cast -> Cast -> Mul -> Unsqueeze -> Concat -> Reshape``: onnx data
    propagation stops at ``Div``.
    """
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="/Shape"),
        _const("i0", [0]),
        _const("i2", [2]),
        _const("i3", [3]),
        _const("patch", [2]),
        _const("channels", [3]),
        helper.make_node("Gather", ["shape", "i0"], ["n"], name="/Gather", axis=0),
        helper.make_node("Gather", ["shape", "i2"], ["h"], name="/Gather_1", axis=0),
        helper.make_node("Gather", ["shape", "i3"], ["w"], name="/Gather_2", axis=0),
        helper.make_node("Div", ["h", "patch"], ["hp"], name="/Div"),
        helper.make_node("Div", ["w", "patch"], ["wp"], name="/Div_1"),
        helper.make_node("Cast", ["hp"], ["hp_f"], name="/Cast", to=F),
        helper.make_node("Cast", ["hp_f"], ["hp_i"], name="/Cast_1", to=I64),
        helper.make_node("Cast", ["wp"], ["wp_f"], name="/Cast_2", to=F),
        helper.make_node("Cast", ["wp_f"], ["wp_i"], name="/Cast_3", to=I64),
        helper.make_node("Mul", ["hp_i", "wp_i"], ["tokens"], name="/Mul"),
        helper.make_node("Concat", ["n", "channels", "tokens"], ["target"], name="/Concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"], name="/Reshape"),
        helper.make_node("MatMul", ["r", "w_proj"], ["y"], name="/MatMul"),
    ]
    weight = numpy_helper.from_array(np.ones((4, 5), np.float32), "w_proj")
    return _model(nodes, ["batch", 3, 4, 4], ["batch", 3, 5], [weight])


def _unflatten_model() -> onnx.ModelProto:
    """``Tensor.unflatten(1, (2, 3))`` from the TorchScript exporter (ViT's attention heads).

    The ``Slice`` bounds come from ``Mod``/``Add``/``Reshape`` of constants; onnxruntime's symbolic
    inference asserts on the ``Reshape`` they feed.
    """
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="/Relu"),
        helper.make_node("Shape", ["a"], ["shape"], name="/Shape"),
        _const("dim", [1]),
        _const("rank", [3]),
        _const("one", [1]),
        _const("zero", [0]),
        _const("end", [2**63 - 1]),
        _const("split", [2, 3]),
        helper.make_node("Mod", ["dim", "rank"], ["axis"], name="/Mod"),
        helper.make_node("Reshape", ["axis", "one"], ["start"], name="/Reshape"),
        helper.make_node("Add", ["axis", "one"], ["after"], name="/Add"),
        helper.make_node("Reshape", ["after", "one"], ["next"], name="/Reshape_1"),
        helper.make_node("Slice", ["shape", "zero", "start"], ["head"], name="/Slice"),
        helper.make_node("Slice", ["shape", "next", "end"], ["tail"], name="/Slice_1"),
        helper.make_node("Concat", ["head", "split", "tail"], ["target"], name="/Concat", axis=0),
        helper.make_node("Reshape", ["a", "target"], ["heads"], name="/Reshape_2"),
        helper.make_node("MatMul", ["heads", "w_out"], ["y"], name="/MatMul"),
    ]
    weight = numpy_helper.from_array(np.ones((4, 5), np.float32), "w_out")
    return _model(nodes, ["batch", 6, 4], ["batch", 2, 3, 5], [weight])


def test_patch_grid_arithmetic_folds_without_a_run() -> None:
    model = _patch_grid_model()
    plain = onnx.shape_inference.infer_shapes(_weightless(model, {"x": (2, 3, 4, 4)}), data_prop=True)
    reshaped = next(vi for vi in plain.graph.value_info if vi.name == "r")
    assert any(not d.HasField("dim_value") for d in reshaped.type.tensor_type.shape.dim)
    result = analyze(model, batch=2)
    assert result.shape_method == "onnx+fold"
    assert result.tensors["r"].shape == (2, 3, 4)
    assert published_macs(result) == 2 * 3 * 4 * 5


def test_unflatten_slice_bounds_fold_where_symbolic_inference_fails() -> None:
    model = _unflatten_model()
    with pytest.raises(AssertionError):  # onnxruntime's symbolic inference: Reshape of a non-literal
        _symbolic_inference(_weightless(model, {"x": (2, 6, 4)}))
    result = analyze(model, batch=2)
    assert result.shape_method == "onnx+fold"
    assert result.tensors["heads"].shape == (2, 2, 3, 4)
    assert published_macs(result) == 2 * 6 * 4 * 5


def test_failed_symbolic_inference_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an incomplete result it saves ``sym_shape_infer_temp.onnx`` into the working directory."""
    nodes = [
        helper.make_node("Foo", ["x"], ["f"], name="custom", domain="custom.ops"),
        helper.make_node("Relu", ["f"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, None)],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("custom.ops", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception, match="Incomplete symbolic shape inference"):
        _symbolic_inference(model)
    assert list(tmp_path.iterdir()) == []


def test_folding_leaves_large_and_random_values_to_the_nodes() -> None:
    """A big ``ConstantOfShape`` and a random op are not evaluated; their shapes still resolve."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="/Shape"),
        helper.make_node("ConstantOfShape", ["shape"], ["big"], name="/ConstantOfShape"),
        helper.make_node("RandomUniformLike", ["big"], ["noise"], name="/RandomUniformLike"),
        helper.make_node("Div", ["shape", "two"], ["half"], name="/Div"),
        helper.make_node("Reshape", ["noise", "half"], ["r"], name="/Reshape"),
        helper.make_node("MatMul", ["r", "w"], ["y"], name="/MatMul"),
    ]
    inits = [
        numpy_helper.from_array(np.array([1, 2], np.int64), "two"),
        numpy_helper.from_array(np.ones((256, 3), np.float32), "w"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, ["batch", 512])],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result = analyze(model, batch=300)
    assert result.tensors["big"].shape == (300, 512)
    assert result.tensors["r"].shape == (300, 256)
    assert published_macs(result) == 300 * 256 * 3


def test_dynamo_style_graph_is_fully_costed() -> None:
    """``node_*`` names, no value_info, opset 20 ``Gelu`` and ``LayerNormalization`` ops, Gemm head."""
    hidden = 8
    inits = [
        numpy_helper.from_array(np.ones((hidden, 16), np.float32), "fc1.weight"),
        numpy_helper.from_array(np.ones((16, hidden), np.float32), "fc2.weight"),
        numpy_helper.from_array(np.ones(hidden, np.float32), "ln.weight"),
        numpy_helper.from_array(np.ones(hidden, np.float32), "ln.bias"),
        numpy_helper.from_array(np.ones((4, hidden), np.float32), "head.weight"),
        numpy_helper.from_array(np.array([0, -1], np.int64), "val_flat"),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ln.weight", "ln.bias"], ["ln"], name="node_layer_norm"),
        helper.make_node("MatMul", ["ln", "fc1.weight"], ["fc1"], name="node_MatMul_1"),
        helper.make_node("Gelu", ["fc1"], ["gelu"], name="node_Gelu_2"),
        helper.make_node("MatMul", ["gelu", "fc2.weight"], ["fc2"], name="node_MatMul_3"),
        helper.make_node("Add", ["fc2", "x"], ["res"], name="node_add"),
        helper.make_node("Reshape", ["res", "val_flat"], ["flat"], name="node_view"),
        helper.make_node("Gemm", ["flat", "head.weight"], ["y"], name="node_linear", transB=1),
    ]
    model = _model(nodes, ["s0", 1, hidden], ["s0", 4], inits, opset=20)
    result = analyze(model, batch=3)
    assert result.uncosted == ()
    assert published_macs(result) == 3 * (hidden * 16 * 2 + hidden * 4)
    assert result.node("node_Gelu_2").flops > 0 and result.node("node_layer_norm").flops > 0


@pytest.mark.parametrize("layout", ["4d", "3d"])
def test_onnx_attention_op_counts_both_matmuls(layout: str) -> None:
    """opset 23 ``Attention`` (dynamo exporter's SDPA): QK^T and softmax(.)V MACs, as published."""
    heads, q_seq, kv_seq, d_qk, d_v = 4, 8, 10, 16, 12
    if layout == "4d":
        dims = [["batch", heads, q_seq, d_qk], ["batch", heads, kv_seq, d_qk], ["batch", heads, kv_seq, d_v]]
        attrs: dict = {}
    else:
        dims = [
            ["batch", q_seq, heads * d_qk],
            ["batch", kv_seq, heads * d_qk],
            ["batch", kv_seq, heads * d_v],
        ]
        attrs = {"q_num_heads": heads, "kv_num_heads": heads}
    inputs = [helper.make_tensor_value_info(n, F, d) for n, d in zip("qkv", dims, strict=True)]
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], name="node_attention", **attrs)
    mask = numpy_helper.from_array(np.zeros((q_seq, kv_seq), np.float32), "mask")
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", F, None)], [mask])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    result = analyze(model, batch=2)
    expected = 2 * heads * q_seq * kv_seq * (d_qk + d_v)
    assert result.uncosted == () and published_macs(result) == expected
    assert result.node("node_attention").flops == 2 * expected + 6 * 2 * heads * q_seq * kv_seq
    feeds = make_inputs(model, bind_input_shapes(model, 2))
    assert reference_macs(model, feeds)["Attention"] == expected
