"""Load ONNX models without their weights, bind symbolic dims, make inputs.

External-data weights are never read here: sizes come from the tensor metadata, so a model far
larger than memory can be analyzed.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from pytest_roofline.errors import ModelError, OptionError, ShapeError, UnboundDim

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

__all__ = [
    "INPUT_LIMIT_ENV",
    "MAX_DIM",
    "ModelSource",
    "ModelSpec",
    "axis_key",
    "bind_input_shapes",
    "check_input_memory",
    "graph_inputs",
    "input_dtype",
    "input_memory_limit",
    "load_model",
    "make_inputs",
    "model_hash",
    "needs_batch",
    "parse_axis_key",
    "shape_dims",
    "subgraphs",
    "walk_nodes",
    "with_shapes",
]

ModelSource = str | os.PathLike | onnx.ModelProto

#: The largest batch or dim accepted (2**31 - 1: what a 32-bit index reaches; far beyond any real
#: input, and far below what overflows numpy or protobuf).
MAX_DIM = 2**31 - 1
#: Environment variable overriding the input-memory limit: bytes (``8G``, ``512MiB``, ``2e9``) or ``0``.
INPUT_LIMIT_ENV = "ROOFLINE_MAX_INPUT_BYTES"


@dataclass(frozen=True)
class ModelSpec:
    """What to run: a model file (or proto), the batch size and named dims to bind."""

    source: ModelSource = field(compare=False)
    batch: int | None = None
    dims: tuple[tuple[str, int], ...] = ()

    @property
    def path(self) -> Path | None:
        """The model's file path, or None when the model was given as a proto."""
        return None if isinstance(self.source, onnx.ModelProto) else Path(self.source)

    @property
    def name(self) -> str:
        """A short display name: the file stem or the graph name."""
        if self.path is not None:
            return self.path.stem
        return self.source.graph.name or "model"  # type: ignore[union-attr]

    @property
    def dims_dict(self) -> dict[str, int]:
        """The named dims as a dict."""
        return dict(self.dims)

    @classmethod
    def create(
        cls, source: ModelSource, batch: int | None = None, dims: Mapping[str, int] | None = None
    ) -> ModelSpec:
        """Build a spec, validating batch and dims."""
        if batch is not None and (not isinstance(batch, int) or not 1 <= batch <= MAX_DIM):
            raise ShapeError(f"batch must be a positive integer up to {MAX_DIM}, got {batch!r}")
        for key, value in (dims or {}).items():
            low = 0 if parse_axis_key(key) else 1  # a whole shape may hold an empty (0) axis
            if not isinstance(value, int) or not low <= value <= MAX_DIM:
                raise ShapeError(f"dim {key}={value!r} must be a positive integer up to {MAX_DIM}")
        return cls(source, batch, tuple(sorted((dims or {}).items())))


def load_model(source: ModelSource) -> onnx.ModelProto:
    """Load a model from a path (without external data) or pass a proto through.

    Raises:
        ModelError: missing file, a directory, an empty/truncated/non-ONNX file, unsupported opset.
    """
    if isinstance(source, onnx.ModelProto):
        model = source
    else:
        path = Path(source)
        if not path.exists():
            raise ModelError(f"{path}: no such file; pass the path of an .onnx model")
        if path.is_dir():
            raise ModelError(f"{path}: is a directory; pass the path of an .onnx model file")
        if path.stat().st_size == 0:
            raise ModelError(f"{path}: the file is empty; re-export the model")
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # protobuf raises DecodeError and friends
            from pytest_roofline.model.gitref import LFS_HINT, LFS_POINTER

            with open(path, "rb") as handle:
                if handle.read(len(LFS_POINTER)) == LFS_POINTER:
                    raise ModelError(f"{path}: a Git LFS pointer, not the model; {LFS_HINT}") from None
            raise ModelError(
                f"{path}: not a valid ONNX model (truncated or not ONNX: {type(exc).__name__}); "
                "re-export the model"
            ) from None
        if not model.graph.node and not model.graph.output:
            raise ModelError(f"{path}: not a valid ONNX model (no graph); re-export the model")
    _check_opset(model, source)
    return model


def _check_opset(model: onnx.ModelProto, source: ModelSource) -> None:
    supported = onnx.defs.onnx_opset_version()
    label = "model" if isinstance(source, onnx.ModelProto) else str(source)
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > supported:
            raise ModelError(
                f"{label}: uses ONNX opset {opset.version} but the installed onnx "
                f"{onnx.__version__} supports up to {supported}; upgrade onnx or export a lower opset"
            )


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs ``node``'s attributes hold: If branches, Loop and Scan bodies."""
    return [
        sub
        for attr in node.attribute
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs)
    ]


