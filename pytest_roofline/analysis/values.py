"""Values of small tensors that need no input data: constants, shapes and arithmetic on them.

Control flow and decode-time attention depend on a few scalars: a Loop's trip count, an If's
condition, GroupQueryAttention's ``total_sequence_length``. Exporters compute them from shapes
(``Shape -> Gather -> Sub``) or store them as constants. Once every tensor's shape is resolved,
:func:`known_values` evaluates the upstream slice of each wanted tensor: initializers and
``Constant`` outputs are values, ``Shape``/``Size`` of a resolved tensor are values, and a node
whose inputs are all values is evaluated with ONNX's reference implementation. A tensor that
depends on an input's data (or on a large or external weight) has no value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from pytest_roofline.model import subgraphs

from .folding import MAX_FOLDED, evaluate_node
from .shapes import iter_nodes
from .types import TensorInfo

__all__ = ["known_values"]

MAX_DEPTH = 256  # nodes upstream of a wanted tensor that are evaluated at most


def known_values(
    model: onnx.ModelProto,
    tensors: Mapping[str, TensorInfo],
    wanted: Iterable[str],
    given: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """The values of the ``wanted`` tensors that can be computed without input data, or from the
    small input arrays ``given`` (a sample rate, a flag: what decides an If in the run measured).

    Args:
        model: the model (local functions inlined), weights possibly external.
        tensors: resolved tensor infos (shapes feed ``Shape``/``Size``).
        wanted: tensor names, in any graph of the model.
        given: graph input arrays by name; those of at most ``MAX_FOLDED`` elements are values.

    Returns:
        Name -> value for each wanted tensor that has one (absent names have none).
    """
    wanted = [t for t in wanted if t]
    if not wanted:
        return {}
    producers: dict[str, onnx.NodeProto] = {}
    values: dict[str, np.ndarray] = {}
    for graph in _graphs(model.graph):
        for init in graph.initializer:
            if init.data_location != onnx.TensorProto.EXTERNAL and _small(init.dims):
                values[init.name] = numpy_helper.to_array(init)
    graph_inputs = {vi.name for vi in model.graph.input}
    for name, array in (given or {}).items():
        if name in graph_inputs and np.asarray(array).size <= MAX_FOLDED:
            values[name] = np.asarray(array)
    for item in iter_nodes(model.graph):
        for tensor in item.node.output:
            if tensor:
                producers[tensor] = item.node
    shapes = {name: (0, info.shape) for name, info in tensors.items()}
    missing: set[str] = set()
    for tensor in wanted:
        _value_of(tensor, producers, values, shapes, missing, 0)
    return {t: values[t] for t in wanted if t in values}


def _value_of(
    tensor: str,
    producers: Mapping[str, onnx.NodeProto],
    values: dict[str, np.ndarray],
    shapes: Mapping[str, tuple[int, tuple[int, ...]]],
    missing: set[str],
    depth: int,
) -> bool:
    """Compute ``tensor`` into ``values`` if possible; whether it has a value."""
    if tensor in values:
        return True
    node = producers.get(tensor)
    if tensor in missing or node is None or depth > MAX_DEPTH or node.domain not in ("", "ai.onnx"):
        missing.add(tensor)
        return False
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        missing.add(tensor)
        return False
    if node.op_type not in ("Shape", "Size"):
        for source in node.input:
            if source and not _value_of(source, producers, values, shapes, missing, depth + 1):
                missing.add(tensor)
                return False
    results = evaluate_node(node, values, shapes)
    outputs = [t for t in node.output if t]
    if (
        results is None
        or len(results) != len(outputs)
        or any(np.asarray(r).size > MAX_FOLDED for r in results)
    ):
        missing.add(tensor)
        return False
    for name, result in zip(outputs, results, strict=True):
        values[name] = np.asarray(result)
    return tensor in values


def _graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from _graphs(sub)


def _small(dims: Iterable[int]) -> bool:
    count = 1
    for dim in dims:
        count *= int(dim)
    return count <= MAX_FOLDED
