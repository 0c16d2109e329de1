"""Small ONNX models several test modules build."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def residual_cnn(
    batch: int | str = 1, *, weight_scale: float = 0.1, name: str = "residual_cnn"
) -> onnx.ModelProto:
    """Conv-Relu-Conv + residual Add, GAP, Flatten, MatMul and an unnamed final Add (16 channels,
    32x32 input, 10 outputs): the model the recorded onnxruntime and OpenVINO profiles under
    tests/data come from (same node names and shapes).  Weights are seeded (0), scaled by
    ``weight_scale``."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal(shape) * weight_scale).astype(np.float32), init)
        for init, shape in (
            ("W1", (16, 3, 3, 3)),
            ("B1", (16,)),
            ("W2", (16, 16, 3, 3)),
            ("B2", (16,)),
            ("WM", (16, 10)),
            ("BM", (10,)),
        )
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="Conv_0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="Relu_1"),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], name="Conv_2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a3"], name="Add_3"),
        helper.make_node("Relu", ["a3"], ["r4"], name="Relu_4"),
        helper.make_node("GlobalAveragePool", ["r4"], ["g5"], name="GAP_5"),
        helper.make_node("Flatten", ["g5"], ["f6"], name="Flatten_6"),
        helper.make_node("MatMul", ["f6", "WM"], ["m7"], name="MatMul_7"),
        helper.make_node("Add", ["m7", "BM"], ["y"], name=""),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
