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
from typing import TYPE_CHECKING, Any

from pytest_roofline.memory import LayerMemory, MemoryProfile

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["has_memory_fields", "trace_memory"]

_KERNEL_SUFFIX = "_kernel_time"
_FIELDS = ("mem_bytes_in_use", "mem_in_use_delta", "mem_in_use_peak", "mem_arena_held")


def _field(event: dict[str, Any], key: str) -> int | None:
    args = event.get("args")
    value = args.get(key) if isinstance(args, dict) else None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _node_events(events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The kernel events carrying every memory field, in time order."""
    nodes = [
        e
        for e in events
        if e.get("cat") == "Node"
        and str(e.get("name", "")).endswith(_KERNEL_SUFFIX)
        and all(_field(e, key) is not None for key in _FIELDS)
    ]
    return sorted(nodes, key=lambda e: float(e.get("ts", 0)))


def _on_cuda(nodes: list[dict[str, Any]]) -> bool:
    """Whether most kernel events ran on the CUDA EP (their counters are its device arena's)."""
    providers = [str((e.get("args") or {}).get("provider", "")) for e in nodes]
    return sum(p == "CUDAExecutionProvider" for p in providers) * 2 > len(providers)


def has_memory_fields(events: Sequence[dict[str, Any]]) -> bool:
    """Whether a trace's kernel events carry the arena's memory counters."""
    return bool(_node_events(events))


def _run_of(events: Sequence[dict[str, Any]], nodes: list[dict[str, Any]]) -> list[int]:
    """The ``model_run`` each node event belongs to (0 for all without run events)."""
    starts = sorted(
        float(e.get("ts", 0)) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    if not starts:
        return [0] * len(nodes)
    return [max(bisect.bisect_right(starts, float(e.get("ts", 0))) - 1, 0) for e in nodes]


def trace_memory(
    events: Sequence[dict[str, Any]],
) -> tuple[MemoryProfile, dict[str, LayerMemory], int] | None:
    """The memory of one inference, of each kernel (by its trace name) and the bytes requested
    before the first node (the weights, unrounded), or None without the fields."""
    nodes = _node_events(events)
    if not nodes:
        return None
    runs = _run_of(events, nodes)
    first = nodes[0]
    weights = max(
        int(_field(first, "mem_bytes_in_use") or 0) - int(_field(first, "mem_in_use_delta") or 0), 0
    )
    peak = max(int(_field(e, "mem_bytes_in_use") or 0) for e in nodes)
    requested = max(int(_field(e, "mem_bytes_requested_in_use") or 0) for e in nodes)
    asked_before = int(_field(first, "mem_bytes_requested_in_use") or 0) - int(
        _field(first, "mem_requested_in_use_delta") or 0
    )
    mark = int(_field(first, "mem_in_use_peak") or 0)  # the high-water mark the session came in with
    for event in nodes[1:]:
        current = int(_field(event, "mem_in_use_peak") or 0)
        if current > mark:  # a run raised it: the inference's own peak, scratch included
            peak, mark = max(peak, current), current
    layers: dict[str, LayerMemory] = {}
    for event, run in zip(nodes, runs, strict=True):
        if run != runs[0]:
            break
        name = str(event["name"])[: -len(_KERNEL_SUFFIX)]
        delta, live = int(_field(event, "mem_in_use_delta") or 0), int(_field(event, "mem_bytes_in_use") or 0)
        before = layers.get(name)  # a node run several times a run (a loop body): deltas add up
        layers[name] = LayerMemory(allocated=delta + (before.allocated if before else 0), live=live)
    memory = MemoryProfile(
        peak=peak,
        arena_held=max(int(_field(e, "mem_arena_held") or 0) for e in nodes),
        weights=weights,
        peak_activations=max(peak - weights, 0),
        source="onnxruntime profiler (CUDA arena)" if _on_cuda(nodes) else "onnxruntime profiler",
        requested_peak=requested,
    )
    return memory, layers, max(asked_before, 0)
