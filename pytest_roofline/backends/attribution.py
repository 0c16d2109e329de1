"""Map backend layers to the original ONNX nodes: by name, by tensor boundary, by range.

Every backend renames and fuses nodes differently (see reference/FORMATS.md), but they all keep
enough of the original graph to find its nodes again: a layer's name lists some of them, its
input and output tensors bound the subgraph it executes, and a fused region names its first and
last node.  :class:`GraphIndex` answers those three questions for one ONNX graph, so each backend
module only has to say which clue it has.

The module also converts a group's byte count to the precision that actually ran
(:func:`group_cost_at_precision`, with :mod:`pytest_roofline.model.precision`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from pytest_roofline.analysis.types import GroupCost
from pytest_roofline.model.precision import precision_itemsize

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    import onnx

    from pytest_roofline.analysis.types import ModelAnalysis

    from .base import KernelProfile

__all__ = [
    "EPILOGUE_OPS",
    "GraphIndex",
    "attributed_fraction",
    "enclosing_nodes",
    "group_cost_at_precision",
    "nearest_mapped",
    "node_name",
]

# ops a kernel may absorb after its anchor (activation / bias / residual epilogues)
EPILOGUE_OPS = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Sum",
        "Max",
        "Min",
        "Relu",
        "Clip",
        "Sigmoid",
        "Tanh",
        "LeakyRelu",
        "HardSigmoid",
        "HardSwish",
        "Elu",
        "Selu",
        "Softplus",
        "PRelu",
        "Erf",
        "Gelu",
        "Sqrt",
        "Pow",
        "Exp",
        "Log",
        "Neg",
        "Abs",
        "Cast",
        "BatchNormalization",
        "QuantizeLinear",
        "DequantizeLinear",
    }
)
# Suffixes frontends append to an original node's name when they split or rename it.
_NAME_SUFFIXES = ("/WithoutBiases", "/MatMulAddFusion", "/sink_port_0", "_nchwc")
_TOKEN_SUFFIX = re.compile(r"_token_\d+$")


def node_name(node: onnx.NodeProto, index: int) -> str:
    """The node's name, or ``<OpType>_<index>`` for an unnamed node (onnxruntime's convention)."""
    return node.name or f"{node.op_type}_{index}"


@dataclass(frozen=True)
class GraphIndex:
    """Names, order and tensor connectivity of an ONNX graph's nodes (main graph only)."""

    order: tuple[str, ...]  # node names in topological (file) order
    op_types: dict[str, str] = field(repr=False)
    node_inputs: dict[str, tuple[str, ...]] = field(repr=False)
    node_outputs: dict[str, tuple[str, ...]] = field(repr=False)
    producer: dict[str, str] = field(repr=False)  # tensor name -> node name
    sources: frozenset[str] = field(repr=False)  # graph inputs and initializers

    @classmethod
    def from_model(cls, model: onnx.ModelProto) -> GraphIndex:
        """Index ``model``'s main graph."""
        order, op_types, ins, outs, producer = [], {}, {}, {}, {}
        for index, node in enumerate(model.graph.node):
            name = node_name(node, index)
            order.append(name)
            op_types[name] = node.op_type
            ins[name] = tuple(t for t in node.input if t)
            outs[name] = tuple(t for t in node.output if t)
            for tensor in outs[name]:
                producer[tensor] = name
        sources = {vi.name for vi in model.graph.input} | {t.name for t in model.graph.initializer}
        return cls(tuple(order), op_types, ins, outs, producer, frozenset(sources))

    def __contains__(self, name: object) -> bool:
        return name in self.op_types

    def position(self, name: str) -> int:
        """Topological position of node ``name``."""
        return self._positions[name]

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.order)}

    def resolve(self, name: str) -> str | None:
        """The ONNX node a backend's name stands for, or None.

        Tries the name itself, the name without frontend suffixes (``Conv_0/WithoutBiases``,
        ``X/MatMulAddFusion``, ``_token_N``), TensorRT's ``node_of_<tensor>`` and finally the name
        as an output tensor (OpenVINO names an unnamed node after its output).
        """
        candidates = [name]
        stripped = _TOKEN_SUFFIX.sub("", name)
        for suffix in _NAME_SUFFIXES:
            if stripped.endswith(suffix):
                stripped = stripped[: -len(suffix)]
        candidates.append(stripped)
        if name.startswith("node_of_"):
            candidates.append(name[len("node_of_") :])
        for candidate in candidates:
            if candidate in self.op_types:
                return candidate
        for candidate in candidates:
            if candidate in self.producer:
                return self.producer[candidate]
        return None

    def resolve_all(self, names: Iterable[str]) -> tuple[str, ...]:
        """Resolve each name; unknown names are dropped, order is topological, no duplicates."""
        found = {r for r in (self.resolve(n) for n in names) if r is not None}
        return tuple(sorted(found, key=self.position))

    def between(
        self,
        inputs: Iterable[str],
        outputs: Iterable[str],
        from_inputs: bool = False,
        stop: Iterable[str] = (),
    ) -> tuple[str, ...]:
        """The nodes computing ``outputs`` from ``inputs``: the subgraph bounded by those tensors.

        Walks back from the producers of ``outputs`` and stops at ``inputs``, graph inputs and
        initializers.  Tensors that are not in the graph are ignored.  Topological order.

        With ``from_inputs`` only nodes the ``inputs`` reach are kept (and constant nodes feeding
        them): where ``outputs`` do not descend from ``inputs`` at all, the walk back would
        otherwise take everything upstream of ``outputs`` (an output Convert after the last Gemm,
        bounded by the Gemm's own input, took 24 nodes of a ConvNeXt).

        ``stop``: further tensors the walk does not cross (those other kernels produce: a region
        never reaches through another kernel's nodes).
        """
        inputs = set(inputs)
        stop = inputs | self.sources | set(stop)
        seen: set[str] = set()
        stack = [self.producer[t] for t in outputs if t in self.producer and t not in stop]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            for tensor in self.node_inputs[current]:
                if tensor not in stop and tensor in self.producer:
                    stack.append(self.producer[tensor])
        ordered = sorted(seen, key=self.position)
        if not from_inputs:
            return tuple(ordered)
        reached, constant, kept = set(inputs), set(self.sources), []
        for node in ordered:
            tensors = self.node_inputs[node]
            if any(t in reached for t in tensors):
                reached.update(self.node_outputs[node])
                kept.append(node)
            elif all(t in constant for t in tensors):
                constant.update(self.node_outputs[node])
        feeding = {t for node in kept for t in self.node_inputs[node]}
        kept += [n for n in ordered if n not in kept and set(self.node_outputs[n]) & feeding]
        return tuple(sorted(kept, key=self.position))

    def span(self, first: str, last: str) -> tuple[str, ...]:
        """The nodes from ``first`` to ``last`` in topological order (a fused region); () if unknown."""
        a, b = self.resolve(first), self.resolve(last)
        if a is None or b is None:
            return ()
        lo, hi = sorted((self.position(a), self.position(b)))
        return self.order[lo : hi + 1]


