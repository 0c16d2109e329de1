"""onnxruntime profiles: parse the Chrome-trace JSON and attribute kernels to original ONNX nodes.

ORT names a kernel after the node of the *optimized* graph it runs.  Fusions rename or regroup
nodes (``MatMul_7/MatMulAddFusion``, ``Conv_0`` running ``FusedConv``, ``r1_nchwc`` after a tensor,
generic ``LayerNormalization_token_3``), so attribution works on the two graphs:

1. *anchors*: an optimized node whose name (after stripping ORT's affixes) is an original node's
   name runs that node; ``<tensor>_nchwc`` runs the producer of ``<tensor>``; an optimized node
   that writes an original tensor runs that tensor's original producer;
2. *absorption*: an original node whose output is no longer materialized in the optimized graph
   was fused: forward into the kernel of its single producer chain (epilogues such as
   Add/Relu), else backward into the kernel consuming it (LayerNorm, Gelu, attention bodies whose
   surviving input and output tensors delimit the region);
3. *helpers*: a node has one owner, but ORT may run it in several kernels (the transpose
   optimizer's ``Gather`` writing a Shape node's output, ``Split`` + ``Squeeze`` of
   ``GatherSliceToSplitFusion``, the reshapes around a ``Gemm`` made of an N-d MatMul, the
   ReduceMax/Sub/Exp/ReduceSum of a Softmax inlined from its function body).  A kernel writing
   an original tensor of a node owned elsewhere, or still without nodes but enclosed by one
   node's (or one fused kernel's) kernels in the optimized graph, lists that node too and names
   it in ``extra["shared"]``: its FLOPs stay with the owner
   (:func:`pytest_roofline.profile.build_layers` counts a node once);
4. *precision substitutions* (fp16 models on CPU): ORT runs nodes without an fp16 kernel in
   fp32, renames each widened tensor ``InsertedPrecisionFreeCast_<tensor>`` (names are compared
   without the prefix) and inserts Casts named alike.  Such a Cast runs no node: it shares the
   nodes of the kernels it serves (``serves``), and kernels that ran in fp32 say so in
   ``extra["precision"]``;
5. what is left is *folded*: constant or shape subgraphs computed at load time, and eliminated
   ``Identity``/``Dropout`` nodes.  Reorder kernels are ``layout`` work serving the neighbouring
   layer.  A kernel whose nodes cannot be found keeps empty ``onnx_nodes``.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_roofline.analysis.views import ALIAS_OPS, ELIDED_OPS, SHAPE_OPS
from pytest_roofline.backends.attribution import EPILOGUE_OPS, GraphIndex, enclosing_nodes, nearest_mapped
from pytest_roofline.backends.base import KernelProfile, KernelRecord

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import onnx

__all__ = [
    "PRECISION_PREFIX",
    "KernelEvents",
    "attribute",
    "kernel_events",
    "load_trace",
    "original_tensor",
]

LAYOUT_OPS = frozenset({"ReorderInput", "ReorderOutput", "Reorder", "MemcpyToHost", "MemcpyFromHost"})
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
# ops that move data without arithmetic: a view kernel writing their output may well run them
MOVEMENT_OPS = ALIAS_OPS | {
    "Gather",
    "GatherElements",
    "GatherND",
    "Split",
    "Slice",
    "Concat",
    "Transpose",
    "Expand",
    "Tile",
    "Pad",
    "Shape",
    "Size",
    "Cast",
    "DepthToSpace",
    "SpaceToDepth",
}
#: Prefix onnxruntime gives a tensor it moves to fp32 around a node without an fp16 kernel
#: (``InsertCastTransformer``); the Cast doing it is named after the new tensor.
PRECISION_PREFIX = "InsertedPrecisionFreeCast_"
_KERNEL_SUFFIX = "_kernel_time"
_TOKEN = re.compile(r"(_token_\d+)+$")
_UNNAMED = re.compile(r"^(?P<op>[A-Za-z][A-Za-z0-9]*)_(?P<index>\d+)$")


@dataclass(frozen=True)
class KernelEvents:
    """The ``_kernel_time`` events of one node: op, provider and seconds per profiled run."""

    name: str
    op_type: str
    provider: str
    times: tuple[float, ...]
    order: int  # first appearance in the trace (execution order)
    io_bytes: int = 0  # activation + parameter + output bytes as ORT reports them
    events: tuple[dict[str, Any], ...] = field(default=(), repr=False, compare=False)


def load_trace(path: str) -> list[dict[str, Any]]:
    """Events of an ORT profile file (a JSON array; an object with ``traceEvents`` is accepted)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    if not text.strip():
        return []
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("traceEvents", [])
    return [event for event in data if isinstance(event, dict)]