def walk_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of the graphs nested in it, each subgraph after its node."""
    for node in graph.node:
        yield node
        for sub in subgraphs(node):
            yield from walk_nodes(sub)


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs that are real inputs (not initializers listed as inputs)."""
    init_names = {init.name for init in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in init_names]


def axis_key(input_name: str, axis: int) -> str:
    """The dims key that binds one axis of one input, whatever its symbolic name: ``x[2]``."""
    return f"{input_name}[{axis}]"


_AXIS_KEY = re.compile(r"(.+)\[(\d+)\]")


def parse_axis_key(key: str) -> tuple[str, int] | None:
    """``"x[2]"`` → ("x", 2); a plain symbolic name → None."""
    match = _AXIS_KEY.fullmatch(key)
    return (match[1], int(match[2])) if match else None


def shape_dims(shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """Whole input shapes (trtexec's ``--shapes``) as per-axis dims keys: ``{"x": (1, 3)}`` →
    ``{"x[0]": 1, "x[1]": 3}``; a 0-d shape ``()`` binds nothing."""
    return {
        axis_key(name, axis): int(size) for name, shape in shapes.items() for axis, size in enumerate(shape)
    }


def with_shapes(
    dims: Mapping[str, int] | None, shapes: Mapping[str, Sequence[int]] | None
) -> dict[str, int] | None:
    """``dims`` with ``shapes`` folded in as per-axis keys (:func:`shape_dims`); a shape wins.

    Raises:
        ShapeError: a shape holds a size that is not a whole number from 0 to :data:`MAX_DIM`.
    """
    if not shapes:
        return dict(dims) if dims is not None else None
    for name, shape in shapes.items():
        if isinstance(shape, (str, bytes)) or not all(
            isinstance(size, int) and 0 <= size <= MAX_DIM for size in shape
        ):
            raise ShapeError(f"shape of {name!r} must be whole numbers from 0 to {MAX_DIM}, got {shape!r}")
    return {**dict(dims or {}), **shape_dims(shapes)}


def _batch_names(model: onnx.ModelProto) -> set[str]:
    """The symbolic names of the inputs' first dims: the model's names for its batch axis."""
    return {
        dims[0].dim_param
        for vi in graph_inputs(model)
        if vi.type.tensor_type.HasField("shape") and (dims := vi.type.tensor_type.shape.dim)
        if dims[0].dim_param and not (dims[0].HasField("dim_value") and dims[0].dim_value >= 0)
    }


def _is_dynamic(dim: onnx.TensorShapeProto.Dimension) -> bool:
    return not (dim.HasField("dim_value") and dim.dim_value >= 0)


def _batch_axis(
    index: int,
    dim: onnx.TensorShapeProto.Dimension,
    declared: list[onnx.TensorShapeProto.Dimension],
    batch_names: set[str],
) -> bool:
    """Whether ``batch`` binds this dynamic axis: the first axis; an axis with the symbolic name of
    another input's first axis; or the one dynamic, unnamed axis of an input whose first axis is
    fixed (a recurrent state ``[2, ?, 128]`` beside its ``[?, samples]`` input)."""
    if index == 0 or (dim.dim_param and dim.dim_param in batch_names):
        return True
    dynamic = [d for d in declared if _is_dynamic(d)]
    return not _is_dynamic(declared[0]) and len(dynamic) == 1 and not dim.dim_param


def _check_axis_keys(model: onnx.ModelProto, dims: Mapping[str, int]) -> None:
    """Refuse an ``input[axis]`` key that names no input or no axis of it (a symbolic name that
    happens to look like one is left to bind by name)."""
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in graph_inputs(model)}
    params = {d.dim_param for vi in graph_inputs(model) for d in vi.type.tensor_type.shape.dim}
    for key in sorted(dims):
        axis = parse_axis_key(key)
        if axis is None or key in params:
            continue
        name, index = axis
        if name not in ranks:
            inputs = ", ".join(ranks) or "none"
            raise ShapeError(f"{key}: the model has no input {name!r} (inputs: {inputs})")
        if index >= ranks[name]:
            raise ShapeError(f"{key}: input {name!r} has {ranks[name]} axes, so no axis {index}")


