"""pytest-roofline and pytest-benchmark in one run: our timings land in its storage and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pytest_benchmark")

SAMPLES = [0.010, 0.011, 0.0105, 0.012, 0.0102, 0.0099, 0.0101]

CONFTEST = f"""
import pytest
from pytest_roofline.report.benchmark_bridge import feed_pytest_benchmark

@pytest.fixture
def fed(request):
    entry = {{
        "test": request.node.nodeid,
        "profile": {{
            "model": "tiny", "batch": 2, "backend": "onnxruntime", "precision": "fp32",
            "latency": {{"samples": {SAMPLES!r}, "median": 0.0102, "n": {len(SAMPLES)}}},
            "total": {{"flops": 123456, "macs": 61728, "bytes": 4096}}, "efficiency": 0.25,
        }},
        "verdict": {{"status": "pass", "ratio": 1.01}},
    }}
    return feed_pytest_benchmark(request.config, entry)
"""

TESTS = """
def test_model(fed):
    print(f"FED={fed}")

def test_plain_benchmark(benchmark):
    benchmark(sum, range(20))
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # pytest-benchmark disables itself under xdist
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_perf=TESTS)
    return pytester


def test_timings_reach_json_storage_and_table(project: pytest.Pytester, tmp_path: Path) -> None:
    out, storage = tmp_path / "bench.json", tmp_path / "storage"
    result = project.runpytest(
        "-s",
        "-p",
        "no:xdist",
        f"--benchmark-json={out}",
        "--benchmark-autosave",
        f"--benchmark-storage=file://{storage}",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*FED=True*"])
    result.stdout.fnmatch_lines(["*test_model[[]tiny-b2[]]*"])  # pytest-benchmark's own table
    result.stdout.fnmatch_lines(["*test_plain_benchmark*"])
    doc = json.loads(out.read_text())
    names = {b["fullname"]: b for b in doc["benchmarks"]}
    ours = names["test_perf.py::test_model::tiny-b2"]
    assert ours["stats"]["data"] == SAMPLES and ours["stats"]["rounds"] == len(SAMPLES)
    assert ours["stats"]["min"] == min(SAMPLES) and ours["extra_info"]["flops"] == 123456
    assert "test_perf.py::test_plain_benchmark" in names
    saved = list(storage.rglob("*.json"))
    assert len(saved) == 1
    assert {b["name"] for b in json.loads(saved[0].read_text())["benchmarks"]} >= {"test_model[tiny-b2]"}


@pytest.mark.parametrize("flag", ["--benchmark-disable", "--benchmark-skip"])
def test_not_fed_when_benchmarks_are_off(project: pytest.Pytester, flag: str) -> None:
    result = project.runpytest("-s", "-p", "no:xdist", flag, "-k", "test_model")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*FED=False*"])


def test_without_pytest_benchmark_loaded(project: pytest.Pytester) -> None:
    result = project.runpytest("-s", "-p", "no:benchmark", "-k", "test_model")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*FED=False*"])


def test_both_plugins_register_their_options(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*--roofline-*", "*--benchmark-json*"])
