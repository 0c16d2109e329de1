"""The Python API: profile a model (or a batch sweep) through a backend, under the roofline.

>>> prof = profile_model("resnet50.onnx", batch=8)            # doctest: +SKIP
>>> prof.latency.median, prof.layer("Conv_0").roofline_fraction  # doctest: +SKIP

The keywords become one :class:`~pytest_roofline.pipeline.ModelCall`, run by
:mod:`pytest_roofline.pipeline` (prepare → profile layers → assemble), whose steps and values this
module also names for callers that compose them (``prepare``, ``profile_layers``, ``assemble``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_roofline import pipeline
from pytest_roofline.pipeline import (
    LayerRun,
    ModelCall,
    PreparedModel,
    ProfileRun,
    RooflineArg,
    assemble,
    parse_batches,
    profile_layers,
)
from pytest_roofline.pipeline import (
    resolve_roofline as resolve_roofline,  # a public name of this module before the pipeline
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pytest_roofline.backends.base import Backend
    from pytest_roofline.model import ModelSource
    from pytest_roofline.model.inputs import InputSource
    from pytest_roofline.profile import ModelProfile

__all__ = [
    "LayerRun",
    "PreparedModel",
    "ProfileRun",
    "assemble",
    "parse_batches",
    "prepare",
    "profile_layers",
    "profile_model",
    "profile_sweep",
    "run_profile",
]


def _call(arguments: dict[str, Any]) -> ModelCall:
    """A public function's arguments as one ModelCall: its parameters are the call's fields, by name
    (``progress`` aside, which is not an option of the call; ``shapes`` join ``dims`` axis by axis)."""
    from pytest_roofline.model import with_shapes

    fields = {name: value for name, value in arguments.items() if name not in ("progress", "shapes")}
    return ModelCall(**{**fields, "dims": with_shapes(fields.get("dims"), arguments.get("shapes"))})


def prepare(
    model: ModelSource,
    *,
    backend: str | Backend = "onnxruntime",
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    inputs: InputSource | None = None,
    options: Mapping[str, str] | None = None,
) -> PreparedModel:
    """Load ``model``, bind its dims and inputs for ``backend`` (raises one-line RooflineErrors)."""
    return pipeline.prepare(_call(locals()))


def run_profile(
    model: ModelSource,
    *,
    backend: str | Backend = "onnxruntime",
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    inputs: InputSource | None = None,
    options: Mapping[str, str] | None = None,
    roofline: RooflineArg = None,
    sessions: int = 5,
    rounds: int = 20,
    profile_iterations: int = 10,
    budget: float | None = None,
    trips: Mapping[str, int] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ProfileRun:
    """:func:`profile_model`, also returning the kernel profile (for traces)."""
    return pipeline.run(_call(locals()), progress)


def profile_model(
    model: ModelSource,
    *,
    backend: str | Backend = "onnxruntime",
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    inputs: InputSource | None = None,
    options: Mapping[str, str] | None = None,
    roofline: RooflineArg = None,
    sessions: int = 5,
    rounds: int = 20,
    profile_iterations: int = 10,
    budget: float | None = None,
    trips: Mapping[str, int] | None = None,
) -> ModelProfile:
    """Measure ``model`` end to end and per layer, and place its layers under the roofline.

    Args:
        model: a path to an .onnx file or a loaded ``onnx.ModelProto``.
        backend: a backend name (``"onnxruntime"``, ``"openvino"``, ...) or a Backend instance.
        batch: binds the first dim of every input whose first dim is symbolic; default 1 when
            such a dim is not bound by ``dims`` (``extra["batch_default"]`` says so), as the
            ``model_profile`` fixture does.
        dims: binds symbolic dims by name, or one input axis by ``"input[axis]"`` (two axes
            sharing a name may differ; an unnamed axis is bound this way).
        shapes: whole input shapes by input name, as trtexec's ``--shapes``:
            ``{"x": (1, 3, 48, 192)}`` binds each axis of ``x`` (0-d: ``()``).
        inputs: arrays by input name, or a path to a ``.npy`` (single input) or ``.npz``;
            default: seeded random inputs.
        options: backend options (``--option K=V``), e.g. ``{"intra_op_threads": "1"}``.
        roofline: a :class:`DeviceRoofline`, ``None`` (no roofline) or ``"auto"`` (calibrate
            through this backend, cached per device).
        sessions, rounds: the latency sampling design (fresh sessions × interleaved rounds).
        profile_iterations: profiled inferences for the per-layer times.
        budget: seconds the latency measurement may take (rounds shrink to fit, at least 3).
        trips: trip counts of Loop nodes the graph does not fix, by node or trip-count input name.

    Raises:
        RooflineError: bad model, shapes, inputs, options, or the backend rejected the model.
    """
    return pipeline.run(_call(locals())).profile


def profile_sweep(model: ModelSource, batches: str | Sequence[int], **kwargs: Any) -> list[ModelProfile]:
    """:func:`profile_model` at each batch size of ``batches`` (a list or ``"1,4,16"`` / ``"1-64"``)."""
    return [profile_model(model, batch=batch, **kwargs) for batch in parse_batches(batches)]