def bind_input_shapes(
    model: onnx.ModelProto, batch: int | None = None, dims: Mapping[str, int] | None = None
) -> dict[str, tuple[int, ...]]:
    """Concrete shapes of the model's inputs after binding ``batch`` and named ``dims``.

    ``dims`` binds dims by their symbolic name, or one axis of one input by ``input[axis]``
    (:func:`axis_key`: two axes with one symbolic name may differ, an unnamed axis is bound the
    same way); an axis key wins over a name. ``batch`` binds the batch axis of every input (see
    :func:`_batch_axis`) that nothing else binds. A declared size of 0 is a legal (empty) dim.
    Inputs that are not tensors (sequences, optionals, maps) have no shape and are left out.

    Raises:
        ShapeError: a dim stays unknown, a named dim matches no input, or an axis key names no
            input axis or contradicts a fixed one.
    """
    dims = dict(dims or {})
    used: set[str] = set()
    known_params: set[str] = set()
    shapes: dict[str, tuple[int, ...]] = {}
    batch_names = _batch_names(model)
    _check_axis_keys(model, dims)
    for vi in graph_inputs(model):
        if vi.type.WhichOneof("value") not in (None, "tensor_type"):
            continue  # a sequence, optional or map input: no tensor shape to bind
        tensor_type = vi.type.tensor_type
        if not tensor_type.HasField("shape"):
            raise ShapeError(f"input '{vi.name}' has no shape in the model; re-export it with shapes")
        declared = list(tensor_type.shape.dim)
        shape = []
        for index, dim in enumerate(declared):
            param = dim.dim_param if dim.HasField("dim_param") else ""
            if param:
                known_params.add(param)
            key = axis_key(vi.name, index)
            if key in dims:
                used.add(key)
                if not _is_dynamic(dim) and dim.dim_value != dims[key]:
                    raise ShapeError(
                        f"input '{vi.name}' axis {index} is fixed at {dim.dim_value} in the model, "
                        f"but {dims[key]} was given"
                    )
                shape.append(dims[key])
            elif not _is_dynamic(dim):
                shape.append(dim.dim_value)
            elif param and param in dims:
                shape.append(dims[param])
                used.add(param)
            elif batch is not None and _batch_axis(index, dim, declared, batch_names):
                shape.append(batch)
            else:
                label = f"'{param}'" if param else "(unnamed)"
                how = f"--dim {param}=VALUE" if param else f"--dim '{key}=VALUE'"
                how += f", --shape {vi.name}=AxBx..."
                if index == 0:
                    how += " or --batch N"
                raise ShapeError(
                    f"input '{vi.name}' dim {index} {label} is unknown; bind it with {how}",
                    unbound=UnboundDim(vi.name, index, param),
                )
        shapes[vi.name] = tuple(shape)
    unused = sorted(key for key in set(dims) - used - known_params if parse_axis_key(key) is None)
    if unused:
        known = ", ".join(sorted(known_params)) or "none"
        raise ShapeError(
            f"--dim {unused[0]} names no symbolic dim of the model's inputs (symbolic dims: {known})",
            unused=unused[0],
            known=tuple(sorted(known_params)),
        )
    return shapes


def needs_batch(model: onnx.ModelProto, dims: Mapping[str, int] | None = None) -> bool:
    """Whether some input's first dim is left unknown by the model and by ``dims``: the dim that
    ``batch`` binds (callers default it to 1, as the ``model_profile`` fixture does)."""
    dims = dims or {}
    for vi in graph_inputs(model):
        shape = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else []
        if shape:
            first = shape[0]
            fixed = first.HasField("dim_value") and first.dim_value > 0
            if not fixed and first.dim_param not in dims and axis_key(vi.name, 0) not in dims:
                return True
    return False


def default_batch(model: onnx.ModelProto, dims: Mapping[str, int] | None = None) -> int:
    """The batch a model runs at when none is asked for: 1 where its batch dim is symbolic (as
    :func:`needs_batch` says), else the static first dim of its first input (1 without one)."""
    if needs_batch(model, dims):
        return 1
    for vi in graph_inputs(model):
        shape = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else []
        if shape and shape[0].HasField("dim_value") and shape[0].dim_value > 0:
            return int(shape[0].dim_value)
    return 1


