"""The static memory estimate: weights plus the peak of live activations over the schedule.

The schedule is the analysis' node order (topological, as onnxruntime's sequential executor
runs the main graph).  A tensor a node writes is live from that node to its last reader; at each
node its outputs are allocated before its inputs are freed, as an allocator must; views share their
input's buffer and elementwise ops may write in place (:func:`static_memory`).  Graph outputs
are counted whole beside the intermediates: onnxruntime plans the intermediates into one block
held for the run (its memory pattern) and allocates the outputs apart, so a 3-MatMul chain held
weights + the peak of two live intermediates + its output, to the byte.  Graph inputs are the
caller's buffers and are left out unless asked for.  A control-flow node's body is counted as its
outputs only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_roofline.analysis.types import ModelAnalysis

__all__ = ["Lifetime", "StaticMemory", "constant_tensors", "lifetimes", "static_memory"]


@dataclass(frozen=True)
class StaticMemory:
    """What the graph alone says: weight bytes, the peak of live activations and where it falls."""

    weights: int
    peak_activations: int
    peak_node: str  # the node at whose run the live activations peak ("" for an empty graph)
    live_after: tuple[tuple[str, int], ...]  # (node, live activation bytes at its end), in order
    live_peak: int = 0  # the most activation bytes live at once, unpacked (a run allocating node by node)

    @property
    def peak(self) -> int:
        """Weights plus peak live activations."""
        return self.weights + self.peak_activations

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict."""
        return {
            "weights": self.weights,
            "peak_activations": self.peak_activations,
            "peak": self.peak,
            "peak_node": self.peak_node,
        }


def constant_tensors(analysis: ModelAnalysis) -> set[str]:
    """Weights, and what nodes compute from weights alone (folded at load time, as onnxruntime's
    constant folding does: T5's tied embedding transposed for its LM head, 33 MB, is no activation)."""
    constant = {name for name, info in analysis.tensors.items() if info.is_weight}
    for node in analysis.nodes:
        if not node.graph and node.inputs and all(not t or t in constant for t in node.inputs):
            constant.update(t for t in node.outputs if t)
    return constant


