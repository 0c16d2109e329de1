"""An independent MAC counter: real shapes from one onnxruntime run, conv/gemm/matmul MACs only.

It shares no code with ``pytest_roofline.analysis``: every intermediate tensor becomes a graph
output, the model runs once on onnxruntime, and MACs follow from the arrays' real shapes.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort

__all__ = ["reference_macs", "runtime_shapes"]


def runtime_shapes(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """Shapes of every main-graph tensor (inputs, initializers, node outputs) after one run."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    names = {vi.name for vi in exposed.graph.output}
    for node in exposed.graph.node:
        for tensor in node.output:
            if tensor and tensor not in names:
                exposed.graph.output.append(onnx.ValueInfoProto(name=tensor))
                names.add(tensor)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(exposed.SerializeToString(), options, providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    shapes = {
        name: tuple(value.shape) for name, value in zip(outputs, session.run(outputs, feeds), strict=True)
    }
    shapes.update({name: tuple(value.shape) for name, value in feeds.items()})
    shapes.update({init.name: tuple(init.dims) for init in model.graph.initializer})
    return shapes


def reference_macs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, int]:
    """Conv, Gemm, MatMul and (ONNX, opset 23) Attention MACs per op type, from runtime shapes."""
    shapes = runtime_shapes(model, feeds)
    totals = {"Conv": 0, "Gemm": 0, "MatMul": 0, "Attention": 0}
    for node in model.graph.node:
        if node.op_type not in totals:
            continue
        out = math.prod(shapes[node.output[0]])
        a = shapes[node.input[0]]
        if node.op_type == "Conv":
            w = shapes[node.input[1]]
            totals["Conv"] += out * math.prod(w[1:])
        elif node.op_type == "Gemm":
            trans_a = any(attr.name == "transA" and attr.i for attr in node.attribute)
            totals["Gemm"] += out * (a[0] if trans_a else a[1])
        elif node.op_type == "Attention":
            # Y is (B, Hq, Sq, Dv) or (B, Sq, Hq*Dv); every Y element sums over the key sequence
            # (QK^T: Dqk MACs per score; scores = Y elements / Dv * Skv)
            key, value = shapes[node.input[1]], shapes[node.input[2]]
            heads = next((attr.i for attr in node.attribute if attr.name == "q_num_heads"), 0)
            kv_heads = next((attr.i for attr in node.attribute if attr.name == "kv_num_heads"), heads)
            if len(a) == 4:
                d_qk, d_v, kv_seq = a[3], value[3], key[2]
            else:
                d_qk, d_v, kv_seq = a[2] // heads, value[2] // kv_heads, key[1]
            if len(node.output) > 1 and node.output[1]:
                kv_seq = shapes[node.output[1]][2]  # present_key: past + new keys
            totals["Attention"] += out // d_v * kv_seq * (d_qk + d_v)
        else:
            totals["MatMul"] += out * a[-1]
    return totals
