"""Decode-time attention with a KV cache, quantized RNNs and pools, DeformConv, packed int4 weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.analysis import analyze
from pytest_roofline.model.precision import model_precision
from pytest_roofline.zoo import decode


def test_ms_attention_counts_past_keys() -> None:
    result = analyze(decode.ms_attention_decode_model(hidden=64, heads=4, past=15))
    # projection 64 x 192, then 4 heads x 1 query x (15 + 1) keys x (16 + 16)
    assert result.node("attention").macs == 64 * 192 + 4 * 16 * 32
    assert result.coverage.complete


def test_multi_head_attention_counts_past_key_and_value() -> None:
    result = analyze(decode.mha_decode_model(hidden=64, heads=4, past=63))
    assert result.node("mha").macs == 4 * 64 * 32  # 64 keys = 63 past + 1 new


def test_group_query_attention_reads_total_sequence_length_from_shape_arithmetic() -> None:
    result = analyze(decode.gqa_decode_model(hidden=64, heads=4, kv_heads=2, past=31))
    assert result.node("gqa").macs == 4 * 32 * 32 and result.node("gqa").costed


def test_rotary_embedding_three_flops_per_rotated_element() -> None:
    assert analyze(decode.rotary_model(seq=8, heads=4, head=16)).node("rotary").flops == 3 * 8 * 64


def test_dynamic_quantize_lstm_from_quantize_dynamic(tmp_path: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save(decode.lstm_model(seq=16, batch=2, input_size=32, hidden=64), tmp_path / "lstm.onnx")
    quantize_dynamic(str(tmp_path / "lstm.onnx"), str(tmp_path / "q.onnx"), weight_type=QuantType.QInt8)
    result = analyze(tmp_path / "q.onnx")
    lstm = next(n for n in result.nodes if n.op_type == "DynamicQuantizeLSTM")
    assert lstm.macs == 16 * 2 * 4 * 64 * (32 + 64) and result.coverage.complete


def test_deform_conv_counts_conv_macs_and_sampling() -> None:
    node = analyze(decode.deform_conv_model(channels=8, out_channels=16, size=16)).node("deform")
    assert node.macs == 16 * 16 * 16 * 8 * 9
    assert node.flops > 2 * node.macs  # bilinear sampling on top


def _nbits_model() -> object:
    n, k, block = 64, 128, 32
    packed = np.zeros((n, k // block, block // 2), np.uint8)
    node = helper.make_node(
        "MatMulNBits",
        ["x", "b", "scales", "zp"],
        ["y"],
        name="mm",
        domain="com.microsoft",
        N=n,
        K=k,
        bits=4,
        block_size=block,
    )
    graph = helper.make_graph(
        [node],
        "int4",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(packed, "b"),
            numpy_helper.from_array(np.ones(n * k // block, np.float32), "scales"),
            numpy_helper.from_array(np.zeros(n * 2, np.uint8), "zp"),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def test_packed_int4_weights_count_elements_not_bytes() -> None:
    result = analyze(_nbits_model())
    assert result.total.params == 64 * 128 + 64 * 4 + 64 * 4  # weights, scales, zero points
    assert result.node("mm").macs == 2 * 64 * 128


def test_precision_of_qdq_and_int4_models() -> None:
    assert model_precision(_nbits_model()) == "int4"  # type: ignore[arg-type]
    node = helper.make_node("DequantizeLinear", ["w_q", "scale", "zero"], ["w"], name="dq")
    matmul = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    graph = helper.make_graph(
        [node, matmul],
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.ones((4, 4), np.int8), "w_q"),
            numpy_helper.from_array(np.array(0.1, np.float32), "scale"),
            numpy_helper.from_array(np.array(0, np.int8), "zero"),
        ],
    )
    assert model_precision(helper.make_model(graph)) == "int8"
