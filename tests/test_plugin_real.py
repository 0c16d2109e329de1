"""End to end through real onnxruntime on tiny models: profiles, assertions, paired git mode.

Timing verdicts use generous tolerances: this machine is noisy, and gate quality is measured by
benchmarks/gate_quality.py, not here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from _plugin_helpers import FIXED_BANDWIDTH, fixed_calibration, matmul_chain

ORT = ("--roofline-backend", "onnxruntime", "--roofline-option", "intra_op_threads=1")


@pytest.fixture(scope="module")
def calibration_cache(tmp_path_factory):
    """A calibration cache holding a fixed roofline (calibrating for real takes ~15 s)."""
    return fixed_calibration(tmp_path_factory.mktemp("calibration"), {"intra_op_threads": "1"})


@pytest.fixture
def project(pytester, monkeypatch, calibration_cache):
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(calibration_cache))
    # these tests judge the gate's logic on real timings; its load awareness has tests of its own
    # (test_gate_control_probe.py), and a busy neighbour (an xdist worker) must not turn them inconclusive
    monkeypatch.setenv("ROOFLINE_LOAD_LIMIT", "off")
    matmul_chain(pytester.path / "mm.onnx", 3)
    return pytester


def test_profile_gate_and_report_end_to_end(project):
    project.makepyfile(
        test_perf="""
        def test_mm(model_profile, device_roofline):
            prof = model_profile("mm.onnx", batch_size=4)
            assert prof.backend == "onnxruntime"
            assert prof.roofline == device_roofline
            assert prof.latency.median > 0
            assert prof.layer("matmul0").flops == 2 * 4 * 64 * 64
            assert prof.layer("matmul0").roofline_fraction is not None
    """
    )
    first = project.runpytest(*ORT, "--roofline-report", "r.json")
    first.assert_outcomes(passed=1)
    data = json.loads((project.path / "r.json").read_text())
    assert data["roofline"]["peak_bandwidth"] == FIXED_BANDWIDTH
    assert data["results"][0]["verdict"]["status"] == "new"
    assert data["results"][0]["profile"]["extra"]["gate"]["figures"]
    second = project.runpytest(*ORT, "--roofline-tolerance", "60")
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["*test_perf.py::test_mm*mm*4*s*%*"])


def test_an_unchanged_verdict_on_a_busy_machine_says_nothing_of_recording(project, monkeypatch):
    """Timed for the history while busy, an unchanged model printed "not recorded as a baseline",
    though an unchanged verdict never records one."""
    project.makepyfile(test_perf='def test_mm(model_profile):\n    model_profile("mm.onnx", batch_size=4)\n')
    project.runpytest(*ORT).assert_outcomes(passed=1)  # the baseline (load check off)
    monkeypatch.setenv("ROOFLINE_LOAD_LIMIT", "0.0001")  # the spinner alone makes the run busy
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        busy = project.runpytest(*ORT, "--roofline-history=hist", "--roofline-report", "r.json")
    finally:
        spinner.kill()
        spinner.wait()
    busy.assert_outcomes(passed=1)
    verdict = json.loads((project.path / "r.json").read_text())["results"][0]["verdict"]
    assert verdict["status"] == "unchanged", busy.stdout.str()
    assert any("measured while busy" in r for r in verdict["reasons"]), verdict["reasons"]  # it was busy
    assert not any("not recorded as a baseline" in r for r in verdict["reasons"]), verdict["reasons"]
    assert "not recorded as a baseline" not in busy.stdout.str()


def test_a_run_beside_a_busy_process_records_no_baseline(project, monkeypatch):
    """A figure measured while another process took a CPU would mislead every later run."""
    monkeypatch.delenv("ROOFLINE_LOAD_LIMIT")
    project.makepyfile(test_perf='def test_mm(model_profile):\n    model_profile("mm.onnx", batch_size=4)\n')
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        busy = project.runpytest(*ORT, "--roofline-report", "r.json")
    finally:
        spinner.kill()
        spinner.wait()
    busy.assert_outcomes(passed=1)
    verdict = json.loads((project.path / "r.json").read_text())["results"][0]["verdict"]
    assert verdict["status"] == "new" and "a quiet run records one" in verdict["message"], busy.stdout.str()
    assert any(r.startswith("not recorded as a baseline: the machine was busy") for r in verdict["reasons"])
    assert any("ROOFLINE_LOAD_LIMIT=off lifts the check" in r for r in verdict["reasons"])
    busy.stdout.fnmatch_lines(["*not recorded as a baseline: the machine was busy*"])
    assert not (project.path / ".roofline").exists()
    monkeypatch.setenv("ROOFLINE_LOAD_LIMIT", "off")  # the knob the message names
    quiet = project.runpytest(*ORT)
    quiet.assert_outcomes(passed=1)
    assert (project.path / ".roofline" / "test_perf.json").exists(), quiet.stdout.str()


def test_assertion_failures_explain_themselves(project):
    project.makepyfile(
        test_perf="""
        from pytest_roofline.assertions import assert_efficiency, assert_fraction, assert_latency

        def test_plain(model_profile):
            prof = model_profile("mm.onnx")
            assert prof.layer("matmul0").roofline_fraction > 1e9

        def test_fraction(model_profile):
            assert_fraction(model_profile("mm.onnx"), "matmul0", above=1e9)

        def test_latency(model_profile):
            assert_latency(model_profile("mm.onnx"), below=1e-12, stat="p90")

        def test_efficiency(model_profile):
            assert_efficiency(model_profile("mm.onnx"), above=1e9)
    """
    )
    result = project.runpytest(*ORT)
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(
        [
            "*where * = Layer('matmul0', MatMul, time=* ms, roofline_fraction=*, bound=*).roofline_fraction",
            "*ModelProfile('mm', batch=1, backend=onnxruntime, median=* ms*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*layer 'matmul0' of mm (batch 1, onnxruntime) reaches *% of its roof, not above 100000000000.0%*"
            f"attainable*roofs: *FLOP/s compute, {FIXED_BANDWIDTH / 1e9:.1f} GB/s memory*",
        ]
    )
    result.stdout.fnmatch_lines(["*latency p90 of mm (batch 1, onnxruntime) is * not below 0.0 us*"])
    result.stdout.fnmatch_lines(
        ["*efficiency of mm (batch 1, onnxruntime) is *% of the roofline*most headroom*"]
    )


def test_check_outputs_against_another_backend(project):
    pytest.importorskip("openvino")
    project.makepyfile(
        test_perf="""
        def test_mm(model_profile):
            model_profile("mm.onnx", batch_size=2, check_outputs="openvino")
    """
    )
    project.runpytest(*ORT, "--roofline-tolerance", "60").assert_outcomes(passed=1)


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_paired_mode_against_a_git_ref(project):
    _git(project.path, "init", "-q")
    _git(project.path, "-c", "user.email=t@t", "-c", "user.name=t", "add", "mm.onnx")
    _git(project.path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "model")
    project.makepyfile(
        test_perf="""
        def test_mm(model_profile):
            model_profile("mm.onnx", batch_size=8)
    """
    )
    same = project.runpytest(*ORT, "--roofline-compare-ref", "HEAD", "--roofline-tolerance", "25")
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["*test_perf.py::test_mm*"])
    assert "REGRESSION" not in same.stdout.str()
    matmul_chain(project.path / "mm.onnx", 24)
    slower = project.runpytest(*ORT, "--roofline-compare-ref", "HEAD", "--roofline-tolerance", "25")
    slower.assert_outcomes(failed=1)
    slower.stdout.fnmatch_lines(
        ["*roofline regression: mm (batch 8) latency: time vs reference +*", "*1 (reference)*"]
    )
    assert not (project.path / ".roofline").exists()
