"""Shape inference with constant folding: what exporters' shape arithmetic needs.

Exporters compute reshape targets at run time: ``Shape -> Gather -> Div -> Cast -> Unsqueeze ->
Concat -> Reshape`` (TorchScript exporter, ViT's patch grid), ``Mod``/``Reshape`` of constants
feeding ``Slice`` starts (``unflatten``). ``onnx`` data propagation stops at ``Div``, ``Cast`` or
``Mod`` and onnxruntime's symbolic inference asserts on such a ``Reshape``. Here ``Shape`` of a
tensor whose shape is known becomes a constant, every node whose inputs are all small constants is
evaluated, the results become initializers, and ``onnx`` inference runs again until nothing folds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["MAX_FOLDED", "evaluate_node", "fold_and_infer"]

MAX_FOLDED = 1 << 16  # elements: a folded value larger than this is left to the node
MAX_ROUNDS = 8

_GRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
_Partial = tuple[int, "tuple[int | None, ...] | None"]
_Infer = Callable[[onnx.ModelProto], dict[str, _Partial]]
_UNFOLDABLE = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


def fold_and_infer(skeleton: onnx.ModelProto, infer: _Infer) -> dict[str, _Partial]:
    """Alternate ``infer`` and constant folding of the main graph until nothing new folds.

    Args:
        skeleton: the weightless copy (inputs bound to concrete shapes; small constants inline).
        infer: a shape inference of a model, e.g. ``onnx`` inference with data propagation.

    Returns:
        Elem type and dims of every tensor the last inference or the folding resolved.
    """
    model = onnx.ModelProto()
    model.CopyFrom(skeleton)
    values: dict[str, np.ndarray] = {
        init.name: numpy_helper.to_array(init)
        for init in model.graph.initializer
        if init.data_location != onnx.TensorProto.EXTERNAL
    }
    found: dict[str, _Partial] = {}
    for _ in range(MAX_ROUNDS):
        found = infer(model)
        folded = _fold(model.graph, values, found)
        if not folded:
            break
        kept = [node for node in model.graph.node if not all(t in values for t in node.output if t)]
        del model.graph.node[:]
        model.graph.node.extend(kept)
        model.graph.initializer.extend(numpy_helper.from_array(values[name], name) for name in folded)
        for vi in [vi for vi in model.graph.value_info if vi.name in folded]:
            model.graph.value_info.remove(vi)
    for name, value in values.items():
        elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
        found[name] = (elem, tuple(int(d) for d in value.shape))
    return found


def _fold(graph: onnx.GraphProto, values: dict[str, np.ndarray], found: Mapping[str, _Partial]) -> list[str]:
    """Evaluate what can be evaluated, in graph order; the names of the new values."""
    folded: list[str] = []
    for node in graph.node:
        outputs = [t for t in node.output if t]
        if not outputs or all(t in values for t in outputs) or node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type in _UNFOLDABLE or any(a.type in _GRAPH_ATTRS for a in node.attribute):
            continue
        results = evaluate_node(node, values, found)
        if results is None or len(results) != len(outputs):
            continue
        if any(np.asarray(r).size > MAX_FOLDED for r in results):
            continue
        for name, result in zip(outputs, results, strict=True):
            values[name] = np.asarray(result)
            folded.append(name)
    return folded


def evaluate_node(
    node: onnx.NodeProto, values: Mapping[str, np.ndarray], found: Mapping[str, _Partial]
) -> list[Any] | None:
    """The node's outputs, or None when an input is not a known value (``Shape``/``Size``: known dims)."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in ("Shape", "Size"):
        partial = found.get(node.input[0])
        dims = partial[1] if partial is not None else None
        if node.input[0] in values:
            dims = values[node.input[0]].shape
        if dims is None or any(d is None for d in dims):
            return None
        shape = np.array(dims, dtype=np.int64)
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape)), dtype=np.int64)]
        start, end = int(attrs.get("start", 0)), attrs.get("end")
        return [shape[start : None if end is None else int(end)]]
    inputs = list(node.input)
    if not all(t in values for t in inputs if t):
        return None
    if node.op_type == "Constant" and "value" in attrs:
        return [numpy_helper.to_array(attrs["value"])]
    feeds = {t: values[t] for t in inputs if t}
    try:
        from onnx.reference import ReferenceEvaluator

        return list(ReferenceEvaluator(node).run(None, feeds))
    except Exception:  # an op the reference implementation lacks or rejects: not folded
        return None
