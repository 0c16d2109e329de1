"""Bound dims checked against the graph's own shape arithmetic.

A decoder with a KV cache takes ``past_len``, ``q_len`` and ``total_len`` as separate input dims
although the graph requires ``total_len == past_len + q_len``: the attention mask is added to
scores whose last dim is a ``Concat`` of the past and the new keys. Binding them inconsistently
yields shapes no run could have. :func:`find_inconsistency` finds the first node whose resolved
input shapes cannot meet (elementwise broadcasting, a MatMul's inner dim, Concat's other dims);
:func:`check_consistency` turns it into a one-line :class:`~pytest_roofline.errors.ShapeError`
when the user bound dims.
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from pytest_roofline.errors import ShapeError
from pytest_roofline.model import walk_nodes

from .types import TensorInfo

__all__ = ["check_consistency", "find_inconsistency"]

#: Multidirectional (numpy) broadcasting ops, opset 7 and later.
BROADCASTING_OPS = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Mod",
        "Equal",
        "Greater",
        "Less",
        "GreaterOrEqual",
        "LessOrEqual",
        "And",
        "Or",
        "Xor",
        "Where",
        "Max",
        "Min",
        "Sum",
        "Mean",
        "BitShift",
    }
)


def check_consistency(
    model: onnx.ModelProto, tensors: Mapping[str, TensorInfo], dims: Mapping[str, int]
) -> None:
    """Raise when bound ``dims`` give a node input shapes that cannot meet.

    Raises:
        ShapeError: one line naming the node, the shapes and the bound dims.
    """
    if not dims:
        return
    problem = find_inconsistency(model, {name: info.shape for name, info in tensors.items()})
    if problem is not None:
        bound = ", ".join(f"{k}={v}" for k, v in sorted(dims.items()))
        raise ShapeError(
            f"the bound dims contradict the graph's shape arithmetic: {problem} (bound: {bound})"
        )


def find_inconsistency(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """A description of the first node whose input shapes cannot meet, or None."""
    for node in walk_nodes(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        named = [t for t in node.input if t]
        if any(t not in shapes for t in named):
            continue
        found = [shapes[t] for t in named]
        if node.op_type in BROADCASTING_OPS and not any(a.name == "broadcast" for a in node.attribute):
            if _broadcast(found) is None:
                return f"{node.op_type} '{node.name}' broadcasts {_show(found)}"
        elif node.op_type == "MatMul" and len(found) == 2 and found[0] and found[1]:
            a, b = found
            k_b = b[0] if len(b) == 1 else b[-2]
            if a[-1] != k_b:
                return f"MatMul '{node.name}' multiplies {_show(found)} (inner dims {a[-1]} and {k_b})"
        elif node.op_type == "Concat" and len(found) > 1:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            ranks = {len(s) for s in found}
            if len(ranks) == 1 and ranks != {0}:
                rank = ranks.pop()
                keep = [tuple(d for i, d in enumerate(s) if i != axis % rank) for s in found]
                if len(set(keep)) > 1:
                    return f"Concat '{node.name}' joins {_show(found)} along axis {axis}"
    return None


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            return None
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def _show(shapes: list[tuple[int, ...]]) -> str:
    return " with ".join("[" + ", ".join(map(str, s)) + "]" for s in shapes)
