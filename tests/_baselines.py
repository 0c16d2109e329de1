"""Typed baseline entries for tests: a valid entry with the figures a test cares about."""

from __future__ import annotations

import json
from pathlib import Path

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


def scale_stored_latency(path: Path, factor: float) -> None:
    """Every entry of the baseline file at ``path`` with its latency (figure and session figures)
    ``factor`` times the recorded one: against a baseline 20x slower a re-timed model is decided
    ``improved`` whatever this machine's load (a live 5 us model on a busy CI runner read noise
    +-39 %), so a test about something else is not at the mercy of the timed verdict."""
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        entry["sessions"] = [x * factor for x in entry["sessions"]]
        entry["figure"] *= factor
    path.write_text(json.dumps(data))
