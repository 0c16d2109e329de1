"""An independent MAC counter that executes control flow: every graph runs on onnxruntime with its
intermediates exposed, and Loop, Scan and If bodies are unrolled iteration by iteration from the
real trip counts, conditions and carried values. MACs follow from the arrays' real shapes.

It shares no code with ``pytest_roofline.analysis``. Counted ops: Conv, Gemm, MatMul (and their
QLinear/Integer forms), LSTM and com.microsoft DynamicQuantizeLSTM, com.microsoft Attention,
MultiHeadAttention and GroupQueryAttention (key length from their ``present`` outputs), DeformConv.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

__all__ = ["reference_run_macs"]

_GRAPH = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def reference_run_macs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> int:
    """MACs of one run of ``model`` on ``feeds``, control flow executed."""
    opsets = list(model.opset_import)
    return _run_graph(model.graph, dict(feeds), opsets, model.ir_version)[0]


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.type not in _GRAPH}


def _run_graph(
    graph: onnx.GraphProto, scope: dict[str, np.ndarray], opsets: list, ir_version: int
) -> tuple[int, dict[str, np.ndarray]]:
    """Run ``graph`` with ``scope`` (its inputs and the outer values it reads); (MACs, all values)."""
    produced = {t for n in graph.node for t in n.output if t}
    inits = {i.name for i in graph.initializer}
    used = {t for n in graph.node for t in n.input if t} | {o.name for o in graph.output}
    for node in graph.node:  # outer values a nested body reads
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                used |= _free_names(sub)
    needed = sorted(t for t in used if t not in produced and t not in inits and t in scope)
    copy = onnx.GraphProto(name=graph.name or "g")
    copy.node.extend(graph.node)
    copy.initializer.extend(graph.initializer)
    for name in needed:
        value = scope[name]
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        copy.input.append(helper.make_tensor_value_info(name, elem, list(value.shape)))
    outputs = [t for n in graph.node for t in n.output if t]
    for name in dict.fromkeys(outputs):
        copy.output.append(onnx.ValueInfoProto(name=name))
    model = helper.make_model(copy, opset_imports=opsets)
    model.ir_version = ir_version
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    results = session.run(names, {n: scope[n] for n in needed})
    values = {**scope, **{i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}}
    values.update(zip(names, results, strict=True))
    macs = 0
    for node in graph.node:
        macs += _node_macs(node, values)
        if node.op_type in ("Loop", "Scan", "If"):
            macs += _control_flow_macs(node, values, opsets, ir_version)
    return macs, values


def _free_names(graph: onnx.GraphProto) -> set[str]:
    local = {t for n in graph.node for t in n.output} | {i.name for i in graph.input}
    local |= {i.name for i in graph.initializer}
    names = {t for n in graph.node for t in n.input if t}
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                names |= _free_names(sub)
    return names - local


def _control_flow_macs(node: onnx.NodeProto, values: dict[str, np.ndarray], opsets: list, ir: int) -> int:
    bodies = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    if node.op_type == "If":
        taken = bodies["then_branch"] if bool(values[node.input[0]]) else bodies["else_branch"]
        return _run_graph(taken, values, opsets, ir)[0]
    body = bodies["body"]
    formal = [i.name for i in body.input]
    total = 0
    if node.op_type == "Loop":
        limit = int(values[node.input[0]]) if node.input[0] else None
        cond = bool(values[node.input[1]]) if len(node.input) > 1 and node.input[1] else True
        carried = [values[t] for t in node.input[2:]]
        i = 0
        while cond and (limit is None or i < limit):
            scope = {**values, formal[0]: np.array(i, np.int64), formal[1]: np.array(cond)}
            scope.update(zip(formal[2:], carried, strict=True))
            macs, inner = _run_graph(body, scope, opsets, ir)
            total += macs
            outs = [inner[o.name] for o in body.output]
            cond, carried = bool(outs[0]), outs[1 : 1 + len(carried)]
            i += 1
        return total
    attrs = _attrs(node)
    n_scan = int(attrs["num_scan_inputs"])
    states = [values[t] for t in node.input[: len(node.input) - n_scan]]
    scans = [values[t] for t in node.input[len(node.input) - n_scan :]]
    axes = list(attrs.get("scan_input_axes", [0] * n_scan))
    steps = scans[0].shape[axes[0]]
    for step in range(steps):
        scope = dict(values)
        scope.update(zip(formal[: len(states)], states, strict=True))
        for name, array, axis in zip(formal[len(states) :], scans, axes, strict=True):
            scope[name] = np.take(array, step, axis=axis)
        macs, inner = _run_graph(body, scope, opsets, ir)
        total += macs
        states = [inner[o.name] for o in body.output[: len(states)]]
    return total


def _shape(values: dict[str, np.ndarray], name: str) -> tuple[int, ...]:
    return tuple(np.asarray(values[name]).shape)


def _node_macs(node: onnx.NodeProto, v: dict[str, np.ndarray]) -> int:
    op = node.op_type
    if not node.output or node.output[0] not in v:
        return 0
    out = math.prod(_shape(v, node.output[0]))
    if op in ("Conv", "ConvInteger", "DeformConv", "NhwcConv"):
        return out * math.prod(_shape(v, node.input[1])[1:])
    if op == "QLinearConv":
        return out * math.prod(_shape(v, node.input[3])[1:])
    if op in ("MatMul", "MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "FusedMatMul"):
        return out * _shape(v, node.input[0])[-1]
    if op == "QLinearMatMul":
        return out * _shape(v, node.input[0])[-1]
    if op in ("Gemm", "QGemm"):
        a = _shape(v, node.input[0])
        return out * (a[0] if _attrs(node).get("transA", 0) else a[1])
    if op == "MatMulNBits":
        return out * int(_attrs(node)["K"])
    if op in ("LSTM", "DynamicQuantizeLSTM"):
        x, r = _shape(v, node.input[0]), _shape(v, node.input[2])
        hidden = int(_attrs(node)["hidden_size"])
        directions = r[0]
        return directions * x[0] * x[1] * 4 * hidden * (x[2] + hidden)
    if node.domain == "com.microsoft" and op == "Attention":
        x, w = _shape(v, node.input[0]), _shape(v, node.input[1])
        heads = int(_attrs(node)["num_heads"])
        present = _shape(v, node.output[1]) if len(node.output) > 1 and node.output[1] else None
        keys = present[3] if present else x[1]
        head = w[1] // 3 // heads
        return x[0] * x[1] * x[2] * w[1] + 2 * x[0] * heads * x[1] * keys * head
    if node.domain == "com.microsoft" and op in ("MultiHeadAttention", "GroupQueryAttention"):
        q = _shape(v, node.input[0])
        heads = int(_attrs(node)["num_heads"])
        y = _shape(v, node.output[0])
        keys = _shape(v, node.output[1])[2]
        return 2 * y[0] * heads * q[1] * keys * (y[2] // heads)
    return 0