def input_memory_limit() -> int | None:
    """Bytes the made inputs may take: ``$ROOFLINE_MAX_INPUT_BYTES``, else half of the memory
    available now (``MemAvailable`` in ``/proc/meminfo``, else the free pages); None: no limit.

    The other half is for what the backend adds: its copy of the inputs, activations, outputs.

    Raises:
        OptionError: the environment variable is not a size.
    """
    text = os.environ.get(INPUT_LIMIT_ENV, "").strip()
    if text:
        from pytest_roofline.files import parse_size

        limit = parse_size(text)
        if limit is None:
            raise OptionError(
                f"{INPUT_LIMIT_ENV}={text!r}: expected bytes such as 8G, 512MiB or 2e9 (0: no limit)"
            )
        return limit or None
    available = _available_memory()
    return None if available is None else available // 2


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def check_input_memory(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> int:
    """Bytes :func:`make_inputs` needs at these shapes; refuse before anything is allocated.

    The estimate is every input's element count times its element size, plus the 8 bytes per
    element of the largest input's generation temporary (random numbers are drawn as 64-bit).

    Returns:
        The estimate in bytes.

    Raises:
        ShapeError: the estimate exceeds :func:`input_memory_limit` (one line: the largest input,
            the sizes, how to bind smaller dims or raise the limit).
    """
    sizes = []
    for vi in graph_inputs(model):
        shape = shapes.get(vi.name, ())
        itemsize = _itemsize(vi.type.tensor_type.elem_type)
        sizes.append((math.prod(shape) * itemsize, math.prod(shape), vi.name, shape))
    if not sizes:
        return 0
    need = sum(s[0] for s in sizes) + 8 * max(s[1] for s in sizes)
    limit = input_memory_limit()
    if limit is not None and need > limit:
        from pytest_roofline.fmt import fmt_bytes

        largest = max(sizes)
        source = (
            f"${INPUT_LIMIT_ENV}"
            if os.environ.get(INPUT_LIMIT_ENV, "").strip()
            else "half the available memory"
        )
        raise ShapeError(
            f"making the inputs would take {fmt_bytes(need)} of memory (largest: {largest[2]!r} "
            f"[{'x'.join(map(str, largest[3]))}], {fmt_bytes(largest[0])}) but at most {fmt_bytes(limit)} "
            f"may be allocated ({source}); bind smaller dims or batch, or set {INPUT_LIMIT_ENV}=SIZE "
            "(0: no limit)"
        )
    return need


def _itemsize(elem_type: int) -> int:
    try:
        return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize)
    except Exception:  # types numpy lacks (bfloat16, float8, ...): count 4 bytes
        return 4


def input_dtype(vi: onnx.ValueInfoProto) -> np.dtype:
    """The numpy dtype of tensor input ``vi``.

    Raises:
        ShapeError: a type roofline cannot feed (string, float8, UNDEFINED, ...), naming the input.
    """
    elem_type = vi.type.tensor_type.elem_type
    try:
        type_name = onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        type_name = f"type {elem_type}"
    if elem_type == onnx.TensorProto.UNDEFINED:
        raise ShapeError(f"input {vi.name!r} has no element type (UNDEFINED) in the model; declare its type")
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        dtype = np.dtype(object)
    if dtype.kind not in "biufc" and dtype.name != "bfloat16":
        raise ShapeError(
            f"input {vi.name!r} is a {type_name.lower()} tensor, which roofline cannot feed "
            "(numeric and bool inputs only)"
        )
    return dtype


def make_inputs(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded random inputs of each input's dtype and the given shapes.

    Floats are standard normal; integers are 0 or 1 (valid token ids, masks and indices for most
    models); booleans are random.

    Raises:
        ShapeError: the inputs would not fit in memory (:func:`check_input_memory`); nothing was
            allocated.
    """
    for vi in graph_inputs(model):
        if vi.name in shapes:
            input_dtype(vi)  # refuse a type it cannot feed before allocating anything
    check_input_memory(model, shapes)
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for vi in graph_inputs(model):
        if vi.name not in shapes:
            continue  # not a tensor input (see bind_input_shapes)
        dtype = input_dtype(vi)
        shape = shapes[vi.name]
        drawn: np.ndarray = (
            np.asarray(rng.standard_normal(shape))
            if np.issubdtype(dtype, np.floating)
            else np.asarray(rng.integers(0, 2, size=shape))
        )
        arrays[vi.name] = np.asarray(drawn).astype(np.bool_ if dtype == np.bool_ else dtype)  # 0-d stays 0-d
    return arrays


def model_hash(source: ModelSource) -> str:
    """SHA-256 of the model file (or of the serialized proto), hex."""
    digest = hashlib.sha256()
    if isinstance(source, onnx.ModelProto):
        digest.update(source.SerializeToString())
    else:
        with open(source, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
