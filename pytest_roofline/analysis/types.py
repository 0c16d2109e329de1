"""Typed, frozen results of the static cost model.

Units: FLOPs (2 per multiply-accumulate), MACs, bytes at each tensor's dtype size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

__all__ = ["GroupCost", "ModelAnalysis", "NodeCost", "TensorInfo", "Totals"]


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's resolved shape and dtype; ``is_weight`` for initializers and constants."""

    name: str
    dtype: str  # numpy dtype name: "float32", "float16", "int8", ...
    shape: tuple[int, ...]
    itemsize: int
    is_weight: bool = False

    @property
    def numel(self) -> int:
        """Number of elements."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.numel * self.itemsize


@dataclass(frozen=True)
class NodeCost:
    """Cost of one ONNX node (subgraph nodes are named ``<parent>/<attr>/<node>``)."""

    name: str
    op_type: str
    domain: str
    flops: int
    macs: int
    bytes_read: int
    bytes_written: int
    params: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    costed: bool = True  # False: no cost rule, only bytes
    graph: str = ""  # "" for the main graph, else the subgraph path

    @property
    def bytes(self) -> int:
        """Bytes read plus bytes written."""
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP/byte."""
        return self.flops / self.bytes if self.bytes else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (includes the derived ``bytes``)."""
        data = asdict(self)
        data["bytes"] = self.bytes
        data["inputs"], data["outputs"] = list(self.inputs), list(self.outputs)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeCost:
        """Inverse of :meth:`to_dict`."""
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["inputs"], fields["outputs"] = tuple(fields["inputs"]), tuple(fields["outputs"])
        return cls(**fields)


@dataclass(frozen=True)
class Totals:
    """Whole-model sums."""

    flops: int
    macs: int
    params: int
    bytes: int  # sum of every node's bytes (unfused)


@dataclass(frozen=True)
class GroupCost:
    """Cost of a group of nodes run as one kernel: bytes only of tensors crossing its boundary."""

    flops: int
    macs: int
    bytes: int
    params: int

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP/byte."""
        return self.flops / self.bytes if self.bytes else 0.0


@dataclass(frozen=True)
class ModelAnalysis:
    """The static analysis of a model at bound shapes."""

    model_name: str
    input_shapes: dict[str, tuple[int, ...]] = field(hash=False)
    nodes: tuple[NodeCost, ...]
    tensors: dict[str, TensorInfo] = field(hash=False, repr=False)
    shape_method: str  # which method resolved the shapes, e.g. "onnx", "symbolic", "onnxruntime"
    uncosted: tuple[tuple[str, int], ...]  # (op_type, count) of nodes without a cost rule
    graph_outputs: tuple[str, ...] = ()  # the main graph's output names

    @property
    def total(self) -> Totals:
        """Sums over all nodes."""
        return Totals(
            flops=sum(n.flops for n in self.nodes),
            macs=sum(n.macs for n in self.nodes),
            params=sum(n.params for n in self.nodes),
            bytes=sum(n.bytes for n in self.nodes),
        )

    def node(self, name: str) -> NodeCost:
        """The node called ``name`` (KeyError if absent)."""
        return self._index[name]

    @cached_property
    def _index(self) -> dict[str, NodeCost]:
        return {node.name: node for node in self.nodes}

    @cached_property
    def _consumers(self) -> dict[str, list[str]]:
        consumers: dict[str, list[str]] = {}
        for node in self.nodes:
            for tensor in node.inputs:
                consumers.setdefault(tensor, []).append(node.name)
        return consumers

    def group(self, names: list[str] | tuple[str, ...], float_itemsize: float | None = None) -> GroupCost:
        """Cost of running ``names`` as one fused kernel (internal tensors never leave it).

        Bytes count only tensors entering the group from outside and tensors it produces that
        are consumed outside it or are graph outputs.
        """
        members = [self._index[n] for n in names]
        inside = set(names)
        produced = {t for n in members for t in n.outputs if t}
        external_in = {t for n in members for t in n.inputs if t and t not in produced}
        external_out = {
            t
            for t in produced
            if t in self.graph_outputs or any(c not in inside for c in self._consumers.get(t, ()))
        }
        nbytes = round(sum(self._tensor_bytes(t, float_itemsize) for t in external_in | external_out))
        return GroupCost(
            flops=sum(n.flops for n in members),
            macs=sum(n.macs for n in members),
            bytes=nbytes,
            params=sum(n.params for n in members),
        )

    def _tensor_bytes(self, name: str, float_itemsize: float | None) -> float:
        """Bytes of tensor ``name``; floating-point tensors at ``float_itemsize`` when given."""
        info = self.tensors.get(name)
        if info is None:
            return 0.0
        if float_itemsize is not None and info.dtype.startswith(("float", "bfloat")):
            return info.numel * float_itemsize
        return float(info.nbytes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict following the ``roofline analyze --format json`` contract."""
        total = self.total
        return {
            "model": self.model_name,
            "inputs": {k: list(v) for k, v in self.input_shapes.items()},
            "shape_method": self.shape_method,
            "total": {"flops": total.flops, "macs": total.macs, "params": total.params, "bytes": total.bytes},
            "nodes": [n.to_dict() for n in self.nodes],
            "uncosted": [{"op_type": op, "count": count} for op, count in self.uncosted],
            "conventions": {"flops": "2 per multiply-accumulate", "bytes": "inputs read + outputs written"},
        }
