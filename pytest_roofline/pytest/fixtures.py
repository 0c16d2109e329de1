"""The plugin's fixtures: ``model_profile``, ``device_roofline``, ``roofline_span``."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_roofline.errors import BackendUnavailable, RooflineError
from pytest_roofline.measure.spans import Spans
from pytest_roofline.pipeline import ModelCall
from pytest_roofline.pytest.session import RooflineSession

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.roofline import DeviceRoofline
    from pytest_roofline.serving.types import ScenarioResult

__all__ = ["SESSION_KEY", "SPANS_KEY", "device_roofline", "model_load", "model_profile", "roofline_span"]

SESSION_KEY = pytest.StashKey[RooflineSession]()
SPANS_KEY = pytest.StashKey[Spans]()


def _session(config: pytest.Config) -> RooflineSession:
    return config.stash[SESSION_KEY]


def _give_up(skipped: bool, message: str) -> NoReturn:
    """Skip or fail the test outside the ``except`` block (no chained traceback)."""
    __tracebackhide__ = True
    if skipped:
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


def _give_up_on(error: RooflineError) -> NoReturn:
    """Skip the test when its backend is not installed, fail it (one line) on any other error;
    called outside the ``except`` block (no chained traceback)."""
    __tracebackhide__ = True
    if isinstance(error, BackendUnavailable):
        _give_up(True, str(error))
    _give_up(False, f"roofline: {error.for_pytest()}")


@pytest.fixture(scope="session")
def device_roofline(pytestconfig: pytest.Config) -> DeviceRoofline | None:
    """The device roofline through the session's backend (cached; ``--roofline-recalibrate``)."""
    session = _session(pytestconfig)
    try:
        name, backend = session.engines.backend(None, None)
        return session.engines.roofline_for(name, backend)
    except BackendUnavailable as exc:
        skipped, message = True, str(exc)
    except RooflineError as exc:
        skipped, message = False, f"roofline: {exc}"
    _give_up(skipped, message)


@pytest.fixture
def model_profile(request: pytest.FixtureRequest) -> Callable[..., ModelProfile]:
    """Profile a model: ``model_profile(path, batch_size=None, dims=None, inputs=None, ...)``.

    ``batch_size`` defaults to 1 for a model whose batch dim is symbolic, to the model's own batch
    for a static one, and to the inputs' first dim when ``inputs`` are given.

    ``shapes`` binds whole input shapes by input name (``{"x": (1, 3, 48, 192)}``), axis by axis.

    ``trips`` binds the trip count of Loop nodes the graph does not fix (``{"loop": 8}``).

    Relative paths resolve against the test file's directory, then the rootdir.  The profile is
    gated against the stored baseline (or ``--roofline-compare-ref``) and recorded for reports.
    A backend that is not installed skips the test; other roofline errors fail it.
    """
    session = _session(request.config)

    def profile(
        path: str | os.PathLike[str],
        batch_size: int | None = None,
        dims: Mapping[str, int] | None = None,
        inputs: Any = None,
        shapes: Mapping[str, Sequence[int]] | None = None,
        backend: str | None = None,
        options: Mapping[str, str] | None = None,
        check_outputs: Any = None,
        trips: Mapping[str, int] | None = None,
    ) -> ModelProfile:
        __tracebackhide__ = True
        try:
            if shapes:
                from pytest_roofline.model import with_shapes  # onnx: loaded when a model is

                dims = with_shapes(dims, shapes)
            call = ModelCall(
                path,
                batch=batch_size,
                dims=dims,
                inputs=inputs,
                backend=backend,
                options=options,
                trips=trips,
                check_outputs=check_outputs,
            )
            prof = session.profile(request.node, call)
            spans = request.node.stash.get(SPANS_KEY, None)
            # spans recorded so far are visible to the test; the full set is attached after the call
            return dataclasses.replace(prof, spans=spans.stats()) if spans else prof
        except RooflineError as exc:
            error = exc
        _give_up_on(error)

    return profile


@pytest.fixture
def model_load(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., ScenarioResult]:
    """Serve a model under an MLPerf LoadGen scenario (docs/serving.md):
    ``model_load(path, scenario="server", qps=None, p99=None, duration=2.0, ...)``.

    Returns LoadGen's figures (``ScenarioResult``: p50/p90/p99/p99.9, QPS, the early-stopping
    tail estimate, ``constraint_met``); its logs are kept in the test's ``tmp_path``.  The run's
    backend and options apply as for ``model_profile``.  Gated like latency: the result is kept
    in the test's baseline entry, nothing is run again while nothing that runs changed, and a
    changed model is run paired with the baseline's (``windows=`` pairs); a regression of p99 or
    QPS fails the test.
    """
    session = _session(request.config)

    def load(
        path: str | os.PathLike[str], scenario: str = "single-stream", **settings: Any
    ) -> ScenarioResult:
        __tracebackhide__ = True
        from pytest_roofline.serving.compare import DEFAULT_WINDOWS
        from pytest_roofline.serving.runner import scenario_request

        try:
            backend, options = settings.pop("backend", None), settings.pop("options", None)
            windows = int(settings.pop("windows", DEFAULT_WINDOWS))
            call, chosen, budget = scenario_request(str(path), scenario, backend, settings)
            call = dataclasses.replace(call, backend=backend, options=options)
            return session.load(request.node, call, chosen, budget, windows, tmp_path / "loadgen")
        except RooflineError as exc:
            error = exc
        _give_up_on(error)

    return load


@pytest.fixture
def roofline_span(request: pytest.FixtureRequest) -> Spans:
    """Time application code around the model: ``with roofline_span("preprocess"): ...``."""
    spans = Spans()
    request.node.stash[SPANS_KEY] = spans
    return spans