def _arg(event: dict[str, Any], key: str, default: str = "") -> str:
    args = event.get("args")
    if not isinstance(args, dict):
        return default
    value = args.get(key, default)
    return value if isinstance(value, str) else default


def _int_arg(event: dict[str, Any], key: str) -> int:
    try:
        return int(_arg(event, key, "0") or 0)
    except ValueError:
        return 0


def kernel_events(
    events: Sequence[dict[str, Any]], skip_runs: int = 0, truncated_to: float = 0.0
) -> list[KernelEvents]:
    """Group ``<node>_kernel_time`` events by node, one summed duration per ``model_run``.

    The first ``skip_runs`` runs (warm-up) are dropped.  Without ``model_run`` events every
    occurrence of a node counts as one run.  ``truncated_to``: the step (µs) the profiler truncates
    each ``dur`` to (onnxruntime's CPU profiler: whole microseconds, ``duration_cast``); half a
    step, the expected truncation, is added back per event.  It matters where a layer is many
    short events: a Scan body's 5 µs FusedGemm ran 32 times a run, and the truncated sum read 9 %
    short (109 % of its compute roof at one thread).
    """
    runs = sorted(
        (float(e.get("ts", 0)), float(e.get("ts", 0)) + float(e.get("dur", 0)))
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    starts = [start for start, _ in runs]
    per_node: dict[str, dict[int, float]] = {}
    info: dict[str, KernelEvents] = {}
    kept: dict[str, list[dict[str, Any]]] = {}
    for position, event in enumerate(sorted(events, key=lambda e: float(e.get("ts", 0)))):
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX):
            continue
        node = name[: -len(_KERNEL_SUFFIX)]
        slots = per_node.setdefault(node, {})
        if runs:
            run = bisect.bisect_right(starts, float(event.get("ts", 0))) - 1
            run = max(run, 0)
        else:
            run = len(slots)
        if run < skip_runs:
            continue
        slots[run] = slots.get(run, 0.0) + (float(event.get("dur", 0)) + truncated_to / 2) * 1e-6
        kept.setdefault(node, []).append(event)
        if node not in info:
            info[node] = KernelEvents(
                name=node,
                op_type=_arg(event, "op_name"),
                provider=_arg(event, "provider"),
                times=(),
                order=position,
                io_bytes=sum(
                    _int_arg(event, key) for key in ("activation_size", "parameter_size", "output_size")
                ),
            )
    result = []
    for node, first in info.items():
        slots = per_node[node]
        result.append(
            KernelEvents(
                name=node,
                op_type=first.op_type,
                provider=first.provider,
                times=tuple(slots[run] for run in sorted(slots)),
                order=first.order,
                io_bytes=first.io_bytes,
                events=tuple(kept[node]),
            )
        )
    return sorted(result, key=lambda k: k.order)


def _name_candidates(name: str) -> list[str]:
    """``name`` and the original names ORT may have derived it from."""
    candidates = [name]
    base = _TOKEN.sub("", name[6:] if name.startswith("fused ") else name)
    if "/" in base and base.rstrip("/").rsplit("/", 1)[-1].endswith("Fusion"):
        base = base.rstrip("/").rsplit("/", 1)[0]
    base = _TOKEN.sub("", base)
    if base != name:
        candidates.append(base)
    return candidates


def original_tensor(name: str) -> str:
    """The original tensor an optimized-graph tensor holds: without :data:`PRECISION_PREFIX`."""
    while name.startswith(PRECISION_PREFIX):
        name = name[len(PRECISION_PREFIX) :]
    return name


