"""Cross-backend output check: run one model on several backends with the same inputs, compare.

Like Polygraphy's comparator or MegEngine's ``asserteq``: the first backend is the reference, each
other backend's outputs are compared with it element by element, passing where
``|candidate - reference| <= atol + rtol * |reference|`` (``numpy.isclose``; NaN equals NaN).
A performance gate is worthless on a backend that computes something else: run this first.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_roofline.errors import OptionError, RooflineError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pytest_roofline.model import ModelSource, ModelSpec
    from pytest_roofline.model.inputs import InputSource
    from pytest_roofline.pipeline import PreparedModel

__all__ = ["CheckResult", "OutputComparison", "check_outputs", "check_test_outputs", "compare_arrays"]

# Accuracy is checked at full precision unless the caller asks otherwise: OpenVINO's CPU plugin
# otherwise picks bf16 on CPUs that have it, which no fp32 tolerance accepts.
DEFAULT_OPTIONS: dict[str, dict[str, str]] = {"openvino": {"precision": "f32"}}
RTOL, ATOL = 1e-3, 1e-4  # the default tolerances (numpy.isclose's rtol and atol)


@dataclass(frozen=True)
class OutputComparison:
    """One output of one candidate backend against the reference backend."""

    reference: str
    candidate: str
    output: str
    max_abs_error: float
    max_rel_error: float  # |c - r| / |r| over elements with r != 0
    mismatched: int  # elements outside the tolerance
    elements: int
    passed: bool
    problem: str = ""  # a shape, dtype or missing-output problem, else ""

    def describe(self) -> str:
        """One line saying what differs."""
        head = f"output {self.output!r}: {self.candidate} vs {self.reference}"
        if self.problem:
            return f"{head}: {self.problem}"
        return (
            f"{head}: max abs error {self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g}, "
            f"{self.mismatched}/{self.elements} elements outside tolerance"
        )


@dataclass(frozen=True)
class CheckResult:
    """Every comparison of a check, with the tolerances used."""

    model: str
    backends: tuple[str, ...]
    rtol: float
    atol: float
    comparisons: tuple[OutputComparison, ...]

    @property
    def passed(self) -> bool:
        """Whether every output of every backend matched the reference."""
        return all(c.passed for c in self.comparisons)

    @property
    def failures(self) -> tuple[OutputComparison, ...]:
        """The comparisons that did not pass."""
        return tuple(c for c in self.comparisons if not c.passed)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "model": self.model,
            "backends": list(self.backends),
            "reference": self.backends[0],
            "rtol": self.rtol,
            "atol": self.atol,
            "passed": self.passed,
            "comparisons": [
                {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in asdict(c).items()}
                for c in self.comparisons
            ],  # strict JSON: an infinite error (shape/NaN mismatch) is null
        }


def compare_arrays(
    reference: np.ndarray, candidate: np.ndarray, rtol: float, atol: float
) -> tuple[float, float, int, str]:
    """(max abs error, max rel error, mismatched elements, problem) of two arrays."""
    reference, candidate = np.asarray(reference), np.asarray(candidate)
    if reference.shape != candidate.shape:
        return (
            np.inf,
            np.inf,
            max(reference.size, candidate.size),
            (f"shape {list(candidate.shape)} differs from the reference's {list(reference.shape)}"),
        )
    if reference.size == 0:
        return 0.0, 0.0, 0, ""
    if reference.dtype.kind in "OSU" or candidate.dtype.kind in "OSU":
        equal = reference == candidate
        return 0.0 if equal.all() else np.inf, 0.0, int((~equal).sum()), ""
    ref = reference.astype(np.float64)
    cand = candidate.astype(np.float64)
    close = np.isclose(cand, ref, rtol=rtol, atol=atol, equal_nan=True)
    both_nan = np.isnan(ref) & np.isnan(cand)
    diff = np.where(both_nan, 0.0, np.abs(cand - ref))
    diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only
    nonzero = (ref != 0) & np.isfinite(ref)
    rel = diff[nonzero] / np.abs(ref[nonzero])
    return float(diff.max()), float(rel.max()) if rel.size else 0.0, int((~close).sum()), ""


def check_outputs(
    model: ModelSource,
    backends: Sequence[str] = ("onnxruntime", "openvino"),
    inputs: InputSource | None = None,
    seed: int = 0,
    rtol: float = RTOL,
    atol: float = ATOL,
    options: Mapping[str, Mapping[str, str]] | None = None,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
) -> CheckResult:
    """Run ``model`` on each backend with the same inputs and compare outputs with the first's.

    Args:
        model: a path or ``onnx.ModelProto``.
        backends: two or more backend names; the first is the reference.
        inputs: arrays by input name, or a ``.npy`` (single input) / ``.npz`` path; default
            seeded random inputs (``seed``) at the bound shapes.
        rtol, atol: tolerances as in ``numpy.isclose``.
        options: per-backend options, ``{"openvino": {"device": "CPU"}}``; OpenVINO defaults to
            ``precision=f32`` here.
        batch, dims: bind symbolic dims when ``inputs`` are generated.

    Raises:
        OptionError: fewer than two backends, a repeated backend or bad tolerances.
        ShapeError: inputs that do not fit the model.
        BackendUnavailable, BackendError: a backend missing or failing.
    """
    from pytest_roofline.model import ModelSpec, bind_input_shapes, graph_inputs, load_model, make_inputs
    from pytest_roofline.model.inputs import dims_from_inputs, load_inputs

    backends = _checked(backends, rtol, atol)
    proto = load_model(model)
    names = [vi.name for vi in graph_inputs(proto)]
    if inputs is not None:
        arrays = load_inputs(inputs, names)
        batch, found = dims_from_inputs(proto, arrays)
        dims = {**found, **dict(dims or {})}
        bind_input_shapes(proto, batch, dims)  # every dim must be bound by the arrays
    else:
        arrays = make_inputs(proto, bind_input_shapes(proto, batch, dims), seed=seed)
    spec = ModelSpec.create(model, batch, dims)
    return _compare(spec, arrays, backends, rtol, atol, options)


def _checked(backends: Sequence[str], rtol: float, atol: float) -> tuple[str, ...]:
    """``backends`` as a tuple, once checked: two or more, none twice, tolerances non-negative."""
    backends = tuple(backends)
    if len(backends) < 2:
        raise OptionError(f"a check needs two or more backends, got {', '.join(backends) or 'none'}")
    if len(set(backends)) != len(backends):
        raise OptionError(f"a backend is listed twice: {', '.join(backends)}")
    if rtol < 0 or atol < 0:
        raise OptionError(f"tolerances must be non-negative (rtol={rtol}, atol={atol})")
    return backends


def _compare(
    spec: ModelSpec,
    arrays: dict[str, np.ndarray],
    backends: tuple[str, ...],
    rtol: float,
    atol: float,
    options: Mapping[str, Mapping[str, str]] | None = None,
) -> CheckResult:
    """``spec`` run on each backend with ``arrays``, each one's outputs compared with the first's."""
    from pytest_roofline.backends.base import get_backend

    outputs: dict[str, dict[str, np.ndarray]] = {}
    for name in backends:
        backend_options = dict(DEFAULT_OPTIONS.get(name, {}))
        backend_options.update((options or {}).get(name, {}))
        backend = get_backend(name, backend_options)
        with backend.open(spec, arrays) as session:
            outputs[name] = session.outputs()
    reference = backends[0]
    comparisons = []
    for candidate in backends[1:]:
        for output, expected in outputs[reference].items():
            actual = outputs[candidate].get(output)
            if actual is None:
                comparisons.append(
                    OutputComparison(
                        reference,
                        candidate,
                        output,
                        np.inf,
                        np.inf,
                        int(np.size(expected)),
                        int(np.size(expected)),
                        False,
                        f"{candidate} returned no output {output!r}",
                    )
                )
                continue
            abs_err, rel_err, mismatched, problem = compare_arrays(expected, actual, rtol, atol)
            comparisons.append(
                OutputComparison(
                    reference,
                    candidate,
                    output,
                    abs_err,
                    rel_err,
                    mismatched,
                    int(np.size(expected)),
                    mismatched == 0 and not problem,
                    problem,
                )
            )
    return CheckResult(spec.name, backends, rtol, atol, tuple(comparisons))


def check_test_outputs(
    model: str | os.PathLike[str],
    backend: str,
    others: bool | str | Sequence[str],
    *,
    inputs: Any = None,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    prepared: PreparedModel | None = None,
) -> None:
    """A test's ``check_outputs=``: ``True`` (vs onnxruntime, or openvino when the test's backend is
    onnxruntime), a backend name, or a list of names; their outputs must match ``backend``'s.

    ``prepared``: the test's model as the gate loaded and bound it (its inputs are the ones compared;
    the model is not loaded again), else ``model`` is loaded with ``inputs``, ``batch`` and ``dims``.

    Raises:
        RooflineError: the outputs differ (the first three differences named).
    """
    if isinstance(others, bool):
        names = ["onnxruntime" if backend != "onnxruntime" else "openvino"]
    else:
        names = [others] if isinstance(others, str) else list(others)
    backends = [backend, *[n for n in names if n != backend]]
    if prepared is not None:
        result = _compare(prepared.spec, prepared.arrays, _checked(backends, RTOL, ATOL), RTOL, ATOL)
    else:
        result = check_outputs(str(model), backends=backends, inputs=inputs, batch=batch, dims=dims or None)
    if not result.passed:
        details = "; ".join(c.describe() for c in result.failures[:3])
        raise RooflineError(f"outputs of {Path(model).name} differ between backends: {details}")
