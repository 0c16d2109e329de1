"""Memory in the reports: terminal, Markdown, CSV, JSON (schema 3 and its migration), HTML timeline."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from _report_data import model_profile, result, results_of, run_results

from pytest_roofline.history.points import HistoryPoint
from pytest_roofline.memory import LayerMemory, MemoryProfile
from pytest_roofline.profile import ModelProfile
from pytest_roofline.report import csv as csv_report
from pytest_roofline.report import markdown
from pytest_roofline.report.terminal import summary_lines
from pytest_roofline.results import RunResults, load_results
from pytest_roofline.schema import RESULTS_SCHEMA, SchemaError

WEIGHTS = 4_000_000


def with_memory(profile: ModelProfile) -> ModelProfile:
    """``profile`` with an arena's figures: each executed layer leaves 10 kB more live, the third
    layer 1 MB more (the peak), the rest free back down."""
    layers, live = [], WEIGHTS
    for position, la in enumerate(profile.layers):
        if la.kind == "folded":
            layers.append(la)
            continue
        allocated = 1_000_000 if position == 2 else (-1_000_000 if position == 3 else 10_000)
        live += allocated
        layers.append(dataclasses.replace(la, memory=LayerMemory(allocated, live)))
    peak = max(la.memory.live for la in layers if la.memory is not None)
    memory = MemoryProfile(
        peak=peak,
        arena_held=2 * peak,
        weights=WEIGHTS,
        peak_activations=peak - WEIGHTS,
        source="onnxruntime profiler",
        predicted_peak=round(peak * 0.95),
    )
    return dataclasses.replace(profile, layers=tuple(layers), memory=memory)


@pytest.fixture(scope="module")
def results() -> RunResults:
    measured = with_memory(model_profile(12, name="arena"))
    bare = model_profile(6, seed=1, name="bare")
    return results_of(run_results(result(measured, "pass"), result(bare, "pass")))


def test_terminal_and_markdown_show_the_peak(results: RunResults) -> None:
    peak = results.records[0].profile.memory.peak  # type: ignore[union-attr]
    shown = f"{peak / 1e6:.3g} MB"
    lines = summary_lines(results)
    assert "peak memory" in lines[0]
    row = next(line for line in lines if "arena" in line)
    assert row.rstrip().endswith(shown)
    assert next(line for line in lines if "bare" in line).rstrip().endswith("-")
    text = markdown.render(results)
    assert "| Peak memory |" in text
    assert f"| {shown} |" in text


def test_csv_has_each_layers_allocation_and_live_bytes(results: RunResults) -> None:
    rows = csv_report.rows(results)
    arena = [r for r in rows if r["model"] == "arena" and r["memory_live_bytes"] is not None]
    layers = [la for la in results.records[0].profile.layers if la.memory is not None]
    assert [(r["memory_allocated_bytes"], r["memory_live_bytes"]) for r in arena] == [
        (la.memory.allocated, la.memory.live)  # type: ignore[union-attr]
        for la in layers
    ]
    assert {r["model_peak_memory_bytes"] for r in rows if r["model"] == "bare"} == {None}
    assert "memory_live_bytes" in csv_report.render(results).splitlines()[0]


def test_json_is_schema_3_and_a_schema_2_document_is_migrated(results: RunResults, tmp_path: Path) -> None:
    document = results.to_dict()
    assert document["schema_version"] == RESULTS_SCHEMA == 3
    assert document["results"][0]["profile"]["memory"]["peak"] == results.records[0].profile.memory.peak  # type: ignore[union-attr]
    path = tmp_path / "r3.json"
    path.write_text(json.dumps(document))
    assert load_results(path).records[0].profile.memory == results.records[0].profile.memory
    old = json.loads(json.dumps(document))
    old["schema_version"] = 2
    for item in old["results"]:
        del item["profile"]["memory"]
        for layer in item["profile"]["layers"]:
            del layer["memory"]
    from pytest_roofline.results import results_to_3

    migrated = results_to_3(json.loads(json.dumps(old)))
    assert all(item["profile"]["memory"] is None for item in migrated["results"])
    assert all(la["memory"] is None for item in migrated["results"] for la in item["profile"]["layers"])
    path = tmp_path / "r2.json"
    path.write_text(json.dumps(old))
    loaded = load_results(path)
    assert [r.profile.memory for r in loaded.records] == [None, None]


def test_html_timeline_in_headless_chromium(results: RunResults, tmp_path: Path) -> None:
    pytest.importorskip("jinja2")
    from test_html_browser import CHROMIUM, open_report

    if CHROMIUM is None:
        pytest.skip("no chromium installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    from pytest_roofline.report import html

    path = tmp_path / "report.html"
    html.write(results, path)
    profile = results.records[0].profile
    layers = [la for la in profile.layers if la.memory is not None]
    with (
        sync_api.sync_playwright() as pw,
        open_report(pw, path, tmp_path / "profile") as (tab, requests, errors),
    ):
        assert requests == [] and errors == []
        bars = tab.locator("section#r0 svg.memory-timeline rect.live")
        assert bars.count() == len(layers)
        assert tab.locator("section#r1 svg.memory-timeline").count() == 0  # no memory: no timeline
        names = [bars.nth(i).get_attribute("data-layer") for i in range(bars.count())]
        assert names == [la.name for la in layers]  # execution order
        heights = [bars.nth(i).bounding_box()["height"] for i in range(bars.count())]  # type: ignore[index]
        tallest = max(range(len(heights)), key=lambda i: heights[i])
        assert names[tallest] == max(layers, key=lambda la: la.memory.live).name  # type: ignore[union-attr]
        peak = tab.locator("section#r0 svg.memory-timeline line.peak")
        assert peak.count() == 1 and peak.get_attribute("y1") == bars.nth(tallest).get_attribute("y")
        figures = tab.locator("section#r0 .memory-figures").inner_text()
        assert "source: onnxruntime profiler" in figures and "static estimate" in figures
        assert "-5.0%" in figures


def _point(index: int, peak: int, layers: dict[str, int]) -> HistoryPoint:
    return HistoryPoint(
        id=f"p{index}",
        test="t",
        key="k",
        device_class="cpu",
        conditions="c",
        commit=f"{index:07x}",
        time=f"2026-11-{10 + index:02d}T10:00:00+00:00",
        value=1.0 + 0.01 * (index % 2),
        memory=peak,
        layer_memory=layers,
    )


def test_history_points_keep_memory_and_its_steps_are_found_with_the_layer() -> None:
    from pytest_roofline.history.changepoints import find_changes

    steady = {"mm1": 65_536, "relu1": 0}
    kept = {"mm1": 65_536, "relu1": 65_536}
    points = [_point(i, 458_752, steady) for i in range(4)] + [_point(i, 524_288, kept) for i in range(4, 7)]
    back = HistoryPoint.from_dict(json.loads(json.dumps(points[0].to_dict())))
    assert back.memory == 458_752 and back.layer_memory == steady
    assert "memory" not in dataclasses.replace(points[0], memory=None).to_dict()  # older points unchanged
    with pytest.raises(SchemaError, match="layer_memory"):
        HistoryPoint.from_dict({**points[0].to_dict(), "layer_memory": {"mm1": 1.5}})
    found = find_changes(points, layers=False)
    assert [(c.commit, c.before, c.after) for c in found.memory_changes] == [
        (points[4].commit, 458_752, 524_288)
    ]
    assert [move.name for move in found.memory_changes[0].layers] == ["relu1"]
    same = find_changes(points[:4], layers=False)
    assert same.memory_changes == ()