def static_memory(analysis: ModelAnalysis, count_inputs: bool = False) -> StaticMemory:
    """Liveness of the main graph's tensors over its topological schedule.

    Buffers, as onnxruntime's allocation planner hands them out: a view (Reshape, Flatten,
    Squeeze, Unsqueeze, Identity) writes into its input's buffer; an elementwise op writes into
    the buffer of an input it is the last reader of when that buffer is large enough (in place);
    any other output gets a new buffer, freed when the last tensor in it is read for the last time.
    The later runs of onnxruntime take the intermediates from one block planned on the first run
    (its memory pattern): each new buffer goes into the gap between live ones that wastes least,
    else after the last; the block's size is the packed peak, ``peak_activations`` (with the graph's
    outputs beside it); ``live_peak`` is the unpacked one (a run allocating node by node).
    MobileNetV2: 11.186 MB unpacked, 11.989 MB packed, onnxruntime's later runs requested 11.989 MB.
    """
    from pytest_roofline.analysis.costs import ELEMENTWISE_FLOPS
    from pytest_roofline.analysis.views import ALIAS_OPS

    nodes = [node for node in analysis.nodes if not node.graph]
    tensors = analysis.tensors
    inputs = set(analysis.input_shapes)
    outputs = set(analysis.graph_outputs)
    constant = constant_tensors(analysis)

    def size(name: str) -> int:
        info = tensors.get(name)
        return info.nbytes if info is not None and name not in constant else 0

    read = {tensor for node in nodes for tensor in node.inputs}
    weights = sum(info.nbytes for name, info in tensors.items() if info.is_weight and name in read)
    last_use: dict[str, int] = {}
    for position, node in enumerate(nodes):
        for tensor in node.inputs:
            if tensor:
                last_use[tensor] = position
    held = sum(size(name) for name in outputs)  # outputs: allocated apart, held to the end
    buffer_of: dict[str, str] = {}  # live tensor -> the buffer holding it (named by its first tensor)
    buffers: dict[str, int] = {}  # live buffer -> bytes
    if count_inputs:
        for name in inputs:
            buffer_of[name], buffers[name] = name, size(name)
    holders = {bid: {bid} for bid in buffers}  # live buffer -> the live tensors in it
    current = sum(buffers.values())
    peak, peak_node, after = current, "", []
    offsets: dict[str, int] = {}  # live planned buffer -> its offset in the pattern's block
    block = 0  # the pattern block's size: the packed peak
    for position, node in enumerate(nodes):
        for tensor in node.outputs:
            if not tensor or tensor in buffer_of or tensor in outputs:
                continue
            need = size(tensor)
            reuse = None
            if node.op_type in ALIAS_OPS and node.inputs and node.inputs[0] in buffer_of:
                reuse = buffer_of[node.inputs[0]]
            elif node.op_type in ELEMENTWISE_FLOPS:
                for source in node.inputs:
                    bid = buffer_of.get(source)
                    if bid is None or source in inputs or buffers[bid] < need:
                        continue
                    if all(last_use.get(t, -1) <= position for t in holders[bid]):  # read last here
                        reuse = bid
                        break
            if reuse is None:
                offsets[tensor] = _best_fit(offsets, buffers, need)
                buffer_of[tensor], buffers[tensor], holders[tensor] = tensor, need, {tensor}
                block = max(block, offsets[tensor] + need)
                current += need
            else:
                buffer_of[tensor] = reuse
                holders[reuse].add(tensor)
        if current > peak or not peak_node:
            peak, peak_node = max(peak, current), node.name
        for tensor in [*node.inputs, *node.outputs]:
            if tensor in buffer_of and last_use.get(tensor, -1) <= position:
                bid = buffer_of.pop(tensor)
                holders[bid].discard(tensor)
                if not holders[bid]:
                    current -= buffers.pop(bid)
                    del holders[bid]
                    offsets.pop(bid, None)
        after.append((node.name, current))
    return StaticMemory(
        weights=weights,
        peak_activations=max(block, peak) + held,
        peak_node=peak_node,
        live_after=tuple(after),
        live_peak=peak + held,
    )


def _best_fit(offsets: dict[str, int], sizes: dict[str, int], size: int) -> int:
    """Where onnxruntime's memory-pattern planner (``MemPatternPlanner::TraceAllocation``) puts a
    new buffer of ``size`` bytes among the live ones (``offsets``, their ``sizes``): the gap between
    live buffers, in offset order, that wastes least; else after the last one."""
    placed = sorted((offsets[b], sizes[b]) for b in offsets)
    best = placed[-1][0] + placed[-1][1] if placed else 0
    waste = None
    current = 0
    for offset, length in placed:
        if offset >= current:
            gap = offset - current
            if gap >= size and (waste is None or gap - size < waste):
                waste, best = gap - size, current
        current = max(current, offset + length)
    return best


@dataclass(frozen=True)
class Lifetime:
    """One activation's life over the schedule: the node writing it, its last reader, its bytes."""

    tensor: str
    producer: str
    last_reader: str  # "" for a graph output: live to the end of the run
    end: int  # position of the last reader in the schedule (len(schedule) for a graph output)
    bytes: int
    shape: tuple[int, ...]


def lifetimes(analysis: ModelAnalysis) -> dict[str, Lifetime]:
    """The activations the main graph's nodes write, with how long each stays live."""
    nodes = [node for node in analysis.nodes if not node.graph]
    outputs = set(analysis.graph_outputs)
    last: dict[str, tuple[int, str]] = {}
    for position, node in enumerate(nodes):
        for tensor in node.inputs:
            if tensor:
                last[tensor] = (position, node.name)
    found: dict[str, Lifetime] = {}
    constant = constant_tensors(analysis)
    for position, node in enumerate(nodes):
        for tensor in node.outputs:
            info = analysis.tensors.get(tensor)
            if not tensor or info is None or tensor in constant:
                continue
            end, reader = (len(nodes), "") if tensor in outputs else last.get(tensor, (position, node.name))
            found[tensor] = Lifetime(tensor, node.name, reader, end, info.nbytes, info.shape)
    return found
