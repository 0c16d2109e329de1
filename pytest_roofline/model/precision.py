"""What precision a model computes in, and how many bytes a float tensor takes at it.

A leaf module: the analysis, the backends and the profile all read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

__all__ = ["INT8_OPS", "model_precision", "precision_itemsize"]

_ITEMSIZE = {
    "fp32": 4,
    "f32": 4,
    "float32": 4,
    "tf32": 4,
    "fp16": 2,
    "f16": 2,
    "float16": 2,
    "bf16": 2,
    "bfloat16": 2,
    "int8": 1,
    "i8": 1,
    "u8": 1,
    "fp8": 1,
    # "int4" is weight-only (MatMulNBits): activations stay float, packed weights are counted
    # at their real bytes by the analysis, so no float itemsize applies
}

#: Ops that run on int8 data (onnxruntime's QOperator format and dynamic quantization).
INT8_OPS = frozenset(
    {
        "QLinearConv",
        "QLinearMatMul",
        "QLinearAdd",
        "QLinearMul",
        "QLinearGlobalAveragePool",
        "QLinearAveragePool",
        "QGemm",
        "QAttention",
        "ConvInteger",
        "MatMulInteger",
        "MatMulIntegerToFloat",
        "DynamicQuantizeLinear",
        "DynamicQuantizeMatMul",
        "DynamicQuantizeLSTM",
    }
)
_INT4_OPS = frozenset({"MatMulNBits", "MatMulBnb4", "GatherBlockQuantized"})


def model_precision(model: onnx.ModelProto) -> str:
    """int4 | int8 | fp16 | bf16 | fp32 | mixed: what a model's heavy ops compute in.

    int4: MatMulNBits/MatMulBnb4 (4-bit weights) or INT4/UINT4 initializers; int8: quantized ops
    (QOperator or dynamic) or a QDQ model whose DequantizeLinear nodes read int8/uint8 weights;
    else the float type of the initializers.
    """
    from onnx import TensorProto

    initializers = {init.name: init.data_type for init in model.graph.initializer}
    four_bit = {TensorProto.INT4, TensorProto.UINT4}
    for node in model.graph.node:
        bits = next((a.i for a in node.attribute if a.name == "bits"), 4)
        if node.op_type in _INT4_OPS and bits == 4:
            return "int4"
    if four_bit & set(initializers.values()):
        return "int4"
    eight_bit = {TensorProto.INT8, TensorProto.UINT8}
    for node in model.graph.node:
        if node.op_type in INT8_OPS:
            return "int8"
        if node.op_type == "DequantizeLinear" and node.input and initializers.get(node.input[0]) in eight_bit:
            return "int8"
    floats = set(initializers.values()) & {
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.BFLOAT16,
        TensorProto.DOUBLE,
    }
    if floats == {TensorProto.FLOAT16}:
        return "fp16"
    if floats == {TensorProto.BFLOAT16}:
        return "bf16"
    return "mixed" if len(floats) > 1 else "fp32"


def precision_itemsize(precision: str) -> float | None:
    """Bytes per element of floating-point tensors at ``precision`` (None for unknown/mixed)."""
    return _ITEMSIZE.get(precision.lower())
