"""Reports of a real onnxruntime profile of a small model (not synthetic numbers)."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from _report_data import device_roofline, results_of

from pytest_roofline.api import profile_model
from pytest_roofline.report import benchmark_json, html, markdown
from pytest_roofline.report import csv as csv_report
from pytest_roofline.results import RunResults
from pytest_roofline.zoo import tiny_cnn


@pytest.fixture(scope="module")
def real_results() -> dict:
    """tiny_cnn at batch 1 and 2 through onnxruntime, under a fixed (uncalibrated) roofline."""
    profiles = [
        profile_model(
            tiny_cnn(),
            batch=batch,
            roofline=device_roofline(),
            sessions=2,
            rounds=5,
            profile_iterations=3,
            options={"intra_op_threads": "1"},
        )
        for batch in (1, 2)
    ]
    return json.loads(json.dumps(RunResults.of_profiles(profiles).to_dict()))  # as if read back from disk


def test_html_of_a_real_profile(real_results) -> None:
    pytest.importorskip("jinja2")
    page = html.render(results_of(real_results))
    blob = re.search(r'id="roofline-data">(.*?)</script>', page, re.S).group(1)
    data = json.loads(blob)
    for entry, view in zip(real_results["results"], data["results"], strict=True):
        executed = [la for la in entry["profile"]["layers"] if la["kind"] != "folded"]
        assert len(view["layers"]) == len(executed) > 0
        assert {la[1] for la in view["layers"]} >= {"Conv", "Gemm"}
    assert [p["batch"] for p in data["sweeps"][0]["points"]] == [1, 2]
    assert "tiny_cnn" in page


def test_other_formats_of_a_real_profile(real_results) -> None:
    rows = list(csv.DictReader(io.StringIO(csv_report.render(results_of(real_results)))))
    assert len(rows) == sum(len(r["profile"]["layers"]) for r in real_results["results"])
    assert any(r["op_type"] == "Conv" and float(r["flops"]) > 0 for r in rows)
    doc = benchmark_json.to_benchmark_json(results_of(real_results))
    assert [b["params"]["batch"] for b in doc["benchmarks"]] == [1, 2]
    assert all(b["stats"]["rounds"] > 0 and b["stats"]["median"] > 0 for b in doc["benchmarks"])
    text = markdown.render(results_of(real_results))
    assert "tiny_cnn" in text and text.count("| PASSED |") == 2  # no baseline: the pytest outcome
