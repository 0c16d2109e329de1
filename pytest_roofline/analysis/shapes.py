"""Concrete shapes for every tensor of every node, without reading external-data weights.

Resolution runs in order and stops when nothing is unknown:

1. ``onnx``: ``onnx.shape_inference`` with data propagation on a weightless copy of the model
   whose inputs are fixed to the bound shapes (large initializers become typed inputs).
2. ``fold``: (1) again after folding ``Shape`` of known tensors and nodes of constants into
   constants, repeated while something folds (exporters' ``Div``/``Cast``/``Mod`` shape arithmetic).
3. ``symbolic``: onnxruntime's ``SymbolicShapeInference`` on the same copy; it folds
   Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains that defeat (1).
4. ``onnxruntime``: one run on onnxruntime with every intermediate exposed as an output; only
   when the weights are inline or their external data files are present.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from pytest_roofline.errors import ShapeError
from pytest_roofline.model import graph_inputs, make_inputs, subgraphs

from .consistency import find_inconsistency
from .folding import fold_and_infer
from .types import TensorInfo

__all__ = [
    "GraphNode",
    "ResolvedShapes",
    "inline_local_functions",
    "iter_nodes",
    "quiet_native_output",
    "resolve_shapes",
]

SMALL_INITIALIZER = 4096  # elements: kept in the weightless copy (shape constants live here)
SMALL_INT64_INITIALIZER = 1 << 20  # int64 tensors (indices, position ids) are kept up to this
MAX_RUN_BYTES = 2 << 30  # the onnxruntime fallback loads weights only below this size

_Shape = tuple[int, ...]
_Partial = tuple[int, "tuple[int | None, ...] | None"]  # (elem_type, dims or None if rank unknown)


@dataclass(frozen=True)
class GraphNode:
    """A node with its display name and the subgraph path it lives in ("" for the main graph)."""

    name: str
    graph: str
    node: onnx.NodeProto


@dataclass(frozen=True)
class ResolvedShapes:
    """Tensor infos of every tensor the nodes touch, and the methods that resolved them."""

    tensors: dict[str, TensorInfo]
    method: str


def iter_nodes(graph: onnx.GraphProto, prefix: str = "") -> Iterator[GraphNode]:
    """Every node of ``graph`` and its subgraphs (If/Loop/Scan), subgraph nodes after their parent.

    Unnamed nodes are called ``<op_type>_<index>``; subgraph nodes ``<parent>/<attr>/<node>``.
    """
    for index, node in enumerate(graph.node):
        local = node.name or f"{node.op_type}_{index}"
        name = f"{prefix}/{local}" if prefix else local
        yield GraphNode(name, prefix, node)
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                yield from iter_nodes(sub, f"{name}/{attr.name}")


# -- local functions ---------------------------------------------------------------------------


def inline_local_functions(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of ``model`` whose calls to local functions are replaced by the function bodies.

    Inlined nodes are named ``<call>/<function>/<node>``; their private tensors get the same prefix.

    Returns:
        The model (``model`` itself when it has no local functions) and, for each inlined node,
        the ``<call>/<function>`` path it came from.
    """
    if not model.functions:
        return model, {}
    functions = {(f.domain, f.name): f for f in model.functions}
    origin: dict[str, str] = {}
    nodes = _inline_nodes(list(model.graph.node), functions, origin)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    del out.functions[:]
    present = {opset.domain for opset in out.opset_import}
    for function in model.functions:
        for opset in function.opset_import:
            if opset.domain not in present:
                out.opset_import.append(opset)
                present.add(opset.domain)
    return out, origin


