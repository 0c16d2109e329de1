"""The history dashboard in a real headless Chromium, offline: charts, change points, click-through."""

from __future__ import annotations

from pathlib import Path

import pytest
from _history_data import series
from test_html_browser import CHROMIUM, open_report

from pytest_roofline.history.dashboard import write
from pytest_roofline.history.view import build_view

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")
pytest.importorskip("ruptures")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tests: one gets 10 % slower at run 12 (layer MatMul_83 +25 %), one unchanged."""
    noise = [1.0, 1.003, 0.998, 1.001, 0.999, 1.002]
    slow = [(1.1 if i >= 12 else 1.0) * noise[i % 6] for i in range(20)]
    points = series(slow, ["a"] * 12 + ["b"] * 8)
    points = [
        p.__class__(**{**p.__dict__, "layers": {"MatMul_83": 0.4 * (1.25 if i >= 12 else 1), "Relu_2": 0.1}})
        for i, p in enumerate(points)
    ]
    flat = series([noise[i % 6] for i in range(20)], ["a"] * 20, test="tests/test_m.py::test_other")
    path = tmp_path_factory.mktemp("dashboard") / "history.html"
    write(build_view(points + flat, None), path)
    return path


@pytest.fixture(scope="module")
def pw():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as driver:
        yield driver


def test_dashboard_draws_one_chart_per_test_and_marks_change_points(pw, dashboard, tmp_path) -> None:
    with open_report(pw, dashboard, tmp_path / "profile") as (tab, requests, errors):
        assert requests == [] and errors == []
        assert tab.locator(".series").count() == 2
        slow = tab.locator('.series[data-test="tests/test_m.py::test_model"]')
        assert slow.locator("circle.pt").count() == 20  # a point per commit
        assert slow.locator("line.cp").count() == 1
        assert tab.locator('.series[data-test="tests/test_m.py::test_other"] line.cp').count() == 0
        slow.locator("text.cplabel").click()
        detail = slow.locator(".detail")
        assert detail.is_visible()
        assert "+10.0 %" in detail.locator("h3").inner_text()
        assert "Why: models not reachable" in detail.inner_text()
        detail.locator('tr[data-layer="MatMul_83"] a').click()
        layer_chart = detail.locator(".layer-chart svg")
        assert layer_chart.count() == 1
        assert layer_chart.locator("circle.pt").count() == 20
        assert layer_chart.locator("line.cp").count() == 1  # the layer's own change point
        slow.locator("circle.pt").nth(3).click()
        assert "figure" in detail.locator("h3").inner_text()


#: Per chart: the points' vertical spread over the plot's height, the unit text, the commit labels.
CHART_GEOMETRY = """() => Array.from(document.querySelectorAll('.series')).map(box => {
  const svg = box.querySelector('svg');
  const ys = Array.from(svg.querySelectorAll('circle.pt')).map(c => +c.getAttribute('cy'));
  const height = +svg.getAttribute('height');
  return {test: box.dataset.test, spread: (Math.max(...ys) - Math.min(...ys)) / height,
          unit: svg.querySelector('text.unit').textContent,
          commits: Array.from(svg.querySelectorAll('text.commit')).map(t => t.textContent),
          ticks: Array.from(svg.querySelectorAll('text.ytick')).map(t => t.textContent)};
})"""


def test_axes_share_one_relative_scale_with_units_and_commit_labels(pw, dashboard, tmp_path) -> None:
    """Each y-axis was scaled to its own range: 0.5 % noise filled the flat series' chart as a 10 %
    step filled the other's; no unit; only the first and last commits labelled."""
    with open_report(pw, dashboard, tmp_path / "profile") as (tab, requests, errors):
        assert requests == [] and errors == []
        charts = {chart["test"]: chart for chart in tab.evaluate(CHART_GEOMETRY)}
        slow, flat = charts["tests/test_m.py::test_model"], charts["tests/test_m.py::test_other"]
        assert flat["spread"] < 0.05, flat  # 0.5 % noise: flat
        assert slow["spread"] > 0.15, slow  # a 10 % step: plain to see
        assert slow["unit"] == flat["unit"] == "model time ÷ control probe time"
        assert len(flat["commits"]) >= 6 and len(set(flat["commits"])) == len(flat["commits"])
        assert any(tick.endswith(" median") for tick in flat["ticks"])
        tab.locator(".series").first.screenshot(path="/tmp/roofline-history-axes.png")