def nearest_mapped(
    name: str, edges: Mapping[str, Iterable[str]], nodes: Mapping[str, tuple[str, ...]]
) -> list[str]:
    """The kernels nearest to ``name`` along ``edges`` that have ONNX nodes, in the order found.

    Kernels without nodes (reorders, casts, unmapped helpers) are looked through.
    """
    found: list[str] = []
    frontier, seen = list(edges.get(name, ())), {name}
    while frontier:
        current = frontier.pop(0)
        if current in seen:
            continue
        seen.add(current)
        if nodes.get(current):
            found.append(current)
        else:
            frontier.extend(edges.get(current, ()))
    return found


def enclosing_nodes(
    name: str,
    feeds: Mapping[str, Iterable[str]],
    feeders: Mapping[str, Iterable[str]],
    nodes: Mapping[str, tuple[str, ...]],
    order: Callable[[str], int],
) -> tuple[str, ...]:
    """The ONNX nodes an unmapped runtime kernel helps to execute, from its runtime neighbours.

    A backend decomposes one ONNX node into several kernels, some with names of its own that are
    absent from the ONNX graph (OpenVINO's ``Abs``+``Clamp`` inside ``Cast(int64->bool)``, the
    ``IsNaN`` of ``Attention``; ORT's helper ``Gather`` and the ``gemm_input_reshape`` it puts
    before a ``Gemm``).  Such a kernel belongs to the node whose kernels enclose it: walking the
    runtime graph from ``name`` through kernels without nodes (reorders, unmapped helpers), the
    nearest mapped kernels upstream and downstream are collected.  Nodes on both sides win; else
    the node, or the nodes of the single kernel, everything downstream reads; else, for a kernel
    feeding only graph outputs, the same upstream.  () when ambiguous.

    Args:
        name: the unmapped kernel.
        feeds: kernel -> the kernels consuming its outputs.
        feeders: kernel -> the kernels producing its inputs.
        nodes: kernel -> its ONNX nodes (empty or missing: looked through).
        order: topological position of an ONNX node (sorts the result).
    """
    up_kernels, down_kernels = nearest_mapped(name, feeders, nodes), nearest_mapped(name, feeds, nodes)
    up = {n for k in up_kernels for n in nodes[k]}
    down = {n for k in down_kernels for n in nodes[k]}
    chosen = up & down
    if not chosen and (len(down_kernels) == 1 or len(down) == 1):
        chosen = down
    if not chosen and not down_kernels and (len(up_kernels) == 1 or len(up) == 1):
        chosen = up
    return tuple(sorted(chosen, key=order))


def attributed_fraction(profile: KernelProfile, known: Iterable[str] | None = None) -> float:
    """Share of the profiled kernel time that is attributed (to ONNX nodes, or as layout).

    With ``known`` (the graph's node names) a kernel counts only if one of its nodes is known;
    this matches :func:`pytest_roofline.profile.build_layers` without needing the cost model.
    """
    known_set = set(known) if known is not None else None
    total = attributed = 0.0
    for kernel in profile.kernels:
        time = sorted(kernel.times)[len(kernel.times) // 2] if kernel.times else 0.0
        total += time
        nodes = [n for n in kernel.onnx_nodes if known_set is None or n in known_set]
        if kernel.kind == "layout" or nodes:
            attributed += time
    return attributed / total if total > 0 else 0.0


def group_cost_at_precision(analysis: ModelAnalysis, names: Iterable[str], precision: str) -> GroupCost:
    """:meth:`ModelAnalysis.group` with floating-point tensors counted at ``precision``.

    A TensorRT fp16 engine moves 2 bytes per activation and weight element; integer tensors (shapes,
    indices) keep their size.  Unknown or mixed precision: the analysis' own bytes.
    """
    return analysis.group(tuple(names), precision_itemsize(precision))
