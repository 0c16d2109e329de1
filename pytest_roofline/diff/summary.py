"""A compact structural summary of an ONNX model: enough to diff it later without the file.

Per node: its name, op type, module scope, a short hash of its attributes and small constant
inputs, the shapes (and dtype) of its outputs, the shapes of its weights, its activation edges
(as integer ids) and its FLOPs and bytes from the static cost model.  No weight values: a
300-node model summarizes to a few tens of kB of JSON (see :meth:`ModelSummary.to_dict`), small
enough to keep in a baseline entry.

>>> summary = summarize("model.onnx", batch=1)  # doctest: +SKIP
>>> ModelSummary.from_dict(summary.to_dict()) == summary  # doctest: +SKIP
True
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import ModelError
from pytest_roofline.schema import MODEL_SUMMARY_SCHEMA

if TYPE_CHECKING:
    import onnx

    from pytest_roofline.analysis import ModelAnalysis, TensorInfo
    from pytest_roofline.memory.estimate import Lifetime
    from pytest_roofline.model import ModelSource

__all__ = ["ModelSummary", "NodeSummary", "summarize"]

FLOAT32 = "float32"
#: Constant inputs with at most this many elements are hashed by value (shape targets, axes,
#: split sizes, clip bounds); larger ones are weights, compared by shape and dtype only.
SMALL_CONSTANT = 64
_COLUMNS = ("name", "op", "scope", "attrs", "inputs", "outputs", "shapes", "weights", "flops", "bytes")


@dataclass(frozen=True)
class NodeSummary:
    """One node: identity, a structural signature, activation edges and static costs.

    ``shapes`` are the node's outputs, ``;``-separated, each ``1x64x56x56`` for float32 or
    ``float16:1x64x56x56`` for another dtype (``scalar`` for rank 0, ``?`` when unresolved);
    ``weights`` the initializer inputs that are weights, ``,``-separated in the same form;
    ``attrs`` an 8-hex-digit hash of the attributes and the values of small constant inputs.
    ``inputs`` and ``outputs`` are edge ids (activation tensors) of the summary.
    """

    name: str
    op_type: str  # "Conv"; "<domain>:<op>" outside the default domain
    scope: str  # dotted module name ("layer2.1.conv1"); "" when unknown
    attrs: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    shapes: str
    weights: str
    flops: int
    bytes: int

    @property
    def dtype(self) -> str:
        """The dtype the node computes in: its first float output's, else its first output's."""
        entries = [s for s in self.shapes.split(";") if s] or [""]
        dtypes = [entry.partition(":")[0] if ":" in entry else FLOAT32 for entry in entries]
        floating = [d for d in dtypes if d.startswith(("float", "bfloat"))]
        return (floating or dtypes)[0]


@dataclass(frozen=True)
class ModelSummary:
    """The structural summary of a model at bound shapes (see the module docstring).

    ``graph_inputs`` are ``(name, edge id, shape)`` of the main graph's inputs; edges
    ``0..len(graph_inputs)-1`` are those inputs, the others are node outputs in node order.
    """

    model_name: str
    input_shapes: dict[str, tuple[int, ...]] = field(hash=False)
    graph_inputs: tuple[tuple[str, int, str], ...]
    graph_outputs: tuple[int, ...]
    nodes: tuple[NodeSummary, ...]
    schema_version: int = MODEL_SUMMARY_SCHEMA

    @property
    def total_flops(self) -> int:
        """FLOPs of all nodes."""
        return sum(node.flops for node in self.nodes)

    @property
    def total_bytes(self) -> int:
        """Bytes of all nodes (unfused: every input read and output written)."""
        return sum(node.bytes for node in self.nodes)

    @cached_property
    def producers(self) -> dict[int, int]:
        """Edge id -> index of the node producing it (graph inputs are absent)."""
        return {edge: index for index, node in enumerate(self.nodes) for edge in node.outputs}

    @cached_property
    def consumers(self) -> dict[int, list[int]]:
        """Edge id -> indices of the nodes reading it."""
        found: dict[int, list[int]] = {}
        for index, node in enumerate(self.nodes):
            for edge in node.inputs:
                found.setdefault(edge, []).append(index)
        return found

    def edge_shape(self, edge: int) -> str:
        """The shape string of an edge (a graph input's or a producer's output)."""
        for _, input_edge, shape in self.graph_inputs:
            if input_edge == edge:
                return shape
        index = self.producers.get(edge)
        if index is None:
            return "?"
        node = self.nodes[index]
        parts = node.shapes.split(";")
        position = node.outputs.index(edge)
        return parts[position] if position < len(parts) else "?"

    def input_shapes_of(self, index: int) -> str:
        """The ``;``-separated shapes of node ``index``'s activation inputs."""
        return ";".join(self.edge_shape(edge) for edge in self.nodes[index].inputs)

    def lifetimes(self) -> tuple[list[str], dict[str, Lifetime]]:
        """The nodes' names in order and each activation's life over them (memory.estimate), keyed
        ``<producer>:<output index>``: the same key in a summary of the model edited (edge ids are not)."""
        from pytest_roofline.memory.estimate import Step, schedule_lifetimes
        from pytest_roofline.memory.trace import ELEMENT_BYTES

        itemsize = {"float32": 4, "float64": 8, **ELEMENT_BYTES}
        key = {edge: f"{node.name}:{i}" for node in self.nodes for i, edge in enumerate(node.outputs)}
        sized: dict[str, tuple[int, tuple[int, ...]]] = {}
        for node in self.nodes:
            for edge, entry in zip(node.outputs, node.shapes.split(";"), strict=False):
                dtype, _, dims = entry.rpartition(":")
                parts = [] if dims == "scalar" else dims.split("x")
                size = itemsize.get(dtype or FLOAT32, 0)
                if size and all(part.isdigit() for part in parts):  # "?": unresolved, not sized
                    numbers = tuple(map(int, parts))
                    sized[key[edge]] = (size * math.prod(numbers), numbers)
        steps = [
            Step(
                node.name,
                node.op_type,
                tuple(key.get(e, f"input:{e}") for e in node.inputs),
                tuple(key[e] for e in node.outputs),
            )
            for node in self.nodes
        ]
        outputs = {key[edge] for edge in self.graph_outputs if edge in key}
        return [node.name for node in self.nodes], schedule_lifetimes(steps, sized, outputs)

    def to_dict(self, packed: bool = False) -> dict[str, Any]:
        """JSON-ready dict: one row per node under ``columns``.

        Args:
            packed: store the rows zlib-compressed and base64-encoded under ``packed`` (about a
                fifth of the size; for baseline entries, where nobody reads the rows by eye).
        """
        rows = [
            [
                node.name,
                node.op_type,
                "" if node.scope == scope_from_name(node.name) else node.scope,
                node.attrs,
                list(node.inputs),
                list(node.outputs),
                node.shapes,
                node.weights,
                node.flops,
                node.bytes,
            ]
            for node in self.nodes
        ]
        data: dict[str, Any] = {
            "schema_version": self.schema_version,
            "model": self.model_name,
            "inputs": {k: list(v) for k, v in self.input_shapes.items()},
            "graph_inputs": [list(item) for item in self.graph_inputs],
            "graph_outputs": list(self.graph_outputs),
            "columns": list(_COLUMNS),
            "total": {"flops": self.total_flops, "bytes": self.total_bytes, "nodes": len(self.nodes)},
        }
        if packed:
            raw = json.dumps(rows, separators=(",", ":")).encode()
            data["packed"] = base64.b64encode(zlib.compress(raw, 9)).decode("ascii")
        else:
            data["nodes"] = rows
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSummary:
        """Inverse of :meth:`to_dict` (packed or not).

        Raises:
            ModelError: an unknown schema version or a malformed summary.
        """
        version = data.get("schema_version")
        if version != MODEL_SUMMARY_SCHEMA:
            raise ModelError(
                f"model summary schema {version!r} is not {MODEL_SUMMARY_SCHEMA}; re-record the baseline"
            )
        try:
            if "packed" in data:
                rows = json.loads(zlib.decompress(base64.b64decode(data["packed"])))
            else:
                rows = data["nodes"]
            columns = list(data.get("columns", _COLUMNS))
            at = {name: columns.index(name) for name in _COLUMNS}
            nodes = tuple(
                NodeSummary(
                    name=row[at["name"]],
                    op_type=row[at["op"]],
                    scope=row[at["scope"]] or scope_from_name(row[at["name"]]),
                    attrs=row[at["attrs"]],
                    inputs=tuple(int(e) for e in row[at["inputs"]]),
                    outputs=tuple(int(e) for e in row[at["outputs"]]),
                    shapes=row[at["shapes"]],
                    weights=row[at["weights"]],
                    flops=int(row[at["flops"]]),
                    bytes=int(row[at["bytes"]]),
                )
                for row in rows
            )
            return cls(
                model_name=str(data.get("model", "")),
                input_shapes={k: tuple(v) for k, v in data.get("inputs", {}).items()},
                graph_inputs=tuple((str(n), int(e), str(s)) for n, e, s in data["graph_inputs"]),
                graph_outputs=tuple(int(e) for e in data["graph_outputs"]),
                nodes=nodes,
                schema_version=version,
            )
        except (KeyError, ValueError, TypeError, IndexError, zlib.error) as exc:
            raise ModelError(
                f"malformed model summary ({type(exc).__name__}); re-record the baseline"
            ) from None


