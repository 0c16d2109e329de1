"""Small models with control flow: Loop, Scan and If around a MatMul, as exporters emit them.

Each runs on onnxruntime (weights seeded random), so an independent counter can execute it.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["if_model", "loop_model", "nested_loop_model", "scan_model"]

F = TensorProto.FLOAT
OPSET = 17
TripSource = Literal["constant", "shape", "input", "while"]


def _weight(name: str, shape: tuple[int, ...], seed: int = 0) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)


def _matmul_body(width: int, weight: str = "w") -> onnx.GraphProto:
    """A Loop body: ``state = tanh(state @ w)``, condition passed through, the state also scanned out."""
    return helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
            helper.make_node("MatMul", ["state_in", weight], ["product"], name="matmul"),
            helper.make_node("Tanh", ["product"], ["state_out"], name="tanh"),
            helper.make_node("Identity", ["state_out"], ["scanned"], name="scan_out"),
        ],
        "body",
        [
            helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_in", F, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_out", F, None),
            helper.make_tensor_value_info("scanned", F, None),
        ],
    )


def loop_model(
    trips: int = 5, source: TripSource = "constant", batch: int = 4, width: int = 64
) -> onnx.ModelProto:
    """``x (batch, width)`` through a Loop of ``trips`` MatMul+Tanh iterations.

    ``source`` says where the trip count comes from: an initializer (``constant``), the input's
    own shape (``shape``: x is ``(batch, trips, width)`` and the count is ``Shape(x)[1]``), a graph
    input ``max_trips`` (``input``), or a while loop whose body stops after ``trips`` iterations
    (``while``, no trip count).
    """
    nodes: list[onnx.NodeProto] = []
    inits = [_weight("w", (width, width))]
    inputs = [helper.make_tensor_value_info("x", F, [batch, width])]
    body = _matmul_body(width)
    if source == "constant":
        inits.append(numpy_helper.from_array(np.array(trips, np.int64), "max_trips"))
        loop_inputs = ["max_trips", "", "x"]
    elif source == "shape":
        inputs = [helper.make_tensor_value_info("x", F, [batch, trips, width])]
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "one"))
        nodes += [
            helper.make_node("Shape", ["x"], ["x_shape"], name="shape"),
            helper.make_node("Gather", ["x_shape", "one"], ["count_1d"], name="gather", axis=0),
            helper.make_node("Squeeze", ["count_1d"], ["max_trips"], name="squeeze"),
            helper.make_node("ReduceMean", ["x"], ["first"], name="mean", axes=[1], keepdims=0),
        ]
        loop_inputs = ["max_trips", "", "first"]
    elif source == "input":
        inputs.append(helper.make_tensor_value_info("max_trips", TensorProto.INT64, []))
        loop_inputs = ["max_trips", "", "x"]
    else:  # while: cond_out = iteration + 1 < trips
        inits += [
            numpy_helper.from_array(np.array(True), "start"),
            numpy_helper.from_array(np.array(trips, np.int64), "limit"),
            numpy_helper.from_array(np.array(1, np.int64), "one"),
        ]
        body = _matmul_body(width)
        del body.node[0]
        body.node.extend(
            [
                helper.make_node("Add", ["iteration", "one"], ["next"], name="next"),
                helper.make_node("Less", ["next", "limit"], ["cond_out"], name="keep_going"),
            ]
        )
        loop_inputs = ["", "start", "x"]
    nodes.append(helper.make_node("Loop", loop_inputs, ["y", "states"], name="loop", body=body))
    graph = helper.make_graph(
        nodes, "loop_model", inputs, [helper.make_tensor_value_info("y", F, None)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def nested_loop_model(outer: int = 3, inner: int = 4, batch: int = 2, width: int = 32) -> onnx.ModelProto:
    """A Loop of ``outer`` iterations whose body runs a Loop of ``inner`` MatMul iterations."""
    inner_body = _matmul_body(width)
    outer_body = helper.make_graph(
        [
            helper.make_node("Identity", ["o_cond_in"], ["o_cond_out"], name="outer_keep"),
            helper.make_node(
                "Loop",
                ["inner_trips", "", "o_state_in"],
                ["o_state_out", "o_scanned"],
                name="inner",
                body=inner_body,
            ),
        ],
        "outer_body",
        [
            helper.make_tensor_value_info("o_iteration", TensorProto.INT64, []),
            helper.make_tensor_value_info("o_cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("o_state_in", F, None),
        ],
        [
            helper.make_tensor_value_info("o_cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("o_state_out", F, None),
        ],
    )
    inits = [
        _weight("w", (width, width)),
        numpy_helper.from_array(np.array(outer, np.int64), "outer_trips"),
        numpy_helper.from_array(np.array(inner, np.int64), "inner_trips"),
    ]
    node = helper.make_node("Loop", ["outer_trips", "", "x"], ["y"], name="outer", body=outer_body)
    graph = helper.make_graph(
        [node],
        "nested",
        [helper.make_tensor_value_info("x", F, [batch, width])],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def scan_model(steps: int = 10, batch: int = 4, width: int = 64) -> onnx.ModelProto:
    """An RNN-like Scan: ``h = tanh(h @ w + x_t)`` over the ``steps`` time steps of ``x``."""
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["h_in", "w"], ["product"], name="matmul"),
            helper.make_node("Add", ["product", "x_t"], ["pre"], name="add"),
            helper.make_node("Tanh", ["pre"], ["h_out"], name="tanh"),
            helper.make_node("Identity", ["h_out"], ["y_t"], name="out"),
        ],
        "scan_body",
        [
            helper.make_tensor_value_info("h_in", F, [batch, width]),
            helper.make_tensor_value_info("x_t", F, [batch, width]),
        ],
        [
            helper.make_tensor_value_info("h_out", F, [batch, width]),
            helper.make_tensor_value_info("y_t", F, [batch, width]),
        ],
    )
    node = helper.make_node("Scan", ["h0", "x"], ["h", "y"], name="scan", body=body, num_scan_inputs=1)
    graph = helper.make_graph(
        [node],
        "scan_model",
        [
            helper.make_tensor_value_info("h0", F, [batch, width]),
            helper.make_tensor_value_info("x", F, [steps, batch, width]),
        ],
        [helper.make_tensor_value_info("y", F, None)],
        [_weight("w", (width, width))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def if_model(
    condition: Literal["constant", "input", "data"] = "input", batch: int = 4, width: int = 64
) -> onnx.ModelProto:
    """``torch.cond``-like: the then branch does two MatMuls, the else branch one.

    ``condition``: a constant True (``constant``), a boolean graph input (``input``), or
    ``ReduceSum(x) > 0`` of the data (``data``, as ``torch.cond`` on a tensor predicate).
    """

    def branch(name: str, matmuls: int) -> onnx.GraphProto:
        nodes, current = [], "x"
        for i in range(matmuls):
            nodes.append(helper.make_node("MatMul", [current, "w"], [f"{name}_{i}"], name=f"matmul_{i}"))
            current = f"{name}_{i}"
        nodes.append(helper.make_node("Relu", [current], [f"{name}_out"], name="relu"))
        return helper.make_graph(
            nodes, name, [], [helper.make_tensor_value_info(f"{name}_out", F, [batch, width])]
        )

    inputs = [helper.make_tensor_value_info("x", F, [batch, width])]
    inits = [_weight("w", (width, width))]
    nodes = []
    if condition == "constant":
        inits.append(numpy_helper.from_array(np.array(True), "cond"))
    elif condition == "input":
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    else:
        inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
        nodes += [
            helper.make_node("ReduceSum", ["x"], ["total"], name="sum", keepdims=0),
            helper.make_node("Greater", ["total", "zero"], ["cond"], name="positive"),
        ]
    nodes.append(
        helper.make_node(
            "If", ["cond"], ["y"], name="cond", then_branch=branch("then", 2), else_branch=branch("else", 1)
        )
    )
    graph = helper.make_graph(nodes, "if_model", inputs, [helper.make_tensor_value_info("y", F, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
