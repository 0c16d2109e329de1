"""The static memory estimate: weights plus the peak of live activations over the schedule.

A model of onnxruntime's sequential allocation planner (``core/framework/allocation_planner.cc``)
and its memory pattern (``core/framework/mem_pattern_planner.h``), run over a schedule of nodes:

* each output gets a buffer at its node: a view (Reshape, Flatten, Squeeze, Unsqueeze, Identity)
  takes its input's; an op that may work in place (:data:`IN_PLACE`: the kernel's ``MayInplace``)
  takes the buffer of that input when the node is its last user and the two have the same shape and
  element size; otherwise a freed buffer of the same shape and element size, the most recently
  freed first; otherwise a new one.  A buffer handed on stays held across the gap: it is released
  after the last node that uses any tensor in it;
* graph outputs are allocated apart and held to the end; graph inputs are the caller's buffers;
  weights and what is folded from them at load are no activations;
* the first run allocates buffer by buffer; later runs take one block planned from that run's
  allocations and frees (each buffer into the gap between live ones that wastes least, the end of
  the block included, else after the last), so the estimate is the larger of the two peaks.

:func:`static_memory` runs it over the model's graph in topological order; :func:`planned_memory`
over the graph onnxruntime itself ran (its optimized graph: NCHWc reorders, fused kernels, the
float32 copies its CPU EP inserts around fp16 ops it cannot run), in the order its profiler saw
and with the shapes it recorded.  A control-flow node's body is counted as its outputs, and a Loop
as one more copy of them at its end (:func:`kernel_held`); scratch a kernel allocates inside its
own run is not modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_roofline.backends.base import ExecutedNode as Step  # one node of a schedule, by tensor names

if TYPE_CHECKING:
    from pytest_roofline.analysis.types import ModelAnalysis
    from pytest_roofline.backends.base import ExecutedGraph

__all__ = [
    "IN_PLACE",
    "Lifetime",
    "StaticMemory",
    "constant_tensors",
    "kernel_held",
    "lifetimes",
    "main_steps",
    "planned_memory",
    "schedule_lifetimes",
    "static_memory",
]

#: Ops onnxruntime's CPU kernels let write into an input's buffer (``MayInplace(input, 0)``): the
#: input's index.  A Conv's (NCHWc or fused) fourth input is the residual it adds its result to.
IN_PLACE: Mapping[str, int] = {"Conv": 3, "FusedConv": 3} | {
    op: 0
    for op in (
        "Relu",
        "Sigmoid",
        "Tanh",
        "LeakyRelu",
        "HardSigmoid",
        "Softplus",
        "Softsign",
        "Elu",
        "Selu",
        "Celu",
        "ThresholdedRelu",
    )
}
ALIASES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
#: The first profiled run's kernels in order, with their outputs' (element bytes, shape).
FirstRun = list[tuple[str, list[tuple[int, tuple[int, ...]] | None]]]
#: A buffer's shape for reuse: (element size, dims as numbers or symbols); None where unknown (never reused).
Key = tuple[int, tuple[int | str, ...]] | None


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


@dataclass
class _Planner:
    """The planner's state over a schedule (:func:`_plan`)."""

    key: Callable[[str], Key]
    uses: dict[str, int]
    buffer_of: dict[str, str] = field(default_factory=dict)  # tensor -> the buffer holding it
    count: dict[str, int] = field(default_factory=dict)  # buffer -> uses left
    free: list[str] = field(default_factory=list)  # buffers whose uses ran out, latest first
    allocated: dict[str, int] = field(default_factory=dict)  # buffer -> step it was allocated at
    released: dict[str, int] = field(default_factory=dict)  # buffer -> step after which it is released

    keys: dict[str, Key] = field(default_factory=dict)  # key() per tensor, asked once

    def known(self, tensor: str) -> Key:
        if tensor not in self.keys:
            self.keys[tensor] = self.key(tensor)
        return self.keys[tensor]

    def same(self, one: str, other: str) -> bool:
        mine = self.known(one)
        return mine is not None and mine == self.known(other)

    def place(self, step: Step, position: int, tensor: str) -> None:
        """The buffer ``tensor``, written by ``step``, goes into."""
        owner = None
        if step.op_type in ALIASES and step.inputs:
            if step.inputs[0] not in self.buffer_of:  # a view of the caller's input or of a weight
                return
            owner = self.buffer_of[step.inputs[0]]
        elif step.op_type in IN_PLACE and IN_PLACE[step.op_type] < len(step.inputs):
            source = step.inputs[IN_PLACE[step.op_type]]
            held = self.buffer_of.get(source)
            if held is not None and self.count.get(held) == 1 and self.same(source, tensor):
                owner = held
        if owner is None and (known := self.known(tensor)) is not None and known[1]:
            owner = next((b for b in self.free if self.same(b, tensor)), None)
            if owner is not None:
                self.free.remove(owner)
        if owner is None:
            owner, self.allocated[tensor], self.count[tensor] = tensor, position, 0
        self.buffer_of[tensor] = owner
        self.count[owner] = self.count.get(owner, 0) + self.uses.get(tensor, 0)

    def release(self, tensor: str, position: int) -> None:
        owner = self.buffer_of.get(tensor)
        if owner is None or owner not in self.count:
            return
        self.count[owner] -= 1
        if self.count[owner] == 0:
            self.free.insert(0, owner)
            self.released[owner] = position


