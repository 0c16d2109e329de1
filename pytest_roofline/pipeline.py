"""The internal steps of one profile: prepare → profile layers → assemble, and the call they serve.

A :class:`ModelCall` is one request to profile a model, as one frozen value: the public
``profile_model(model, batch=..., ...)`` keywords (:mod:`pytest_roofline.api`), the
``roofline profile`` options (:mod:`pytest_roofline.cli.profile`) and the ``model_profile(path,
batch_size=..., ...)`` fixture's arguments (:mod:`pytest_roofline.gate.request`) all become one.

* :func:`prepare` loads the model once and binds its dims and inputs for the backend (a bad model or
  input fails here, before anything is timed): a :class:`PreparedModel`, which every later step of
  the same request reuses — the layer profile, the output check, the gate's sessions;
* :func:`profile_layers` runs the backend's profiler and the static analysis: a :class:`LayerRun`;
* :func:`assemble` joins them with an end-to-end latency into a :class:`ModelProfile`.

:func:`run` is the three steps with a fresh-session latency measurement between them (what
``profile_model`` and ``roofline profile`` do); the gate (:mod:`pytest_roofline.gate.runner`)
calls the steps itself and takes the latency from its own samples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Union

from pytest_roofline.errors import OptionError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import numpy as np
    import onnx

    from pytest_roofline.analysis.types import ModelAnalysis
    from pytest_roofline.backends.base import Backend, BackendSession, KernelProfile
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.model import ModelSource, ModelSpec
    from pytest_roofline.model.inputs import InputSource
    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.roofline import DeviceRoofline

__all__ = [
    "Binding",
    "LayerRun",
    "ModelCall",
    "PreparedModel",
    "ProfileRun",
    "RooflineArg",
    "assemble",
    "bind",
    "parse_batches",
    "prepare",
    "profile_layers",
    "resolve_roofline",
    "run",
]

RooflineArg = Union["DeviceRoofline", str, None]
MAX_BATCH = 1 << 16


@dataclass(frozen=True)
class ModelCall:
    """One request to profile a model: what to load and bind, on which backend, and how to time it.

    ``backend`` None is onnxruntime here (the plugin's session puts the run's backend in first);
    ``check_outputs`` is the fixture's (the backends whose outputs must match), unused by :func:`run`.
    """

    model: ModelSource
    batch: int | None = None
    dims: Mapping[str, int] | None = None
    inputs: InputSource | None = None
    backend: str | Backend | None = None
    options: Mapping[str, str] | None = None
    trips: Mapping[str, int] | None = None
    roofline: RooflineArg = None
    sessions: int = 5
    rounds: int = 20
    profile_iterations: int = 10
    budget: float | None = None
    check_outputs: Any = None


@dataclass(frozen=True)
class ProfileRun:
    """A profile together with the raw kernel profile it was built from (trace export needs it)."""

    profile: ModelProfile
    kernels: KernelProfile


@dataclass(frozen=True)
class PreparedModel:
    """A model bound to a backend: its spec, proto, input arrays and the shapes they bind."""

    source: ModelSource
    proto: onnx.ModelProto
    spec: ModelSpec
    engine: Backend
    arrays: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]
    batch: int | None
    dims: dict[str, int]
    batch_default: bool = False  # a symbolic batch dim nobody bound runs at 1

    def open(self) -> BackendSession:
        """A fresh backend session of the model with its inputs bound."""
        return self.engine.open(self.spec, self.arrays)


@dataclass(frozen=True)
class LayerRun:
    """A profiled run joined with the static analysis, and the roofline to place it under."""

    kernels: KernelProfile
    analysis: ModelAnalysis
    roofline: DeviceRoofline | None
    iterations: int
    latency: LatencyStats | None = None  # a short sample of the plain session, when asked for


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


def _backend(backend: str | Backend | None, options: Mapping[str, str] | None) -> Backend:
    from pytest_roofline.backends.base import Backend, get_backend

    if isinstance(backend, Backend):
        if options:
            raise OptionError("pass options to the backend instance, not to profile_model, when giving one")
        return backend
    return get_backend(backend or "onnxruntime", options)


def resolve_roofline(roofline: RooflineArg, backend: Backend) -> DeviceRoofline | None:
    """``None`` → no roofline; ``"auto"`` → the calibrated (cached) roofline of this backend."""
    if roofline is None or not isinstance(roofline, str):
        return roofline
    if roofline != "auto":
        raise OptionError(f"roofline must be a DeviceRoofline, None or 'auto', got {roofline!r}")
    from pytest_roofline.roofline.calibrate import calibrate

    return calibrate(backend)


@dataclass(frozen=True)
class Binding:
    """What a call's batch, dims and input arrays bind on a model, before any backend: the batch
    (None where the model fixes it and nobody asked), every dim the arrays and the call bind, each
    input's shape, and the arrays the call gave (empty when it gave none)."""

    batch: int | None
    dims: dict[str, int]
    shapes: dict[str, tuple[int, ...]]
    given: dict[str, np.ndarray]
    batch_default: bool = False  # a symbolic batch dim nobody bound runs at 1


