"""Cost rules against hand-computed FLOPs, MACs, bytes and params."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.analysis import analyze, rule
from pytest_roofline.analysis.costs import OpCost, einsum_extents, lookup

F = TensorProto.FLOAT


def single(
    op_type: str,
    inputs: dict[str, tuple[int, ...]],
    weights: dict[str, np.ndarray] | None = None,
    n_out: int = 1,
    domain: str = "",
    order: list[str] | None = None,
    **attrs: object,
) -> onnx.ModelProto:
    """A one-node model: float inputs of static shapes, weights as initializers."""
    weights = weights or {}
    names = order or [*inputs, *weights]
    outputs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outputs, name="node", domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, F, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in weights.items()],
    )
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets)


def w(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return np.ones(shape, dtype=dtype)


def node_of(model: onnx.ModelProto, **kwargs: object):
    result = analyze(model, **kwargs)
    return result.node("node"), result


def test_conv_groups_bias_pads() -> None:
    model = single("Conv", {"x": (1, 4, 8, 8)}, {"w": w(6, 2, 3, 3), "b": w(6)}, group=2, pads=[1, 1, 1, 1])
    node, result = node_of(model)
    assert result.tensors["y0"].shape == (1, 6, 8, 8)
    assert node.macs == 384 * 2 * 9
    assert node.flops == 2 * node.macs + 384  # bias: one add per output element
    assert node.params == 6 * 2 * 9 + 6
    assert node.bytes_read == 4 * (256 + 108 + 6) and node.bytes_written == 4 * 384


def test_conv_transpose_output_padding_groups_dilations() -> None:
    model = single(
        "ConvTranspose",
        {"x": (1, 4, 5, 5)},
        {"w": w(4, 3, 3, 3)},
        group=2,
        strides=[2, 2],
        dilations=[2, 2],
        output_padding=[1, 1],
    )
    node, result = node_of(model)
    # out = stride*(in-1) + output_padding + (k-1)*dilation + 1 = 8 + 1 + 5 = 14; Cout = 3*2
    assert result.tensors["y0"].shape == (1, 6, 14, 14)
    assert node.macs == 100 * 27  # every input element meets every weight of its group
    assert node.flops == 2 * 2700


@pytest.mark.parametrize(
    ("attrs", "a", "b", "macs"),
    [
        ({}, (4, 8), (8, 5), 160),
        ({"transA": 1}, (8, 4), (8, 5), 160),
        ({"transA": 1, "transB": 1}, (8, 4), (5, 8), 160),
    ],
)
def test_gemm_transposes_and_bias(
    attrs: dict[str, int], a: tuple[int, ...], b: tuple[int, ...], macs: int
) -> None:
    node, result = node_of(single("Gemm", {"a": a}, {"b": w(*b), "c": w(5)}, **attrs))
    assert result.tensors["y0"].shape == (4, 5)
    assert node.macs == macs and node.flops == 2 * macs + 20


def test_matmul_broadcast_batch() -> None:
    node, result = node_of(single("MatMul", {"a": (2, 1, 3, 4), "b": (5, 4, 6)}))
    assert result.tensors["y0"].shape == (2, 5, 3, 6)
    assert node.macs == 180 * 4 and node.flops == 1440
    assert node.params == 0  # activations, not weights


def test_einsum_batched_and_ellipsis() -> None:
    node, _ = node_of(single("Einsum", {"a": (2, 3, 4), "b": (2, 4, 5)}, equation="bij,bjk->bik"))
    assert node.macs == 2 * 3 * 4 * 5
    node, _ = node_of(single("Einsum", {"a": (7, 2, 3, 4), "b": (7, 2, 4, 5)}, equation="...ij,...jk->...ik"))
    assert node.macs == 7 * 2 * 3 * 4 * 5
    assert einsum_extents("i,i->", [(9,), (9,)]) == {"i": 9}


def test_lstm_bidirectional_with_bias() -> None:
    model = single(
        "LSTM",
        {"x": (5, 2, 3)},
        {"W": w(2, 16, 3), "R": w(2, 16, 4), "B": w(2, 32)},
        n_out=3,
        hidden_size=4,
        direction="bidirectional",
    )
    node, result = node_of(model)
    assert result.tensors["y0"].shape == (5, 2, 2, 4)
    steps = 2 * 5 * 2  # directions x seq x batch
    assert node.macs == steps * 16 * (3 + 4)
    assert node.flops == 2 * node.macs + steps * 2 * 16 + steps * 4 * 9
    assert node.params == 2 * 16 * 3 + 2 * 16 * 4 + 2 * 32


def test_gru_without_bias_batch_first() -> None:
    model = single(
        "GRU", {"x": (2, 5, 3)}, {"W": w(1, 12, 3), "R": w(1, 12, 4)}, n_out=2, hidden_size=4, layout=1
    )
    node, _ = node_of(model)
    assert node.macs == 10 * 12 * 7 and node.flops == 2 * 840 + 10 * 4 * 8


def test_broadcasting_binary_and_variadic() -> None:
    node, result = node_of(single("Add", {"a": (2, 3, 1), "b": (1, 4)}))
    assert result.tensors["y0"].shape == (2, 3, 4)
    assert (node.flops, node.macs, node.bytes_read, node.bytes_written) == (24, 0, 40, 96)
    node, _ = node_of(single("Sum", {"a": (4,), "b": (4,), "c": (4,)}))
    assert node.flops == 8  # n-1 adds per element


def test_activation_and_softmax_weights() -> None:
    assert node_of(single("Relu", {"x": (10,)}))[0].flops == 10
    assert node_of(single("Sigmoid", {"x": (10,)}))[0].flops == 30
    assert node_of(single("Softmax", {"x": (2, 10)}))[0].flops == 100


def test_views_move_nothing_data_movement_moves_bytes() -> None:
    shape = np.array([6], dtype=np.int64)
    into_output = single("Reshape", {"x": (2, 3)}, {"s": shape})
    relu = onnx.helper.make_node("Relu", ["y0"], ["z"], name="relu")
    graph = into_output.graph
    feeding = onnx.helper.make_model(
        onnx.helper.make_graph(
            [*graph.node, relu],
            "g",
            graph.input,
            [onnx.helper.make_tensor_value_info("z", 1, [6])],
            graph.initializer,
        ),
        opset_imports=into_output.opset_import,
    )
    node, _ = node_of(feeding)
    assert (node.flops, node.bytes, node.params) == (0, 0, 0)  # a view feeding a node: nothing moves
    node, _ = node_of(into_output)  # a view writing a graph output copies into the caller's buffer
    assert (node.flops, node.bytes_read, node.bytes_written) == (0, 24 + 8, 24)
    node, _ = node_of(single("Transpose", {"x": (2, 3)}, perm=[1, 0]))
    assert (node.flops, node.bytes) == (0, 48)


def test_pooling_and_reduction() -> None:
    node, _ = node_of(single("MaxPool", {"x": (1, 2, 4, 4)}, kernel_shape=[2, 2], strides=[2, 2]))
    assert node.flops == 8 * 4
    node, _ = node_of(single("GlobalAveragePool", {"x": (1, 2, 4, 4)}))
    assert node.flops == 32 + 2


def test_quantized_ops() -> None:
    u8 = np.ones((4, 3), np.uint8)
    model = single("MatMulInteger", {}, {"a": u8, "b": np.ones((3, 5), np.uint8)})
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
    node, _ = node_of(model)
    assert node.macs == 60
    dq = single("DequantizeLinear", {}, {"x": u8, "s": np.float32(0.1), "z": np.uint8(0)})
    assert node_of(dq)[0].flops == 24


def test_attention_contrib_op() -> None:
    model = single(
        "Attention", {"x": (2, 8, 16)}, {"w": w(16, 48), "b": w(48)}, domain="com.microsoft", num_heads=4
    )
    node, result = node_of(model)
    assert result.tensors["y0"].shape == (2, 8, 16)
    assert node.macs == 2 * 8 * 16 * 48 + 2 * (2 * 8 * 8 * 16)


def test_params_shared_weight_counted_once() -> None:
    weight = numpy_helper.from_array(w(4, 4), "shared")
    nodes = [
        helper.make_node("MatMul", ["x", "shared"], ["h"], name="a"),
        helper.make_node("MatMul", ["h", "shared"], ["y"], name="b"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, None)],
        [weight],
    )
    result = analyze(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert result.total.params == 16 and result.node("b").bytes_read == 16 + 64


def test_uncosted_op_keeps_bytes() -> None:
    node, result = node_of(single("Det", {"x": (2, 3, 3)}))
    assert not node.costed and node.flops == 0 and node.bytes == 72 + 8
    assert result.uncosted == (("Det", 1),)


def test_adding_a_rule_is_one_decorated_function() -> None:
    assert lookup("", "Det") is None

    @rule("Det", domain="test.rules")
    def _det(ctx):  # noqa: ANN001, ANN202
        return OpCost(flops=ctx.inp(0).numel)

    assert lookup("test.rules", "Det") is _det and lookup("", "Det") is None


def test_lstm_peepholes_add_pointwise_flops() -> None:
    weights = {"W": w(1, 16, 3), "R": w(1, 16, 4)}
    plain = node_of(single("LSTM", {"x": (5, 2, 3)}, weights, n_out=1, hidden_size=4))[0]
    order = ["x", "W", "R", "", "", "", "", "P"]
    peep = single("LSTM", {"x": (5, 2, 3)}, {**weights, "P": w(1, 12)}, n_out=1, order=order, hidden_size=4)
    node = node_of(peep)[0]
    assert node.macs == plain.macs and node.flops == plain.flops + 10 * 3 * 4 * 2


def test_contrib_fused_gemm_adds_bias_and_activation() -> None:
    fused = single(
        "FusedGemm", {"a": (4, 8)}, {"b": w(8, 5), "c": w(5)}, domain="com.microsoft", activation="Relu"
    )
    node = node_of(fused)[0]
    assert node.macs == 160 and node.flops == 320 + 20 + 20
