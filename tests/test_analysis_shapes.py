"""Shape resolution: the three methods, subgraphs, local functions, external data, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline import zoo
from pytest_roofline.analysis import analyze
from pytest_roofline.errors import ModelError, RooflineError, ShapeError

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), functions=(), opset=17):  # noqa: ANN001, ANN202
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], functions=list(functions))


def test_static_cnn_resolves_with_onnx_inference() -> None:
    result = analyze(zoo.tiny_cnn(), batch=3)
    assert result.shape_method == "onnx"
    assert result.input_shapes == {"input": (3, 3, 32, 32)}
    assert result.tensors["output"].shape == (3, 10)
    assert [n.name for n in result.nodes[:3]] == ["Conv_0", "Relu_1", "MaxPool_2"]


def test_shape_chains_need_folding() -> None:
    model = zoo.tiny_transformer()
    plain = onnx.shape_inference.infer_shapes(model)
    assert any(
        d.dim_param or not d.HasField("dim_value")
        for vi in plain.graph.value_info
        for d in vi.type.tensor_type.shape.dim
    )
    result = analyze(model, batch=2, dims={"seq": 8})
    assert result.shape_method == "onnx+fold"
    assert result.tensors["last_hidden_state"].shape == (2, 8, 64)
    assert all(
        all(isinstance(d, int) and d > 0 for d in t.shape) or t.shape == () for t in result.tensors.values()
    )


def _nonzero_model() -> onnx.ModelProto:
    mask = numpy_helper.from_array(np.array([[1, 0, 1], [0, 0, 1]], np.float32), "mask")
    nodes = [
        helper.make_node("Mul", ["x", "mask"], ["m"], name="mul"),
        helper.make_node("NonZero", ["m"], ["idx"], name="nonzero"),
        helper.make_node("Transpose", ["idx"], ["y"], name="transpose", perm=[1, 0]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [mask],
    )


def test_data_dependent_shapes_fall_back_to_an_onnxruntime_run() -> None:
    result = analyze(_nonzero_model())
    assert result.shape_method.endswith("onnxruntime")
    assert result.tensors["y"].shape[1] == 2  # three nonzeros of a rank-2 tensor: idx (2, 3), y (3, 2)


def test_unresolvable_shape_names_tensor_and_node(tmp_path: Path) -> None:
    model = _nonzero_model()
    onnx.save_model(
        model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0
    )
    (tmp_path / "m.data").unlink()  # no weights: the onnxruntime run is impossible
    with pytest.raises(ShapeError, match="tensor 'idx'.*node 'nonzero'") as err:
        analyze(tmp_path / "m.onnx")
    assert "\n" not in str(err.value)


def test_if_branches_are_costed_with_graph_paths() -> None:
    branch = lambda name: helper.make_graph(  # noqa: E731
        [helper.make_node("Add", ["x", "x"], [f"{name}_out"], name="add")],
        name,
        [],
        [helper.make_tensor_value_info(f"{name}_out", F, [2, 4])],
    )
    node = helper.make_node(
        "If", ["cond"], ["y"], name="if", then_branch=branch("then"), else_branch=branch("else")
    )
    inputs = [
        helper.make_tensor_value_info("x", F, [2, 4]),
        helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
    ]
    result = analyze(_model([node], inputs, [helper.make_tensor_value_info("y", F, None)]))
    inner = result.node("if/then_branch/add")
    assert inner.graph == "if/then_branch" and inner.flops == 8
    assert result.node("if/else_branch/add").flops == 8
    assert result.node("if").bytes == 0


def test_local_functions_are_inlined_and_costed() -> None:
    body = [
        helper.make_node("Mul", ["a", "a"], ["sq"], name="square"),
        helper.make_node("Relu", ["sq"], ["out"], name="relu"),
    ]
    function = helper.make_function(
        "local", "SquareRelu", ["a"], ["out"], body, [helper.make_opsetid("", 17)]
    )
    call = helper.make_node("SquareRelu", ["x"], ["y"], name="call", domain="local")
    model = _model(
        [call],
        [helper.make_tensor_value_info("x", F, [3, 5])],
        [helper.make_tensor_value_info("y", F, None)],
        functions=[function],
    )
    model.opset_import.append(helper.make_opsetid("local", 1))
    result = analyze(model)
    assert [n.name for n in result.nodes] == ["call/SquareRelu/square", "call/SquareRelu/relu"]
    assert {n.graph for n in result.nodes} == {"call/SquareRelu"}
    assert result.total.flops == 30


def test_external_data_is_never_read(tmp_path: Path) -> None:
    inline = analyze(zoo.tiny_cnn(), batch=2)
    path = tmp_path / "cnn.onnx"
    onnx.save_model(zoo.tiny_cnn(), path, save_as_external_data=True, location="cnn.data", size_threshold=0)
    (tmp_path / "cnn.data").write_bytes(b"")  # truncated: any read would fail
    assert analyze(path, batch=2).to_dict()["total"] == inline.to_dict()["total"]
    (tmp_path / "cnn.data").unlink()
    assert analyze(path, batch=2).to_dict()["nodes"][1:] == inline.to_dict()["nodes"][1:]


def test_weightless_zoo_model_matches_weighted() -> None:
    assert analyze(zoo.tiny_cnn(external_data=True), batch=1).total == analyze(zoo.tiny_cnn(), batch=1).total


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    good = tmp_path / "good.onnx"
    onnx.save(zoo.tiny_cnn(), good)
    files = {"missing": tmp_path / "nope.onnx", "directory": tmp_path}
    files["empty"] = tmp_path / "empty.onnx"
    files["empty"].write_bytes(b"")
    files["truncated"] = tmp_path / "truncated.onnx"
    files["truncated"].write_bytes(good.read_bytes()[:1000])
    files["not_onnx"] = tmp_path / "text.onnx"
    files["not_onnx"].write_text("this is not a model\n" * 10)
    too_new = zoo.tiny_cnn()
    too_new.opset_import[0].version = 999
    files["opset"] = tmp_path / "new.onnx"
    onnx.save(too_new, files["opset"])
    return files


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "truncated", "not_onnx", "opset"])
def test_bad_model_files_raise_one_line_model_error(tmp_path: Path, case: str) -> None:
    with pytest.raises(ModelError) as err:
        analyze(_bad_files(tmp_path)[case], batch=1)
    assert "\n" not in str(err.value)


def test_unbound_dims_raise_one_line_shape_error() -> None:
    with pytest.raises(ShapeError, match="'N'.*--batch") as err:
        analyze(zoo.tiny_cnn())
    assert "\n" not in str(err.value)
    with pytest.raises(ShapeError, match="seq"):
        analyze(zoo.tiny_transformer(), batch=1)
    with pytest.raises(RooflineError):
        analyze(zoo.tiny_cnn(), batch=0)


def test_loop_body_shapes_come_from_the_parent_node() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="id"),
            helper.make_node("MatMul", ["state_in", "w"], ["state_out"], name="mm"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_in", F, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_out", F, None),
        ],
    )
    loop = helper.make_node("Loop", ["trip", "", "x"], ["y"], name="loop", body=body)
    inits = [
        numpy_helper.from_array(np.array(3, np.int64), "trip"),
        numpy_helper.from_array(np.ones((4, 4), np.float32), "w"),
    ]
    model = _model(
        [loop],
        [helper.make_tensor_value_info("x", F, ["N", 4])],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    result = analyze(model, batch=2)
    assert result.tensors["state_out"].shape == (2, 4) and result.tensors["y"].shape == (2, 4)
    mm = result.node("loop/body/mm")
    assert mm.graph == "loop/body" and mm.macs == 2 * 4 * 4 and mm.params == 16


def test_initializers_listed_as_inputs_and_stale_value_info() -> None:
    model = zoo.tiny_cnn()
    for init in model.graph.initializer:  # IR < 4 style: weights are graph inputs too
        model.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    model.graph.value_info.append(helper.make_tensor_value_info("1", F, ["unk__0", 16, "unk__1", 32]))
    result = analyze(model, batch=2)
    assert result.tensors["1"].shape == (2, 16, 32, 32)
    assert result.total == analyze(zoo.tiny_cnn(), batch=2).total


def test_fused_group_counts_only_boundary_tensors() -> None:
    result = analyze(zoo.tiny_cnn(), batch=1)
    conv, relu = result.node("Conv_0"), result.node("Relu_1")
    group = result.group(["Conv_0", "Relu_1"])
    assert group.flops == conv.flops + relu.flops
    assert group.bytes == conv.bytes_read + relu.bytes_written  # the conv output never leaves the kernel
