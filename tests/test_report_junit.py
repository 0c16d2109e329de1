"""JUnit XML properties of a result, through pytest's own --junitxml."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from _report_data import record_of, sample_run

from pytest_roofline.report import junit


def test_properties_of_a_result() -> None:
    entry = sample_run(6)["results"][0]
    props = dict(junit.properties(record_of(entry)))
    latency = entry["profile"]["latency"]
    assert float(props["roofline_latency_median_s"]) == pytest.approx(latency["median"], rel=1e-5)
    assert float(props["roofline_efficiency"]) == pytest.approx(entry["profile"]["efficiency"], rel=1e-5)
    assert props["roofline_verdict"] == "regression" and props["roofline_ratio"] == "1.12"
    assert props["roofline_ratio_ci"] == "1.09..1.16"


def test_unknown_figures_are_left_out() -> None:
    import dataclasses
    import math

    from pytest_roofline.measure.stats import LatencyStats

    record = record_of(sample_run(3)["results"][1])
    nan = math.nan
    latency = LatencyStats(1, 0.01, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan)
    profile = dataclasses.replace(record.profile, latency=latency, layers=(), roofline=None)
    verdict = dataclasses.replace(record.verdict, ratio=None, ci=None)
    props = dict(junit.properties(dataclasses.replace(record, profile=profile, verdict=verdict)))
    assert set(props) == {
        "roofline_model",
        "roofline_batch",
        "roofline_backend",
        "roofline_latency_median_s",
        "roofline_throughput",
        "roofline_attributed_fraction",
        "roofline_verdict",
    }


def test_written_into_junit_xml_by_the_plugin(pytester: pytest.Pytester, tmp_path) -> None:
    from _plugin_helpers import FAKE, relu_chain

    from pytest_roofline.results import load_results

    relu_chain(pytester.path / "m.onnx", 3)
    pytester.makepyfile(
        """
        def test_model(model_profile):
            model_profile("m.onnx")
        """
    )
    xml_path = tmp_path / "junit.xml"
    result = pytester.runpytest(
        "-p", "no:xdist", *FAKE, f"--junitxml={xml_path}", f"--roofline-report={tmp_path / 'r.json'}"
    )
    result.assert_outcomes(passed=1)
    props = {p.get("name"): p.get("value") for p in ET.parse(xml_path).getroot().iter("property")}
    assert props == dict(junit.properties(load_results(tmp_path / "r.json").records[0]))
    assert props["roofline_verdict"] == "new" and float(props["roofline_latency_median_s"]) > 0