def summarize(
    model: ModelSource,
    *,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    analysis: ModelAnalysis | None = None,
) -> ModelSummary:
    """The structural summary of ``model`` at bound shapes.

    Args:
        model: a path to an .onnx file or a loaded ``onnx.ModelProto`` (weights never read).
        batch: binds the first dim of every input whose first dim is symbolic.
        dims: binds symbolic dims by name.
        analysis: the model's :func:`~pytest_roofline.analysis.analyze` result at the same
            shapes, when the caller has it already (saves a second analysis).

    Raises:
        ModelError, ShapeError: the model cannot be loaded or its shapes resolved.
    """
    from pytest_roofline.analysis import analyze
    from pytest_roofline.model import load_model, walk_nodes

    proto = load_model(model)
    if analysis is None:
        analysis = analyze(model, batch=batch, dims=dims)
    protos = {tuple(node.output): node for node in walk_nodes(proto.graph)}
    constants = _constants(proto)
    edges: dict[str, int] = {}
    graph_inputs = []
    for value in proto.graph.input:
        if value.name in constants:
            continue  # an old-style input that is a weight
        edges[value.name] = len(edges)
        graph_inputs.append((value.name, edges[value.name], _shape(analysis.tensors.get(value.name))))
    nodes = []
    for cost in analysis.nodes:
        if cost.outputs and all(t in constants for t in cost.outputs if t):
            continue  # a Constant, or an Identity of a constant: folded into its consumers
        activations, weights, values = [], [], []
        for tensor in cost.inputs:
            if not tensor:
                continue
            if tensor in edges:
                activations.append(edges[tensor])
            elif tensor in constants:
                info = analysis.tensors.get(tensor)
                if _is_weight(info):
                    weights.append(_shape(info))
                else:
                    values.append(constants[tensor])
        outputs = []
        for tensor in cost.outputs:
            if tensor:
                edges.setdefault(tensor, len(edges))
                outputs.append(edges[tensor])
        node_proto = protos.get(tuple(cost.outputs))
        nodes.append(
            NodeSummary(
                name=cost.name,
                op_type=cost.op_type if cost.domain in ("", "ai.onnx") else f"{cost.domain}:{cost.op_type}",
                scope=_scope(cost.name, node_proto),
                attrs=_attrs_hash(node_proto, values),
                inputs=tuple(activations),
                outputs=tuple(outputs),
                shapes=";".join(_shape(analysis.tensors.get(t)) for t in cost.outputs if t),
                weights=",".join(weights),
                flops=cost.flops,
                bytes=cost.bytes,
            )
        )
    return ModelSummary(
        model_name=analysis.model_name,
        input_shapes=dict(analysis.input_shapes),
        graph_inputs=tuple(graph_inputs),
        graph_outputs=tuple(edges[name] for name in analysis.graph_outputs if name in edges),
        nodes=tuple(nodes),
    )