def bind(
    proto: onnx.ModelProto,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    inputs: InputSource | None = None,
) -> Binding:
    """Bind ``proto``'s inputs from a batch, dims and the given arrays, axis by axis (raises one-line
    RooflineErrors): what :func:`prepare` does before it needs the backend, and all that an
    analysis-only run (``--roofline-disable``) needs."""
    from pytest_roofline.model import bind_input_shapes, graph_inputs, needs_batch
    from pytest_roofline.model.inputs import dims_from_inputs, load_inputs

    given: dict[str, np.ndarray] = {}
    if inputs is not None:
        given = load_inputs(inputs, [vi.name for vi in graph_inputs(proto)])
        found_batch, found_dims = dims_from_inputs(proto, given)
        if batch is not None and found_batch is not None and batch != found_batch:
            raise OptionError(f"batch {batch} differs from the inputs' first dim {found_batch}")
        batch = batch or found_batch
        dims = {**found_dims, **dict(dims or {})}
    batch_default = batch is None and needs_batch(proto, dims)
    if batch_default:  # like the model_profile fixture: a symbolic batch dim runs at 1
        batch = 1
    shapes = bind_input_shapes(proto, batch, dims)
    if batch is not None and shapes and all(not shape or shape[0] != batch for shape in shapes.values()):
        static = ", ".join(f"{k}[{'x'.join(map(str, v))}]" for k, v in shapes.items())
        raise OptionError(f"batch {batch} binds nothing: the model's inputs are static ({static})")
    return Binding(batch, dict(dims or {}), dict(shapes), given, batch_default)


def prepare(call: ModelCall, proto: onnx.ModelProto | None = None) -> PreparedModel:
    """Load ``call.model``, bind its dims and inputs for its backend (raises one-line RooflineErrors).

    ``proto``: the model already loaded from ``call.model`` by the caller (it is not loaded again).
    """
    from pytest_roofline.model import ModelSpec, load_model, make_inputs

    engine = _backend(call.backend, call.options)
    if proto is None:
        proto = load_model(call.model)
    bound = bind(proto, call.batch, call.dims, call.inputs)
    spec = ModelSpec.create(call.model, bound.batch, bound.dims)
    arrays = bound.given if call.inputs is not None else make_inputs(proto, bound.shapes, seed=0)
    return PreparedModel(
        call.model, proto, spec, engine, arrays, bound.shapes, bound.batch, bound.dims, bound.batch_default
    )


