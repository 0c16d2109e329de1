"""The structural diff of two models: nodes added, removed and changed, grouped into blocks.

>>> result = diff_models("old.onnx", "new.onnx", batch=1)  # doctest: +SKIP
>>> result.blocks[0].kind, result.blocks[0].name, result.flops_change  # doctest: +SKIP
('added', 'layer2.2', 0.041)

A *block* is a connected region of difference: added nodes, removed nodes and changed nodes that
touch each other through a tensor (a removed and an added node count as touching when they sit
next to the same unchanged node, as a replaced op does).  It is named by the module scope its
nodes share (``layer2.2``), or by its first and last node when the exporter kept no scope.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .match import Matching, match_nodes, signature
from .summary import ModelSummary, summarize

if TYPE_CHECKING:
    from pytest_roofline.model import ModelSource

__all__ = ["Block", "GraphDiff", "NodeChange", "diff_models", "diff_summaries"]

KINDS = ("added", "removed", "changed")


@dataclass(frozen=True)
class NodeChange:
    """One node added, removed or changed, with its costs before and after (0 where absent).

    ``what`` lists what changed in a changed node: ``op attributes``, ``dtype``, ``output
    shape``, ``input shape``, ``weights``.  ``before``/``after`` say it in shapes.
    """

    kind: str
    name: str  # the new graph's name (the old one's for a removed node)
    op_type: str
    scope: str
    old_name: str | None
    what: tuple[str, ...]
    before: str
    after: str
    flops_before: int
    flops_after: int
    bytes_before: int
    bytes_after: int
    block: int = -1
    old_index: int | None = field(default=None, compare=False)
    new_index: int | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "kind": self.kind,
            "name": self.name,
            "old_name": self.old_name,
            "op_type": self.op_type,
            "scope": self.scope,
            "what": list(self.what),
            "before": self.before,
            "after": self.after,
            "flops_before": self.flops_before,
            "flops_after": self.flops_after,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "block": self.block,
            "old_index": self.old_index,
            "new_index": self.new_index,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeChange:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**data, "what": tuple(data.get("what", ()))})


@dataclass(frozen=True)
class Block:
    """A connected region of difference (see the module docstring)."""

    kind: str  # "added", "removed" or "changed" (a mix, or changed nodes)
    name: str
    nodes: tuple[str, ...]  # node names: the new graph's, the old one's for removed nodes
    ops: str  # op types with counts: "Conv x2, Relu x2, Add"
    added: int
    removed: int
    changed: int
    flops_before: int
    flops_after: int
    bytes_before: int
    bytes_after: int

    @property
    def label(self) -> str:
        """``+layer2.2`` (added), ``-name`` (removed), ``~name`` (changed)."""
        return {"added": "+", "removed": "-"}.get(self.kind, "~") + self.name

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "kind": self.kind,
            "name": self.name,
            "nodes": list(self.nodes),
            "ops": self.ops,
            "added": self.added,
            "removed": self.removed,
            "changed": self.changed,
            "flops_before": self.flops_before,
            "flops_after": self.flops_after,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Block:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**data, "nodes": tuple(data["nodes"])})


@dataclass(frozen=True)
class GraphDiff:
    """What differs between two models, node by node and block by block, with their costs.

    ``rewired`` names unchanged nodes of the new graph whose inputs now come from other existing
    nodes (a moved skip connection); inputs from added nodes are part of that addition.
    ``old``/``new`` are the summaries compared (kept in memory, not in :meth:`to_dict`).
    """

    old_model: str
    new_model: str
    added: tuple[NodeChange, ...]
    removed: tuple[NodeChange, ...]
    changed: tuple[NodeChange, ...]
    rewired: tuple[str, ...]
    blocks: tuple[Block, ...]
    unchanged: int
    renamed: int  # matched nodes whose names differ (renumbering exporters)
    flops_before: int
    flops_after: int
    bytes_before: int
    bytes_after: int
    old: ModelSummary | None = field(default=None, compare=False, repr=False)
    new: ModelSummary | None = field(default=None, compare=False, repr=False)

    @property
    def is_unchanged(self) -> bool:
        """No node added, removed, changed or rewired."""
        return not (self.added or self.removed or self.changed or self.rewired)

    @property
    def flops_change(self) -> float | None:
        """FLOPs after / before - 1 (None when the old model has no FLOPs)."""
        return self.flops_after / self.flops_before - 1 if self.flops_before else None

    @property
    def bytes_change(self) -> float | None:
        """Bytes after / before - 1 (None when the old model moves no bytes)."""
        return self.bytes_after / self.bytes_before - 1 if self.bytes_before else None

    @property
    def nodes(self) -> tuple[NodeChange, ...]:
        """Every changed, added and removed node."""
        return self.changed + self.added + self.removed

    def blocks_of(self, kind: str) -> list[Block]:
        """The blocks of one kind."""
        return [block for block in self.blocks if block.kind == kind]

    def headline(self) -> str:
        """``graph unchanged`` or ``graph changed: +1 block (layer3.2), +4.1 % FLOPs``."""
        if self.is_unchanged:
            return "graph unchanged"
        parts = []
        for kind, sign in (("added", "+"), ("removed", "-"), ("changed", "~")):
            blocks = self.blocks_of(kind)
            if blocks:
                noun = "block" if len(blocks) == 1 else "blocks"
                names = ", ".join(b.name for b in blocks[:2]) + (", ..." if len(blocks) > 2 else "")
                parts.append(f"{sign}{len(blocks)} {noun} ({names})")
        if self.rewired:
            parts.append(f"{len(self.rewired)} node{'s' if len(self.rewired) != 1 else ''} rewired")
        if self.flops_change is not None:
            parts.append(f"{_signed_pct(self.flops_change)} FLOPs")
        return "graph changed: " + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``added``, ``removed``, ``changed``, ``flops_change``, ``bytes_change``..."""
        return {
            "old_model": self.old_model,
            "new_model": self.new_model,
            "unchanged_graph": self.is_unchanged,
            "headline": self.headline(),
            "added": [n.to_dict() for n in self.added],
            "removed": [n.to_dict() for n in self.removed],
            "changed": [n.to_dict() for n in self.changed],
            "rewired": list(self.rewired),
            "blocks": [b.to_dict() for b in self.blocks],
            "unchanged": self.unchanged,
            "renamed": self.renamed,
            "flops_before": self.flops_before,
            "flops_after": self.flops_after,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "flops_change": self.flops_change,
            "bytes_change": self.bytes_change,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GraphDiff:
        """Inverse of :meth:`to_dict` (without the summaries)."""
        return cls(
            old_model=data["old_model"],
            new_model=data["new_model"],
            added=tuple(NodeChange.from_dict(n) for n in data["added"]),
            removed=tuple(NodeChange.from_dict(n) for n in data["removed"]),
            changed=tuple(NodeChange.from_dict(n) for n in data["changed"]),
            rewired=tuple(data.get("rewired", ())),
            blocks=tuple(Block.from_dict(b) for b in data.get("blocks", ())),
            unchanged=data["unchanged"],
            renamed=data.get("renamed", 0),
            flops_before=data["flops_before"],
            flops_after=data["flops_after"],
            bytes_before=data["bytes_before"],
            bytes_after=data["bytes_after"],
        )


def diff_models(
    old: ModelSource,
    new: ModelSource,
    *,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
) -> GraphDiff:
    """Summarize both models at the same bound shapes and diff them (paired mode)."""
    return diff_summaries(summarize(old, batch=batch, dims=dims), summarize(new, batch=batch, dims=dims))


def diff_summaries(old: ModelSummary, new: ModelSummary) -> GraphDiff:
    """The structural diff of two summaries: the same answer as on the two models."""
    matching = match_nodes(old, new)
    changed: list[NodeChange] = []
    renamed = 0
    for i, j in matching.pairs:
        renamed += old.nodes[i].name != new.nodes[j].name
        if signature(old, i) != signature(new, j):
            changed.append(_changed(old, new, i, j))
    added = [_one_sided("added", new, j) for j in matching.added]
    removed = [_one_sided("removed", old, i) for i in matching.removed]
    blocks, block_of = _blocks(old, new, matching, changed, added, removed)
    return GraphDiff(
        old_model=old.model_name,
        new_model=new.model_name,
        added=tuple(_with_block(c, block_of) for c in added),
        removed=tuple(_with_block(c, block_of) for c in removed),
        changed=tuple(_with_block(c, block_of) for c in changed),
        rewired=tuple(_rewired(old, new, matching)),
        blocks=tuple(blocks),
        unchanged=len(matching.pairs) - len(changed),
        renamed=renamed,
        flops_before=old.total_flops,
        flops_after=new.total_flops,
        bytes_before=old.total_bytes,
        bytes_after=new.total_bytes,
        old=old,
        new=new,
    )


# -- building the changes ------------------------------------------------------------------------


def _changed(old: ModelSummary, new: ModelSummary, i: int, j: int) -> NodeChange:
    a, b = old.nodes[i], new.nodes[j]
    what, before, after = [], [], []
    if a.attrs != b.attrs:
        what.append("op attributes")
    if a.dtype != b.dtype:
        what.append("dtype")
    if a.shapes != b.shapes:
        if _dims(a.shapes) != _dims(b.shapes):
            what.append("output shape")
        before.append(f"out {a.shapes}")
        after.append(f"out {b.shapes}")
    if old.input_shapes_of(i) != new.input_shapes_of(j):
        what.append("input shape")
        if a.shapes == b.shapes:
            before.append(f"in {old.input_shapes_of(i)}")
            after.append(f"in {new.input_shapes_of(j)}")
    if a.weights != b.weights:
        what.append("weights")
        before.append(f"w {a.weights or '-'}")
        after.append(f"w {b.weights or '-'}")
    return NodeChange(
        kind="changed",
        name=b.name,
        op_type=b.op_type,
        scope=b.scope,
        old_name=a.name,
        what=tuple(what),
        before="; ".join(before),
        after="; ".join(after),
        flops_before=a.flops,
        flops_after=b.flops,
        bytes_before=a.bytes,
        bytes_after=b.bytes,
        old_index=i,
        new_index=j,
    )


def _one_sided(kind: str, summary: ModelSummary, index: int) -> NodeChange:
    node = summary.nodes[index]
    shape = f"out {node.shapes}" + (f"; w {node.weights}" if node.weights else "")
    added = kind == "added"
    return NodeChange(
        kind=kind,
        name=node.name,
        op_type=node.op_type,
        scope=node.scope,
        old_name=None if added else node.name,
        what=(),
        before="" if added else shape,
        after=shape if added else "",
        flops_before=0 if added else node.flops,
        flops_after=node.flops if added else 0,
        bytes_before=0 if added else node.bytes,
        bytes_after=node.bytes if added else 0,
        old_index=None if added else index,
        new_index=index if added else None,
    )


def _dims(shapes: str) -> list[str]:
    return [entry.rpartition(":")[2] for entry in shapes.split(";")]


def _with_block(change: NodeChange, block_of: Mapping[tuple[str, int], int]) -> NodeChange:
    key = ("old", change.old_index) if change.kind == "removed" else ("new", change.new_index)
    return NodeChange(**{**change.__dict__, "block": block_of.get(key, -1)})  # type: ignore[arg-type]


def _rewired(old: ModelSummary, new: ModelSummary, matching: Matching) -> list[str]:
    """Matched nodes whose inputs come from another matched node (or graph input) than before."""
    old_to_new = dict(matching.pairs)
    added = set(matching.added)
    removed = set(matching.removed)
    inputs_old = {edge: name for name, edge, _ in old.graph_inputs}
    inputs_new = {edge: name for name, edge, _ in new.graph_inputs}
    found = []
    for i, j in matching.pairs:
        a, b = old.nodes[i], new.nodes[j]
        for edge_a, edge_b in zip(a.inputs, b.inputs, strict=False):
            producer_a, producer_b = old.producers.get(edge_a), new.producers.get(edge_b)
            if producer_a in removed or producer_b in added:
                continue  # part of a removal or an addition
            if producer_a is None or producer_b is None:
                moved = producer_a != producer_b or inputs_old.get(edge_a) != inputs_new.get(edge_b)
            else:
                moved = old_to_new.get(producer_a) != producer_b
            if moved:
                found.append(b.name)
                break
        else:
            if len(a.inputs) != len(b.inputs) and signature(old, i) == signature(new, j):
                found.append(b.name)
    return found


# -- blocks --------------------------------------------------------------------------------------


def _blocks(
    old: ModelSummary,
    new: ModelSummary,
    matching: Matching,
    changed: list[NodeChange],
    added: list[NodeChange],
    removed: list[NodeChange],
) -> tuple[list[Block], dict[tuple[str, int], int]]:
    """Connected regions of difference; returns the blocks and ``(side, index) -> block``."""
    items: list[tuple[str, int]] = [("new", c.new_index) for c in changed + added if c.new_index is not None]
    items += [("old", c.old_index) for c in removed if c.old_index is not None]
    new_of_old = dict(matching.pairs)
    old_of_new = {j: i for i, j in matching.pairs}
    in_new = {j for side, j in items if side == "new"}
    in_old = {i for side, i in items if side == "old"} | {old_of_new[j] for j in in_new if j in old_of_new}
    parent = {item: item for item in items}

    def find(item: tuple[str, int]) -> tuple[str, int]:
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    def union(a: tuple[str, int], b: tuple[str, int]) -> None:
        parent[find(a)] = find(b)

    def item_of_old(i: int) -> tuple[str, int]:
        j = new_of_old.get(i)
        return ("new", j) if j is not None else ("old", i)

    for j, node in enumerate(new.nodes):  # edges of the new graph between differing nodes
        if j in in_new:
            for edge in node.inputs:
                producer = new.producers.get(edge)
                if producer is not None and producer in in_new:
                    union(("new", j), ("new", producer))
    for i, node in enumerate(old.nodes):  # edges of the old graph between differing nodes
        if i in in_old:
            for edge in node.inputs:
                producer = old.producers.get(edge)
                if producer is not None and producer in in_old:
                    union(item_of_old(i), item_of_old(producer))
    _join_replacements(old, new, matching, union)
    groups: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for item in items:
        groups.setdefault(find(item), []).append(item)
    ordered = sorted(groups.values(), key=lambda members: _position(members, old_of_new, new_of_old))
    blocks, block_of = [], {}
    kinds = {("new", c.new_index): c for c in changed + added} | {("old", c.old_index): c for c in removed}
    for number, members in enumerate(ordered):
        changes = [kinds[m] for m in sorted(members, key=lambda m: _position([m], old_of_new, new_of_old))]
        for member in members:
            block_of[member] = number
        blocks.append(_block(changes))
    return blocks, block_of


def _join_replacements(old: ModelSummary, new: ModelSummary, matching: Matching, union: Any) -> None:
    """Join a removed and an added node that neighbour the same matched node on the same side."""
    removed, added = set(matching.removed), set(matching.added)
    old_to_new = dict(matching.pairs)
    by_anchor: dict[tuple[str, int], list[int]] = {}
    for i in removed:
        for side, neighbour in _neighbours(old, i):
            if neighbour in old_to_new:
                by_anchor.setdefault((side, old_to_new[neighbour]), []).append(i)
    for j in added:
        for side, neighbour in _neighbours(new, j):
            for i in by_anchor.get((side, neighbour), ()):
                union(("old", i), ("new", j))


def _neighbours(summary: ModelSummary, index: int) -> Iterable[tuple[str, int]]:
    node = summary.nodes[index]
    for edge in node.inputs:
        producer = summary.producers.get(edge)
        if producer is not None:
            yield "after", producer
    for edge in node.outputs:
        for consumer in summary.consumers.get(edge, ()):
            yield "before", consumer


def _position(
    members: list[tuple[str, int]], old_of_new: Mapping[int, int], new_of_old: Mapping[int, int]
) -> float:
    """Where a block sits, in new-graph order (removed nodes at their old neighbour's place)."""
    best = float("inf")
    for side, index in members:
        if side == "new":
            best = min(best, index)
        else:
            following = [new_of_old[i] for i in range(index, index + 50) if i in new_of_old]
            best = min(best, (following[0] if following else float(len(old_of_new) + index)) - 0.5)
    return best


def _block(changes: list[NodeChange]) -> Block:
    counts = Counter(c.kind for c in changes)
    kind = next((k for k in ("added", "removed") if counts[k] == len(changes)), "changed")
    ops = Counter(c.op_type for c in changes)
    return Block(
        kind=kind,
        name=_block_name(changes),
        nodes=tuple(c.name for c in changes),
        ops=", ".join(f"{op} x{n}" if n > 1 else op for op, n in ops.most_common()),
        added=counts["added"],
        removed=counts["removed"],
        changed=counts["changed"],
        flops_before=sum(c.flops_before for c in changes),
        flops_after=sum(c.flops_after for c in changes),
        bytes_before=sum(c.bytes_before for c in changes),
        bytes_after=sum(c.bytes_after for c in changes),
    )


def _block_name(changes: list[NodeChange]) -> str:
    """The scope the nodes share (nodes without a scope ignored), else ``first..last``.

    A shared scope that only contains the block (``features``, the nodes all in its sub-modules
    ``features.17`` and ``features.18``) does not name it: ``features (first..last)``.
    """
    span = changes[0].name if len(changes) == 1 else f"{changes[0].name}..{changes[-1].name}"
    scopes = [c.scope.split(".") for c in changes if c.scope]
    if scopes and len(scopes) * 2 >= len(changes):
        common: list[str] = []
        for parts in zip(*scopes, strict=False):
            if len(set(parts)) != 1:
                break
            common.append(parts[0])
        if common:
            if len(changes) > 1 and all(len(parts) > len(common) for parts in scopes):
                return f"{'.'.join(common)} ({span})"
            return ".".join(common)
    return span


def _signed_pct(value: float) -> str:
    return f"{value * 100:+.1f} %"
