"""Typed baseline entries for tests: a valid entry with the figures a test cares about."""

from __future__ import annotations

from pytest_roofline.gate.baseline import BaselineEntry, ControlRecord, LatencyRecord, entry_key
from pytest_roofline.gate.conditions import Conditions
from pytest_roofline.gate.control_probe import PROBE_NAME


def make_entry(
    test: str = "tests/test_m.py::test_a",
    figure: float = 2.0,
    model: str = "m.onnx",
    *,
    backend: str = "onnxruntime",
    device: str = "cpu x2",
    sessions: tuple[float, ...] | None = None,
    settings: dict[str, str] | None = None,
    version: str = "1.0.0",
) -> BaselineEntry:
    """An entry of ``test`` whose sessions all read ``figure`` (or ``sessions``)."""
    median = figure / 1000
    return BaselineEntry(
        key=entry_key(test, model, 1, {}, backend, device),
        test=test,
        model=model,
        batch=1,
        backend=backend,
        device_class=device,
        figure=figure,
        sessions=sessions or (figure, figure),
        control=ControlRecord(PROBE_NAME, 1e-3, {"compute": 1}),
        latency=LatencyRecord(median, median, median, median, median, median, 0.0, median),
        conditions=Conditions(version, dict(settings or {}), PROBE_NAME),
        backend_version=version,
        commit="abc",
        time="2026-01-01T00:00:00+00:00",
    )