@dataclass(frozen=True)
class _Run:
    """A plan's runtime: bytes in use during each step (first run, outputs included), the bytes of
    intermediates live after each step, the pattern's block and the outputs' bytes held at each step."""

    during: list[int]
    after: list[tuple[str, int]]
    block: int
    held: list[int]

    def estimate(self, steps: Sequence[Step], extra: Sequence[int] = ()) -> tuple[int, int, str]:
        """(the larger of the first run's peak and a later run's: the pattern's block, the outputs
        and ``extra`` at each step; the first run's peak; the step it falls at)."""
        peak, node = self.peak(steps, extra)
        later = max((held + (extra[i] if extra else 0) for i, held in enumerate(self.held)), default=0)
        return max(self.block + later, peak), peak, node

    def peak(self, steps: Sequence[Step], extra: Sequence[int] = ()) -> tuple[int, str]:
        """The first run's peak (with ``extra`` bytes per step) and the step it falls at."""
        best, node = 0, steps[0].name if steps else ""
        for position, used in enumerate(self.during):
            total = used + (extra[position] if extra else 0)
            if total > best:
                best, node = total, steps[position].name
        return best, node


def _plan(
    steps: Sequence[Step],
    key: Callable[[str], Key],
    size: Callable[[str], int],
    inputs: set[str],
    outputs: set[str],
    fixed: set[str],
) -> _Run:
    """Run the planner over ``steps`` (``fixed``: weights and folded tensors, never planned)."""
    uses: dict[str, int] = {}
    for step in steps:
        for tensor in (*step.inputs, *step.outputs):
            if tensor:
                uses[tensor] = uses.get(tensor, 0) + 1
    for tensor in (*inputs, *outputs, *fixed):
        uses[tensor] = uses.get(tensor, 0) + 1
    planner = _Planner(key, uses)
    held_outputs: list[int] = []
    produced = 0
    for position, step in enumerate(steps):
        for tensor in step.outputs:
            if not tensor or tensor in fixed:
                continue
            if tensor in outputs:
                produced += size(tensor)
                continue
            planner.place(step, position, tensor)
        held_outputs.append(produced)
        for tensor in (*step.inputs, *step.outputs):
            if tensor and tensor not in outputs:
                planner.release(tensor, position)
    return _replay(steps, planner, size, held_outputs)


