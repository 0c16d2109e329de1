"""JUnit XML properties of a result, through pytest's own --junitxml."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from _report_data import sample_run

from pytest_roofline.report import junit


def test_properties_of_a_result() -> None:
    entry = sample_run(6)["results"][0]
    props = dict(junit.properties(entry))
    latency = entry["profile"]["latency"]
    assert float(props["roofline_latency_median_s"]) == pytest.approx(latency["median"], rel=1e-5)
    assert float(props["roofline_efficiency"]) == pytest.approx(entry["profile"]["efficiency"], rel=1e-5)
    assert props["roofline_verdict"] == "regression" and props["roofline_ratio"] == "1.12"
    assert props["roofline_ratio_ci"] == "1.09..1.16"


def test_unknown_figures_are_left_out() -> None:
    props = dict(junit.properties({"profile": {"model": "m", "batch": 1, "latency": {"median": 0.01}}}))
    assert set(props) == {"roofline_model", "roofline_batch", "roofline_latency_median_s"}


def test_written_into_junit_xml(pytester: pytest.Pytester, tmp_path) -> None:
    entry = sample_run(3)["results"][1]
    (pytester.path / "entry.json").write_text(json.dumps(entry))
    pytester.makepyfile(
        """
        import json, pathlib
        from pytest_roofline.report import junit

        def test_model(record_property):
            junit.record(record_property, json.loads(pathlib.Path("entry.json").read_text()))
        """
    )
    xml_path = tmp_path / "junit.xml"
    pytester.runpytest("-p", "no:xdist", f"--junitxml={xml_path}").assert_outcomes(passed=1)
    props = {p.get("name"): p.get("value") for p in ET.parse(xml_path).getroot().iter("property")}
    assert props == dict(junit.properties(entry))