def _inline_nodes(
    nodes: list[onnx.NodeProto],
    functions: dict[tuple[str, str], onnx.FunctionProto],
    origin: dict[str, str],
) -> list[onnx.NodeProto]:
    result: list[onnx.NodeProto] = []
    for index, node in enumerate(nodes):
        function = functions.get((node.domain, node.op_type))
        if function is None:
            result.append(node)
            continue
        path = f"{node.name or f'{node.op_type}_{index}'}/{function.name}"
        rename = dict(zip(function.input, node.input, strict=False))
        rename.update(zip(function.output, node.output, strict=False))
        attrs = {a.name: a for a in node.attribute}
        defaults = {a.name: a for a in function.attribute_proto}
        body = []
        for inner_index, inner in enumerate(function.node):
            copy = onnx.NodeProto()
            copy.CopyFrom(inner)
            copy.name = f"{path}/{inner.name or f'{inner.op_type}_{inner_index}'}"
            origin[copy.name] = path
            for field in (copy.input, copy.output):
                for i, tensor in enumerate(field):
                    if tensor:
                        field[i] = rename.get(tensor, f"{path}/{tensor}")
            _bind_attribute_refs(copy, attrs, defaults)
            body.append(copy)
        result.extend(_inline_nodes(body, functions, origin))
    return result


def _bind_attribute_refs(
    node: onnx.NodeProto,
    attrs: Mapping[str, onnx.AttributeProto],
    defaults: Mapping[str, onnx.AttributeProto],
) -> None:
    kept = []
    for attr in node.attribute:
        if attr.ref_attr_name:
            source = attrs.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
            if source is None:
                continue
            bound = onnx.AttributeProto()
            bound.CopyFrom(source)
            bound.name = attr.name
            kept.append(bound)
        else:
            kept.append(attr)
    del node.attribute[:]
    node.attribute.extend(kept)


# -- the weightless copy -----------------------------------------------------------------------


def _is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def _weightless(model: onnx.ModelProto, input_shapes: Mapping[str, _Shape]) -> onnx.ModelProto:
    """A copy with inputs fixed to ``input_shapes``, large or external initializers as inputs."""
    source = model.graph
    copy = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name)
    copy.opset_import.extend(model.opset_import)
    copy.functions.extend(model.functions)
    graph = copy.graph
    graph.name = source.name
    graph.node.extend(source.node)
    kept = [init for init in source.initializer if _keep_inline(init)]
    kept_names = {init.name for init in kept}
    as_inputs = [init for init in source.initializer if init.name not in kept_names]
    moved = {init.name for init in as_inputs}
    for vi in source.input:
        if vi.name in moved:
            continue
        fixed = graph.input.add()
        fixed.CopyFrom(vi)
        if vi.name in input_shapes:
            del fixed.type.tensor_type.shape.dim[:]
            for size in input_shapes[vi.name]:
                fixed.type.tensor_type.shape.dim.add().dim_value = size
    graph.input.extend(onnx.helper.make_tensor_value_info(i.name, i.data_type, i.dims) for i in as_inputs)
    graph.initializer.extend(kept)
    graph.sparse_initializer.extend(source.sparse_initializer)
    for vi in source.output:  # keep the types, drop declared shapes that may contradict bindings
        out = graph.output.add()
        out.name = vi.name
        if vi.type.HasField("tensor_type"):
            out.type.tensor_type.elem_type = vi.type.tensor_type.elem_type
        else:
            out.type.CopyFrom(vi.type)
    return copy


def _keep_inline(init: onnx.TensorProto) -> bool:
    """Small inline initializers (shape constants, int64 indices) stay; weights become inputs."""
    if _is_external(init):
        return False
    limit = SMALL_INT64_INITIALIZER if init.data_type == onnx.TensorProto.INT64 else SMALL_INITIALIZER
    return _numel(init.dims) <= limit


def _numel(dims: object) -> int:
    count = 1
    for dim in dims:  # type: ignore[attr-defined]
        count *= int(dim)
    return count


# -- reading shapes back -----------------------------------------------------------------------


def _value_infos(graph: onnx.GraphProto) -> Iterator[onnx.ValueInfoProto]:
    yield from graph.input
    yield from graph.value_info
    yield from graph.output
    for node in graph.node:
        for sub in subgraphs(node):
            yield from _value_infos(sub)


