"""Load ONNX models without their weights, bind symbolic dims, make inputs.

External-data weights are never read here: sizes come from the tensor metadata, so a model far
larger than memory can be analyzed.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from .errors import ModelError, ShapeError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ModelSource",
    "ModelSpec",
    "bind_input_shapes",
    "graph_inputs",
    "load_model",
    "make_inputs",
    "model_hash",
]

ModelSource = str | os.PathLike | onnx.ModelProto


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
        if batch is not None and (not isinstance(batch, int) or batch < 1):
            raise ShapeError(f"batch must be a positive integer, got {batch!r}")
        for key, value in (dims or {}).items():
            if not isinstance(value, int) or value < 1:
                raise ShapeError(f"dim {key}={value!r} must be a positive integer")
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


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs that are real inputs (not initializers listed as inputs)."""
    init_names = {init.name for init in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in init_names]


def bind_input_shapes(
    model: onnx.ModelProto, batch: int | None = None, dims: Mapping[str, int] | None = None
) -> dict[str, tuple[int, ...]]:
    """Concrete shapes of the model's inputs after binding ``batch`` and named ``dims``.

    ``batch`` binds the first dim of every input whose first dim is symbolic or unknown; ``dims``
    binds dims by their symbolic name. A declared size of 0 is a legal (empty) dim. Inputs that
    are not tensors (sequences, optionals, maps) have no shape and are left out.

    Raises:
        ShapeError: a dim stays unknown, or a named dim matches no input.
    """
    dims = dict(dims or {})
    used: set[str] = set()
    known_params: set[str] = set()
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in graph_inputs(model):
        if vi.type.WhichOneof("value") not in (None, "tensor_type"):
            continue  # a sequence, optional or map input: no tensor shape to bind
        tensor_type = vi.type.tensor_type
        if not tensor_type.HasField("shape"):
            raise ShapeError(f"input '{vi.name}' has no shape in the model; re-export it with shapes")
        shape = []
        for index, dim in enumerate(tensor_type.shape.dim):
            param = dim.dim_param if dim.HasField("dim_param") else ""
            if param:
                known_params.add(param)
            if dim.HasField("dim_value") and dim.dim_value >= 0:
                shape.append(dim.dim_value)
            elif param and param in dims:
                shape.append(dims[param])
                used.add(param)
            elif index == 0 and batch is not None:
                shape.append(batch)
            else:
                label = f"'{param}'" if param else "(unnamed)"
                how = f"--dim {param}=VALUE" if param else "--dim NAME=VALUE after naming it"
                if index == 0:
                    how += " or --batch N"
                raise ShapeError(f"input '{vi.name}' dim {index} {label} is unknown; bind it with {how}")
        shapes[vi.name] = tuple(shape)
    unused = sorted(set(dims) - used - known_params)
    if unused:
        known = ", ".join(sorted(known_params)) or "none"
        raise ShapeError(
            f"--dim {unused[0]} names no symbolic dim of the model's inputs (symbolic dims: {known})"
        )
    return shapes


def make_inputs(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded random inputs of each input's dtype and the given shapes.

    Floats are standard normal; integers are 0 or 1 (valid token ids, masks and indices for most
    models); booleans are random.
    """
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for vi in graph_inputs(model):
        if vi.name not in shapes:
            continue  # not a tensor input (see bind_input_shapes)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = shapes[vi.name]
        if np.issubdtype(dtype, np.floating):
            arrays[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            arrays[vi.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        else:
            arrays[vi.name] = rng.integers(0, 2, size=shape).astype(dtype)
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