def _replay(steps: Sequence[Step], planner: _Planner, size: Callable[[str], int], held: list[int]) -> _Run:
    """The runtime of a plan: bytes in use step by step (first run) and the pattern's block."""
    starts: dict[int, list[str]] = {}
    ends: dict[int, list[str]] = {}
    for buffer, position in planner.allocated.items():
        starts.setdefault(position, []).append(buffer)
        ends.setdefault(planner.released.get(buffer, len(steps)), []).append(buffer)
    current = block = 0
    offsets: dict[str, int] = {}
    sizes = {buffer: size(buffer) for buffer in planner.allocated}
    during, after = [], []
    for position, step in enumerate(steps):
        for buffer in starts.get(position, ()):
            current += sizes[buffer]
            offsets[buffer] = _best_fit(offsets, sizes, sizes[buffer], block)
            block = max(block, offsets[buffer] + sizes[buffer])
        during.append(current + held[position])
        for buffer in ends.get(position, ()):
            current -= sizes[buffer]
            offsets.pop(buffer, None)
        after.append((step.name, current))
    return _Run(during, after, block, held)


def constant_tensors(analysis: ModelAnalysis) -> set[str]:
    """Weights, and what nodes compute from weights alone (folded at load time, as onnxruntime's
    constant folding does: T5's tied embedding transposed for its LM head, 33 MB, is no activation)."""
    constant = {name for name, info in analysis.tensors.items() if info.is_weight}
    for node in analysis.nodes:
        if not node.graph and node.inputs and all(not t or t in constant for t in node.inputs):
            constant.update(t for t in node.outputs if t)
    return constant


def static_memory(analysis: ModelAnalysis, count_inputs: bool = False) -> StaticMemory:
    """The planner (module docstring) over the model's main graph in topological order.

    ``count_inputs`` adds the caller's inputs, live until their last reader, to the bytes in use.
    MobileNetV2: 11.186 MB unpacked, 11.989 MB packed, onnxruntime's later runs requested 11.989 MB.
    """
    nodes = [node for node in analysis.nodes if not node.graph]
    tensors = analysis.tensors
    constant = constant_tensors(analysis)
    read = {tensor for node in nodes for tensor in node.inputs}
    weights = sum(info.nbytes for name, info in tensors.items() if info.is_weight and name in read)

    def key(name: str) -> Key:
        info = tensors.get(name)
        return None if info is None or name in constant else (info.itemsize, tuple(info.shape))

    def size(name: str) -> int:
        info = tensors.get(name)
        return info.nbytes if info is not None and name not in constant else 0

    steps = main_steps(analysis)
    inputs = set(analysis.input_shapes)
    run = _plan(steps, key, size, inputs, set(analysis.graph_outputs), constant)
    extra = kernel_held(steps, size)
    if count_inputs:  # the caller's buffers, live until their last reader
        last = {t: i for i, step in enumerate(steps) for t in step.inputs if t in inputs}
        extra = [held + sum(size(t) for t, end in last.items() if end >= i) for i, held in enumerate(extra)]
    estimate, peak, peak_node = run.estimate(steps, extra)
    return StaticMemory(weights, estimate, peak_node, tuple(run.after), peak)


def planned_memory(
    executed: ExecutedGraph, events: Sequence[dict[str, Any]], first_run: FirstRun | None = None
) -> StaticMemory | None:
    """The planner over the graph onnxruntime ran, in the order of the first profiled run's kernel
    events, with the output shapes they recorded (None where the trace has none of its nodes);
    ``first_run``: those events already read (``memory.trace.first_run_outputs``)."""
    from pytest_roofline.memory.trace import first_run_outputs

    by_name = {node.name: node for node in executed.nodes}
    steps: list[Step] = []
    shapes: dict[str, tuple[int, tuple[int, ...]] | None] = {}
    for name, keys in first_run if first_run is not None else first_run_outputs(events):
        node = by_name.get(name)
        if node is None:
            continue
        steps.append(node)
        shapes.update(zip([t for t in node.outputs if t], keys, strict=False))
    if not steps:
        return None

    def size(name: str) -> int:
        known = shapes.get(name)
        if known is None:
            return 0
        count = 1
        for dim in known[1]:
            count *= dim
        return count * known[0]

    declared = executed.declared

    def key(name: str) -> Key:
        """What the planner compares buffers by: the declared shape of a model's own tensor (None
        where inference left a dim unknown: never reused), the run's shape of one the backend made."""
        ran = shapes.get(name)
        if ran is None or name not in declared:
            return ran
        dims = declared[name]
        if dims is None or any(d is None for d in dims):
            return None
        return ran[0], dims  # type: ignore[return-value]

    fixed = set(executed.initializers)
    run = _plan(steps, key, size, set(executed.inputs), set(executed.outputs), fixed)
    estimate, peak, peak_node = run.estimate(steps, kernel_held(steps, size))
    return StaticMemory(0, estimate, peak_node, tuple(run.after), peak)