def _precision_cast(node: onnx.NodeProto | None) -> str | None:
    """How an ORT-inserted precision Cast serves: ``"readers"`` or ``"writer"``; None otherwise.

    Such a Cast converts one original tensor between fp16 and fp32: its input and output are the
    same tensor but for :data:`PRECISION_PREFIX` on the fp32 side.  Into fp32 it exists for the
    nodes reading its output (they have no fp16 kernel); back to fp16, for the node that wrote
    its input in fp32.
    """
    if node is None or node.op_type != "Cast" or not node.input or not node.output:
        return None
    source, target = node.input[0], node.output[0]
    if source == target or original_tensor(source) != original_tensor(target):
        return None
    return "readers" if len(target) > len(source) else "writer"


class _Graph:
    """The original graph (a :class:`GraphIndex`) plus consumers, outputs and load-time nodes."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.index = GraphIndex.from_model(model)
        self.names = self.index.order
        self.producer = self.index.producer
        self.consumers: dict[str, list[str]] = {}
        for name in self.names:
            for tensor in self.index.node_inputs[name]:
                self.consumers.setdefault(tensor, []).append(name)
        self.outputs = {o.name for o in model.graph.output}
        self.constant = self._constant_nodes({init.name for init in model.graph.initializer})
        self.nested = _nested_names(model.graph)

    def position(self, name: str) -> int:
        """Topological position; subgraph nodes after the main graph, in discovery order."""
        if name in self.index:
            return self.index.position(name)
        return len(self.names) + self._nested_order.get(name, 0)

    @property
    def _nested_order(self) -> dict[str, int]:
        return {full: i for i, full in enumerate(self.nested.values())}

    def knows(self, name: str) -> bool:
        """Whether ``name`` is a main-graph node or a control-flow subgraph node's full path."""
        return name in self.index or name in self.nested.values()

    def _constant_nodes(self, known: set[str]) -> set[str]:
        """Nodes computable at load time: shape queries and anything fed only by constants."""
        constant: set[str] = set()
        for name in self.names:
            inputs = self.index.node_inputs[name]
            if self.index.op_types[name] in SHAPE_OPS or (inputs and all(t in known for t in inputs)):
                constant.add(name)
                known.update(self.index.node_outputs[name])
        return constant

    def op(self, name: str) -> str:
        """Op type of original node ``name``."""
        return self.index.op_types[name]


def _nested_names(graph: onnx.GraphProto, prefix: str = "") -> dict[str, str]:
    """Subgraph nodes (If/Loop/Scan bodies): local name -> ``<parent>/<attr>/<local>`` path.

    The path is the analyzer's naming; a local name used in two subgraphs maps to nothing.
    """
    found: dict[str, str] = {}
    ambiguous: set[str] = set()
    for index, node in enumerate(graph.node):
        parent = f"{prefix}{node.name or f'{node.op_type}_{index}'}"
        for attr in node.attribute:
            bodies = [attr.g] if attr.HasField("g") else list(attr.graphs)
            for body in bodies:
                path = f"{parent}/{attr.name}/"
                for inner_index, inner in enumerate(body.node):
                    local = inner.name or f"{inner.op_type}_{inner_index}"
                    if local in found:
                        ambiguous.add(local)
                    found[local] = path + local
                for local, full in _nested_names(body, path).items():
                    if local in found:
                        ambiguous.add(local)
                    found[local] = full
    return {k: v for k, v in found.items() if k not in ambiguous}


