"""Static cost model: per-node FLOPs, MACs, bytes and params at bound shapes.

>>> from pytest_roofline.analysis import analyze
>>> result = analyze("resnet50.onnx", batch=8)  # doctest: +SKIP
>>> result.total.flops  # doctest: +SKIP
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import replace

import numpy as np
import onnx

from pytest_roofline.model import ModelSource, ModelSpec, bind_input_shapes, load_model

from . import contrib  # noqa: F401  (registers the com.microsoft rules)
from .consistency import check_consistency
from .control import plan_executions, value_inputs
from .costs import (
    CONTAINER_OPS,
    MAC_OP_TYPES,
    VIEW_OPS,
    CostContext,
    OpCost,
    logical_elements,
    lookup,
    rule,
    wanted_values,
)
from .shapes import GraphNode, inline_local_functions, iter_nodes, resolve_shapes
from .traffic import Touch, lookup_traffic
from .types import (
    FORM_NOT_HANDLED,
    NO_RULE,
    SHAPE_UNRESOLVED,
    ControlFlow,
    Coverage,
    GroupCost,
    ModelAnalysis,
    NodeCost,
    TensorInfo,
    Totals,
)
from .values import known_values
from .views import ALIAS_OPS

__all__ = [
    "MAC_OP_TYPES",
    "ControlFlow",
    "CostContext",
    "Coverage",
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
    model: ModelSource | ModelSpec,
    *,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    trips: Mapping[str, int] | None = None,
    proto: onnx.ModelProto | None = None,
    input_values: Mapping[str, np.ndarray] | None = None,
) -> ModelAnalysis:
    """Analyze a model at bound shapes without reading its external-data weights.

    Args:
        model: a path, a loaded ``onnx.ModelProto`` or a :class:`~pytest_roofline.model.ModelSpec`.
        batch: binds the first dim of every input whose first dim is symbolic.
        dims: binds symbolic dims by name.
        trips: binds the trip count of Loop nodes whose count the graph does not fix, by the Loop
            node's name (its display name for a nested loop) or the name of its trip-count input.
        proto: ``model`` as :func:`~pytest_roofline.model.load_model` loaded it already, when
            the caller has it (read, not changed, and not loaded again); ``model`` still names
            the file whose directory holds its external data.
        input_values: the input arrays the run feeds, by name: small ones (a sample rate, a
            flag) decide the If branches they condition, which are then costed as taken.

    Returns:
        Per-node costs (subgraph and local-function nodes included, each with its executions per
        run), resolved tensors, control-flow decisions, totals and their coverage.

    Raises:
        ModelError: the model cannot be loaded.
        ShapeError: a dim is unbound, a tensor's shape cannot be resolved, bound dims contradict
            the graph's shape arithmetic, or a trip-count binding names no Loop or contradicts it.
    """
    if isinstance(model, ModelSpec):
        source: ModelSource = model.source
        batch, dims = model.batch, model.dims_dict
    else:
        source = model
    spec = ModelSpec.create(source, batch, dims)
    if proto is None:
        proto = load_model(source)
    input_shapes = bind_input_shapes(proto, batch, dims)
    flat, origin = inline_local_functions(proto)
    base_dir = spec.path.parent if spec.path is not None else None
    resolved = resolve_shapes(flat, input_shapes, base_dir, dims)
    tensors = resolved.tensors
    check_consistency(flat, tensors, dims or {})
    items = list(iter_nodes(flat.graph))
    names = _display_names(items)
    wanted = {t for item in items for t in (*value_inputs(item.node), *wanted_values(item.node))}
    values = known_values(flat, tensors, wanted, input_values)
    nodes: list[NodeCost] = []
    counted_params: set[str] = set()
    shared = _held_elsewhere(flat.graph, items)
    copied = _body_outputs(items) | {vi.name for vi in flat.graph.output}
    for item, name in zip(items, names, strict=True):
        graph = item.graph or origin.get(item.node.name, "")
        nodes.append(_node_cost(item, name, graph, tensors, counted_params, values, shared, copied))
    plan = plan_executions(items, names, {n.name: n.flops for n in nodes}, tensors, values, trips)
    if plan.flows:
        nodes = [
            replace(n, executions=plan.executions.get(n.name, 1), assumed=n.name in plan.assumed)
            for n in nodes
        ]
    uncosted = Counter(n.op_type for n in nodes if not n.costed and n.reason == NO_RULE)
    return ModelAnalysis(
        model_name=spec.name,
        input_shapes=dict(input_shapes),
        nodes=tuple(nodes),
        tensors=tensors,
        shape_method=resolved.method,
        uncosted=tuple(sorted(uncosted.items(), key=lambda kv: (-kv[1], kv[0]))),
        graph_outputs=tuple(vi.name for vi in proto.graph.output),
        control_flow=plan.flows,
        flops_range=(plan.flops_low, plan.flops_high) if plan.flops_low != plan.flops_high else None,
    )


def _held_elsewhere(graph: onnx.GraphProto, items: list[GraphNode]) -> set[str]:
    """Tensors whose buffer a node may not write into: graph inputs, initializers, graph outputs,
    tensors with more than one consumer, and every tensor a subgraph sees (its caller holds them)."""
    uses = Counter(t for item in items for t in item.node.input if t)
    held = {t for t, count in uses.items() if count > 1}
    held |= {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    held |= {vi.name for vi in graph.output}
    held |= {t for item in items if item.graph for t in item.node.input}
    return held


def _body_outputs(items: list[GraphNode]) -> frozenset[str]:
    """Outputs of Loop/Scan/If bodies: the caller copies each out of the body every iteration
    (scan outputs into the stacked output, carried state into the next iteration's input)."""
    found: set[str] = set()
    for item in items:
        for attr in item.node.attribute:
            bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            found.update(vi.name for body in bodies for vi in body.output)
    return frozenset(found)


def _display_names(items: list[GraphNode]) -> list[str]:
    """Node names made unique: a repeated name gets ``_1``, ``_2``, ..."""
    seen: Counter[str] = Counter()
    names = []
    for item in items:
        names.append(item.name if not seen[item.name] else f"{item.name}_{seen[item.name]}")
        seen[item.name] += 1
    return names


def by_op_type(analysis: ModelAnalysis) -> dict[str, tuple[int, Totals]]:
    """Node count and summed costs per op type, most FLOPs first."""
    groups: dict[str, list[NodeCost]] = {}
    for node in analysis.nodes:
        groups.setdefault(node.op_type, []).append(node)
    rows = {
        op: (
            len(nodes),
            Totals(
                flops=sum(n.total_flops for n in nodes),
                macs=sum(n.total_macs for n in nodes),
                params=sum(n.params for n in nodes),
                bytes=sum(n.total_bytes for n in nodes),
            ),
        )
        for op, nodes in groups.items()
    }
    return dict(sorted(rows.items(), key=lambda kv: (-kv[1][1].flops, -kv[1][1].bytes, kv[0])))


def published_macs(analysis: ModelAnalysis) -> int:
    """MACs of conv, gemm, matmul and einsum nodes (all executions): the figure published tables report."""
    return sum(n.total_macs for n in analysis.nodes if n.op_type in MAC_OP_TYPES)


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
    item: GraphNode,
    name: str,
    graph: str,
    tensors: dict[str, TensorInfo],
    counted_params: set[str],
    values: Mapping[str, np.ndarray],
    held: Collection[str] = frozenset(),
    body_outputs: Collection[str] = frozenset(),
) -> NodeCost:
    node = item.node
    inputs = tuple(tensors.get(t) if t else None for t in node.input)
    outputs = tuple(tensors.get(t) if t else None for t in node.output)
    rule_fn = lookup(node.domain, node.op_type)
    cost = None
    reason = NO_RULE if rule_fn is None else ""
    attrs = {a.name: _attribute(a) for a in node.attribute if a.type not in _GRAPH_ATTRS}
    node_values = {i: values[t] for i, t in enumerate(node.input) if t in values}
    weights = {t.name for t in inputs if t is not None and t.is_weight}  # Constant outputs too
    sole_use = frozenset(i for i, t in enumerate(node.input) if t and t not in held and t not in weights)
    ctx = CostContext(
        node=node, inputs=inputs, outputs=outputs, attrs=attrs, values=node_values, sole_use=sole_use
    )
    if rule_fn is not None:
        try:
            cost = rule_fn(ctx)
        except (TypeError, ValueError, IndexError, KeyError, AttributeError, ZeroDivisionError):
            cost = None  # a form the rule does not handle (e.g. an unusual rank): bytes only
        if cost is None:
            unresolved = any(t and t not in tensors for t in (*node.input, *node.output))
            reason = SHAPE_UNRESOLVED if unresolved else FORM_NOT_HANDLED
    costed = cost is not None
    cost = cost or OpCost(flops=0)
    moves_data = node.op_type not in _ZERO_BYTE_OPS or node.domain not in ("", "ai.onnx")
    # a view writing a body's output is a copy: no buffer can alias what the Loop/Scan takes out
    # (onnxruntime ran a 16-trip Loop body's two Identity outputs for 10 % of the model's time);
    # so is one writing a graph output, a buffer the caller receives (GPT-2 with KV cache: its
    # Identities into present.*.key/value and logits were 2.6 % of onnxruntime's time)
    moves_data = moves_data or (node.op_type in ALIAS_OPS and any(t in body_outputs for t in node.output))
    touched = _touched(ctx) if moves_data else {}
    read = {t.name: t.bytes_of(touched.get(t.name)) for t in inputs if t is not None} if moves_data else {}
    written = (
        {t.name: t.bytes_of(touched.get(t.name)) for t in outputs if t is not None} if moves_data else {}
    )
    params = 0
    if moves_data and node.op_type not in _ARGUMENT_OPS:
        for index, tensor in enumerate(inputs):
            if _is_param(tensor) and tensor is not None and tensor.name not in counted_params:
                counted_params.add(tensor.name)
                params += logical_elements(node, index, tensor)
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
        reason=reason,
        touched=tuple(sorted(touched.items())),
    )


def _touched(ctx: CostContext) -> dict[str, int]:
    """Tensor -> elements the node touches, for the tensors it touches only in part (traffic rules)."""
    traffic_fn = lookup_traffic(ctx.node.domain, ctx.node.op_type)
    if traffic_fn is None:
        return {}
    try:
        touch = traffic_fn(ctx) or Touch()
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, ZeroDivisionError):
        return {}  # a form the rule does not handle: whole tensors
    parts: dict[str, int] = {}
    for names, tensors, counts in (
        (ctx.node.input, ctx.inputs, touch.reads),
        (ctx.node.output, ctx.outputs, touch.writes),
    ):
        for index, elements in counts.items():
            tensor = tensors[index] if 0 <= index < len(tensors) else None
            if tensor is not None and 0 <= elements < tensor.numel:
                name = names[index]
                parts[name] = max(parts.get(name, 0), int(elements))
    return parts
