"""xdist and concurrent pytest processes: baselines merged by the controller, nothing lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _plugin_helpers import FAKE, relu_chain

pytest.importorskip("xdist")

MODULE = """
import pytest

@pytest.mark.parametrize("batch", [1, 2, 3])
def test_model(model_profile, batch):
    model_profile("chain.onnx", batch_size=batch)
"""


@pytest.fixture
def project(pytester, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    relu_chain(pytester.path / "chain.onnx", 3)
    pytester.makepyfile(test_a=MODULE, test_b=MODULE)
    return pytester


def entries(pytester):
    found = {}
    for path in (pytester.path / ".roofline").glob("*.json"):
        found.update(json.loads(path.read_text())["entries"])
    return found


def test_xdist_workers_hand_results_to_the_controller(project):
    result = project.runpytest_subprocess(*FAKE, "-n", "2", "--roofline-report", "r.json")
    result.assert_outcomes(passed=6)
    assert len(entries(project)) == 6
    assert len(json.loads((project.path / "r.json").read_text())["results"]) == 6
    result.stdout.fnmatch_lines(["*test_a.py::test_model[[]1[]]*new*"])
    relu_chain(project.path / "chain.onnx", 5)
    regressed = project.runpytest_subprocess(*FAKE, "-n", "2")
    regressed.assert_outcomes(failed=6)
    regressed.stdout.fnmatch_lines(["*REGRESSION test_*.py::test_model*"])
    project.runpytest_subprocess(*FAKE, "-n", "2", "--roofline-update").assert_outcomes(passed=6)
    assert all(len(e["history"]) == 1 for e in entries(project).values())


def test_two_concurrent_pytest_processes_lose_no_entry(project):
    env = {**os.environ, "PYTHONPATH": ""}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                *FAKE,
                "-q",
                "-p",
                "no:cacheprovider",
                *names,
                "--roofline-update",
            ],
            cwd=project.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        # both processes write test_a.json
        for names in (
            ["test_a.py::test_model[1]", "test_b.py"],
            ["test_a.py::test_model[2]", "test_a.py::test_model[3]"],
        )
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out.decode()
    assert len(entries(project)) == 6


def test_measurements_of_two_workers_never_overlap(project):
    log = project.path / "timing.log"
    # the fake takes the machine's measure lock only when told to, as a wall-clock backend does
    lock = ("--roofline-option", "wall_clock=1")
    result = project.runpytest_subprocess(*FAKE, "-n", "2", "--roofline-option", f"log={log}", *lock)
    result.assert_outcomes(passed=6)
    spans = sorted(
        (float(start), float(end), pid)
        for pid, start, end in (line.split() for line in log.read_text().splitlines())
    )
    assert len({pid for _, _, pid in spans}) == 2  # both workers measured
    for (_, end, pid), (start, _, other) in zip(spans, spans[1:], strict=False):
        if pid != other:
            assert start >= end  # another worker starts only after this one stopped