def profile_layers(
    prepared: PreparedModel,
    *,
    iterations: int = 10,
    roofline: RooflineArg = None,
    trips: Mapping[str, int] | None = None,
    progress: Callable[[str], None] | None = None,
    sample_latency: Callable[[Any], LatencyStats] | None = None,
) -> LayerRun:
    """Profile ``prepared`` for ``iterations`` runs and analyze it (FLOPs, bytes per node).

    ``sample_latency`` times the plain session the profiler runs beside (its result is the run's
    ``latency``): a run that needs only a short sample loads the model once less.
    """
    from pytest_roofline.analysis import analyze

    say = progress or (lambda message: None)
    spec = prepared.spec
    # the backend loads the model first: its verdict on a model it rejects is the clearest error
    say(f"profiling {spec.name} on {prepared.engine.name}: {iterations} iterations")
    with prepared.open() as session:
        latency = sample_latency(session) if sample_latency is not None else None
        kernels = session.profile(iterations)
    say(f"analyzing {spec.name}")
    source = prepared.proto if spec.path is None else spec.path  # a path: its external data's directory
    analysis = analyze(
        source,
        batch=prepared.batch,
        dims=prepared.dims,
        trips=trips,
        proto=prepared.proto,
        input_values=prepared.arrays,  # what the run fed decides the If branches it conditions
    )
    return LayerRun(kernels, analysis, resolve_roofline(roofline, prepared.engine), iterations, latency)


def assemble(
    prepared: PreparedModel, run: LayerRun, latency: LatencyStats, extra: Mapping[str, Any] | None = None
) -> ModelProfile:
    """The :class:`ModelProfile` of a profiled run and the model's end-to-end latency."""
    from pytest_roofline.memory.measure import profiled_memory
    from pytest_roofline.model import model_hash
    from pytest_roofline.profile import ModelProfile, build_layers, profiler_scale, profiler_scales

    scale = profiler_scale(run.kernels, latency.median)
    floor = run.roofline.dispatch_floor if run.roofline is not None else 0.0
    scales = profiler_scales(run.kernels, latency.median, floor)  # per kernel: a profiler's cost is per event
    layers, fraction = build_layers(run.analysis, run.kernels, run.roofline, time_scale=scales)
    memory, layer_memory = profiled_memory(run.kernels, run.analysis)
    layers = [
        replace(la, memory=layer_memory.get(la.name)) if la.name in layer_memory else la for la in layers
    ]
    total = run.analysis.total
    first_shape = next(iter(prepared.shapes.values()), ())
    spec, engine = prepared.spec, prepared.engine
    return ModelProfile(
        model_name=spec.name,
        model_path=str(spec.path) if spec.path is not None else None,
        model_hash=model_hash(prepared.source),
        backend=engine.name,
        backend_version=engine.version(),
        options=dict(engine.options),
        batch=prepared.batch or (int(first_shape[0]) if first_shape else 1),
        input_shapes=dict(prepared.shapes),
        latency=latency,
        layers=tuple(layers),
        attributed_fraction=fraction,
        total_flops=total.flops,
        total_macs=total.macs,
        total_bytes=total.bytes,
        precision=run.kernels.precision,
        roofline=run.roofline,
        dims=dict(prepared.dims),
        shape_method=run.analysis.shape_method,
        fingerprint=engine.fingerprint(),
        extra={
            **run.kernels.extra,  # a backend's own figures, e.g. host<->device "transfer" times
            "profile_iterations": run.iterations,
            "folded": list(run.kernels.folded),
            "profiler_scale": scale,
            **({"batch_default": True} if prepared.batch_default else {}),
            "timing_source": run.kernels.timing_source,
            "timer_resolution": run.kernels.timer_resolution,
            **dict(extra or {}),
        },
        layer_timing=run.kernels.timing,
        memory=memory,
    )


def run(call: ModelCall, progress: Callable[[str], None] | None = None) -> ProfileRun:
    """``call`` prepared, profiled per layer, timed end to end in fresh sessions and assembled."""
    from pytest_roofline.measure.rounds import measure_latency

    say = progress or (lambda message: None)
    prepared = prepare(call)
    if prepared.batch_default:
        say("batch 1 (default; choose another with --batch N or batch=N)")
    layer_run = profile_layers(
        prepared,
        iterations=call.profile_iterations,
        roofline=call.roofline,
        trips=call.trips,
        progress=say,
    )
    say(f"timing {prepared.spec.name}: {call.sessions} fresh sessions x {call.rounds} rounds")
    latency = measure_latency(prepared.open, sessions=call.sessions, rounds=call.rounds, budget=call.budget)
    return ProfileRun(assemble(prepared, layer_run, latency), layer_run.kernels)
