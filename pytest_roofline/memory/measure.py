"""A profiled run's memory: the backend's own figures beside the static estimate."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from pytest_roofline.memory.estimate import planned_memory, static_memory
from pytest_roofline.memory.trace import first_run_outputs, read_nodes, trace_memory
from pytest_roofline.memory.trtexec_log import log_memory

if TYPE_CHECKING:
    from pytest_roofline.analysis.types import ModelAnalysis
    from pytest_roofline.backends.base import KernelProfile
    from pytest_roofline.memory import LayerMemory, MemoryProfile

__all__ = ["profiled_memory"]


def profiled_memory(
    kernels: KernelProfile, analysis: ModelAnalysis
) -> tuple[MemoryProfile | None, dict[str, LayerMemory]]:
    """The memory of one inference (None where the backend reports none) and per kernel.

    The measured peak carries the static estimate as ``predicted_peak``: the weights the backend
    holds (the bytes requested before the first node, measured) plus the peak of live activations
    the planner model gives (memory.estimate) over the graph the backend ran where it says which
    (onnxruntime's optimized graph), else over the model's graph; it is compared with the requested
    peak (no allocator rounding).
    """
    if kernels.console_log:  # trtexec: what TensorRT logged it allocated, no per-layer counters
        logged = log_memory(kernels.console_log)
        if logged is not None:
            return logged, {}
    events = kernels.trace_events
    nodes = read_nodes(events) if events else []
    measured = trace_memory(events, nodes) if nodes else None
    if measured is None:
        return None, {}
    memory, layers, asked_before = measured
    first_run = first_run_outputs(events, nodes) if kernels.executed else None
    planned = planned_memory(kernels.executed, events, first_run) if kernels.executed else None
    static = planned if planned is not None else static_memory(analysis)
    return replace(memory, predicted_peak=asked_before + static.peak_activations), layers