def attribute(
    original: onnx.ModelProto,
    optimized: onnx.ModelProto | None,
    kernels: Sequence[KernelEvents],
    iterations: int = 0,
) -> KernelProfile:
    """Map profiled kernels to original ONNX nodes; see the module docstring for the rules.

    ``optimized`` is the graph ORT saved through ``optimized_model_filepath`` for the profiled
    session; without it only names are matched.
    """
    graph = _Graph(original)
    opt_nodes = _optimized_nodes(optimized, kernels)
    materialized: set[str] = set()
    if optimized is not None:
        og = optimized.graph
        materialized.update(i.name for i in og.input)
        materialized.update(i.name for i in og.initializer)
        for node in og.node:
            materialized.update(original_tensor(t) for t in node.input if t)
            materialized.update(original_tensor(t) for t in node.output if t)
    owner: dict[str, str] = {}  # original node -> kernel name
    claims: dict[str, list[str]] = {k.name: [] for k in kernels}
    layout = {k.name for k in kernels if k.op_type in LAYOUT_OPS or _op(opt_nodes.get(k.name)) in LAYOUT_OPS}

    def claim(node: str, kernel: str) -> bool:
        if node in owner or not graph.knows(node):
            return False
        owner[node] = kernel
        claims[kernel].append(node)
        return True

    compute = [k for k in kernels if k.name not in layout]
    casts = {k.name: how for k in compute if (how := _precision_cast(opt_nodes.get(k.name)))}
    anchoring = [k for k in compute if k.name not in casts]  # a precision cast runs no node
    opt_main = {n.name for n in optimized.graph.node} if optimized is not None else set()
    for kernel in anchoring:  # anchors by name
        for candidate in _name_candidates(kernel.name):
            if candidate in graph.index:
                claim(candidate, kernel.name)
                break
            if candidate in graph.nested and candidate not in opt_main:  # a control-flow body's node
                claim(graph.nested[candidate], kernel.name)
                break
            tensor = original_tensor(candidate[:-6]) if candidate.endswith("_nchwc") else ""
            if tensor in graph.producer:  # NCHWc conv named after its (maybe fp32-renamed) output
                claim(graph.producer[tensor], kernel.name)
                break
    for kernel in anchoring:  # anchors by the original tensors a kernel writes
        node = opt_nodes.get(kernel.name)
        for tensor in node.output if node is not None else ():
            source = graph.producer.get(original_tensor(tensor))
            while source is not None and graph.op(source) in ELIDED_OPS:  # removed by ORT: folded
                inputs = graph.index.node_inputs[source]
                source = graph.producer.get(inputs[0]) if inputs else None
            if source is None or (node is not None and _views_only(node.op_type, graph.op(source))):
                continue
            claim(source, kernel.name)
    if optimized is not None:
        _absorb(graph, anchoring, claims, claim, owner, materialized)
    shared, served = _helpers(graph, compute, opt_nodes, claims, owner, casts)
    self_times, body_events = _self_times(kernels, claims)
    records = []
    for kernel in kernels:
        helped = shared.get(kernel.name, ())
        nodes = tuple(sorted({*claims.get(kernel.name, ()), *helped}, key=graph.position))
        is_layout = kernel.name in layout
        extra: dict[str, Any] = {"provider": kernel.provider}
        if kernel.events:  # the profiler's cost is per event (profile.profiler_scales)
            extra["events_per_run"] = _per_run(kernel) + body_events.get(kernel.name, 0.0)
        if is_layout:
            extra["bytes"] = kernel.io_bytes
        elif helped:
            extra["shared"] = helped
            if not claims.get(kernel.name):  # a helper moves its own tensors, not its node's
                extra["bytes"] = kernel.io_bytes
        if kernel.name in casts:
            extra["substitution"] = "precision"
        elif _widened(opt_nodes.get(kernel.name)):
            extra["precision"] = "fp32"  # ORT ran this fp16 node in fp32
        records.append(
            KernelRecord(
                name=kernel.name,
                op_type=kernel.op_type or _op(opt_nodes.get(kernel.name)),
                onnx_nodes=() if is_layout else nodes,
                times=self_times.get(kernel.name, kernel.times),
                kind="layout" if is_layout else "compute",
                serves=_serves(kernel.name, opt_nodes) if is_layout else served.get(kernel.name),
                extra=extra,
            )
        )
    folded = tuple(name for name in graph.names if name not in owner)
    return KernelProfile(kernels=tuple(records), folded=folded, iterations=iterations)