def kernel_held(steps: Sequence[Step], size: Callable[[str], int]) -> list[int]:
    """Bytes each step's kernel holds during its run beyond its planned outputs, outside the plan.

    A Loop (onnxruntime's ``loop.cc``) keeps every iteration's scan outputs until the loop ends and
    only then allocates each output and copies them in (``ConcatenateLoopOutput``), and copies its
    last iteration's carried values out: one more copy of each output, live with them at its end.
    A Loop whose bytes depend on a condition or runtime trip count is sized by the shapes the run
    recorded.  Other kernels' scratch is not modelled."""
    return [sum(size(t) for t in step.outputs if t) if step.op_type == "Loop" else 0 for step in steps]


def _best_fit(offsets: dict[str, int], sizes: dict[str, int], size: int, block: int) -> int:
    """Where onnxruntime's memory-pattern planner (``MemPatternPlanner::TraceAllocation``) puts a
    new buffer of ``size`` bytes among the live ones (``offsets``, their ``sizes``) in a block of
    ``block`` bytes so far: the gap between live buffers, in offset order, or between the last and
    the block's end, that wastes least; else after the last one."""
    current, waste, best = 0, None, None
    for offset, length in sorted((offsets[b], sizes[b]) for b in offsets):
        if offset >= current:
            gap = offset - current
            if gap >= size and (waste is None or gap - size < waste):
                waste, best = gap - size, current
        current = max(current, offset + length)
    if current < block and block - current >= size and (waste is None or block - current - size < waste):
        best = current
    return current if best is None else best


@dataclass(frozen=True)
class Lifetime:
    """One activation's life over the schedule: the node writing it, its last reader, its bytes."""

    tensor: str
    producer: str
    last_reader: str  # "" for a graph output: live to the end of the run
    end: int  # position of the last reader in the schedule (len(schedule) for a graph output)
    bytes: int
    shape: tuple[int, ...]
    start: int = 0  # position of the producer in the schedule


def schedule_lifetimes(
    steps: Sequence[Step], sized: Mapping[str, tuple[int, tuple[int, ...]]], outputs: Collection[str]
) -> dict[str, Lifetime]:
    """How long each tensor of ``sized`` (its bytes and shape) that ``steps`` write stays live:
    until its last reader, or to the end for one of the graph's ``outputs``."""
    last: dict[str, tuple[int, str]] = {}
    for position, step in enumerate(steps):
        for tensor in step.inputs:
            if tensor:
                last[tensor] = (position, step.name)
    found: dict[str, Lifetime] = {}
    for position, step in enumerate(steps):
        for tensor in step.outputs:
            if not tensor or tensor not in sized:
                continue
            end, reader = (len(steps), "") if tensor in outputs else last.get(tensor, (position, step.name))
            nbytes, shape = sized[tensor]
            found[tensor] = Lifetime(tensor, step.name, reader, end, nbytes, shape, position)
    return found


def lifetimes(analysis: ModelAnalysis) -> dict[str, Lifetime]:
    """The activations the main graph's nodes write, with how long each stays live."""
    constant = constant_tensors(analysis)
    sized = {
        name: (info.nbytes, info.shape) for name, info in analysis.tensors.items() if name not in constant
    }
    return schedule_lifetimes(main_steps(analysis), sized, set(analysis.graph_outputs))


def main_steps(analysis: ModelAnalysis) -> list[Step]:
    """The main graph's nodes in the analysis's (topological) order, as a schedule."""
    return [
        Step(node.name, node.op_type, tuple(node.inputs), tuple(node.outputs))
        for node in analysis.nodes
        if not node.graph
    ]