def _collect(model: onnx.ModelProto) -> dict[str, _Partial]:
    """What a model's value infos say: elem type and dims (None where unknown)."""
    found: dict[str, _Partial] = {}
    for vi in _value_infos(model.graph):
        if not vi.type.HasField("tensor_type"):
            continue
        tensor_type = vi.type.tensor_type
        if not tensor_type.HasField("shape"):
            found.setdefault(vi.name, (tensor_type.elem_type, None))
            continue
        dims = tuple(
            d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
            for d in tensor_type.shape.dim
        )
        previous = found.get(vi.name)
        if previous is None or not _complete(previous):
            found[vi.name] = (tensor_type.elem_type or (previous[0] if previous else 0), dims)
    return found


def _complete(partial: _Partial | None) -> bool:
    return partial is not None and partial[1] is not None and None not in partial[1] and partial[0] > 0


def _needed(model: onnx.ModelProto) -> dict[str, str]:
    """Every tensor a node reads or writes, mapped to the name of a node that touches it."""
    needed: dict[str, str] = {}
    for item in iter_nodes(model.graph):
        for tensor in (*item.node.output, *item.node.input):
            if tensor and tensor not in needed:
                needed[tensor] = item.name
    return needed


def _non_tensors(model: onnx.ModelProto) -> set[str]:
    """Values declared as sequences, optionals or maps (a value info without a type is a tensor)."""
    return {
        vi.name
        for vi in _value_infos(model.graph)
        if vi.type.WhichOneof("value") not in (None, "tensor_type", "sparse_tensor_type")
    }


# -- the three methods -------------------------------------------------------------------------


def _onnx_inference(skeleton: onnx.ModelProto) -> dict[str, _Partial]:
    inferred = onnx.shape_inference.infer_shapes(
        skeleton, check_type=False, strict_mode=False, data_prop=True
    )
    return _collect(inferred)


def _symbolic_inference(skeleton: onnx.ModelProto) -> dict[str, _Partial]:
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    with quiet_native_output(), _in_temp_dir():
        inferred = SymbolicShapeInference.infer_shapes(skeleton, auto_merge=True, guess_output_rank=False)
    return _collect(inferred) if inferred is not None else {}


