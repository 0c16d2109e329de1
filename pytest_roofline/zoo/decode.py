"""Decode-time and contrib-op models, as onnxruntime's transformer optimizer and model builders emit
them: one attention step against a KV cache of ``past`` tokens, rotary embedding, an LSTM and a
small CNN (inputs for ``quantize_dynamic``/``quantize_static``), DeformConv. Weights seeded random.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "conv_pool_model",
    "deform_conv_model",
    "gqa_decode_model",
    "lstm_model",
    "mha_decode_model",
    "ms_attention_decode_model",
    "rotary_model",
]

F = TensorProto.FLOAT
MS = "com.microsoft"


def _w(name: str, *shape: int, seed: int = 0) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)


def _model(
    nodes: list[onnx.NodeProto], inputs: list, outputs: list, inits: list, ms: bool = True
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "decode", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(MS, 1)] if ms else [])
    return helper.make_model(graph, opset_imports=opsets)


def _vi(name: str, shape: list | None, elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def ms_attention_decode_model(
    hidden: int = 64, heads: int = 4, past: int = 15, batch: int = 1
) -> onnx.ModelProto:
    """com.microsoft ``Attention`` for one new token with ``past`` cached keys (GPT-2 style)."""
    head = hidden // heads
    node = helper.make_node(
        "Attention",
        ["x", "w", "b", "", "past"],
        ["y", "present"],
        name="attention",
        domain=MS,
        num_heads=heads,
        unidirectional=1,
    )
    return _model(
        [node],
        [_vi("x", [batch, 1, hidden]), _vi("past", [2, batch, heads, past, head])],
        [_vi("y", None), _vi("present", None)],
        [_w("w", hidden, 3 * hidden), _w("b", 3 * hidden, seed=1)],
    )


def mha_decode_model(hidden: int = 64, heads: int = 4, past: int = 63, batch: int = 1) -> onnx.ModelProto:
    """com.microsoft ``MultiHeadAttention`` with past_key/past_value for one new token."""
    head = hidden // heads
    node = helper.make_node(
        "MultiHeadAttention",
        ["q", "k", "v", "", "", "", "past_key", "past_value"],
        ["y", "present_key", "present_value"],
        name="mha",
        domain=MS,
        num_heads=heads,
    )
    inputs = [_vi(n, [batch, 1, hidden]) for n in ("q", "k", "v")]
    inputs += [_vi(n, [batch, heads, past, head]) for n in ("past_key", "past_value")]
    return _model([node], inputs, [_vi("y", None), _vi("present_key", None), _vi("present_value", None)], [])


def gqa_decode_model(
    hidden: int = 64, heads: int = 4, kv_heads: int = 2, past: int = 31, batch: int = 1
) -> onnx.ModelProto:
    """com.microsoft ``GroupQueryAttention`` for one new token; ``total_sequence_length`` is the
    attention mask's length, computed from its shape as model builders do."""
    head = hidden // heads
    nodes = [
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"], name="mask_shape"),
        helper.make_node("Gather", ["mask_shape", "one"], ["total_len64"], name="total_len", axis=0),
        helper.make_node("Cast", ["total_len64"], ["total_len"], name="cast_total", to=TensorProto.INT32),
        helper.make_node("ReduceSum", ["attention_mask", "axis1"], ["mask_sum"], name="seqlens", keepdims=0),
        helper.make_node("Sub", ["mask_sum", "one_batch"], ["seqlens64"], name="seqlens_minus_one"),
        helper.make_node("Cast", ["seqlens64"], ["seqlens_k"], name="cast_seqlens", to=TensorProto.INT32),
        helper.make_node(
            "GroupQueryAttention",
            ["q", "k", "v", "past_key", "past_value", "seqlens_k", "total_len"],
            ["y", "present_key", "present_value"],
            name="gqa",
            domain=MS,
            num_heads=heads,
            kv_num_heads=kv_heads,
        ),
    ]
    inputs = [_vi("q", [batch, 1, hidden])]
    inputs += [_vi(n, [batch, 1, kv_heads * head]) for n in ("k", "v")]
    inputs += [_vi(n, [batch, kv_heads, past, head]) for n in ("past_key", "past_value")]
    inputs.append(_vi("attention_mask", [batch, past + 1], TensorProto.INT64))
    inits = [
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array(1, np.int64), "one_batch"),
    ]
    return _model(
        nodes, inputs, [_vi("y", None), _vi("present_key", None), _vi("present_value", None)], inits
    )


def rotary_model(
    batch: int = 1, seq: int = 8, heads: int = 4, head: int = 16, max_pos: int = 64
) -> onnx.ModelProto:
    """com.microsoft ``RotaryEmbedding`` of (batch, seq, heads * head) with a full-width cos/sin cache."""
    angles = np.outer(np.arange(max_pos), 1.0 / 10000 ** (np.arange(0, head, 2) / head)).astype(np.float32)
    node = helper.make_node(
        "RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rotary", domain=MS, num_heads=heads
    )
    return _model(
        [node],
        [_vi("x", [batch, seq, heads * head]), _vi("pos", [batch, seq], TensorProto.INT64)],
        [_vi("y", None)],
        [numpy_helper.from_array(np.cos(angles), "cos"), numpy_helper.from_array(np.sin(angles), "sin")],
    )


def lstm_model(seq: int = 16, batch: int = 2, input_size: int = 32, hidden: int = 64) -> onnx.ModelProto:
    """A float LSTM with biases, ``quantize_dynamic`` turns it into DynamicQuantizeLSTM."""
    node = helper.make_node(
        "LSTM", ["x", "W", "R", "B"], ["y", "y_h", "y_c"], name="lstm", hidden_size=hidden
    )
    inits = [
        _w("W", 1, 4 * hidden, input_size),
        _w("R", 1, 4 * hidden, hidden, seed=1),
        _w("B", 1, 8 * hidden, seed=2),
    ]
    return _model(
        [node],
        [_vi("x", [seq, batch, input_size])],
        [_vi("y", None), _vi("y_h", None), _vi("y_c", None)],
        inits,
        ms=False,
    )


def conv_pool_model(batch: int = 1, channels: int = 16, size: int = 32) -> onnx.ModelProto:
    """Conv + Relu + GlobalAveragePool: ``quantize_static`` (QOperator) emits QLinearGlobalAveragePool."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap"),
    ]
    inits = [_w("w", channels, 3, 3, 3), _w("b", channels, seed=1)]
    return _model(nodes, [_vi("x", [batch, 3, size, size])], [_vi("y", None)], inits, ms=False)


def deform_conv_model(
    batch: int = 1, channels: int = 8, out_channels: int = 16, size: int = 16
) -> onnx.ModelProto:
    """ONNX ``DeformConv`` (opset 19) 3x3 with a mask."""
    node = helper.make_node(
        "DeformConv", ["x", "w", "offset", "b", "mask"], ["y"], name="deform", pads=[1, 1, 1, 1]
    )
    graph = helper.make_graph(
        [node],
        "deform",
        [
            _vi("x", [batch, channels, size, size]),
            _vi("offset", [batch, 18, size, size]),
            _vi("mask", [batch, 9, size, size]),
        ],
        [_vi("y", None)],
        [_w("w", out_channels, channels, 3, 3), _w("b", out_channels, seed=1)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
