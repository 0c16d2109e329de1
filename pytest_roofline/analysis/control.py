"""How often each node runs: Loop and Scan bodies per iteration, the If branch that is taken.

A node's :class:`~pytest_roofline.analysis.types.NodeCost` is the cost of one execution; this
module decides ``executions`` for every node of every subgraph:

* **Loop**: the trip count ``M`` when its value is known (a constant, or shape arithmetic that
  folds), else the first dim of a scan output whose shape is resolved, else the user's binding
  (``trips={"<loop node or M tensor>": N}``, ``roofline analyze --trip NAME=N``), else 1, *assumed*
  and said. A body whose condition is computed may stop early: ``M`` is then an upper bound, said.
* **Scan**: the length of the first scan input along its scan axis.
* **If**: the branch taken when the condition folds (from constants, shapes, or the small input
  arrays the run feeds, e.g. a 0-d sample rate); else the costlier branch, marked assumed, with
  both branches' costs as a range.

Executions multiply through nesting. Nodes of an If's other branch keep their own cost and get
``executions=0``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from pytest_roofline.errors import ShapeError

from .shapes import GraphNode
from .types import ControlFlow, TensorInfo

__all__ = ["ExecutionPlan", "plan_executions", "value_inputs"]

_GRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


@dataclass(frozen=True)
class ExecutionPlan:
    """Executions per node name, which nodes rest on a guess, and the If-range of total FLOPs."""

    executions: dict[str, int] = field(default_factory=dict)
    assumed: frozenset[str] = frozenset()
    flows: tuple[ControlFlow, ...] = ()
    flops_low: int = 0
    flops_high: int = 0


def value_inputs(node: onnx.NodeProto) -> tuple[str, ...]:
    """Input tensors whose values the plan needs: a Loop's trip count and condition, an If's condition."""
    if node.op_type == "Loop":
        return tuple(node.input[:2])
    if node.op_type == "If":
        return tuple(node.input[:1])
    return ()


def plan_executions(
    items: Sequence[GraphNode],
    names: Sequence[str],
    flops: Mapping[str, int],
    tensors: Mapping[str, TensorInfo],
    values: Mapping[str, np.ndarray],
    trips: Mapping[str, int] | None = None,
) -> ExecutionPlan:
    """Executions of every node.

    Args:
        items: the nodes in :func:`~pytest_roofline.analysis.shapes.iter_nodes` order.
        names: the display name of each item (unique).
        flops: FLOPs of one execution of each node, by display name.
        tensors: resolved tensors.
        values: known values of the tensors :func:`value_inputs` asks for.
        trips: user bindings, by Loop node display name or by the name of its trip-count tensor.

    Raises:
        ShapeError: a binding names no Loop, or contradicts a trip count the graph fixes.
    """
    trips = dict(trips or {})
    if not any(item.graph for item in items):  # one flat graph (most models): one run per node
        if trips:
            raise ShapeError(
                f"--trip {sorted(trips)[0]} names no Loop node or trip-count tensor (Loop nodes: none)"
            )
        total = sum(flops.get(name, 0) for name in names)
        return ExecutionPlan(dict.fromkeys(names, 1), frozenset(), (), total, total)
    by_graph: dict[str, list[tuple[str, str, onnx.NodeProto]]] = {}
    for item, name in zip(items, names, strict=True):  # subgraph paths use the raw node names
        by_graph.setdefault(item.graph, []).append((name, item.name, item.node))
    used: set[str] = set()
    flows: dict[str, ControlFlow] = {}
    for item, name in zip(items, names, strict=True):
        node = item.node
        if node.op_type in ("Loop", "Scan") and _has_graph(node):
            flows[name] = _iterations(name, item, tensors, values, trips, used)
    unused = sorted(set(trips) - used)
    if unused:
        loops = ", ".join(n for n, f in flows.items() if f.op_type == "Loop") or "none"
        raise ShapeError(f"--trip {unused[0]} names no Loop node or trip-count tensor (Loop nodes: {loops})")

    def subtotal(path: str) -> tuple[int, int, int]:
        """FLOPs of one execution of subgraph ``path``: as costed, lowest, highest."""
        chosen = low = high = 0
        for name, raw, node in by_graph.get(path, ()):
            own = flops.get(name, 0)
            chosen, low, high = chosen + own, low + own, high + own
            subs = {attr: subtotal(f"{raw}/{attr}") for attr in _graph_attrs(node)}
            if not subs:
                continue
            if node.op_type == "If":
                flow = _branch(name, node, path, subs, values)
                flows[name] = flow
                taken = subs.get(flow.branch, (0, 0, 0))
                chosen += taken[0]
                if flow.source == "folded":
                    low, high = low + taken[1], high + taken[2]
                else:
                    low += min(s[1] for s in subs.values())
                    high += max(s[2] for s in subs.values())
                continue
            times = flows[name].trips if name in flows else 1
            times = 1 if times is None else times
            chosen += times * sum(s[0] for s in subs.values())
            low += times * sum(s[1] for s in subs.values())
            high += times * sum(s[2] for s in subs.values())
        return chosen, low, high

    _, flops_low, flops_high = subtotal("")
    executions: dict[str, int] = {}
    assumed: set[str] = set()

    def assign(path: str, times: int, guessed: bool) -> None:
        for name, raw, node in by_graph.get(path, ()):
            executions[name] = times
            if guessed:
                assumed.add(name)
            flow = flows.get(name)
            for attr in _graph_attrs(node):
                inner, inner_guess = times, guessed or (flow is not None and flow.assumed)
                if flow is not None and flow.op_type == "If":
                    inner = times if attr == flow.branch else 0
                elif flow is not None and flow.trips is not None:
                    inner = times * flow.trips
                assign(f"{raw}/{attr}", inner, inner_guess)

    assign("", 1, False)
    ordered = tuple(flows[n] for n in names if n in flows)
    return ExecutionPlan(executions, frozenset(assumed), ordered, flops_low, flops_high)


def _has_graph(node: onnx.NodeProto) -> bool:
    return any(a.type in _GRAPH_ATTRS for a in node.attribute)


def _graph_attrs(node: onnx.NodeProto) -> list[str]:
    return [a.name for a in node.attribute if a.type in _GRAPH_ATTRS]


def _body(node: onnx.NodeProto) -> onnx.GraphProto | None:
    for attr in node.attribute:
        if attr.name == "body" and attr.type == onnx.AttributeProto.GRAPH:
            return attr.g
    return None


def _int_value(values: Mapping[str, np.ndarray], tensor: str) -> int | None:
    value = values.get(tensor) if tensor else None
    if value is None or value.size != 1:
        return None
    return int(value.reshape(()).item())


def _iterations(
    name: str,
    item: GraphNode,
    tensors: Mapping[str, TensorInfo],
    values: Mapping[str, np.ndarray],
    trips: Mapping[str, int],
    used: set[str],
) -> ControlFlow:
    """Trip count of a Loop or Scan node and where it came from."""
    node = item.node
    if node.op_type == "Scan":
        attrs = {
            a.name: onnx.helper.get_attribute_value(a) for a in node.attribute if a.type not in _GRAPH_ATTRS
        }
        n_scan = int(attrs.get("num_scan_inputs", 1))
        first = node.input[len(node.input) - n_scan] if n_scan else ""
        axes = list(attrs.get("scan_input_axes") or [0] * n_scan)
        info = tensors.get(first)
        if info is not None and info.shape:
            return ControlFlow(name, "Scan", item.graph, info.shape[axes[0] % len(info.shape)], "shapes")
        return ControlFlow(name, "Scan", item.graph, 1, "assumed", note="scan length unknown, assumed 1")
    trip_tensor = node.input[0] if node.input else ""
    keys = [k for k in (name, node.name, trip_tensor) if k and k in trips]
    bound = trips[keys[0]] if keys else None
    used.update(keys)
    count = _int_value(values, trip_tensor)
    condition = _int_value(values, node.input[1] if len(node.input) > 1 else "")
    note = _early_exit_note(node)
    if condition == 0:
        return ControlFlow(
            name, "Loop", item.graph, 0, "constant", note="its condition is false: no iteration"
        )
    if count is not None:
        if bound is not None and bound != count and not note:
            raise ShapeError(
                f"--trip {keys[0]}={bound} contradicts the graph: Loop '{name}' runs {count} times"
                f" (its trip count '{trip_tensor}' folds to {count})"
            )
        source = "constant" if trip_tensor not in tensors or tensors[trip_tensor].is_weight else "shapes"
        if bound is not None and note and bound <= count:
            return ControlFlow(name, "Loop", item.graph, bound, "binding", note=f"at most {count}; {note}")
        return ControlFlow(
            name, "Loop", item.graph, count, source, note=f"at most {count}; {note}" if note else ""
        )
    carried = max(len(node.input) - 2, 0)
    for output in node.output[carried:] if not trip_tensor and bound is None else ():
        info = tensors.get(output)  # a while loop: its scan outputs' length is its trip count
        if output and info is not None and info.shape:
            counted = "a while loop: counted from the length of its scan output"
            return ControlFlow(name, "Loop", item.graph, info.shape[0], "shapes", note=counted)
    if bound is not None:
        return ControlFlow(name, "Loop", item.graph, bound, "binding", note=note)
    hint = f"bind it with --trip {name}=N (or trips={{'{name}': N}})"
    return ControlFlow(name, "Loop", item.graph, 1, "assumed", note=f"trip count unknown, assumed 1; {hint}")


def _early_exit_note(node: onnx.NodeProto) -> str:
    """'' when the body passes its condition through unchanged, else a note that it may stop early."""
    body = _body(node)
    if body is None or len(body.input) < 2 or not body.output:
        return ""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    if cond_out == cond_in:
        return ""
    for inner in body.node:
        if cond_out in inner.output:
            if inner.op_type == "Identity" and list(inner.input) == [cond_in]:
                return ""
            attrs = {a.name: a for a in inner.attribute}
            if inner.op_type == "Constant" and "value" in attrs:
                if bool(np.all(onnx.numpy_helper.to_array(attrs["value"].t))):
                    return ""
    for init in body.initializer:
        if init.name == cond_out and bool(np.all(onnx.numpy_helper.to_array(init))):
            return ""
    return "the body computes its condition and may stop early"


def _branch(
    name: str,
    node: onnx.NodeProto,
    graph: str,
    subs: Mapping[str, tuple[int, int, int]],
    values: Mapping[str, np.ndarray],
) -> ControlFlow:
    """Which branch of an If is costed."""
    low = min(s[1] for s in subs.values())
    high = max(s[2] for s in subs.values())
    condition = _int_value(values, node.input[0] if node.input else "")
    if condition is not None:
        branch = "then_branch" if condition else "else_branch"
        return ControlFlow(
            name, "If", graph, None, "folded", branch, low, high, f"condition folds to {bool(condition)}"
        )
    branch = max(subs, key=lambda attr: (subs[attr][0], attr == "then_branch"))
    other = [a for a in subs if a != branch]
    note = f"condition unknown: costed the costlier {branch}" + (
        f" (the {other[0]} costs less)" if other else ""
    )
    return ControlFlow(name, "If", graph, None, "costlier", branch, low, high, note)