def scope_from_name(name: str) -> str:
    """The module path in a legacy-exporter node name: ``/layer1/layer1.0/conv1/Conv`` →
    ``layer1.0.conv1``; ``""`` for names without one."""
    if not name.startswith("/"):
        return ""
    return qualified(name.strip("/").split("/")[:-1])


def qualified(parts: list[str]) -> str:
    """The dotted module name from a path of module names, each relative to its parent
    (``layer1``, ``conv1``) or already qualified (``layer1.0``, ``layer1.0.conv1``)."""
    name = ""
    for part in parts:
        if not part:
            continue
        name = part if not name or part.startswith(name + ".") else f"{name}.{part}"
    return name


def _scope(name: str, node: onnx.NodeProto | None) -> str:
    """The module path from the dynamo exporter's ``namespace`` metadata, else from the name.

    ``namespace`` reads ``: pkg.Net/layer1: Sequential/layer1.0: Block/layer1.0.conv1: Conv2d/
    conv2d: aten.conv2d.default``: the root and the final op are dropped.
    """
    if node is not None:
        for prop in node.metadata_props:
            if prop.key == "namespace":
                parts = [part.split(":")[0].strip() for part in prop.value.split("/")]
                return qualified(parts[1:-1])
    return scope_from_name(name)


def _constants(proto: onnx.ModelProto) -> dict[str, str]:
    """Tensors that are constants, with their value (small) or dtype and dims (large).

    Initializers, outputs of ``Constant`` nodes and of ``Identity`` nodes of constants (the
    legacy exporter's de-duplicated weights): they are the inputs' values, not graph structure.
    """
    import onnx

    from pytest_roofline.model import walk_nodes

    found = {init.name: _constant_value(init) for init in _initializers(proto.graph)}
    for node in walk_nodes(proto.graph):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            attr = node.attribute[0] if len(node.attribute) == 1 else None
            if attr is not None and attr.type == onnx.AttributeProto.TENSOR:
                found[node.output[0]] = _constant_value(attr.t)
            elif attr is not None:
                found[node.output[0]] = f"{attr.name}={onnx.helper.get_attribute_value(attr)!r}"
        elif node.op_type == "Identity" and len(node.input) == 1 and node.input[0] in found:
            found[node.output[0]] = found[node.input[0]]
    return found