def _self_times(
    kernels: Sequence[KernelEvents], claims: dict[str, list[str]]
) -> tuple[dict[str, tuple[float, ...]], dict[str, float]]:
    """Times of control-flow kernels without the body kernels ORT also reports inside them, and
    the body's events per run (the container's own time holds their profiler bookkeeping: the
    fence events and the recording of each body kernel's event)."""
    result: dict[str, tuple[float, ...]] = {}
    body_events: dict[str, float] = {}
    for parent in kernels:
        if parent.op_type not in CONTROL_FLOW_OPS or not claims.get(parent.name):
            continue
        prefix = claims[parent.name][0] + "/"
        own = list(parent.times)
        for child in kernels:
            if child is not parent and any(n.startswith(prefix) for n in claims.get(child.name, ())):
                if len(child.times) == len(own):
                    own = [max(a - b, 0.0) for a, b in zip(own, child.times, strict=True)]
                    body_events[parent.name] = body_events.get(parent.name, 0.0) + _per_run(child)
        result[parent.name] = tuple(own)
    return result, body_events


def _per_run(kernel: KernelEvents) -> float:
    """Profiler events of ``kernel`` per profiled run (0.0 without events)."""
    return len(kernel.events) / len(kernel.times) if kernel.times else 0.0


def _op(node: onnx.NodeProto | None) -> str:
    return node.op_type if node is not None else ""


def _views_only(kernel_op: str, node_op: str) -> bool:
    """Whether a kernel of ``kernel_op`` only reshapes a tensor that a ``node_op`` node computes.

    ORT's MatMul-to-Gemm rewrite of an N-d MatMul writes the original output through a helper
    ``Reshape`` (``gemm_output_reshape``): that Reshape does not run the bias ``Add``.  A view
    writing a data-movement node's output (the ``Squeeze`` after ``GatherSliceToSplitFusion``'s
    ``Split``) does run it.
    """
    return kernel_op in ALIAS_OPS and node_op not in MOVEMENT_OPS


def _widened(node: onnx.NodeProto | None) -> bool:
    """Whether ORT runs this optimized node in fp32 in place of fp16 (it reads a widened tensor)."""
    if node is None:
        return False
    return any(t.startswith(PRECISION_PREFIX) for t in (*node.input, *node.output))


def _absorb(graph: _Graph, compute: Iterable[KernelEvents], claims, claim, owner, materialized) -> None:
    """Give unclaimed, non-constant original nodes to the kernel they were fused into."""

    def free(node: str) -> bool:
        return node not in owner and node not in graph.constant

    changed = True
    while changed:
        changed = False
        for kernel in compute:  # forward: epilogues of a producer whose output vanished
            stack = [n for n in claims[kernel.name] if n in graph.index]  # main graph only
            while stack:
                node = stack.pop()
                for tensor in graph.index.node_outputs[node]:
                    if not tensor or tensor in materialized or tensor in graph.outputs:
                        continue
                    users = graph.consumers.get(tensor, [])
                    if len(users) == 1 and free(users[0]):
                        if graph.op(users[0]) not in EPILOGUE_OPS:
                            continue
                        if claim(users[0], kernel.name):
                            stack.append(users[0])
                            changed = True
        for kernel in compute:  # backward: the body between a fused kernel's surviving tensors
            stack = [n for n in claims[kernel.name] if n in graph.index]  # main graph only
            while stack:
                node = stack.pop()
                for tensor in graph.index.node_inputs[node]:
                    if not tensor or tensor in materialized or tensor not in graph.producer:
                        continue
                    source = graph.producer[tensor]
                    if not free(source):
                        continue
                    if graph.op(source) in ELIDED_OPS:
                        stack.append(source)  # look through it, leave it folded
                        continue
                    if claim(source, kernel.name):
                        stack.append(source)
                        changed = True


