"""Synthetic graphs for speed tests."""

from __future__ import annotations

import onnx

from .builder import GraphBuilder

__all__ = ["synthetic_chain"]

_CYCLE = ("MatMul", "Add", "Relu", "Mul")


def synthetic_chain(n_nodes: int, width: int = 16) -> onnx.ModelProto:
    """A chain of ``n_nodes`` nodes cycling MatMul/Add/Relu/Mul on a (batch, width) tensor."""
    b = GraphBuilder("synthetic_chain", weights="zeros")
    x = b.input("input", ["batch", width])
    w = b.weight("w", [width, width])
    c = b.const("c", [1.0] * width)
    for index in range(n_nodes):
        op = _CYCLE[index % len(_CYCLE)]
        x = b.op(op, [x] if op == "Relu" else [x, w if op == "MatMul" else c])
    b.output(x, "output", ["batch", width])
    return b.build()
