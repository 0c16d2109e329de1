"""Changed copies of a model for gate trials: a slower one that computes the same outputs, and a
re-saved one with the same graph in other bytes."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.errors import ModelError

__all__ = ["resaved_copy", "slower_variant"]

_HEAVY_OPS = ("MatMul", "Gemm", "Conv", "LSTM", "GRU", "RNN")
#: The duplicate's output is added back at this scale.
_EPSILON = 1e-9
#: Initializers up to this many elements switch storage in a re-saved copy.
_TYPED_LIMIT = 1 << 16


def slower_variant(
    model: onnx.ModelProto,
    node: str | None = None,
    seed: int = 1,
    *,
    dims: Mapping[str, int] | None = None,
    at_least: float = 0.0,
) -> onnx.ModelProto:
    """``model`` with its heaviest weight-fed MatMul/Gemm/Conv (LSTM/GRU/RNN count too; by MACs
    at ``dims``, or the node named ``node``) computed twice: the copy uses a perturbed copy of the
    weight and its output is added back scaled by 1e-9 (Mul by a constant, then Add), which no
    optimizer folds away.

    Outputs stay numerically the same. In a QDQ model (weight behind DequantizeLinear, output
    through QuantizeLinear -> DequantizeLinear) the copy is quantized the same way and the sum is
    re-quantized at the original scale, so every quantized consumer stays fused. A model whose
    weight-fed nodes all sit in Loop/Scan/If bodies gets the copy in the body (``node`` may then be
    the analysis' path name, e.g. ``scan/body/matmul``). ``dims`` default to the zoo entry's of the
    same graph name, else every symbolic dim is 1. With ``at_least`` (a fraction of the model's
    MACs) and no ``node``, the next heaviest nodes are duplicated too until the copies add that
    much work (a large model whose heaviest node is 3 % of its MACs gets several).

    Raises:
        ModelError: ``node`` names no weight-fed MatMul/Gemm/Conv of the model, or there is none.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {t.name: t for t in out.graph.initializer}
    sites = _sites(out.graph, "", inits)
    if node is None:
        top = [site for site in sites if site[1] == site[2].name] or sites
        if not top:
            raise ModelError(f"model '{out.graph.name}' has no weight-fed MatMul, Gemm or Conv to duplicate")
        names = _heaviest(model, [path for _, path, _ in top], dims, at_least)
    else:
        names = [node]
    rng = np.random.default_rng(seed)
    for name in names:
        sites = _sites(out.graph, "", inits)  # each copy rebuilds the node list
        chosen = [site for site in sites if name in (site[1], site[2].name)]
        if not chosen:
            raise ModelError(
                f"node '{name}' is not a weight-fed MatMul, Gemm or Conv of model '{out.graph.name}'"
            )
        graph, _, target = chosen[0]
        _duplicate(out.graph, graph, target, inits, rng)
        inits = {t.name: t for t in out.graph.initializer}
    return out


def _sites(
    graph: onnx.GraphProto, prefix: str, inits: dict[str, onnx.TensorProto]
) -> list[tuple[onnx.GraphProto, str, onnx.NodeProto]]:
    """(graph, analysis path name, node) of every weight-fed MatMul/Gemm/Conv, bodies included."""
    scope = {**inits, **{t.name: t for t in graph.initializer}}
    producers = {o: n for n in graph.node for o in n.output}
    sites = []
    for node in graph.node:
        path = f"{prefix}{node.name}"
        if node.op_type in _HEAVY_OPS and _weight_of(node, scope, producers):
            sites.append((graph, path, node))
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                sites += _sites(body, f"{path}/{attr.name}/", scope)
    return sites


def _duplicate(
    main: onnx.GraphProto,
    graph: onnx.GraphProto,
    target: onnx.NodeProto,
    outer: Mapping[str, onnx.TensorProto],
    rng: np.random.Generator,
) -> None:
    """Add the perturbed copy of ``target`` to ``graph`` (new initializers go to ``main``)."""
    inits = {**outer, **{t.name: t for t in graph.initializer}}
    producers = {o: n for n in graph.node for o in n.output}
    weight_name, dequantize = _weight_of(target, inits, producers)  # type: ignore[misc]
    new_weight = f"{weight_name}_slower"
    main.initializer.append(
        numpy_helper.from_array(_perturbed(numpy_helper.to_array(inits[weight_name]), rng), new_weight)
    )
    branch: list[onnx.NodeProto] = []
    copy_weight = new_weight
    if dequantize is not None:
        dq = helper.make_node(
            "DequantizeLinear",
            [new_weight, *dequantize.input[1:]],
            [f"{new_weight}_dequantized"],
            name=f"{dequantize.name}_slower",
        )
        dq.attribute.extend(dequantize.attribute)
        branch.append(dq)
        copy_weight = dq.output[0]
    twin = onnx.NodeProto()
    twin.CopyFrom(target)
    twin.name = f"{target.name}_slower"
    twin.input[1] = copy_weight
    used = _used_output(target, graph)
    for index, name in enumerate(target.output):
        twin.output[index] = f"{name}_slower" if name else ""
    branch.append(twin)
    extra = twin.output[used]
    requant = _requantize_point(target, graph)
    if requant is not None:
        branch += _qdq(extra, *requant, f"{twin.name}_out")
        extra = branch[-1].output[0]
        attach_after, attached = requant[1], requant[1].output[0]
    else:
        attach_after, attached = target, target.output[used]
    renamed = f"{attached}_before_slower"
    for index, name in enumerate(attach_after.output):
        if name == attached:
            attach_after.output[index] = renamed
    tail = _scaled(main, extra, _float_type(inits[weight_name], dequantize, inits), twin.name)
    tail.append(helper.make_node("Add", [renamed, tail[-1].output[0]], [attached], name=f"{twin.name}_add"))
    if requant is not None:  # the sum quantized again at the original's scale for fused consumers
        tail[-1].output[0] = f"{attached}_sum"
        tail += _qdq(f"{attached}_sum", *requant, f"{twin.name}_sum", output=attached)
    nodes = list(graph.node)
    position = nodes.index(target) + 1
    nodes[position:position] = branch
    after = max(nodes.index(attach_after), position + len(branch) - 1) + 1
    nodes[after:after] = tail
    nodes = _copies(nodes)
    del graph.node[:]
    graph.node.extend(nodes)


def resaved_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same graph (nodes, weights, shapes) in other bytes: another producer and doc string,
    initializers in reverse order, and each initializer of up to 64K elements stored the other way:
    ``raw_data`` <-> the typed fields (``float_data``, ``int32_data``, ``int64_data``...)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.producer_name = "pytest-roofline-resave"
    out.producer_version = "1"
    out.doc_string = "re-saved: the same graph in other bytes"
    graph = out.graph
    tensors = [_switch_storage(t) for t in reversed(graph.initializer)]
    del graph.initializer[:]
    graph.initializer.extend(tensors)
    return out


def _weight_of(
    node: onnx.NodeProto, inits: Mapping[str, onnx.TensorProto], producers: Mapping[str, onnx.NodeProto]
) -> tuple[str, onnx.NodeProto | None] | None:
    """The initializer behind ``node``'s second input and the DequantizeLinear between, if any."""
    if len(node.input) < 2:
        return None
    name = node.input[1]
    if name in inits:
        return name, None
    producer = producers.get(name)
    if producer is not None and producer.op_type == "DequantizeLinear" and producer.input[0] in inits:
        return producer.input[0], producer
    return None


def _heaviest(
    model: onnx.ModelProto, names: list[str], dims: Mapping[str, int] | None, at_least: float = 0.0
) -> list[str]:
    """The node of ``names`` (analysis path names) with the most MACs at ``dims``, then the next
    heaviest until together they hold ``at_least`` of the model's MACs."""
    from pytest_roofline.analysis import analyze
    from pytest_roofline.model import graph_inputs

    if dims is None:
        from .suite import ZOO

        known = {entry.name: entry.dims for entry in ZOO}
        dims = known.get(model.graph.name)
    if dims is None:
        dims = {
            d.dim_param: 1 for vi in graph_inputs(model) for d in vi.type.tensor_type.shape.dim if d.dim_param
        }
    nodes = analyze(model, batch=1, dims=dims).nodes
    macs = {node.name: node.macs for node in nodes}
    total = sum(node.macs for node in nodes)
    ranked = sorted(names, key=lambda name: -macs.get(name, 0))
    chosen = ranked[:1]
    for name in ranked[1:]:
        if sum(macs.get(n, 0) for n in chosen) >= at_least * total:
            break
        chosen.append(name)
    return chosen


def _perturbed(weight: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A weight of the same shape and dtype, about 5 % off (integers: +-1 step, clipped)."""
    if weight.dtype.kind in "iu":
        info = np.iinfo(weight.dtype)
        step = rng.integers(-1, 2, size=weight.shape)
        return np.clip(weight.astype(np.int64) + step, info.min + (info.min < 0), info.max).astype(
            weight.dtype
        )
    noise = 1.0 + 0.05 * rng.standard_normal(weight.shape)
    return (weight.astype(np.float64) * noise).astype(weight.dtype)


def _used_output(node: onnx.NodeProto, graph: onnx.GraphProto) -> int:
    """The index of ``node``'s first output that a node or the graph reads (an RNN's Y or Y_h)."""
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    return next((i for i, name in enumerate(node.output) if name in read), 0)


def _scaled(main: onnx.GraphProto, tensor: str, dtype: np.dtype, prefix: str) -> list[onnx.NodeProto]:
    """``tensor * 1e-9``: a Mul by a constant (initializer in ``main``); a tensor of another float
    type than float32 is scaled in float32 and cast back (1e-9 underflows in float16)."""
    epsilon = f"{prefix}_epsilon"
    main.initializer.append(numpy_helper.from_array(np.array(_EPSILON, np.float32), epsilon))
    if dtype == np.float32:
        return [helper.make_node("Mul", [tensor, epsilon], [f"{tensor}_scaled"], name=f"{prefix}_scale")]
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    return [
        helper.make_node("Cast", [tensor], [f"{tensor}_float"], name=f"{prefix}_cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", [f"{tensor}_float", epsilon], [f"{tensor}_scaled"], name=f"{prefix}_scale"),
        helper.make_node(
            "Cast", [f"{tensor}_scaled"], [f"{tensor}_scaled_back"], name=f"{prefix}_cast_back", to=elem
        ),
    ]


def _requantize_point(
    target: onnx.NodeProto, graph: onnx.GraphProto
) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
    """(QuantizeLinear, DequantizeLinear) after ``target`` when its only consumer is a
    QuantizeLinear read by a DequantizeLinear (a QDQ group), else None."""
    consumers = [n for n in graph.node if target.output[0] in n.input]
    if len(consumers) != 1 or consumers[0].op_type != "QuantizeLinear":
        return None
    quantize = consumers[0]
    for node in graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] == quantize.output[0]:
            return quantize, node
    return None


def _qdq(
    tensor: str, quantize: onnx.NodeProto, dequant: onnx.NodeProto, prefix: str, output: str = ""
) -> list[onnx.NodeProto]:
    """QuantizeLinear -> DequantizeLinear of ``tensor`` with the parameters of the given pair."""
    q = helper.make_node(
        "QuantizeLinear",
        [tensor, *quantize.input[1:]],
        [f"{prefix}_quantized"],
        name=f"{prefix}_QuantizeLinear",
    )
    q.attribute.extend(quantize.attribute)
    dq = helper.make_node(
        "DequantizeLinear",
        [q.output[0], *dequant.input[1:]],
        [output or f"{prefix}_dequantized"],
        name=f"{prefix}_DequantizeLinear",
    )
    dq.attribute.extend(dequant.attribute)
    return [q, dq]


def _float_type(
    weight: onnx.TensorProto, dequantize: onnx.NodeProto | None, inits: Mapping[str, onnx.TensorProto]
) -> np.dtype:
    """The float dtype of the duplicated node's output: its weight's, or its DequantizeLinear scale's."""
    if dequantize is None:
        return helper.tensor_dtype_to_np_dtype(weight.data_type)
    scale = inits.get(dequantize.input[1])
    return helper.tensor_dtype_to_np_dtype(scale.data_type) if scale is not None else np.dtype(np.float32)


def _copies(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """Detached copies (the originals live in the repeated field about to be cleared)."""
    copies = []
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copies.append(copy)
    return copies


def _switch_storage(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """The same tensor with its values in the typed field when they were raw, raw otherwise
    (tensors over ``_TYPED_LIMIT`` elements stay raw: filling a typed field is slow)."""
    if tensor.data_location == TensorProto.EXTERNAL:
        return tensor
    array = numpy_helper.to_array(tensor)
    if not tensor.HasField("raw_data"):
        return numpy_helper.from_array(array, tensor.name)
    if array.size > _TYPED_LIMIT:
        return tensor
    typed = helper.make_tensor(tensor.name, tensor.data_type, list(tensor.dims), array.ravel().tolist())
    return typed if typed.ByteSize() else tensor
