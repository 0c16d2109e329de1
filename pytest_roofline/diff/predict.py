"""What the roofline says a graph change should cost.

Every added, removed or changed node is priced at the roof it runs under: its *roof time* is
``max(FLOPs / peak FLOP/s of its dtype, bytes / bandwidth of the memory level holding them)``
(compute- or memory-bound, as :class:`~pytest_roofline.roofline.DeviceRoofline` says).  A roof
time becomes a predicted time at an *efficiency* (roof time / real time) taken from the
baseline's own profile:

* a changed node keeps the efficiency it had (its measured time in the baseline);
* an added node identical to a measured baseline node (same op, attributes, shapes) takes that
  node's measured time; otherwise the efficiency of its op type in the baseline, else of its
  bound over the whole profile; an op type the backend folded away at load costs nothing;
* without a baseline profile, :data:`DEFAULT_EFFICIENCY` per bound, and the change is relative
  to the baseline's latency predicted the same way.

A fused kernel's measured time is split among its ONNX nodes by their roof times; a layout
kernel's time goes to the kernel it serves.  Unchanged nodes keep their time.  The change is a
fraction of the baseline's kernel time in the same profiled run (end-to-end medians drift
between runs on a shared machine; the kernels of one run do not).  Without a roofline there is
no prediction (and the result says so).

Precision changes and rewrites (docs/diff.md): a dtype the roofline has no roof for, or a QDQ
graph (what runs is the int8 kernels the backend fuses at load, not the nodes written), an int8
op the calibration never probed, and float16/bfloat16 work on a device with no faster roof for
it (the backend runs it in float32 after Casts) have no prediction, with the reason; a block that
swaps nodes for unmeasured ops with the same FLOPs in the same dtypes costs what it cost
(``same work``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_roofline.model.precision import INT8_OPS

from .match import signature
from .summary import FLOAT32, NodeSummary

if TYPE_CHECKING:
    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.roofline import DeviceRoofline

    from .changes import GraphDiff, NodeChange
    from .summary import ModelSummary

__all__ = [
    "DEFAULT_EFFICIENCY",
    "EfficiencyTable",
    "NodePrediction",
    "Prediction",
    "efficiency_table",
    "predict",
    "roof_time",
]

#: Efficiency (roof time / real time) assumed per bound when no baseline profile is given:
#: the time-weighted roofline fractions onnxruntime's CPU kernels reach on this project's CNN and
#: transformer benchmarks at one thread (docs/diff.md), rounded down.
DEFAULT_EFFICIENCY = {"compute": 0.5, "memory": 0.3}


@dataclass(frozen=True)
class NodePrediction:
    """One differing node's time before and after, and what the figure rests on.

    ``basis``: ``measured`` (its own baseline time), ``twin`` (an identical baseline node's),
    ``op type``/``bound``/``default`` (efficiency of that), ``folded`` (folded at load: 0).
    """

    name: str
    kind: str
    op_type: str
    bound: str
    roof_before: float
    roof_after: float
    time_before: float
    time_after: float
    efficiency: float | None
    basis: str
    block: int = -1  # the GraphDiff block the node belongs to

    @property
    def delta(self) -> float:
        """Predicted seconds added (negative: saved)."""
        return self.time_after - self.time_before

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "name": self.name,
            "kind": self.kind,
            "op_type": self.op_type,
            "bound": self.bound,
            "roof_before": self.roof_before,
            "roof_after": self.roof_after,
            "time_before": self.time_before,
            "time_after": self.time_after,
            "delta": self.delta,
            "efficiency": self.efficiency,
            "basis": self.basis,
            "block": self.block,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodePrediction:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: v for k, v in data.items() if k != "delta"})


@dataclass(frozen=True)
class Prediction:
    """The predicted change of model latency, or why there is none."""

    available: bool
    reason: str = ""  # why unavailable
    baseline_time: float | None = None  # seconds the change is relative to
    time_change: float | None = None  # predicted seconds added per inference
    nodes: tuple[NodePrediction, ...] = ()
    assumptions: tuple[str, ...] = ()
    efficiency_source: str = ""  # "profile" or "default"

    @property
    def fraction(self) -> float | None:
        """Predicted latency change as a fraction of the baseline (``+0.069`` = 6.9 % slower)."""
        if not self.available or self.time_change is None or not self.baseline_time:
            return None
        return self.time_change / self.baseline_time

    def block_deltas(self) -> dict[int, float]:
        """Predicted seconds added per block of the diff (by block index)."""
        deltas: dict[int, float] = {}
        for node in self.nodes:
            deltas[node.block] = deltas.get(node.block, 0.0) + node.delta
        return deltas

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "available": self.available,
            "reason": self.reason,
            "baseline_time": self.baseline_time,
            "time_change": self.time_change,
            "fraction": self.fraction,
            "efficiency_source": self.efficiency_source,
            "assumptions": list(self.assumptions),
            "nodes": [n.to_dict() for n in self.nodes],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Prediction:
        """Inverse of :meth:`to_dict`."""
        return cls(
            available=data["available"],
            reason=data.get("reason", ""),
            baseline_time=data.get("baseline_time"),
            time_change=data.get("time_change"),
            nodes=tuple(NodePrediction.from_dict(n) for n in data.get("nodes", ())),
            assumptions=tuple(data.get("assumptions", ())),
            efficiency_source=data.get("efficiency_source", ""),
        )


@dataclass(frozen=True)
class EfficiencyTable:
    """Efficiencies the baseline reached, and its nodes' measured times (seconds).

    ``node_time`` holds every node a kernel ran (fused kernels split by roof time);
    ``folded`` the nodes that ran no kernel.
    """

    latency: float  # the baseline's kernel seconds per inference (Σ layer times, profiled run)
    node_time: dict[str, float] = field(hash=False)
    by_op: dict[str, float] = field(hash=False)
    by_bound: dict[str, float] = field(hash=False)
    folded: frozenset[str] = frozenset()
    folded_ops: frozenset[str] = frozenset()  # op types no kernel ran in the baseline
    unassigned: float = 0.0  # kernel seconds mapped to no node of the summary


def roof_time(node: NodeSummary, roofline: DeviceRoofline) -> tuple[float, str]:
    """Seconds ``node`` takes at its roof, and its bound (``compute`` or ``memory``)."""
    memory = node.bytes / roofline.bandwidth_for(node.bytes) if node.bytes else 0.0
    if node.flops <= 0:
        return memory, "memory"
    compute = node.flops / roofline.peak_flops.get(node.dtype, roofline.peak)
    return (compute, "compute") if compute >= memory else (memory, "memory")


def efficiency_table(
    profile: ModelProfile, summary: ModelSummary, roofline: DeviceRoofline
) -> EfficiencyTable:
    """The per-node times and per-op-type efficiencies of a baseline profile.

    Args:
        profile: the baseline's :class:`~pytest_roofline.profile.ModelProfile` (its layers'
            ``onnx_nodes`` name the nodes of ``summary``).
        summary: the baseline model's summary, at the profile's shapes.
        roofline: the roofline the prediction prices with.
    """
    index = {node.name: node for node in summary.nodes}
    roofs = {name: roof_time(node, roofline) for name, node in index.items()}
    times: dict[str, float] = {}
    by_layer: dict[str, list[str]] = {}
    unassigned = 0.0
    for layer in profile.layers:
        if layer.kind in ("folded", "layout"):
            continue
        nodes = [n for n in layer.onnx_nodes if n in index]
        by_layer[layer.name] = nodes
        if not nodes:
            unassigned += layer.time
            continue
        _spread(times, nodes, layer.time, roofs)
    for layer in profile.layers:
        if layer.kind == "layout":
            served = by_layer.get(layer.serves or "")
            if served:
                _spread(times, served, layer.time, roofs)
            else:
                unassigned += layer.time
    measured = {name: t for name, t in times.items() if t > 0}
    folded = frozenset(name for name in index if name not in measured)
    by_op = _ratios((index[n].op_type, roofs[n][0], t) for n, t in measured.items())
    by_bound = _ratios((roofs[n][1], roofs[n][0], t) for n, t in measured.items())
    ran_ops = {index[n].op_type for n in measured}
    return EfficiencyTable(
        latency=profile.kernel_time or profile.latency.median,
        node_time=measured,
        by_op=by_op,
        by_bound=by_bound,
        folded=folded,
        folded_ops=frozenset(index[n].op_type for n in folded) - ran_ops,
        unassigned=unassigned,
    )


def predict(
    diff: GraphDiff,
    roofline: DeviceRoofline | None,
    profile: ModelProfile | None = None,
    *,
    default_efficiency: Mapping[str, float] | None = None,
) -> Prediction:
    """The predicted change of latency from ``diff`` (see the module docstring).

    Args:
        diff: a :class:`~pytest_roofline.diff.changes.GraphDiff` with its summaries
            (as :func:`~pytest_roofline.diff.changes.diff_summaries` returns it).
        roofline: the device roofline; None gives an unavailable prediction.
        profile: the baseline model's profile on the backend that will run it (optional).
        default_efficiency: per-bound efficiency without a profile (:data:`DEFAULT_EFFICIENCY`).
    """
    if roofline is None:
        return Prediction(False, reason="no device roofline (calibrate the device to price the change)")
    if diff.old is None or diff.new is None:
        return Prediction(False, reason="the diff carries no model summaries (diff_summaries keeps them)")
    old, new = diff.old, diff.new
    unpriceable = _no_honest_price(old, new, roofline)
    if unpriceable:
        return Prediction(False, reason=unpriceable)
    defaults = dict(DEFAULT_EFFICIENCY if default_efficiency is None else default_efficiency)
    table = efficiency_table(profile, old, roofline) if profile is not None else None
    twins = _twins(old, table) if table is not None else {}
    nodes = []
    for change in diff.nodes:
        before = old.nodes[change.old_index] if change.old_index is not None else None
        after = new.nodes[change.new_index] if change.new_index is not None else None
        twin = twins.get(signature(new, change.new_index)) if change.new_index is not None else None
        priced = _price(change, before, after, roofline, table, defaults, twin)
        nodes.append(replace(priced, block=change.block))
    nodes = _same_work_blocks(diff, nodes)
    if table is not None:
        baseline = table.latency
    else:
        baseline = sum(
            roof / defaults.get(bound, 1.0) for roof, bound in (roof_time(n, roofline) for n in old.nodes)
        )
    return Prediction(
        available=True,
        baseline_time=baseline,
        time_change=sum(n.delta for n in nodes),
        nodes=tuple(nodes),
        assumptions=tuple(_assumptions(profile, table, defaults, nodes)),
        efficiency_source="profile" if table is not None else "default",
    )


# -- precision changes and rewrites -----------------------------------------------------------------

#: Relative FLOPs difference under which a block that swaps nodes for others does the same work.
SAME_WORK = 0.01
_LOW_FLOATS = ("float16", "bfloat16")
#: int8 op types the calibration's int8 roof was measured on (roofline/probes.py) or that feed them.
PROBED_INT8 = frozenset({"MatMulInteger", "QLinearMatMul", "DynamicQuantizeLinear", "MatMulIntegerToFloat"})
_UNMEASURED = ("op type", "bound", "default")  # bases that rest on no measured node of this type
_ROOFED = (
    "float16",
    "bfloat16",
    "int8",
    "float8e4m3fn",
    "float8e5m2",
)  # dtypes a roofline may lack  # bases that rest on no measured node of this type


def _no_honest_price(old: ModelSummary, new: ModelSummary, roofline: DeviceRoofline) -> str:
    """Why the new graph's work cannot be priced honestly ("" when it can): a dtype the roofline
    has no roof for, or a QDQ graph (its kernels are not the nodes written)."""
    old_dtypes = {_work_dtype(n) for n in old.nodes if n.flops > 0}
    for dtype in sorted({_work_dtype(n) for n in new.nodes if n.flops > 0} - old_dtypes):
        if dtype in _ROOFED and dtype not in roofline.peak_flops:
            return f"the new graph computes in {dtype}, and the roofline has no {dtype} roof (calibrate it)"
    old_ops = {n.op_type.rpartition(":")[2] for n in old.nodes}
    unprobed = sorted({n.op_type.rpartition(":")[2] for n in new.nodes} & (INT8_OPS - PROBED_INT8) - old_ops)
    if unprobed:
        return (
            f"{unprobed[0]} runs int8 kernels the roofline never measured (its int8 roof is "
            "MatMulInteger's and QLinearMatMul's), and the baseline did not run it"
        )
    fp32 = roofline.peak_flops.get("float32", roofline.peak)
    for node in new.nodes:
        if node.flops > 0 and node.dtype in _LOW_FLOATS and roofline.peak_flops.get(node.dtype, 0.0) <= fp32:
            return (
                f"{node.dtype} nodes run in float32 after inserted Casts on this device (its "
                f"{node.dtype} roof is no faster than float32's); the Casts and the fusions and layouts "
                "the backend gives up (onnxruntime CPU: NCHWc convolutions) are beyond the roofline"
            )
    if _qdq_weights(new) and not _qdq_weights(old):
        return (
            "a QDQ graph: the backend fuses QuantizeLinear/DequantizeLinear around MatMul, Gemm and Conv "
            "into int8 kernels at load, which the graph as written does not show"
        )
    return ""


def _work_dtype(node: NodeSummary) -> str:
    """The dtype a node's arithmetic runs in: int8 for quantized ops (their outputs are int32 or
    float), else the dtype of its output."""
    return "int8" if node.op_type.rpartition(":")[2] in INT8_OPS else node.dtype


def _qdq_weights(summary: ModelSummary) -> bool:
    """Whether some DequantizeLinear reads a stored (int8) weight: a QDQ-quantized graph."""
    return any(n.op_type == "DequantizeLinear" and not n.inputs for n in summary.nodes)  # no activation in


def _same_work_blocks(diff: GraphDiff, nodes: list[NodePrediction]) -> list[NodePrediction]:
    """A block that swaps nodes for ops the baseline never ran (fusion, an offline-optimised copy)
    whose added nodes do the removed nodes' FLOPs (within :data:`SAME_WORK`) in the same dtypes
    costs what it cost: the added nodes share the removed nodes' measured time by roof time, not a
    guessed efficiency of their type (its changed nodes stay priced as they are)."""
    old = {n.name: n for n in diff.old.nodes} if diff.old else {}
    new = {n.name: n for n in diff.new.nodes} if diff.new else {}
    for index in range(len(diff.blocks)):
        added = [n for n in nodes if n.block == index and n.kind == "added" and n.name in new]
        removed = [n for n in nodes if n.block == index and n.kind == "removed" and n.name in old]
        flops_in = sum(old[n.name].flops for n in removed)
        flops_out = sum(new[n.name].flops for n in added)
        dtypes_in = {_work_dtype(old[n.name]) for n in removed if old[n.name].flops > 0} | {FLOAT32}
        if (
            not added
            or flops_in <= 0
            or abs(flops_out - flops_in) > SAME_WORK * flops_in
            or any(_work_dtype(new[n.name]) not in dtypes_in for n in added if new[n.name].flops > 0)
            or not any(n.basis in _UNMEASURED for n in added)
        ):
            continue
        spent = sum(n.time_before for n in removed)
        weights = {n.name: n.roof_after for n in added}
        total = sum(weights.values())
        share = {name: weight / total if total > 0 else 1.0 / len(added) for name, weight in weights.items()}
        nodes = [
            replace(n, time_after=spent * share[n.name], basis="same work")
            if n.block == index and n.kind == "added"
            else n
            for n in nodes
        ]
    return nodes


# -- pricing -------------------------------------------------------------------------------------


def _price(
    change: NodeChange,
    before: NodeSummary | None,
    after: NodeSummary | None,
    roofline: DeviceRoofline,
    table: EfficiencyTable | None,
    defaults: Mapping[str, float],
    twin: float | None,
) -> NodePrediction:
    roof_before, bound_before = roof_time(before, roofline) if before else (0.0, "")
    roof_after, bound_after = roof_time(after, roofline) if after else (0.0, "")
    bound = bound_after or bound_before
    op = (after or before).op_type  # type: ignore[union-attr]
    measured = table.node_time.get(before.name) if table is not None and before is not None else None
    if table is not None and before is not None and measured is None and before.name in table.folded:
        measured = 0.0
    efficiency: float | None
    if measured is not None and before is not None:
        if measured == 0.0:
            efficiency, basis = None, "folded"
        else:
            efficiency, basis = roof_before / measured if roof_before > 0 else None, "measured"
        time_before = measured
        if after is None:
            time_after = 0.0
        elif efficiency:
            time_after = roof_after / efficiency
        else:
            time_after = measured if roof_before <= 0 else 0.0
    elif twin is not None and after is not None:
        efficiency, basis = roof_after / twin if twin > 0 else None, "twin"
        time_before, time_after = 0.0, twin
    else:
        efficiency, basis = _efficiency(op, bound, table, defaults)
        time_before = roof_before / efficiency if efficiency else 0.0
        time_after = roof_after / efficiency if efficiency else 0.0
    return NodePrediction(
        change.name,
        change.kind,
        op,
        bound,
        roof_before,
        roof_after,
        time_before,
        time_after,
        efficiency,
        basis,
    )


def _efficiency(
    op: str, bound: str, table: EfficiencyTable | None, defaults: Mapping[str, float]
) -> tuple[float | None, str]:
    if table is not None:
        if op in table.by_op:
            return table.by_op[op], "op type"
        if op in table.folded_ops:
            return None, "folded"
        if bound in table.by_bound:
            return table.by_bound[bound], "bound"
    return defaults.get(bound, 1.0), "default"


def _spread(
    times: dict[str, float], nodes: list[str], seconds: float, roofs: Mapping[str, tuple[float, str]]
) -> None:
    """Add ``seconds`` to ``nodes`` in proportion to their roof times (evenly if all are 0)."""
    weights = [roofs[n][0] for n in nodes]
    total = sum(weights)
    for name, weight in zip(nodes, weights, strict=True):
        share = weight / total if total > 0 else 1.0 / len(nodes)
        times[name] = times.get(name, 0.0) + seconds * share


def _ratios(items: Iterable[tuple[str, float, float]]) -> dict[str, float]:
    """Per key: sum of roof times / sum of measured times (a time-weighted efficiency)."""
    roofs: dict[str, float] = {}
    spent: dict[str, float] = {}
    for key, roof, seconds in items:
        roofs[key] = roofs.get(key, 0.0) + roof
        spent[key] = spent.get(key, 0.0) + seconds
    return {k: roofs[k] / spent[k] for k in roofs if spent[k] > 0 and roofs[k] > 0}


def _twins(old: ModelSummary, table: EfficiencyTable) -> dict[str, float]:
    """Full signature -> median measured time of the baseline nodes that have it."""
    found: dict[str, list[float]] = {}
    for index, node in enumerate(old.nodes):
        if node.name in table.node_time:
            found.setdefault(signature(old, index), []).append(table.node_time[node.name])
        elif node.name in table.folded:
            found.setdefault(signature(old, index), []).append(0.0)
    return {sig: sorted(times)[len(times) // 2] for sig, times in found.items()}


def _assumptions(
    profile: ModelProfile | None,
    table: EfficiencyTable | None,
    defaults: Mapping[str, float],
    nodes: list[NodePrediction],
) -> list[str]:
    said = [
        "each node is priced at its roof: max(FLOPs / peak FLOP/s of its dtype, "
        "bytes read and written / bandwidth of the memory level holding them)",
        "unchanged nodes keep their time: no change of fusion, caching or scheduling around the change",
    ]
    if profile is not None and table is not None:
        options = ", ".join(f"{k}={v}" for k, v in sorted(profile.options.items())) or "default options"
        said.append(
            f"efficiencies from the baseline profile of {profile.model_name} on {profile.backend} "
            f"({options}); a fused kernel's time is split among its ONNX nodes by roof time"
        )
        said.append(
            "a changed node keeps the efficiency it measured, also at another dtype's roof (a backend "
            "that lacks fast kernels for the new dtype runs it slower); an added node identical to a "
            "baseline node takes its time"
        )
        bounds = ", ".join(f"{b} {e:.0%}" for b, e in sorted(table.by_bound.items()))
        if any(n.basis == "bound" for n in nodes):
            said.append(f"op types absent from the baseline run at their bound's efficiency ({bounds})")
        folded = sorted({n.op_type for n in nodes if n.basis == "folded"})
        if folded:
            said.append(
                f"{', '.join(folded)} nodes were folded away at load in the baseline and cost nothing"
            )
        said.append(
            f"the change is relative to the baseline's kernel time in the same profiled run, "
            f"{table.latency * 1e3:.3f} ms (end-to-end median {profile.latency.median * 1e3:.3f} ms)"
        )
        if table.unassigned > 0:
            said.append(
                f"{table.unassigned * 1e3:.3f} ms of baseline kernel time maps to no ONNX node "
                "and is left out"
            )
    else:
        said.append(
            "no baseline profile: default efficiencies "
            + ", ".join(f"{b} {e:.0%}" for b, e in sorted(defaults.items()))
            + "; the change is relative to the baseline's latency predicted the same way"
        )
    if any(n.basis == "same work" for n in nodes):
        said.append(
            "a block rewritten into op types the baseline never ran with the same FLOPs in the same "
            "dtypes (fusion, an optimiser's copy) costs what the nodes it replaces measured"
        )
    if any(n.basis == "default" for n in nodes) and table is not None:
        said.append("nodes whose bound never ran in the baseline use the default efficiencies")
    if any(not math.isfinite(n.delta) for n in nodes):
        said.append("some nodes could not be priced")
    return said