def _initializers(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    from pytest_roofline.model import subgraphs

    yield from graph.initializer
    for node in graph.node:
        for sub in subgraphs(node):
            yield from _initializers(sub)


def _is_weight(info: TensorInfo | None) -> bool:
    """A float initializer of more than one element (compared by shape, never by value)."""
    if info is None:
        return False
    return info.dtype.startswith(("float", "bfloat")) and info.numel > 1


def _shape(info: TensorInfo | None) -> str:
    if info is None:
        return "?"
    dims = "x".join(str(d) for d in info.shape) if info.shape else "scalar"
    return dims if info.dtype == FLOAT32 else f"{info.dtype}:{dims}"


def _constant_value(tensor: onnx.TensorProto) -> str:
    """A small constant's dtype, dims and values; a large or external one's dtype and dims."""
    import onnx
    from onnx import numpy_helper

    dims = list(tensor.dims)
    numel = 1
    for dim in dims:
        numel *= dim
    head = f"{tensor.data_type}:{dims}"
    if numel > SMALL_CONSTANT or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return head
    try:
        return f"{head}={numpy_helper.to_array(tensor).tolist()}"
    except (ValueError, TypeError):
        return head


def _attrs_hash(node: onnx.NodeProto | None, values: list[str]) -> str:
    """8 hex digits over the attributes (sorted by name) and the small constant inputs."""
    import onnx

    from pytest_roofline.model import walk_nodes

    parts: list[str] = []
    if node is not None:
        for attr in sorted(node.attribute, key=lambda a: a.name):
            if attr.type == onnx.AttributeProto.GRAPH:
                value: object = [n.op_type for n in walk_nodes(attr.g)]
            elif attr.type == onnx.AttributeProto.GRAPHS:
                value = [[n.op_type for n in walk_nodes(g)] for g in attr.graphs]
            elif attr.type == onnx.AttributeProto.TENSOR:
                value = _constant_value(attr.t)
            elif attr.type == onnx.AttributeProto.SPARSE_TENSOR:
                value = list(attr.sparse_tensor.dims)
            else:
                value = onnx.helper.get_attribute_value(attr)
            parts.append(f"{attr.name}={value!r}")
    parts += values
    return hashlib.blake2b("|".join(parts).encode(), digest_size=4).hexdigest()