@contextlib.contextmanager
def quiet_native_output() -> Iterator[None]:
    """Swallow what Python and native code (onnxruntime's logger) write to stdout and stderr.

    onnxruntime logs session and kernel errors from C++ straight to file descriptor 2, which
    ``contextlib.redirect_stderr`` cannot catch; the analyzer's own failures are reported as
    one-line errors instead.
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
        try:
            saved = os.dup(2)
        except OSError:  # no file descriptor 2: nothing native to silence
            yield
            return
        sink = stack.enter_context(tempfile.TemporaryFile())
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


@contextlib.contextmanager
def _in_temp_dir() -> Iterator[None]:
    """Run in a scratch directory: on failure the symbolic inference saves its partial model
    (``sym_shape_infer_temp.onnx`` + a uuid-named data file) into the working directory."""
    previous = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="roofline-sym-") as scratch:
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(previous)


def _weights_available(model: onnx.ModelProto, base_dir: Path | None) -> bool:
    total = 0
    for init in model.graph.initializer:
        if _is_external(init):
            info = {entry.key: entry.value for entry in init.external_data}
            if base_dir is None or not (base_dir / info.get("location", "")).is_file():
                return False
            total += int(info.get("length", 0)) or _numel(init.dims) * 4
    return total <= MAX_RUN_BYTES


def _onnxruntime_run(
    model: onnx.ModelProto, input_shapes: Mapping[str, _Shape], base_dir: Path | None
) -> dict[str, _Partial]:
    import onnxruntime as ort

    runnable = onnx.ModelProto()
    runnable.CopyFrom(model)
    if any(_is_external(init) for init in runnable.graph.initializer):
        onnx.external_data_helper.load_external_data_for_model(runnable, str(base_dir))
    existing = {vi.name for vi in runnable.graph.output}
    for node in runnable.graph.node:
        for tensor in node.output:
            if tensor and tensor not in existing:
                runnable.graph.output.append(onnx.ValueInfoProto(name=tensor))
                existing.add(tensor)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    with quiet_native_output():
        session = ort.InferenceSession(
            runnable.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        names = [o.name for o in session.get_outputs()]
        values = session.run(names, make_inputs(model, input_shapes))
    found: dict[str, _Partial] = {}
    for name, value in zip(names, values, strict=True):
        if isinstance(value, np.ndarray):
            elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
            found[name] = (elem, tuple(int(d) for d in value.shape))
    return found


# -- putting it together -----------------------------------------------------------------------


def resolve_shapes(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, _Shape],
    base_dir: Path | None = None,
    dims: Mapping[str, int] | None = None,
) -> ResolvedShapes:
    """Concrete shapes of every tensor any node (also in subgraphs) touches.

    Args:
        model: the model (local functions already inlined), loaded without external data.
        input_shapes: bound shapes of the graph inputs.
        base_dir: directory of the model file, for the onnxruntime fallback's external data.
        dims: the user's dim bindings, named when they contradict the graph.

    Raises:
        ShapeError: a tensor's shape is still unknown after every method; names tensor and node.
    """
    needed = _needed(model)
    skip = _non_tensors(model)
    weights = _weight_infos(model)
    known: dict[str, _Partial] = dict(weights)
    inputs = {vi.name: vi.type.tensor_type.elem_type for vi in graph_inputs(model)}
    known.update(
        {name: (inputs[name], tuple(shape)) for name, shape in input_shapes.items() if name in inputs}
    )
    methods = _resolve(model, input_shapes, base_dir, known)
    missing = [t for t in needed if t not in skip and not _complete(known.get(t))]
    if missing:
        complete = {t: tuple(d or 0 for d in p[1] or ()) for t, p in known.items() if _complete(p)}
        problem = find_inconsistency(model, complete)
        if problem is not None:
            bound = ", ".join(f"{k}={v}" for k, v in sorted((dims or {}).items()))
            raise ShapeError(
                f"the bound dims contradict the graph's shape arithmetic: {problem} (bound: {bound})"
                if bound
                else f"the input shapes contradict the graph's shape arithmetic: {problem}"
            )
        raise ShapeError(_unresolved_message(model, missing, known, needed, base_dir))
    tensors = {name: _tensor_info(name, known[name], name in weights) for name in needed if name not in skip}
    return ResolvedShapes(tensors=tensors, method="+".join(methods) or "onnx")


# fmt: off
#: Ops whose output size depends on the data itself, not on any shape.
DATA_DEPENDENT_OPS = frozenset(
    {
        "NonZero", "Unique", "Compress", "NonMaxSuppression", "StringSplit", "StringNormalizer",
        "ImageDecoder", "TfIdfVectorizer", "RegexFullMatch", "SequenceEmpty", "SplitToSequence",
    }
)
#: Ops whose output shape is set by the *values* of these inputs (sizes, scales, starts, counts).
VALUE_SHAPED_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Resize": (1, 2, 3),
    "Upsample": (1,), "Pad": (1, 2, 3), "Range": (0, 1, 2), "ConstantOfShape": (0,), "OneHot": (1,),
    "TopK": (1,), "Unsqueeze": (1,), "Squeeze": (1,), "Split": (1,), "CenterCropPad": (1,),
    "Col2Im": (1, 2), "AffineGrid": (1,), "MaxUnpool": (2,), "MelWeightMatrix": (0, 1, 2),
    "DFT": (1, 2), "STFT": (1, 2, 3), "HannWindow": (0,), "HammingWindow": (0,),
    "BlackmanWindow": (0,), "RandomNormal": (), "EyeLike": (), "ReduceSum": (1,),
    "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,), "Loop": (0, 1),
}
# fmt: on


def _unresolved_message(
    model: onnx.ModelProto,
    missing: list[str],
    known: dict[str, _Partial],
    needed: dict[str, str],
    base_dir: Path | None,
) -> str:
    """One line: the first unresolved tensor, the node that blocks it and what could help."""
    tensor = missing[0]
    dims = known.get(tensor, (0, None))[1]
    shown = (
        "unknown rank" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
    )
    head = (
        f"cannot resolve the shape of tensor '{tensor}' ({shown}) used by node '{needed[tensor]}'"
        f" ({len(missing)} tensor(s) unresolved)"
    )
    blocker = _blocking_node(model, tensor, known)
    if blocker is None:
        return head + "; export the model with static shapes"
    name, node = blocker
    constants = set(_weight_infos(model))
    if node.op_type in DATA_DEPENDENT_OPS:
        why = f"the output size of {node.op_type} '{name}' depends on the data, not on any dim"
    elif node.op_type in ("Loop", "Scan"):
        why = f"it depends on the trip count of {node.op_type} '{name}'; bind it with --trip {name}=N"
    else:
        positions = VALUE_SHAPED_INPUTS.get(node.op_type, ())
        by_value = [
            node.input[i]
            for i in positions
            if i < len(node.input) and node.input[i] and node.input[i] not in constants
        ]
        if by_value:
            values = ", ".join(f"'{t}'" for t in by_value)
            why = (
                f"the shape {node.op_type} '{name}' produces depends on the values of {values}, not on a dim"
            )
        else:
            why = f"no shape inference method handles {node.op_type} '{name}' here"
    if not _weights_available(model, base_dir):
        why += "; keep the model's external data beside it so an onnxruntime run can resolve it"
    return f"{head}: {why}"


def _blocking_node(
    model: onnx.ModelProto, tensor: str, known: dict[str, _Partial]
) -> tuple[str, onnx.NodeProto] | None:
    """The first node upstream of ``tensor`` whose inputs are resolved but whose outputs are not."""
    producers = {t: item for item in iter_nodes(model.graph) for t in item.node.output if t}
    current = producers.get(tensor)
    seen: set[str] = set()
    while current is not None and current.name not in seen:
        seen.add(current.name)
        upstream = [
            producers[t] for t in current.node.input if t and t in producers and not _complete(known.get(t))
        ]
        if not upstream:
            return current.name, current.node
        current = upstream[0]
    return None


def _resolve(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, _Shape],
    base_dir: Path | None,
    known: dict[str, _Partial],
) -> list[str]:
    """Run the methods in order while tensors are unknown; update ``known``; the methods that helped."""
    needed = _needed(model)
    skip = _non_tensors(model)
    main = {t for node in model.graph.node for t in (*node.input, *node.output)}
    skeleton = _weightless(model, input_shapes)
    methods: list[str] = []
    steps = [
        ("onnx", lambda: _onnx_inference(skeleton)),
        ("fold", lambda: fold_and_infer(skeleton, _onnx_inference)),
        ("symbolic", lambda: _symbolic_inference(skeleton)),
        ("onnxruntime", lambda: _onnxruntime_run(model, input_shapes, base_dir)),
    ]
    for method, step in steps:
        missing = [t for t in needed if t not in skip and not _complete(known.get(t))]
        if not missing:
            break
        if method == "onnxruntime" and (main.isdisjoint(missing) or not _weights_available(model, base_dir)):
            continue  # a run only exposes main-graph tensors
        try:
            found = step()
        except Exception:  # a method that cannot handle the model leaves the rest to the next
            continue
        gained = False
        for tensor in missing:
            partial = found.get(tensor)
            if _complete(partial):
                known[tensor] = partial  # type: ignore[assignment]
                gained = True
            elif partial is not None and tensor not in known:
                known[tensor] = partial
        if gained:
            methods.append(method)
    for method in _resolve_subgraphs(model, base_dir, known):
        if method not in methods:
            methods.append(method)
    return methods


def _resolve_subgraphs(
    model: onnx.ModelProto, base_dir: Path | None, known: dict[str, _Partial]
) -> list[str]:
    """Resolve unresolved If/Loop/Scan bodies as standalone models seeded from their parent node."""
    methods: list[str] = []
    for node in model.graph.node:
        for sub in subgraphs(node):
            inner = {t for item in iter_nodes(sub) for t in (*item.node.input, *item.node.output) if t}
            if all(_complete(known.get(t)) for t in inner):
                continue
            standalone = _standalone(model, node, sub, inner, known)
            if standalone is None:
                continue
            sub_model, sub_inputs = standalone
            sub_known = {**known, **{n: p for n, p in sub_inputs.items()}}
            shapes = {name: partial[1] for name, partial in sub_inputs.items()}
            methods += _resolve(sub_model, shapes, base_dir, sub_known)  # type: ignore[arg-type]
            known.update({t: sub_known[t] for t in inner if _complete(sub_known.get(t))})
    return methods


def _standalone(
    model: onnx.ModelProto,
    node: onnx.NodeProto,
    sub: onnx.GraphProto,
    inner: set[str],
    known: dict[str, _Partial],
) -> tuple[onnx.ModelProto, dict[str, _Partial]] | None:
    """A model of ``sub`` whose inputs are its formal inputs and the outer tensors it reads."""
    seeds = _body_input_shapes(node, sub, known)
    if seeds is None:
        return None
    produced = {t for item in iter_nodes(sub) for t in item.node.output if t}
    local = produced | _declared_names(sub)
    outer = sorted(t for t in inner if t not in local)
    for name in outer:
        if not _complete(known.get(name)):
            return None
        seeds[name] = known[name]
    graph = onnx.GraphProto(name=sub.name)
    graph.node.extend(sub.node)
    graph.initializer.extend(sub.initializer)
    for name, (elem, dims) in seeds.items():
        graph.input.append(onnx.helper.make_tensor_value_info(name, elem, list(dims or ())))
    for vi in sub.output:
        out = graph.output.add()
        out.name = vi.name
        out.type.tensor_type.elem_type = vi.type.tensor_type.elem_type
    standalone = onnx.ModelProto(ir_version=model.ir_version)
    standalone.opset_import.extend(model.opset_import)
    standalone.graph.CopyFrom(graph)
    return standalone, seeds


def _declared_names(graph: onnx.GraphProto) -> set[str]:
    """Formal inputs and initializers of ``graph`` and of every subgraph nested in it."""
    names = {vi.name for vi in graph.input} | {init.name for init in graph.initializer}
    for node in graph.node:
        for sub in subgraphs(node):
            names |= _declared_names(sub)
    return names


def _body_input_shapes(
    node: onnx.NodeProto, sub: onnx.GraphProto, known: dict[str, _Partial]
) -> dict[str, _Partial] | None:
    """Shapes of a body's formal inputs from its parent: Loop (iter, cond, carried), Scan, If."""
    formal = [vi.name for vi in sub.input]
    if node.op_type == "If":
        return {}
    if node.op_type == "Loop":
        sources: list[_Partial | None] = [(onnx.TensorProto.INT64, ()), (onnx.TensorProto.BOOL, ())]
        sources += [known.get(t) for t in node.input[2:]]
    elif node.op_type == "Scan":
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        n_scan = int(attrs.get("num_scan_inputs", 0))
        states, scans = (
            list(node.input[: len(node.input) - n_scan]),
            list(node.input[len(node.input) - n_scan :]),
        )
        axes = list(attrs.get("scan_input_axes") or [0] * n_scan)
        sources = [known.get(t) for t in states]
        for tensor, axis in zip(scans, axes, strict=False):
            partial = known.get(tensor)
            if not _complete(partial):
                return None
            if partial is None or partial[1] is None:
                return None
            dims = list(partial[1])
            del dims[axis % len(dims)]
            sources.append((partial[0], tuple(dims)))
    else:
        return _modifier_input_shapes(node, sub, known)
    complete = [s for s in sources if s is not None and _complete(s)]
    if len(complete) != len(formal) or len(sources) != len(formal):
        return None
    return dict(zip(formal, complete, strict=True))


