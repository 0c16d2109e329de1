"""Serving scenarios in every report: JSON, Markdown and CSV columns, LoadGen's logs kept beside the
report, and the HTML report's latency distribution and QPS-over-time charts in headless Chromium."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import pytest
from _report_data import model_profile, result, results_of, run_results
from _serving_data import RESULT
from test_html_browser import CHROMIUM, open_report

from pytest_roofline.fmt import fmt_seconds, markdown_text
from pytest_roofline.gate.verdict import Verdict
from pytest_roofline.report import write_reports
from pytest_roofline.report.serving import cdf_view, timeline_view
from pytest_roofline.serving.gate import ServingRecord

P99 = Verdict(
    "regression",
    "paired",
    "server p99",
    0.004,
    0.1,
    baseline=0.002,
    ratio=2.0,
    ci=(1.5, 2.5),
    noise=0.2,
    message="server p99: 100.0 % worse than the baseline's model, beyond the 10 % tolerance",
)
QPS = dataclasses.replace(P99, status="pass", metric="server qps", ratio=1.01, ci=(0.97, 1.05), message="ok")


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> tuple[Path, ServingRecord]:
    """A run of one profile and two serving records (one with LoadGen's logs, one from its
    baseline), written as JSON, HTML, Markdown and CSV into one folder."""
    pytest.importorskip("jinja2")
    logs = tmp_path_factory.mktemp("loadgen")
    (logs / "mlperf_log_summary.txt").write_text("Result is : VALID\n")
    (logs / "mlperf_log_detail.txt").write_text(':::MLLOG {"key": "x", "value": 1}\n')
    ran = ServingRecord(
        "test_s.py::test_serve",
        "k",
        "mm.onnx",
        1,
        dataclasses.replace(
            RESULT,
            summary_log=str(logs / "mlperf_log_summary.txt"),
            detail_log=str(logs / "mlperf_log_detail.txt"),
        ),
        (P99, QPS),
        outcome="failed",
    )
    stored = ServingRecord("test_s.py::test_other", "k2", "mm.onnx", 1, RESULT.stored(), ())
    document = run_results(result(model_profile(9, name="tiny"), "pass"))
    results = dataclasses.replace(results_of(document), serving=(ran, stored))
    folder = tmp_path_factory.mktemp("reports")
    paths = [str(folder / f"run.{ext}") for ext in ("json", "html", "md", "csv")]
    assert write_reports(results, paths) == paths
    return folder, ran


def test_loadgens_logs_are_kept_beside_the_report(reports) -> None:
    folder, _ = reports
    kept = folder / "run-loadgen" / "00-server"
    assert (kept / "mlperf_log_summary.txt").read_text() == "Result is : VALID\n"
    assert (kept / "mlperf_log_detail.txt").exists()
    assert not (folder / "run-loadgen" / "01-server").exists()  # figures from the baseline: no logs


def test_json_markdown_and_csv_carry_the_serving_figures(reports) -> None:
    folder, ran = reports
    data = json.loads((folder / "run.json").read_text())
    assert [s["result"]["p99"] for s in data["serving"]] == [RESULT.p99, RESULT.p99]
    assert data["serving"][0]["verdicts"][0]["status"] == "regression"
    markdown = (folder / "run.md").read_text()
    figures = " | ".join(fmt_seconds(x) for x in (RESULT.p50, RESULT.p99, RESULT.p999))
    assert (
        f"| {markdown_text('test_s.py::test_serve')} | mm.onnx b1 | server | {figures} | 39.5 |" in markdown
    )
    assert "p99 regression, qps pass |" in markdown
    assert f"**{markdown_text('test_s.py::test_serve')}** regression: server p99: 100.0 % worse" in markdown
    rows = list(csv.DictReader(io.StringIO((folder / "run.csv").read_text())))
    serving = [r for r in rows if r["scenario"]]
    assert [r["test"] for r in serving] == ["test_s.py::test_serve", "test_s.py::test_other"]
    assert float(serving[0]["p99_s"]) == RESULT.p99 and float(serving[0]["qps"]) == 39.5
    assert serving[0]["serving_verdict"] == "p99 regression, qps pass" and serving[0]["layer"] == ""
    assert all(r["scenario"] == "" for r in rows if r["layer"])  # layer rows unchanged


def test_chart_geometry_follows_the_figures() -> None:
    cdf = cdf_view(RESULT)
    assert cdf is not None and cdf["top"] == RESULT.p999  # LoadGen's p99.9 is past the last sample
    assert [m["name"] for m in cdf["marks"]] == ["p50", "p90", "p99", "p99.9"]
    assert cdf["marks"][-1]["x"] == cdf["width"]
    first, last = cdf["points"].split()[0], cdf["points"].split()[-1]
    assert first.endswith(f",{cdf['height']:.1f}") and last.endswith(",0.0")  # 0 to 1 of the samples
    timeline = timeline_view(RESULT)
    assert timeline is not None and timeline["seconds"] == pytest.approx(2.0) and timeline["mean"] == 40.0
    assert cdf_view(RESULT.stored()) is None and timeline_view(RESULT.stored()) is None


@pytest.fixture(scope="module")
def pw():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as driver:
        yield driver


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")
def test_the_html_report_draws_the_distribution_and_the_rate(pw, reports, tmp_path) -> None:
    folder, _ = reports
    with open_report(pw, folder / "run.html", tmp_path / "profile") as (tab, requests, errors):
        assert requests == [] and errors == []
        section = tab.locator("section#serving")
        assert section.is_visible()
        cdf = tab.locator("#serving-0 svg.latency-cdf polyline.cdf")
        assert cdf.is_visible() and len(cdf.get_attribute("points").split()) == 101
        marks = tab.locator("#serving-0 svg.latency-cdf line.mark")
        assert [marks.nth(i).get_attribute("data-mark") for i in range(marks.count())] == [
            "p50",
            "p90",
            "p99",
            "p99.9",
        ]
        assert (
            tab.locator("#serving-0 svg.latency-cdf line.mark title").first.text_content()
            == f"LoadGen p50: {fmt_seconds(RESULT.p50)}"
        )
        assert tab.locator("#serving-0 svg.qps-timeline polygon.qps").is_visible()
        assert tab.locator("#serving-0 .verdict.bad").first.inner_text().startswith("REGRESSION: server p99")
        assert tab.locator("#serving-1 svg").count() == 0  # the baseline's figures: nothing to draw
        assert "figures are the baseline's" in tab.locator("#serving-1").inner_text()
        hrefs = [a.get_attribute("href") for a in tab.locator("section#serving a.loadgen-log").all()]
        assert hrefs == [
            "run-loadgen/00-server/mlperf_log_summary.txt",
            "run-loadgen/00-server/mlperf_log_detail.txt",
        ]
        assert all((folder / href).is_file() for href in hrefs)
        row = tab.locator("table.serving-table tbody tr").first
        assert fmt_seconds(RESULT.p99) in row.inner_text() and "39.5" in row.inner_text()
