"""User-supplied model inputs: a dict of arrays, a ``.npy`` file (one input) or ``.npz`` (by name)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Union

import numpy as np

from pytest_roofline.errors import ShapeError

if TYPE_CHECKING:
    from collections.abc import Mapping

    import onnx

__all__ = ["InputSource", "dims_from_inputs", "load_inputs"]

InputSource = Union["Mapping[str, np.ndarray]", str, os.PathLike]


def load_inputs(source: InputSource, input_names: list[str]) -> dict[str, np.ndarray]:
    """Arrays by input name from a mapping, a ``.npy`` file (single-input models) or a ``.npz``.

    Raises:
        ShapeError: unreadable file, a ``.npy`` for a multi-input model, or names that do not
            match the model's inputs.
    """
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise ShapeError(f"{path}: no such inputs file; pass a .npy (one input) or .npz (by input name)")
        try:
            if path.suffix == ".npy":
                array = np.load(path, allow_pickle=False)
                if len(input_names) != 1:
                    raise ShapeError(
                        f"{path}: a .npy holds one array but the model has {len(input_names)} inputs "
                        f"({', '.join(input_names)}); save them by name in an .npz"
                    )
                arrays = {input_names[0]: array}
            elif path.suffix == ".npz":
                with np.load(path, allow_pickle=False) as archive:
                    arrays = {name: archive[name] for name in archive.files}
            else:
                raise ShapeError(f"{path}: inputs must be a .npy or .npz file")
        except (OSError, ValueError) as exc:
            raise ShapeError(f"{path}: cannot read inputs ({type(exc).__name__}: {exc})") from None
    else:
        arrays = {str(k): np.asarray(v) for k, v in source.items()}
    missing = [name for name in input_names if name not in arrays]
    unknown = sorted(set(arrays) - set(input_names))
    if unknown:
        raise ShapeError(f"the model has no input {unknown[0]!r} (inputs: {', '.join(input_names)})")
    if missing:
        raise ShapeError(f"no array given for input {missing[0]!r} (inputs: {', '.join(input_names)})")
    # np.asarray, not np.ascontiguousarray: that one makes a 0-d (scalar) input 1-d
    return {name: np.asarray(arrays[name], order="C") for name in input_names}


def dims_from_inputs(
    model: onnx.ModelProto, arrays: Mapping[str, np.ndarray]
) -> tuple[int | None, dict[str, int]]:
    """The batch and dims that the arrays' shapes bind in ``model``'s inputs, axis by axis.

    A symbolic name every array gives one size binds by name; a name given two sizes (H and W
    both ``?``) and an unnamed axis past the first bind that axis alone (``x[2]``, see
    :func:`~pytest_roofline.model.axis_key`); an unnamed first axis is the batch.

    Raises:
        ShapeError: an array's dtype, rank or a fixed dim differs from the model.
    """

    from pytest_roofline.model import axis_key, graph_inputs, input_dtype

    batch: int | None = None
    by_name: dict[str, dict[str, int]] = {}  # symbolic name -> {axis key: size}
    dims: dict[str, int] = {}
    for vi in graph_inputs(model):
        array = arrays[vi.name]
        declared = list(vi.type.tensor_type.shape.dim)
        expected = [d.dim_param or (d.dim_value if d.dim_value > 0 else "?") for d in declared]
        want = input_dtype(vi)
        if want != array.dtype:
            got = f"{array.dtype.name} {list(array.shape)}"
            raise ShapeError(f"input {vi.name!r} expects {want.name} {expected}, got {got}")
        if vi.type.tensor_type.HasField("shape") and len(declared) != array.ndim:
            raise ShapeError(f"input {vi.name!r} expects shape {expected}, got {list(array.shape)}")
        for index, (dim, size) in enumerate(zip(declared, array.shape, strict=False)):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                if dim.dim_value != size:
                    raise ShapeError(f"input {vi.name!r} expects shape {expected}, got {list(array.shape)}")
            elif dim.dim_param:
                by_name.setdefault(dim.dim_param, {})[axis_key(vi.name, index)] = int(size)
            elif index == 0 and batch in (None, size):
                batch = int(size)
            else:
                dims[axis_key(vi.name, index)] = int(size)
    for name, axes in by_name.items():
        sizes = set(axes.values())
        dims.update({name: sizes.pop()} if len(sizes) == 1 else axes)
    return batch, dims