def _modifier_input_shapes(
    node: onnx.NodeProto, sub: onnx.GraphProto, known: dict[str, _Partial]
) -> dict[str, _Partial] | None:
    """Formal inputs of a subgraph attribute of any other op (FlexAttention's ``score_mod``).

    FlexAttention's ``score_mod`` and ``prob_mod`` take the score tensor (batch, q_heads, q_seq,
    kv_seq); other ops' subgraphs are seeded from their formal inputs' declared types.
    """
    formal = list(sub.input)
    if node.op_type == "FlexAttention" and len(formal) == 1:
        query, key = known.get(node.input[0]), known.get(node.input[1])
        if query is None or key is None or not _complete(query) or not _complete(key):
            return None
        q_dims, k_dims = query[1], key[1]
        if q_dims is None or k_dims is None or len(q_dims) != 4 or len(k_dims) != 4:
            return None
        attrs = {a.name: a.i for a in node.attribute if a.type == onnx.AttributeProto.INT}
        default = onnx.TensorProto.DOUBLE if query[0] == onnx.TensorProto.DOUBLE else onnx.TensorProto.FLOAT
        elem = attrs.get("softmax_precision") or default
        return {formal[0].name: (elem, (q_dims[0], q_dims[1], q_dims[2], k_dims[2]))}
    declared: dict[str, _Partial] = {}
    for vi in formal:
        partial = _declared(vi)
        if partial is None or not _complete(partial):
            return None
        declared[vi.name] = partial
    return declared


