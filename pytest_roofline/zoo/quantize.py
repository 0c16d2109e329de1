"""Precision rewrites of a float model: static QDQ int8 (as ``quantize_static`` in QDQ format writes
it) and fp16 -> fp32 (a ``model.half()`` export made float again)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["float32_copy", "qdq_int8"]

#: uint8 activations, symmetric around this zero point.
ACTIVATION_ZERO_POINT = 128


def qdq_int8(
    model: onnx.ModelProto, ops: Iterable[str] = ("Conv", "MatMul", "Gemm"), name: str | None = None
) -> onnx.ModelProto:
    """``model`` with every weight-fed ``ops`` node quantized in QDQ form.

    Weights become int8 initializers behind DequantizeLinear (symmetric; per output channel for
    Conv, per tensor otherwise), biases int32 at scale ``x_scale * w_scale``; the activation
    input gets QuantizeLinear -> DequantizeLinear (uint8, zero point 128, shared by every
    consumer) and so does the output, so onnxruntime fuses each group into QLinearConv /
    QLinearMatMul / QGemm. Ops between (Sigmoid, Mul, pooling, Add) stay float.

    Activation scales are calibrated: one onnxruntime run of the float model on seeded inputs,
    each tensor's max |x| / 127 rounded up to a power of two (so the file does not change with
    the last bits another CPU computes).
    """
    ops = frozenset(ops)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    if name:
        graph.name = name
    inits = {t.name: t for t in graph.initializer}
    targets = [n for n in model.graph.node if _weight_fed(n, ops, inits)]
    scales = _calibrate(model, [t for n in targets for t in (n.input[0], n.output[0])])
    act_zero = "qdq.act_zero_point"
    graph.initializer.append(numpy_helper.from_array(np.array(ACTIVATION_ZERO_POINT, np.uint8), act_zero))

    def act_scale(tensor: str) -> str:
        name = f"{tensor}_act_scale"
        if name not in inits:
            inits[name] = numpy_helper.from_array(np.array(scales[tensor], np.float32), name)
            graph.initializer.append(inits[name])
        return name

    quantized: dict[str, str] = {}  # float activation -> its DequantizeLinear output
    dequantized: dict[str, tuple[str, np.ndarray]] = {}  # weight -> DequantizeLinear output, scale
    nodes: list[onnx.NodeProto] = []
    for original in model.graph.node:
        node = onnx.NodeProto()
        node.CopyFrom(original)
        if not _weight_fed(node, ops, inits):
            nodes.append(node)
            continue
        weight = inits[node.input[1]]
        x = node.input[0]
        if x not in quantized:
            nodes += _qdq_pair(x, f"{x}_dq", act_scale(x), act_zero)
            quantized[x] = f"{x}_dq"
        node.input[0] = quantized[x]
        per_channel = node.op_type == "Conv"
        if weight.name not in dequantized:  # a weight shared by several nodes is quantized once
            w = numpy_helper.to_array(weight)
            axes = tuple(range(1, w.ndim)) if per_channel else None
            w_scale = (np.maximum(np.abs(w).max(axis=axes), 1e-12) / 127.0).astype(np.float32)
            shaped = w_scale.reshape((-1,) + (1,) * (w.ndim - 1)) if per_channel else w_scale
            q = np.clip(np.rint(w / shaped), -127, 127).astype(np.int8)
            dequantized[weight.name] = (
                _dequantized(graph, nodes, weight.name, q, w_scale, per_channel),
                w_scale,
            )
        node.input[1], w_scale = dequantized[weight.name]
        if len(node.input) > 2 and node.input[2] in inits:
            bias = numpy_helper.to_array(inits[node.input[2]])
            b_scale = (scales[x] * w_scale).astype(np.float32)
            if not per_channel:
                b_scale = np.full(bias.shape, b_scale, np.float32)
            b_q = np.rint(bias / b_scale).astype(np.int32)
            node.input[2] = _dequantized(graph, nodes, node.input[2], b_q, b_scale, True)
        y = node.output[0]
        node.output[0] = f"{y}_float"
        nodes.append(node)
        nodes += _qdq_pair(f"{y}_float", y, act_scale(y), act_zero)
        quantized[y] = y
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in graph.node for i in n.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return out


def _weight_fed(node: onnx.NodeProto, ops: frozenset[str], inits: dict[str, onnx.TensorProto]) -> bool:
    """A node of ``ops`` whose second input is a float32 initializer."""
    if node.op_type not in ops or len(node.input) < 2 or node.input[1] not in inits:
        return False
    return inits[node.input[1]].data_type == TensorProto.FLOAT


def _calibrate(model: onnx.ModelProto, tensors: list[str]) -> dict[str, float]:
    """Per tensor, max |x| / 127 rounded up to a power of two, from one single-threaded onnxruntime
    run of ``model`` on seeded standard-normal inputs (integer inputs 0/1)."""
    import onnxruntime as ort

    from pytest_roofline.model import bind_input_shapes, make_inputs

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    wanted = list(dict.fromkeys(tensors))
    outputs = {o.name for o in probe.graph.output}
    probe.graph.output.extend(
        helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in wanted if t not in outputs
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = make_inputs(probe, bind_input_shapes(probe, 1))
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(None, feeds), strict=True))
    return {
        t: float(2.0 ** np.ceil(np.log2(max(float(np.abs(values[t]).max()), 1e-6) / 127.0))) for t in wanted
    }


def _qdq_pair(x: str, y: str, scale: str, zero: str) -> list[onnx.NodeProto]:
    """QuantizeLinear(x) -> DequantizeLinear -> y."""
    return [
        helper.make_node("QuantizeLinear", [x, scale, zero], [f"{x}_q"], name=f"{x}_QuantizeLinear"),
        helper.make_node("DequantizeLinear", [f"{x}_q", scale, zero], [y], name=f"{x}_DequantizeLinear"),
    ]


def _dequantized(
    graph: onnx.GraphProto,
    nodes: list[onnx.NodeProto],
    name: str,
    q: np.ndarray,
    scale: np.ndarray,
    axis0: bool,
) -> str:
    """Store ``q`` with its scale and zero point; a DequantizeLinear node makes it float again."""
    zero = np.zeros(scale.shape, q.dtype)
    graph.initializer.extend(
        [
            numpy_helper.from_array(q, f"{name}_quantized"),
            numpy_helper.from_array(scale, f"{name}_scale"),
            numpy_helper.from_array(zero, f"{name}_zero_point"),
        ]
    )
    node = helper.make_node(
        "DequantizeLinear",
        [f"{name}_quantized", f"{name}_scale", f"{name}_zero_point"],
        [f"{name}_dequantized"],
        name=f"{name}_DequantizeLinear",
    )
    if axis0 and scale.ndim == 1:
        node.attribute.append(helper.make_attribute("axis", 0))
    nodes.append(node)
    return f"{name}_dequantized"


def float32_copy(model: onnx.ModelProto, name: str | None = None) -> onnx.ModelProto:
    """``model`` with every float16 initializer, graph input/output, value info and Cast target
    made float32 (the export of the same network without ``.half()``)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    if name:
        graph.name = name
    for index, tensor in enumerate(graph.initializer):
        if tensor.data_type == TensorProto.FLOAT16:
            array = numpy_helper.to_array(tensor).astype(np.float32)
            graph.initializer[index].CopyFrom(numpy_helper.from_array(array, tensor.name))
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT16:
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    for node in graph.node:
        for attr in node.attribute:
            if attr.name == "to" and attr.i == TensorProto.FLOAT16:
                attr.i = TensorProto.FLOAT
    return out
