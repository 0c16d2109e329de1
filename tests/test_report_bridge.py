"""pytest-roofline and pytest-benchmark in one run: our timings land in its storage and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pytest_benchmark")

SAMPLES = [0.010, 0.011, 0.0105, 0.012, 0.0102, 0.0099, 0.0101]

CONFTEST = f"""
import pytest
from pytest_roofline.gate.verdict import Verdict
from pytest_roofline.profile import ModelProfile
from pytest_roofline.report.benchmark_bridge import feed_pytest_benchmark
from pytest_roofline.results import ProfileRecord
from pytest_roofline.measure.stats import LatencyStats

@pytest.fixture
def fed(request):
    profile = ModelProfile(
        model_name="tiny", model_path=None, model_hash="", backend="onnxruntime", backend_version="",
        options={{}}, batch=2, input_shapes={{}}, latency=LatencyStats.from_samples({SAMPLES!r}),
        layers=(), attributed_fraction=1.0, total_flops=123456, total_macs=61728, total_bytes=4096,
    )
    verdict = Verdict(status="pass", mode="stored", metric="latency", current=1.0, tolerance=0.05, ratio=1.01)
    record = ProfileRecord(test=request.node.nodeid, key="k", profile=profile, verdict=verdict)
    return feed_pytest_benchmark(request.config, record)
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


def test_not_fed_unless_the_run_asks_pytest_benchmark_for_something(project: pytest.Pytester) -> None:
    """Installed is not enough: feeding it would print its table in every run of the project."""
    result = project.runpytest("-s", "-p", "no:xdist", "-k", "test_model")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*FED=False*"])


def test_both_plugins_register_their_options(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    assert result.ret == 0
    # each on its own: fnmatch_lines wants its lines in order, and the plugins' option groups come in
    # the order pytest finds their distributions (a site-packages listing: it changes as packages do)
    result.stdout.fnmatch_lines(["*--roofline-*"])
    result.stdout.fnmatch_lines(["*--benchmark-json*"])


def test_the_plugin_feeds_every_profiled_model(
    pytester: pytest.Pytester, monkeypatch, tmp_path: Path
) -> None:
    """No helper call in the test: model_profile's timings reach pytest-benchmark's JSON by themselves."""
    from _plugin_helpers import FAKE, relu_chain

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    relu_chain(pytester.path / "m.onnx", 4)
    pytester.makepyfile(
        test_fed="""
        def test_model(model_profile):
            model_profile("m.onnx", batch_size=2)
        """
    )
    out = tmp_path / "bench.json"
    result = pytester.runpytest("-p", "no:xdist", *FAKE, f"--benchmark-json={out}", "--roofline-budget=1")
    result.assert_outcomes(passed=1)
    (ours,) = json.loads(out.read_text())["benchmarks"]
    assert ours["fullname"] == "test_fed.py::test_model::m-b2"
    assert ours["stats"]["rounds"] == len(ours["stats"]["data"]) > 0
    assert ours["extra_info"]["backend"] == "fake" and ours["extra_info"]["verdict"] == "new"


# --- no empty .benchmarks/ (issue 14) ---------------------------------------------------------------

STORAGE_GUARD = """
import pytest
from pytest_roofline.report.benchmark_bridge import new_benchmark_storage, remove_if_empty

KEY = pytest.StashKey()

def pytest_configure(config):
    config.stash[KEY] = new_benchmark_storage(config)

def pytest_unconfigure(config):
    remove_if_empty(config.stash[KEY])
"""


@pytest.fixture
def guarded(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makeconftest(STORAGE_GUARD)
    pytester.makepyfile(
        test_plain="def test_a():\n    pass\n",
        test_bench="def test_b(benchmark):\n    benchmark(sum, range(20))\n",
    )
    return pytester


def test_a_run_that_benchmarks_nothing_leaves_no_benchmarks_folder(guarded: pytest.Pytester) -> None:
    result = guarded.runpytest("-p", "no:xdist", "test_plain.py")
    result.assert_outcomes(passed=1)
    assert not (guarded.path / ".benchmarks").exists()


def test_saved_benchmarks_and_an_existing_folder_stay(guarded: pytest.Pytester) -> None:
    result = guarded.runpytest("-p", "no:xdist", "--benchmark-autosave", "test_bench.py")
    result.assert_outcomes(passed=1)
    assert list((guarded.path / ".benchmarks").rglob("*.json"))  # pytest-benchmark's save survives
    (guarded.path / "mine").mkdir()
    result = guarded.runpytest("-p", "no:xdist", "--benchmark-storage=file://mine", "test_plain.py")
    result.assert_outcomes(passed=1)
    assert (guarded.path / "mine").is_dir()  # existed before the run: not ours to remove


def test_this_projects_own_runs_leave_no_benchmarks_folder(tmp_path: Path) -> None:
    """The repository's conftest.py (the [test] extra brings pytest-benchmark into every run)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).parent.parent
    (tmp_path / "conftest.py").write_text((root / "conftest.py").read_text())
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    for extra in ([], ["-n", "2"]):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert not (tmp_path / ".benchmarks").exists(), extra
