"""The gate request of one ``model_profile(...)`` call, built without pytest.

The plugin's session (:mod:`pytest_roofline.pytest.session`) turns a test into the values this
module reads — the test's gate settings, the model's path, the chosen backend — and
:func:`build_request` does the rest: load and bind the model (a bad model or input fails before
anything is measured), look up the baseline (a corrupt one fails here unless the run rewrites it),
and find the model at ``--roofline-compare-ref``.  :func:`run_request` then takes the request
through the gate (or not: the gate off, or the identity measured already) and returns its outcome.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import BaselineError, ModelError, OptionError

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend
    from pytest_roofline.gate.memory import MemoryTolerance
    from pytest_roofline.gate.order import MeasuredIdentities
    from pytest_roofline.gate.store import BaselineStore
    from pytest_roofline.gate.types import GateOutcome, GateRequest, ModelStoreLike
    from pytest_roofline.model import ModelSpec
    from pytest_roofline.pipeline import ModelCall
    from pytest_roofline.roofline import DeviceRoofline

__all__ = [
    "METRICS_HELP",
    "GateSettings",
    "RunMode",
    "build_request",
    "check_call_outputs",
    "gate_settings",
    "relative_to_root",
    "resolve_model_path",
    "run_request",
]

METRICS_HELP = "latency, memory, layer:<name>"


@dataclasses.dataclass(frozen=True)
class GateSettings:
    """A test's gate settings: the session's, overridden by its ``roofline`` marker."""

    tolerance: float
    budget: float
    metrics: tuple[str, ...] = ("latency",)
    retime: bool = False
    timed: bool = False  # a figure timed every run (the history), the verdict still the identity's
    memory_tolerance: MemoryTolerance | None = None  # the memory verdict's (None: gate.memory's default)


@dataclasses.dataclass(frozen=True)
class RunMode:
    """What the run asks of every request: measure at all, accept the figures, compare with a ref."""

    disable: bool = False
    update: bool = False
    compare_ref: str | None = None


def gate_settings(
    kwargs: Mapping[str, Any],
    defaults: GateSettings,
    parse_percent: Callable[[Any], float],
    parse_budget: Callable[[Any], float],
) -> GateSettings:
    """``defaults`` (the session's settings) overridden by a ``roofline`` marker's ``kwargs``."""
    unknown = sorted(set(kwargs) - {"tolerance", "metrics", "budget", "retime"})
    if unknown:
        raise OptionError(
            f"roofline marker has no argument {unknown[0]!r} (tolerance, metrics, budget, retime)"
        )
    retime = kwargs.get("retime", defaults.retime)
    if not isinstance(retime, bool):
        raise OptionError(f"roofline marker: retime must be True or False, got {retime!r}")
    try:
        tolerance = parse_percent(kwargs["tolerance"]) if "tolerance" in kwargs else defaults.tolerance
        budget = parse_budget(kwargs["budget"]) if "budget" in kwargs else defaults.budget
    except argparse.ArgumentTypeError as exc:
        raise OptionError(f"roofline marker: {exc}") from None
    metrics = kwargs.get("metrics", ["latency"])
    if isinstance(metrics, str):
        metrics = [metrics]
    for metric in metrics:
        if metric not in ("latency", "memory") and not str(metric).startswith("layer:"):
            raise OptionError(f"roofline marker: unknown metric {metric!r} ({METRICS_HELP})")
    timed = defaults.timed and kwargs.get("retime") is not False  # retime=False: the identity shortcut
    return GateSettings(tolerance, budget, tuple(metrics), retime, timed, defaults.memory_tolerance)


def resolve_model_path(path: str | os.PathLike[str], test_dir: Path, rootdir: Path) -> Path:
    """An absolute model path: as given if absolute, else the test file's dir, then rootdir
    (raises ModelError, one line naming both places looked, when neither holds it)."""
    candidate = Path(path)
    if candidate.is_absolute():
        return candidate
    for base in (test_dir, rootdir):
        if (base / candidate).exists():
            return (base / candidate).resolve()
    looked = " or ".join(dict.fromkeys(str(base.resolve()) for base in (test_dir, rootdir)))
    raise ModelError(f"{candidate}: no such file in {looked}; pass the path of an .onnx model")


def relative_to_root(path: Path, rootdir: Path) -> str:
    """``path`` relative to the rootdir (posix), or absolute when outside it."""
    try:
        return path.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def build_request(
    test: str,
    model_path: Path,
    rootdir: Path,
    *,
    backend: tuple[str, Backend],
    settings: GateSettings,
    mode: RunMode,
    store: BaselineStore,
    device_class: Callable[[Mapping[str, Any]], str],
    commit: Callable[[], str | None],
    models: Callable[[], ModelStoreLike | None],
    call: ModelCall,
) -> GateRequest:
    """The gate request of one ``model_profile(...)`` call (a corrupt baseline fails here).

    ``model_path`` is ``call.model`` resolved, ``backend`` the call's backend with its options.
    """
    from pytest_roofline.gate.baseline import entry_key
    from pytest_roofline.gate.types import GateRequest

    backend_name, engine = backend
    batch_size, dims, inputs, trips = call.batch, call.dims, call.inputs, call.trips
    prepared, bound = None, None
    if not mode.disable:  # load and bind now: a bad model or input fails before measuring
        from pytest_roofline.pipeline import prepare

        # the engine carries the call's options
        resolved = dataclasses.replace(call, model=str(model_path), backend=engine, options=None)
        prepared = prepare(resolved)
        batch_size = prepared.batch or 1
    else:  # analysis only: the arrays still bind every axis they cover, and decide If branches
        from pytest_roofline.model import default_batch, load_model
        from pytest_roofline.pipeline import bind

        proto = load_model(str(model_path))
        bound = bind(proto, batch_size, dims, inputs)
        # 1 for a symbolic batch dim, the model's own when it is static
        batch_size = bound.batch or default_batch(proto, bound.dims)
    rel = relative_to_root(model_path, rootdir)
    device = device_class(engine.fingerprint())
    key = entry_key(test, rel, batch_size, dict(dims or {}), backend_name, device)
    baseline, other_device = None, None
    if not mode.disable and not mode.compare_ref:
        try:
            baseline = store.get(key, test)
        except BaselineError:
            if not mode.update:  # --roofline-update rewrites the entry
                raise
        if baseline is None and not mode.update:
            other_device = other_device_class(store, key, test)
    reference, new_at_ref = None, ""
    if mode.compare_ref and not mode.disable:  # a bad ref fails before measuring
        from pytest_roofline.model.gitref import NotAtRef

        try:
            reference = reference_spec(model_path, mode.compare_ref, batch_size, dims or {})
        except NotAtRef as exc:  # a model the change adds: measured, nothing to compare
            new_at_ref = str(exc)
    return GateRequest(
        test=test,
        key=key,
        model=model_path,
        model_rel=rel,
        batch=batch_size,
        backend=engine,
        device_class=device,
        tolerance=settings.tolerance,
        budget=settings.budget,
        dims=dict(dims or {}),
        inputs=inputs,
        metrics=settings.metrics,
        baseline=baseline,
        reference=reference,
        new_at_ref=new_at_ref,
        commit=commit() if not mode.disable else None,
        trips=dict(trips) if trips else None,
        prepared=prepared,
        bound=bound,
        retime=settings.retime or mode.update,  # an accepted figure is a timed one
        timed=settings.timed,
        models=models() if not mode.disable else None,
        other_device=other_device,
        memory_tolerance=settings.memory_tolerance,
        update=mode.update,
    )


def other_device_class(store: BaselineStore, key: str, test: str) -> str | None:
    """The device class of another entry of the same test, model, shape and backend, or None."""
    stem = key.rsplit("|", 1)[0]
    try:
        owners = store.owners(store.file_for(test))
    except BaselineError:
        return None
    found = sorted(device for k, (_, _, device) in owners.items() if k.rsplit("|", 1)[0] == stem and k != key)
    return found[0] if found else None


def reference_spec(path: Path, ref: str, batch: int, dims: Mapping[str, int]) -> ModelSpec:
    """The model at ``ref`` (``--roofline-compare-ref``) with its external data at the same ref."""
    from pytest_roofline.model import ModelSpec
    from pytest_roofline.model.gitref import model_at_ref

    return ModelSpec.create(str(model_at_ref(path, ref)), batch, dims)


def run_request(
    request: GateRequest,
    mode: RunMode,
    measured: MeasuredIdentities,
    roofline: Callable[[], DeviceRoofline | None],
    timeout: float,
    then: Callable[[GateRequest, GateOutcome], GateOutcome] | None = None,
) -> GateOutcome:
    """``request`` through the gate: its static outcome when the gate is off; the figures of the
    same identity when this run measured it already (``measured``); else :func:`run_model_gate`
    under the machine-wide measure lock (a backend of wall-clock times) and ``timeout`` seconds,
    followed there by ``then`` (what a caller measures beside it, e.g. the history's pairing).
    ``measured`` keeps the outcome.
    """
    import contextlib

    from pytest_roofline.backends.bounded import run_bounded
    from pytest_roofline.gate.runner import measure_lock, run_model_gate, static_outcome

    if mode.disable:
        return static_outcome(request)
    outcome = measured.before(request, mode.update)
    if outcome is None:
        # a backend of synthetic times (the fake) can neither disturb nor be disturbed: it does not
        # wait behind, or hold up, every real measurement of the machine
        lock = measure_lock() if request.backend.wall_clock else contextlib.nullcontext()
        with lock:  # held by this thread, released even when the measurement hangs
            outcome = run_bounded(
                lambda: run_model_gate(request, roofline),
                timeout,
                f"{request.model_rel} (batch {request.batch})",
            )
            if then is not None:
                outcome = then(request, outcome)
    measured.remember(request, outcome)
    return outcome


def check_call_outputs(request: GateRequest, call: ModelCall) -> None:
    """The call's ``check_outputs=``, if any: the request's model on the backends it names must
    compute the outputs of the request's backend (:func:`pytest_roofline.check.check_test_outputs`),
    on the inputs the request's prepared model binds when it has one (the model is loaded once)."""
    if call.check_outputs:
        from pytest_roofline.check import check_test_outputs

        engine, checks = request.backend.name, call.check_outputs
        check_test_outputs(
            request.model,
            engine,
            checks,
            inputs=call.inputs,
            batch=request.batch,
            dims=call.dims,
            prepared=request.prepared,
        )
