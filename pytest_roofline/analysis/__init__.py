"""Static cost model: per-node FLOPs, MACs, bytes and params at bound shapes.

>>> from pytest_roofline.analysis import analyze
>>> result = analyze("resnet50.onnx", batch=8)  # doctest: +SKIP
>>> result.total.flops  # doctest: +SKIP
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import onnx

from pytest_roofline.model import ModelSource, ModelSpec, bind_input_shapes, load_model

from .costs import CONTAINER_OPS, MAC_OP_TYPES, VIEW_OPS, CostContext, OpCost, lookup, rule
from .shapes import GraphNode, inline_local_functions, iter_nodes, resolve_shapes
from .types import GroupCost, ModelAnalysis, NodeCost, TensorInfo, Totals

__all__ = [
    "MAC_OP_TYPES",
    "CostContext",
    "GroupCost",
    "ModelAnalysis",
    "NodeCost",
    "OpCost",
    "TensorInfo",
    "Totals",
    "analyze",
    "by_op_type",
    "published_macs",
    "rule",
]

_ZERO_BYTE_OPS = VIEW_OPS | CONTAINER_OPS
_ARGUMENT_OPS = frozenset({"Resize", "Upsample", "Pad", "Clip"})  # constant inputs are arguments
_GRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def analyze(
    model: ModelSource | ModelSpec, *, batch: int | None = None, dims: Mapping[str, int] | None = None
) -> ModelAnalysis:
    """Analyze a model at bound shapes without reading its external-data weights.

    Args:
        model: a path, a loaded ``onnx.ModelProto`` or a :class:`~pytest_roofline.model.ModelSpec`.
        batch: binds the first dim of every input whose first dim is symbolic.
        dims: binds symbolic dims by name.

    Returns:
        Per-node costs (subgraph and local-function nodes included), resolved tensors, totals.

    Raises:
        ModelError: the model cannot be loaded.
        ShapeError: a dim is unbound or a tensor's shape cannot be resolved.
    """
    if isinstance(model, ModelSpec):
        model, batch, dims = model.source, model.batch, model.dims_dict
    spec = ModelSpec.create(model, batch, dims)
    proto = load_model(model)
    input_shapes = bind_input_shapes(proto, batch, dims)
    flat, origin = inline_local_functions(proto)
    base_dir = spec.path.parent if spec.path is not None else None
    resolved = resolve_shapes(flat, input_shapes, base_dir)
    tensors = resolved.tensors
    nodes: list[NodeCost] = []
    seen_names: Counter[str] = Counter()
    counted_params: set[str] = set()
    for item in iter_nodes(flat.graph):
        name = item.name if not seen_names[item.name] else f"{item.name}_{seen_names[item.name]}"
        seen_names[item.name] += 1
        graph = item.graph or origin.get(item.node.name, "")
        nodes.append(_node_cost(item, name, graph, tensors, counted_params))
    uncosted = Counter(n.op_type for n in nodes if not n.costed)
    return ModelAnalysis(
        model_name=spec.name,
        input_shapes=dict(input_shapes),
        nodes=tuple(nodes),
        tensors=tensors,
        shape_method=resolved.method,
        uncosted=tuple(sorted(uncosted.items(), key=lambda kv: (-kv[1], kv[0]))),
        graph_outputs=tuple(vi.name for vi in proto.graph.output),
    )


def by_op_type(analysis: ModelAnalysis) -> dict[str, tuple[int, Totals]]:
    """Node count and summed costs per op type, most FLOPs first."""
    groups: dict[str, list[NodeCost]] = {}
    for node in analysis.nodes:
        groups.setdefault(node.op_type, []).append(node)
    rows = {
        op: (
            len(nodes),
            Totals(
                flops=sum(n.flops for n in nodes),
                macs=sum(n.macs for n in nodes),
                params=sum(n.params for n in nodes),
                bytes=sum(n.bytes for n in nodes),
            ),
        )
        for op, nodes in groups.items()
    }
    return dict(sorted(rows.items(), key=lambda kv: (-kv[1][1].flops, -kv[1][1].bytes, kv[0])))


def published_macs(analysis: ModelAnalysis) -> int:
    """MACs of conv, gemm, matmul and einsum nodes: the figure published model tables report."""
    return sum(n.macs for n in analysis.nodes if n.op_type in MAC_OP_TYPES)


def _attribute(attr: onnx.AttributeProto) -> object:
    """An attribute's value with strings decoded."""
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    return value


def _is_param(tensor: TensorInfo | None) -> bool:
    """Weights count as params except int64 shape/index constants and scalars."""
    return tensor is not None and tensor.is_weight and tensor.dtype != "int64" and len(tensor.shape) > 0


def _node_cost(
    item: GraphNode, name: str, graph: str, tensors: dict[str, TensorInfo], counted_params: set[str]
) -> NodeCost:
    node = item.node
    inputs = tuple(tensors.get(t) if t else None for t in node.input)
    outputs = tuple(tensors.get(t) if t else None for t in node.output)
    rule_fn = lookup(node.domain, node.op_type)
    cost = None
    if rule_fn is not None:
        attrs = {a.name: _attribute(a) for a in node.attribute if a.type not in _GRAPH_ATTRS}
        try:
            cost = rule_fn(CostContext(node=node, inputs=inputs, outputs=outputs, attrs=attrs))
        except (TypeError, ValueError, IndexError, KeyError, AttributeError, ZeroDivisionError):
            cost = None  # a form the rule does not handle (e.g. an unusual rank): bytes only
    costed = rule_fn is not None and cost is not None
    cost = cost or OpCost(flops=0)
    moves_data = node.op_type not in _ZERO_BYTE_OPS or node.domain not in ("", "ai.onnx")
    read = {t.name: t.nbytes for t in inputs if t is not None} if moves_data else {}
    written = {t.name: t.nbytes for t in outputs if t is not None} if moves_data else {}
    params = 0
    if moves_data and node.op_type not in _ARGUMENT_OPS:
        for tensor in inputs:
            if _is_param(tensor) and tensor.name not in counted_params:
                counted_params.add(tensor.name)
                params += tensor.numel
    return NodeCost(
        name=name,
        op_type=node.op_type,
        domain=node.domain,
        flops=int(cost.flops),
        macs=int(cost.macs),
        bytes_read=sum(read.values()),
        bytes_written=sum(written.values()),
        params=params,
        inputs=tuple(node.input),
        outputs=tuple(node.output),
        costed=costed,
        graph=graph,
    )
