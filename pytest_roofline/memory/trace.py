"""Memory from onnxruntime's profiler: the arena's counters on each node event.

onnxruntime 1.32 writes, on every ``<node>_kernel_time`` event of its CPU trace,
``mem_bytes_in_use`` (the arena's bytes in use at the node's end), ``mem_in_use_delta`` (their
change over the node), ``mem_in_use_peak`` (the arena's high-water mark since the session was
created) and ``mem_arena_held`` (bytes the arena holds from the system).  Measured here
(a 3-MatMul chain, 256x256 fp32 weights): the weights are allocated from the same arena (bytes in
use before the first node = the weight's 262144 bytes); the first run allocates node by node,
the later runs take one block planned from it (``memory pattern``), so every node of a later run
reads ``delta`` 0 but the outputs'.  So:

* ``weights``: bytes in use before the first run's first node;
* ``peak``: the most bytes in use at a node's end over the profiled runs (scratch a kernel frees
  inside its own run is not seen), or the high-water mark where a run raised it;
* ``requested_peak``: the most of ``mem_bytes_requested_in_use`` (what tensors asked for, before
  the arena's rounding to its bins);
* per layer, from the first run (the one that allocates node by node): its ``delta`` and the bytes
  in use at its end.

The recorded CUDA EP traces (onnxruntime 1.31 on an H200, shared/data) carry the same fields for
the CUDA EP's device arena (ResNet-50 at batch 1: 114 MB in use before the first node, the weights
and cuDNN's workspace; 135-269 MB held): read alike, the source says ``(CUDA arena)``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_roofline.memory import LayerMemory, MemoryProfile

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["first_run_outputs", "has_memory_fields", "read_nodes", "trace_memory"]

#: Bytes per element of the type names onnxruntime's profiler writes in ``output_type_shape``.
ELEMENT_BYTES = {
    "float": 4,
    "float16": 2,
    "bfloat16": 2,
    "double": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "bool": 1,
}

_KERNEL_SUFFIX = "_kernel_time"
_FIELDS = ("mem_bytes_in_use", "mem_in_use_delta", "mem_in_use_peak", "mem_arena_held")
_OPTIONAL = ("mem_bytes_requested_in_use", "mem_requested_in_use_delta")


@dataclass(frozen=True)
class _Counters:
    """One kernel event's name, start, provider and memory counters, read once."""

    name: str
    ts: float
    provider: str
    values: dict[str, int]
    output_shapes: Any = None  # the profiler's ``output_type_shape``: [{type name: dims}, ...]

    def __getitem__(self, key: str) -> int:
        return self.values.get(key, 0)


def _counters(event: dict[str, Any]) -> _Counters | None:
    """The counters of a ``<node>_kernel_time`` event carrying every memory field, else None."""
    name = str(event.get("name", ""))
    args = event.get("args")
    if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX) or not isinstance(args, dict):
        return None
    values = {}
    for key in (*_FIELDS, *_OPTIONAL):
        try:
            values[key] = int(args[key])
        except (KeyError, TypeError, ValueError):
            if key in _FIELDS:
                return None
    provider = str(args.get("provider", ""))
    shapes = args.get("output_type_shape")
    return _Counters(name[: -len(_KERNEL_SUFFIX)], float(event.get("ts", 0)), provider, values, shapes)


#: The runs whose counters are read: the first (buffer by buffer) and two on the memory pattern
#: planned from it, which every later run repeats to the byte (the gate profiles 1 + 5 runs; a
#: longer profile costs no more to read).
RUNS_READ = 3


def _node_events(events: Sequence[dict[str, Any]]) -> list[_Counters]:
    """The kernel events carrying every memory field, in time order, of the first
    :data:`RUNS_READ` runs."""
    starts = sorted(_run_starts(events))
    cutoff = starts[RUNS_READ] if len(starts) > RUNS_READ else float("inf")
    nodes = [c for c in map(_counters, events) if c is not None and c.ts < cutoff]
    return sorted(nodes, key=lambda c: c.ts)


def _run_starts(events: Sequence[dict[str, Any]]) -> list[float]:
    """When each ``model_run`` of the trace started."""
    return [
        float(e.get("ts", 0)) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"
    ]


