"""Memory per inference: what one inference holds (``prof.memory``) and each layer's share.

A leaf of types: :class:`MemoryProfile` (peak bytes in use during one inference, the arena held,
the weights, the peak activations, where the figures come from, the static estimate beside
them) and :class:`LayerMemory` (bytes a layer added to what is in use, bytes live at its end).
The readers live beside it: ``trace.py`` (onnxruntime's profiler fields), ``rss.py`` (a helper
process's peak RSS over a fixed load-and-run), ``estimate.py`` (liveness over the graph's
schedule), ``trtexec_log.py`` (what TensorRT logs it allocated).  This module imports neither onnx nor numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SOURCES", "LayerMemory", "MemoryProfile", "MemoryRecord"]

#: Where a :class:`MemoryProfile`'s figures come from.
SOURCES = {
    "onnxruntime profiler": "the arena's bytes in use, per node event of onnxruntime's profiler",
    "onnxruntime profiler (CUDA arena)": "the CUDA EP's device arena, per node event of the profiler",
    "peak RSS": "a helper process's peak resident set (VmHWM) over a fixed load-and-run",
    "static estimate": "weights plus the peak of live activations over the graph's schedule",
    "trtexec-log": "weights, activation and persistent device memory TensorRT logs (trtexec's console)",
}


@dataclass(frozen=True)
class LayerMemory:
    """One layer's memory, exact where the backend reports it.

    ``allocated`` is the net change of bytes in use over the layer's run (its outputs and
    scratch it keeps, less what was freed after it: negative when it freed more); ``live`` the
    bytes in use at its end (weights included where the backend counts them in one arena).
    """

    allocated: int
    live: int

    def to_dict(self) -> dict[str, int]:
        """JSON-ready dict."""
        return {"allocated": self.allocated, "live": self.live}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LayerMemory:
        """Inverse of :meth:`to_dict`."""
        return cls(allocated=int(data["allocated"]), live=int(data["live"]))


@dataclass(frozen=True)
class MemoryProfile:
    """Memory of one inference, in bytes.

    ``peak``: bytes in use at the inference's highest point (``source`` says what counts: the
    arena of onnxruntime with the weights it holds; the process's resident set for ``peak RSS``);
    ``arena_held``: bytes the allocator holds from the system (0 where unknown); ``weights``:
    bytes of weights held where ``peak`` counts (onnxruntime: the arena's bytes before the first
    node; its CPU EP pre-packs Conv/MatMul weights outside the arena: 8.3 MB of ResNet-50's 102 MB,
    while its CUDA EP holds them all); ``peak_activations``: ``peak - weights``;
    ``predicted_peak``: the static estimate (weights + peak live activations), 0 when none;
    ``exact``: repeated runs read the same bytes (an allocator's counters), so one run decides;
    ``requested_peak``: the most bytes the tensors themselves asked for at once, before the
    allocator's rounding (onnxruntime's BFC arena serves a request from a bin of at least its size:
    MobileNetV2's first run had 11.18 MB requested in 15.65 MB in use), 0 where unknown; the static
    estimate predicts this figure.
    """

    peak: int
    arena_held: int
    weights: int
    peak_activations: int
    source: str
    predicted_peak: int = 0
    exact: bool = True
    requested_peak: int = 0

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown memory source {self.source!r}")

    @property
    def predicted_error(self) -> float | None:
        """(predicted - measured) / measured, or None without a prediction; measured is the
        requested peak where the backend reports one (what the estimate models), else the peak."""
        measured = self.requested_peak or self.peak
        if not self.predicted_peak or measured <= 0:
            return None
        return (self.predicted_peak - measured) / measured

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``prof.to_dict()["memory"]``)."""
        return {
            "peak": self.peak,
            "arena_held": self.arena_held,
            "weights": self.weights,
            "peak_activations": self.peak_activations,
            "source": self.source,
            "predicted_peak": self.predicted_peak,
            "predicted_error": self.predicted_error,
            "exact": self.exact,
            "requested_peak": self.requested_peak,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryProfile:
        """Inverse of :meth:`to_dict`."""
        return cls(
            peak=int(data["peak"]),
            arena_held=int(data.get("arena_held", 0)),
            weights=int(data.get("weights", 0)),
            peak_activations=int(data.get("peak_activations", 0)),
            source=str(data["source"]),
            predicted_peak=int(data.get("predicted_peak", 0)),
            exact=bool(data.get("exact", True)),
            requested_peak=int(data.get("requested_peak", 0)),
        )


@dataclass(frozen=True)
class MemoryRecord:
    """The memory a baseline entry keeps: the model's figures and each layer's, by layer name."""

    memory: MemoryProfile
    layers: dict[str, LayerMemory]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (a baseline entry's optional ``memory`` block)."""
        return {**self.memory.to_dict(), "layers": {k: v.to_dict() for k, v in sorted(self.layers.items())}}

    @classmethod
    def from_dict(cls, data: Any) -> MemoryRecord:
        """Strict inverse of :meth:`to_dict`.

        Raises:
            SchemaError: a missing, negative or ill-typed figure, or an unknown source.
        """
        from pytest_roofline.schema import SchemaError, as_mapping, read_int, read_mapping, read_str

        block = as_mapping(data, "'memory'")
        source = read_str(block, "source")
        if source not in SOURCES:
            raise SchemaError(f"'memory': unknown source {source!r}")
        layers = read_mapping(block, "layers", {})
        memory = MemoryProfile(
            peak=read_int(block, "peak"),
            arena_held=read_int(block, "arena_held"),
            weights=read_int(block, "weights"),
            peak_activations=read_int(block, "peak_activations"),
            source=source,
            predicted_peak=read_int(block, "predicted_peak"),
            exact=bool(block.get("exact", True)),
            requested_peak=read_int(block, "requested_peak") if "requested_peak" in block else 0,
        )
        per_layer = {}
        for name in layers:
            layer = as_mapping(layers[name], f"'memory' layer {name!r}")
            allocated = layer.get("allocated")
            if not isinstance(allocated, int) or isinstance(allocated, bool):
                raise SchemaError(f"'memory' layer {name!r}: 'allocated' must be an integer")
            per_layer[str(name)] = LayerMemory(allocated=allocated, live=read_int(layer, "live"))
        return cls(memory=memory, layers=per_layer)
