"""A small graph builder that names nodes and tensors like PyTorch's legacy ONNX exporter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["OPSET", "GraphBuilder", "Weights"]

OPSET = 17
Weights = Literal["random", "zeros"]
Dim = int | str


class GraphBuilder:
    """Accumulates nodes, initializers and value infos; :meth:`build` makes the ModelProto.

    Nodes are named ``<OpType>_<index>`` and intermediate tensors by number, as the legacy
    exporter does. Weights are seeded random (scaled by fan-in) or zeros; with ``external_data``
    they are references to a ``<name>.data`` file that is never written (analysis only).
    """

    def __init__(self, name: str, *, weights: Weights = "random", external_data: bool = False, seed: int = 0):
        self.name = name
        self.weights = weights
        self.external_data = external_data
        self._rng = np.random.default_rng(seed)
        self._nodes: list[onnx.NodeProto] = []
        self._inits: list[onnx.TensorProto] = []
        self._inputs: list[onnx.ValueInfoProto] = []
        self._outputs: list[onnx.ValueInfoProto] = []
        self._count = 0
        self._consts: set[str] = set()
        self._offset = 0

    # -- graph interface ------------------------------------------------------------------------

    def input(self, name: str, shape: Sequence[Dim], elem_type: int = TensorProto.FLOAT) -> str:
        """Declare a graph input (str dims are symbolic)."""
        self._inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, tensor: str, name: str, shape: Sequence[Dim], elem_type: int = TensorProto.FLOAT) -> str:
        """Expose ``tensor`` (of ``shape``) as graph output ``name`` (through an Identity if renamed)."""
        if tensor != name:
            self._nodes.append(helper.make_node("Identity", [tensor], [name], name=self._next("Identity")))
        self._outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def op(self, op_type: str, inputs: Sequence[str], n_out: int = 1, domain: str = "", **attrs: Any) -> str:
        """Add a node; returns its (first) output. Use :meth:`op_multi` for several outputs."""
        return self.op_multi(op_type, inputs, n_out, domain, **attrs)[0]

    def op_multi(
        self, op_type: str, inputs: Sequence[str], n_out: int, domain: str = "", **attrs: Any
    ) -> list[str]:
        """Add a node with ``n_out`` outputs."""
        name = self._next(op_type)
        outputs = [f"{self._count}" if n_out == 1 else f"{self._count}_{i}" for i in range(n_out)]
        self._nodes.append(
            helper.make_node(op_type, list(inputs), outputs, name=name, domain=domain, **attrs)
        )
        return outputs

    def weight(self, name: str, shape: Sequence[int], fan_in: int | None = None) -> str:
        """A float32 weight initializer."""
        if self.external_data:
            self._inits.append(self._external(name, shape))
        elif self.weights == "zeros":
            self._inits.append(
                helper.make_tensor(name, TensorProto.FLOAT, list(shape), bytes(4 * _numel(shape)), raw=True)
            )
        else:
            scale = 1.0 / np.sqrt(fan_in or (shape[0] if shape else 1))
            array = (self._rng.standard_normal(tuple(shape)) * scale).astype(np.float32)
            self._inits.append(numpy_helper.from_array(array, name))
        return name

    def const(self, name: str, values: float | Sequence[int] | Sequence[float] | np.ndarray) -> str:
        """A small constant initializer (int64 for ints, float32 for floats); always inline."""
        if name in self._consts:
            return name
        self._consts.add(name)
        array = np.asarray(values)
        array = array.astype(np.int64 if array.dtype.kind in "iu" else np.float32)
        self._inits.append(numpy_helper.from_array(array, name))
        return name

    def tensor(self, name: str, array: np.ndarray) -> str:
        """An initializer holding ``array`` as it is (any dtype: packed int4, bool masks, fp16)."""
        self._inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def random(self, shape: Sequence[int]) -> np.ndarray:
        """Standard-normal float32 values from the builder's seeded stream (for weights a caller
        transforms before storing, e.g. quantizes)."""
        return self._rng.standard_normal(tuple(shape)).astype(np.float32)

    def build(self) -> onnx.ModelProto:
        """The ModelProto (opset 17 plus com.microsoft 1), checked."""
        graph = helper.make_graph(self._nodes, self.name, self._inputs, self._outputs, self._inits)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
            producer_name="pytorch",
            producer_version="1.13.1",
        )
        model.ir_version = 8
        return model

    def fresh(self, prefix: str) -> str:
        """A name ``<prefix><n>`` not used before (n is the next node index)."""
        return f"{prefix}{self._count}"

    # -- helpers --------------------------------------------------------------------------------

    def _next(self, op_type: str) -> str:
        name = f"{op_type}_{self._count}"
        self._count += 1
        return name

    def _external(self, name: str, shape: Sequence[int]) -> onnx.TensorProto:
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(shape))
        tensor.data_location = TensorProto.EXTERNAL
        length = 4 * _numel(shape)
        for key, value in (("location", f"{self.name}.data"), ("offset", self._offset), ("length", length)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        self._offset += length
        return tensor


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for dim in shape:
        count *= int(dim)
    return count