def _on_cuda(nodes: list[_Counters]) -> bool:
    """Whether most kernel events ran on the CUDA EP (their counters are its device arena's)."""
    return sum(c.provider == "CUDAExecutionProvider" for c in nodes) * 2 > len(nodes)


def has_memory_fields(events: Sequence[dict[str, Any]]) -> bool:
    """Whether a trace's kernel events carry the arena's memory counters."""
    return any(_counters(event) is not None for event in events)


def _run_of(events: Sequence[dict[str, Any]], nodes: list[_Counters]) -> list[int]:
    """The ``model_run`` each node event belongs to (0 for all without run events)."""
    starts = sorted(_run_starts(events))
    if not starts:
        return [0] * len(nodes)
    return [max(bisect.bisect_right(starts, c.ts) - 1, 0) for c in nodes]


def trace_memory(
    events: Sequence[dict[str, Any]], nodes: list[_Counters] | None = None
) -> tuple[MemoryProfile, dict[str, LayerMemory], int] | None:
    """The memory of one inference, of each kernel (by its trace name) and the bytes requested
    before the first node (the weights, unrounded), or None without the fields; ``nodes``: the
    events already read (:func:`read_nodes`)."""
    nodes = _node_events(events) if nodes is None else nodes
    if not nodes:
        return None
    runs = _run_of(events, nodes)
    first = nodes[0]
    weights = max(first["mem_bytes_in_use"] - first["mem_in_use_delta"], 0)
    peak = max(c["mem_bytes_in_use"] for c in nodes)
    requested = max(c["mem_bytes_requested_in_use"] for c in nodes)
    asked_before = first["mem_bytes_requested_in_use"] - first["mem_requested_in_use_delta"]
    mark = first["mem_in_use_peak"]  # the high-water mark the session came in with
    for counters in nodes[1:]:
        if counters["mem_in_use_peak"] > mark:  # a run raised it: the inference's own peak, scratch included
            mark = counters["mem_in_use_peak"]
            peak = max(peak, mark)
    layers: dict[str, LayerMemory] = {}
    for counters, run in zip(nodes, runs, strict=True):
        if run != runs[0]:
            break
        before = layers.get(counters.name)  # a node run several times a run (a loop body): deltas add up
        allocated = counters["mem_in_use_delta"] + (before.allocated if before else 0)
        layers[counters.name] = LayerMemory(allocated=allocated, live=counters["mem_bytes_in_use"])
    memory = MemoryProfile(
        peak=peak,
        arena_held=max(c["mem_arena_held"] for c in nodes),
        weights=weights,
        peak_activations=max(peak - weights, 0),
        source="onnxruntime profiler (CUDA arena)" if _on_cuda(nodes) else "onnxruntime profiler",
        requested_peak=requested,
    )
    return memory, layers, max(asked_before, 0)


def read_nodes(events: Sequence[dict[str, Any]]) -> list[_Counters]:
    """The kernel events' counters, read once for :func:`trace_memory` and :func:`first_run_outputs`."""
    return _node_events(events)


def first_run_outputs(
    events: Sequence[dict[str, Any]], nodes: list[_Counters] | None = None
) -> list[tuple[str, list[tuple[int, tuple[int, ...]] | None]]]:
    """The first profiled run's kernels in the order they ran, each with its outputs' (element
    bytes, shape) as the profiler recorded them (None for a type it does not size, e.g. strings)."""
    nodes = _node_events(events) if nodes is None else nodes
    runs = _run_of(events, nodes)
    found = []
    for counters, run in zip(nodes, runs, strict=True):
        if run != runs[0]:
            break
        shapes = counters.output_shapes
        keys: list[tuple[int, tuple[int, ...]] | None] = []
        for entry in shapes if isinstance(shapes, list) else []:
            (dtype, dims), *_ = entry.items() if isinstance(entry, dict) and entry else ((None, None),)
            size = ELEMENT_BYTES.get(str(dtype))
            if size and isinstance(dims, list) and all(isinstance(d, int) and d >= 0 for d in dims):
                keys.append((size, tuple(dims)))
            else:
                keys.append(None)
        found.append((counters.name, keys))
    return found
