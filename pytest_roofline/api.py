"""The Python API: profile a model (or a batch sweep) through a backend, under the roofline.

>>> prof = profile_model("resnet50.onnx", batch=8)            # doctest: +SKIP
>>> prof.latency.median, prof.layer("Conv_0").roofline_fraction  # doctest: +SKIP
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from pytest_roofline.errors import OptionError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import numpy as np

    from pytest_roofline.backends.base import Backend, KernelProfile
    from pytest_roofline.inputs import InputSource
    from pytest_roofline.model import ModelSource
    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.roofline import DeviceRoofline

__all__ = ["ProfileRun", "parse_batches", "profile_model", "profile_sweep", "run_profile"]

RooflineArg = Union["DeviceRoofline", str, None]
MAX_BATCH = 1 << 16


@dataclass(frozen=True)
class ProfileRun:
    """A profile together with the raw kernel profile it was built from (trace export needs it)."""

    profile: ModelProfile
    kernels: KernelProfile


def parse_batches(text: str | int | Sequence[int]) -> list[int]:
    """``"8"`` → [8]; ``"1,4,16"`` → [1, 4, 16]; ``"1-64"`` → powers of two [1, 2, 4, ..., 64].

    A range's ends need not be powers of two: ``"3-20"`` → [3, 4, 8, 16, 20].

    Raises:
        OptionError: empty, non-integer, non-positive or reversed values.
    """
    if isinstance(text, int):
        values = [text]
    elif not isinstance(text, str):
        values = [int(v) for v in text]
    else:
        spec = text.replace(" ", "")
        match = re.fullmatch(r"(\d+)-(\d+)", spec)
        if match:
            low, high = int(match[1]), int(match[2])
            if low < 1 or high < low:
                raise OptionError(f"batch range {text!r} must be LOW-HIGH with 1 <= LOW <= HIGH")
            values, power = [low], 1
            while power <= high:
                if power > low:
                    values.append(power)
                power *= 2
            if values[-1] != high:
                values.append(high)
        else:
            try:
                values = [int(part) for part in spec.split(",")]
            except ValueError:
                raise OptionError(f"batch {text!r} must be N, N1,N2,... or LOW-HIGH") from None
    if not values or any(v < 1 or v > MAX_BATCH for v in values):
        raise OptionError(f"batch sizes must be between 1 and {MAX_BATCH}, got {text!r}")
    return sorted(set(values))


def _backend(backend: str | Backend, options: Mapping[str, str] | None) -> Backend:
    from pytest_roofline.backends.base import Backend, get_backend

    if isinstance(backend, Backend):
        if options:
            raise OptionError("pass options to the backend instance, not to profile_model, when giving one")
        return backend
    return get_backend(backend, options)


def resolve_roofline(roofline: RooflineArg, backend: Backend) -> DeviceRoofline | None:
    """``None`` → no roofline; ``"auto"`` → the calibrated (cached) roofline of this backend."""
    if roofline is None or not isinstance(roofline, str):
        return roofline
    if roofline != "auto":
        raise OptionError(f"roofline must be a DeviceRoofline, None or 'auto', got {roofline!r}")
    from pytest_roofline.roofline.calibrate import calibrate

    return calibrate(backend)


def run_profile(
    model: ModelSource,
    *,
    backend: str | Backend = "onnxruntime",
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    inputs: InputSource | None = None,
    options: Mapping[str, str] | None = None,
    roofline: RooflineArg = None,
    sessions: int = 5,
    rounds: int = 20,
    profile_iterations: int = 10,
    budget: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> ProfileRun:
    """:func:`profile_model`, also returning the kernel profile (for traces)."""
    from pytest_roofline.analysis import analyze
    from pytest_roofline.inputs import dims_from_inputs, load_inputs
    from pytest_roofline.measure import measure_latency
    from pytest_roofline.model import (
        ModelSpec,
        bind_input_shapes,
        graph_inputs,
        load_model,
        make_inputs,
        model_hash,
    )
    from pytest_roofline.profile import ModelProfile, build_layers, profiler_scale

    say = progress or (lambda message: None)
    engine = _backend(backend, options)
    proto = load_model(model)
    arrays: dict[str, np.ndarray]
    if inputs is not None:
        arrays = load_inputs(inputs, [vi.name for vi in graph_inputs(proto)])
        found_batch, found_dims = dims_from_inputs(proto, arrays)
        if batch is not None and found_batch is not None and batch != found_batch:
            raise OptionError(f"batch {batch} differs from the inputs' first dim {found_batch}")
        batch = batch or found_batch
        dims = {**found_dims, **dict(dims or {})}
    spec = ModelSpec.create(model, batch, dims)
    shapes = bind_input_shapes(proto, batch, dims)
    if batch is not None and shapes and all(not shape or shape[0] != batch for shape in shapes.values()):
        static = ", ".join(f"{k}[{'x'.join(map(str, v))}]" for k, v in shapes.items())
        raise OptionError(f"batch {batch} binds nothing: the model's inputs are static ({static})")
    if inputs is None:
        arrays = make_inputs(proto, shapes, seed=0)
    # the backend loads the model first: its verdict on a model it rejects is the clearest error
    say(f"profiling {spec.name} on {engine.name}: {profile_iterations} iterations")
    with engine.open(spec, arrays) as session:
        kernels = session.profile(profile_iterations)
    say(f"analyzing {spec.name}")
    analysis = analyze(proto if spec.path is None else spec.path, batch=batch, dims=dims)
    device_roof = resolve_roofline(roofline, engine)

    def opener():  # noqa: ANN202 - a BackendSession
        return engine.open(spec, arrays)

    say(f"timing {spec.name}: {sessions} fresh sessions x {rounds} rounds")
    latency = measure_latency(opener, sessions=sessions, rounds=rounds, budget=budget)
    scale = profiler_scale(kernels, latency.median)
    layers, fraction = build_layers(analysis, kernels, device_roof, time_scale=scale)
    total = analysis.total
    first_shape = next(iter(shapes.values()), ())
    profile = ModelProfile(
        model_name=spec.name,
        model_path=str(spec.path) if spec.path is not None else None,
        model_hash=model_hash(model),
        backend=engine.name,
        backend_version=engine.version(),
        options=dict(engine.options),
        batch=batch or (int(first_shape[0]) if first_shape else 1),
        input_shapes=dict(shapes),
        latency=latency,
        layers=tuple(layers),
        attributed_fraction=fraction,
        total_flops=total.flops,
        total_macs=total.macs,
        total_bytes=total.bytes,
        precision=kernels.precision,
        roofline=device_roof,
        dims=dict(dims or {}),
        shape_method=analysis.shape_method,
        fingerprint=engine.fingerprint(),
        extra={
            **kernels.extra,  # a backend's own figures, e.g. host<->device "transfer" times
            "profile_iterations": profile_iterations,
            "folded": list(kernels.folded),
            "profiler_scale": scale,
            "timing_source": kernels.timing_source,
            "timer_resolution": kernels.timer_resolution,
        },
        layer_timing=kernels.timing,
    )
    return ProfileRun(profile, kernels)


def profile_model(
    model: ModelSource,
    *,
    backend: str | Backend = "onnxruntime",
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    inputs: InputSource | None = None,
    options: Mapping[str, str] | None = None,
    roofline: RooflineArg = None,
    sessions: int = 5,
    rounds: int = 20,
    profile_iterations: int = 10,
    budget: float | None = None,
) -> ModelProfile:
    """Measure ``model`` end to end and per layer, and place its layers under the roofline.

    Args:
        model: a path to an .onnx file or a loaded ``onnx.ModelProto``.
        backend: a backend name (``"onnxruntime"``, ``"openvino"``, ...) or a Backend instance.
        batch: binds the first dim of every input whose first dim is symbolic.
        dims: binds symbolic dims by name.
        inputs: arrays by input name, or a path to a ``.npy`` (single input) or ``.npz``;
            default: seeded random inputs.
        options: backend options (``--option K=V``), e.g. ``{"intra_op_threads": "1"}``.
        roofline: a :class:`DeviceRoofline`, ``None`` (no roofline) or ``"auto"`` (calibrate
            through this backend, cached per device).
        sessions, rounds: the latency sampling design (fresh sessions × interleaved rounds).
        profile_iterations: profiled inferences for the per-layer times.
        budget: seconds the latency measurement may take (rounds shrink to fit, at least 3).

    Raises:
        RooflineError: bad model, shapes, inputs, options, or the backend rejected the model.
    """
    return run_profile(
        model,
        backend=backend,
        batch=batch,
        dims=dims,
        inputs=inputs,
        options=options,
        roofline=roofline,
        sessions=sessions,
        rounds=rounds,
        profile_iterations=profile_iterations,
        budget=budget,
    ).profile


def profile_sweep(model: ModelSource, batches: str | Sequence[int], **kwargs: Any) -> list[ModelProfile]:
    """:func:`profile_model` at each batch size of ``batches`` (a list or ``"1,4,16"`` / ``"1-64"``)."""
    return [profile_model(model, batch=batch, **kwargs) for batch in parse_batches(batches)]
