"""Typed, frozen results of the static cost model.

Units: FLOPs (2 per multiply-accumulate), MACs, bytes at each tensor's dtype size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from .views import VIEW_OPS

__all__ = ["ControlFlow", "Coverage", "GroupCost", "ModelAnalysis", "NodeCost", "TensorInfo", "Totals"]

#: Why a node has no FLOPs: no rule for its op, a tensor it needs has no shape, or the rule
#: does not handle this form of the op (an unusual rank or attribute).
NO_RULE, SHAPE_UNRESOLVED, FORM_NOT_HANDLED = "no cost rule", "shape unresolved", "form not handled"
_PACKED_4BIT = ("int4", "uint4", "float4e2m1")


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
        """Size in bytes (4-bit types pack two elements per byte)."""
        return self.bytes_of()

    def bytes_of(self, elements: int | None = None) -> int:
        """Bytes of ``elements`` of its elements (all when None; capped at its size)."""
        count = self.numel if elements is None else min(elements, self.numel)
        if self.dtype in _PACKED_4BIT:
            return (count + 1) // 2
        return count * self.itemsize


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
    costed: bool = True  # False: see ``reason``; only bytes
    graph: str = ""  # "" for the main graph, else the subgraph path
    executions: int = 1  # runs per model run: Loop/Scan trip counts, 0 in an If branch not taken
    assumed: bool = False  # executions rest on an assumed trip count or an unknown If condition
    reason: str = ""  # why not costed: NO_RULE, SHAPE_UNRESOLVED or FORM_NOT_HANDLED
    touched: tuple[tuple[str, int], ...] = ()  # (tensor, elements) it touches only in part

    @property
    def touched_elements(self) -> dict[str, int]:
        """Tensor -> elements this node reads or writes of it, for tensors it touches in part."""
        return dict(self.touched)

    @property
    def total_flops(self) -> int:
        """FLOPs of all its executions in one model run."""
        return self.flops * self.executions

    @property
    def total_macs(self) -> int:
        """MACs of all its executions in one model run."""
        return self.macs * self.executions

    @property
    def total_bytes(self) -> int:
        """Bytes of all its executions in one model run."""
        return self.bytes * self.executions

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
        data["touched"] = dict(self.touched)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeCost:
        """Inverse of :meth:`to_dict`."""
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["inputs"], fields["outputs"] = tuple(fields["inputs"]), tuple(fields["outputs"])
        fields["touched"] = tuple(sorted(dict(fields.get("touched") or {}).items()))
        return cls(**fields)


@dataclass(frozen=True)
class Totals:
    """Whole-model sums."""

    flops: int
    macs: int
    params: int
    bytes: int  # sum of every node's bytes (unfused)


@dataclass(frozen=True)
class ControlFlow:
    """What the analysis decided for one Loop, Scan or If node (per execution of that node)."""

    node: str
    op_type: str
    graph: str  # the subgraph path the node itself lives in ("" for the main graph)
    trips: int | None = None  # Loop/Scan iterations per execution; None for If
    source: str = ""  # Loop/Scan: constant | shapes | binding | assumed; If: folded | costlier
    branch: str = ""  # If: the branch attribute that is costed
    flops_low: int = 0  # If: FLOPs of one execution of its cheaper branch
    flops_high: int = 0  # If: ... of its costlier branch
    note: str = ""  # a sentence for the user (early exit, what was assumed and how to bind it)

    @property
    def assumed(self) -> bool:
        """Whether the decision is a guess: an assumed trip count, an If whose condition is unknown."""
        return self.source in ("assumed", "costlier")

    def describe(self) -> str:
        """One line for the user."""
        if self.op_type == "If" and self.source == "folded":
            return f"If '{self.node}': {self.note}, costed the {self.branch}"
        if self.op_type == "If":
            return f"If '{self.node}': {self.note} (range {self.flops_low:,}..{self.flops_high:,} FLOPs)"
        plural = "" if self.trips == 1 else "s"
        text = f"{self.op_type} '{self.node}': {self.trips} iteration{plural} ({self.source})"
        return f"{text}; {self.note}" if self.note else text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {**asdict(self), "assumed": self.assumed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ControlFlow:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Coverage:
    """How much of a total is counted, uncosted or assumed: what every total must say."""

    nodes: int
    uncosted_nodes: int  # nodes with 0 FLOPs for lack of a rule, a shape or a handled form
    uncosted_bytes: int  # their bytes (all executions)
    uncosted_by_reason: dict[str, int]  # reason -> node count
    assumed_nodes: int  # nodes whose executions rest on a guess
    assumed_flops: int  # their FLOPs (all executions)
    flops: int  # the total as counted
    bytes: int
    flops_low: int  # the total with every unknown If taking its cheaper branch
    flops_high: int  # ... its costlier branch

    @property
    def uncosted_bytes_share(self) -> float:
        """Share of the moved bytes that belongs to uncosted nodes (their FLOPs are unknown)."""
        return self.uncosted_bytes / self.bytes if self.bytes else 0.0

    @property
    def assumed_flops_share(self) -> float:
        """Share of the FLOPs that rests on an assumed trip count or branch."""
        return self.assumed_flops / self.flops if self.flops else 0.0

    @property
    def complete(self) -> bool:
        """Every node costed and nothing assumed."""
        return not self.uncosted_nodes and not self.assumed_nodes

    def describe(self) -> str:
        """One line: complete, or which share is uncosted or assumed."""
        if self.complete:
            return "complete: every node costed, every trip count and branch known"
        parts = []
        if self.uncosted_nodes:
            reasons = ", ".join(
                f"{reason} x{count}" for reason, count in sorted(self.uncosted_by_reason.items())
            )
            parts.append(
                f"{self.uncosted_nodes} node(s) uncosted ({reasons}): FLOPs unknown for "
                f"{100 * self.uncosted_bytes_share:.1f}% of the bytes"
            )
        if self.assumed_nodes:
            parts.append(
                f"{100 * self.assumed_flops_share:.1f}% of the FLOPs rest on an assumed trip count or branch"
            )
        if self.flops_low != self.flops_high:
            parts.append(f"FLOPs range {self.flops_low:,}..{self.flops_high:,} over If branches")
        return "incomplete: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the derived shares."""
        return {
            **asdict(self),
            "uncosted_bytes_share": self.uncosted_bytes_share,
            "assumed_flops_share": self.assumed_flops_share,
            "complete": self.complete,
        }


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
    control_flow: tuple[ControlFlow, ...] = ()  # Loop/Scan/If decisions
    flops_range: tuple[int, int] | None = None  # total FLOPs over unknown If branches (low, high)

    @property
    def total(self) -> Totals:
        """Sums over all nodes and all their executions (params once)."""
        return Totals(
            flops=sum(n.total_flops for n in self.nodes),
            macs=sum(n.total_macs for n in self.nodes),
            params=sum(n.params for n in self.nodes),
            bytes=sum(n.total_bytes for n in self.nodes),
        )

    @property
    def unresolved(self) -> tuple[tuple[str, str, int], ...]:
        """(op_type, reason, count) of nodes that have a cost rule but could not be costed."""
        counts: dict[tuple[str, str], int] = {}
        for node in self.nodes:
            if not node.costed and node.reason != NO_RULE:
                key = (node.op_type, node.reason or FORM_NOT_HANDLED)
                counts[key] = counts.get(key, 0) + 1
        return tuple(
            (op, reason, n) for (op, reason), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        )

    @cached_property
    def coverage(self) -> Coverage:
        """Which share of the totals is uncosted or assumed."""
        total = self.total
        uncosted = [n for n in self.nodes if not n.costed]
        reasons: dict[str, int] = {}
        for node in uncosted:
            reasons[node.reason or NO_RULE] = reasons.get(node.reason or NO_RULE, 0) + 1
        assumed = [n for n in self.nodes if n.assumed]
        low, high = self.flops_range or (total.flops, total.flops)
        return Coverage(
            nodes=len(self.nodes),
            uncosted_nodes=len(uncosted),
            uncosted_bytes=sum(n.total_bytes for n in uncosted),
            uncosted_by_reason=reasons,
            assumed_nodes=len(assumed),
            assumed_flops=sum(n.total_flops for n in assumed),
            flops=total.flops,
            bytes=total.bytes,
            flops_low=low,
            flops_high=high,
        )

    @property
    def warnings(self) -> tuple[str, ...]:
        """One line per guess or doubt the totals carry (assumed trip counts, unknown If conditions)."""
        return tuple(flow.describe() for flow in self.control_flow if flow.assumed or flow.note)

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
        runs = max((max(n.executions, 1) for n in members), default=1)  # the kernel ran: count it
        inside = set(names)
        produced = {t for n in members for t in n.outputs if t}
        external_in = {t for n in members for t in n.inputs if t and t not in produced}
        external_out = {
            t
            for t in produced
            if t in self.graph_outputs or any(c not in inside for c in self._consumers.get(t, ()))
        }
        touched = self._touched_in(members, external_in | external_out)
        nbytes = round(
            sum(self._tensor_bytes(t, float_itemsize, touched.get(t)) for t in external_in | external_out)
        )
        if members and all(n.op_type in VIEW_OPS and not n.bytes for n in members):
            nbytes = 0  # views hand out a buffer; one writing a Loop body's output is priced as a copy

        return GroupCost(
            flops=sum(n.flops * max(n.executions, 1) for n in members),
            macs=sum(n.macs * max(n.executions, 1) for n in members),
            bytes=nbytes * runs,
            params=sum(n.params for n in members),
        )

    @staticmethod
    def _touched_in(members: list[NodeCost], boundary: set[str]) -> dict[str, int]:
        """Boundary tensors every member using them touches only in part -> the most elements touched."""
        parts: dict[str, int] = {}
        whole: set[str] = set()
        for node in members:
            own = node.touched_elements
            for tensor in (*node.inputs, *node.outputs):
                if tensor not in boundary:
                    continue
                if tensor in own:
                    parts[tensor] = max(parts.get(tensor, 0), own[tensor])
                else:
                    whole.add(tensor)
        return {t: n for t, n in parts.items() if t not in whole}

    def _tensor_bytes(self, name: str, float_itemsize: float | None, elements: int | None = None) -> float:
        """Bytes of tensor ``name`` (or of ``elements`` of it); floats at ``float_itemsize`` when given."""
        info = self.tensors.get(name)
        if info is None:
            return 0.0
        if float_itemsize is not None and info.dtype.startswith(("float", "bfloat")):
            return min(info.numel if elements is None else elements, info.numel) * float_itemsize
        return float(info.bytes_of(elements))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict following the ``roofline analyze --format json`` contract."""
        total = self.total
        return {
            "model": self.model_name,
            "inputs": {k: list(v) for k, v in self.input_shapes.items()},
            "shape_method": self.shape_method,
            "total": {
                "flops": total.flops,
                "macs": total.macs,
                "params": total.params,
                "bytes": total.bytes,
                "coverage": self.coverage.to_dict(),
            },
            "nodes": [n.to_dict() for n in self.nodes],
            "uncosted": [{"op_type": op, "count": count, "reason": NO_RULE} for op, count in self.uncosted],
            "unresolved": [
                {"op_type": op, "count": count, "reason": reason} for op, reason, count in self.unresolved
            ],
            "control_flow": [flow.to_dict() for flow in self.control_flow],
            "warnings": list(self.warnings),
            "conventions": {
                "flops": "2 per multiply-accumulate",
                "bytes": "inputs read + outputs written: the elements a kernel touches (see touched)",
                "executions": "node figures are per execution; totals multiply by executions",
            },
        }