def _helpers(
    graph: _Graph,
    compute: Sequence[KernelEvents],
    opt_nodes: dict[str, onnx.NodeProto],
    claims: dict[str, list[str]],
    owner: dict[str, str],
    casts: dict[str, str],
) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """Nodes that kernels help another kernel execute (listed, cost counted in the owner's layer).

    A node has one owner, but ORT may run it in several kernels: the transpose optimizer turns
    ``Shape(Transpose(x))`` into ``Shape(x)`` + a ``Gather`` writing the Shape node's original
    output; ``GatherSliceToSplitFusion`` turns ``Gather(qkv, i)`` into a ``Split`` + one
    ``Squeeze`` per original output.  A kernel that writes an original tensor of a node owned
    elsewhere shares that node.  A kernel still without nodes shares the nodes whose kernels
    enclose it in the optimized graph (:func:`~.attribution.enclosing_nodes`): the
    ``gemm_input_reshape`` before a Gemm, the ReduceMax/Sub/Exp/ReduceSum of a Softmax that ORT
    inlined from its function body.  A precision cast (see :func:`_precision_cast`) shares the
    nodes of the kernels it serves.  Returns the shared nodes and, for casts, the kernel served.
    """
    shared: dict[str, tuple[str, ...]] = {}
    for kernel in compute:
        node = opt_nodes.get(kernel.name)
        if node is None or kernel.name in casts:
            continue
        found = {graph.producer[t] for t in map(original_tensor, node.output) if t in graph.producer}
        found = {n for n in found if owner.get(n, kernel.name) != kernel.name}
        if found:
            shared[kernel.name] = tuple(sorted(found, key=graph.position))
    producer: dict[str, str] = {}
    for name, node in opt_nodes.items():
        for tensor in node.output:
            producer[tensor] = name
    feeders = {name: [producer[t] for t in node.input if t in producer] for name, node in opt_nodes.items()}
    feeds: dict[str, list[str]] = {}
    for name, sources in feeders.items():
        for source in sources:
            feeds.setdefault(source, []).append(name)
    mapped = {name: (*claims.get(name, ()), *shared.get(name, ())) for name in opt_nodes}
    for kernel in compute:
        if kernel.name in opt_nodes and kernel.name not in casts and not mapped.get(kernel.name):
            found_nodes = enclosing_nodes(kernel.name, feeds, feeders, mapped, graph.position)
            if found_nodes:
                shared[kernel.name] = found_nodes
    mapped = {name: (*claims.get(name, ()), *shared.get(name, ())) for name in opt_nodes}
    served: dict[str, str] = {}
    for name, how in casts.items():
        targets = nearest_mapped(name, feeds if how == "readers" else feeders, mapped)
        if targets:
            served[name] = targets[0]
            shared[name] = tuple(sorted({n for t in targets for n in mapped[t]}, key=graph.position))
        elif found_nodes := enclosing_nodes(name, feeds, feeders, mapped, graph.position):
            shared[name] = found_nodes
    return shared, served


def _optimized_nodes(
    optimized: onnx.ModelProto | None, kernels: Sequence[KernelEvents]
) -> dict[str, onnx.NodeProto]:
    """Profile kernel name -> optimized-graph node (unnamed nodes appear as ``<Op>_<index>``)."""
    if optimized is None:
        return {}
    nodes = list(optimized.graph.node)
    by_name = {node.name: node for node in nodes if node.name}
    unnamed: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        if not node.name:
            unnamed.setdefault(node.op_type, []).append(node)
    result = {k.name: by_name[k.name] for k in kernels if k.name in by_name}
    pending: dict[str, list[tuple[int, str]]] = {}
    for kernel in kernels:
        match = _UNNAMED.match(kernel.name)
        if kernel.name not in result and match:
            pending.setdefault(match["op"], []).append((int(match["index"]), kernel.name))
    for op, items in pending.items():
        for node, (_, name) in zip(unnamed.get(op, []), sorted(items), strict=False):
            result[name] = node
    return result


def _serves(name: str, opt_nodes: dict[str, onnx.NodeProto]) -> str | None:
    """The compute kernel a layout kernel feeds (ReorderInput) or drains (ReorderOutput)."""
    node = opt_nodes.get(name)
    if node is None:
        return None
    names = {id(n): kname for kname, n in opt_nodes.items()}
    others = [n for n in opt_nodes.values() if n is not node and n.op_type not in LAYOUT_OPS]
    if node.op_type == "ReorderOutput" or node.op_type == "MemcpyToHost":
        sources = [n for n in others if set(n.output) & set(node.input)]
        return names[id(sources[0])] if sources else None
    sinks = [n for n in others if set(n.input) & set(node.output)]
    if sinks:
        return names[id(sinks[0])]
    sources = [n for n in others if set(n.output) & set(node.input)]
    return names[id(sources[0])] if sources else None