def _declared(vi: onnx.ValueInfoProto) -> _Partial | None:
    """What a value info declares, or None for a non-tensor or shapeless one."""
    tensor_type = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
        return None
    dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
    return (tensor_type.elem_type, dims)


def _weight_infos(model: onnx.ModelProto) -> dict[str, _Partial]:
    """Initializers (all graphs) and Constant outputs, from metadata only."""
    weights: dict[str, _Partial] = {}
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for init in graph.initializer:
            weights[init.name] = (init.data_type, tuple(int(d) for d in init.dims))
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
                value = _constant_info(node)
                if value is not None:
                    weights[node.output[0]] = value
            graphs.extend(subgraphs(node))
    return weights


def _constant_info(node: onnx.NodeProto) -> _Partial | None:
    for attr in node.attribute:
        if attr.name == "value":
            return (attr.t.data_type, tuple(int(d) for d in attr.t.dims))
        if attr.name in ("value_float", "value_int"):
            return (onnx.TensorProto.FLOAT if attr.name == "value_float" else onnx.TensorProto.INT64, ())
        if attr.name in ("value_floats", "value_ints"):
            count = len(attr.floats) if attr.name == "value_floats" else len(attr.ints)
            elem = onnx.TensorProto.FLOAT if attr.name == "value_floats" else onnx.TensorProto.INT64
            return (elem, (count,))
    return None


_ITEMSIZE_FALLBACK = {"bfloat16": 2, "float8e4m3fn": 1, "float8e5m2": 1, "int4": 1, "uint4": 1}


def _tensor_info(name: str, partial: _Partial, is_weight: bool) -> TensorInfo:
    dtype_name, itemsize = _dtype(partial[0])
    return TensorInfo(
        name=name,
        dtype=dtype_name,
        shape=tuple(d or 0 for d in partial[1] or ()),
        itemsize=itemsize,
        is_weight=is_weight,
    )


@functools.cache
def _dtype(elem: int) -> tuple[str, int]:
    """numpy dtype name and item size of an ONNX element type."""
    name = onnx.helper.tensor_dtype_to_string(elem).replace("TensorProto.", "").lower()
    try:
        np_dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    except Exception:  # types numpy lacks (bfloat16, float8, int4)
        return name, _ITEMSIZE_FALLBACK.get(name, 1)
    return np_dtype.name, np_dtype.itemsize
