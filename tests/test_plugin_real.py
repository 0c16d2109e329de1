"""End to end through real onnxruntime on tiny models: profiles, assertions, paired git mode.

Timing verdicts use generous tolerances: this machine is noisy, and gate quality is measured by
benchmarks/gate_quality.py, not here.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from _baselines import scale_stored_latency
from _plugin_helpers import FIXED_BANDWIDTH, busy_neighbour, fixed_calibration, matmul_chain

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
    with busy_neighbour():
        busy = project.runpytest(*ORT, "--roofline-history=hist", "--roofline-report", "r.json")
    busy.assert_outcomes(passed=1)
    verdict = json.loads((project.path / "r.json").read_text())["results"][0]["verdict"]
    assert verdict["status"] == "unchanged", busy.stdout.str()
    assert any("measured while busy" in r for r in verdict["reasons"]), verdict["reasons"]  # it was busy
    assert not any("not recorded as a baseline" in r for r in verdict["reasons"]), verdict["reasons"]
    assert "not recorded as a baseline" not in busy.stdout.str()


def test_a_run_beside_a_busy_process_records_its_baseline_with_the_load(project, monkeypatch):
    """Busy is the normal case: the baseline is recorded, with the load it was measured under kept
    in the entry for later comparisons to widen by."""
    monkeypatch.delenv("ROOFLINE_LOAD_LIMIT")
    project.makepyfile(test_perf='def test_mm(model_profile):\n    model_profile("mm.onnx", batch_size=4)\n')
    with busy_neighbour():
        busy = project.runpytest(*ORT, "--roofline-report", "r.json")
    busy.assert_outcomes(passed=1)
    verdict = json.loads((project.path / "r.json").read_text())["results"][0]["verdict"]
    assert verdict["status"] == "new", busy.stdout.str()
    assert not any("not recorded" in r for r in verdict["reasons"])
    (entry,) = json.loads((project.path / ".roofline" / "test_perf.json").read_text())["entries"].values()
    assert entry["load"]["other"] > 0.1  # a spinning process took a share of the CPUs
    if entry["load"]["other"] > 0.15:
        assert any(r.startswith("recorded under load") for r in verdict["reasons"]), verdict["reasons"]
    # the busy entry is read back and compared; its figures 20x slower (and a 90 % tolerance) so the
    # verdict is decided whatever this machine's load: that a same-model retime against a busy
    # baseline is no false alarm is the stored comparison's width (test_gate_stored, fixed figures)
    # and a rate benchmarks/stored_retime_loop.py measures, not one live draw (+40 % once, round three)
    scale_stored_latency(project.path / ".roofline" / "test_perf.json", 20)
    again = project.runpytest(
        *ORT, "--roofline-retime", "--roofline-tolerance", "90", "--roofline-report", "r2.json"
    )
    again.assert_outcomes(passed=1)
    second = json.loads((project.path / "r2.json").read_text())["results"][0]["verdict"]
    assert second["status"] == "improved" and second["mode"] == "stored", second


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


def test_three_times_the_work_is_a_regression_beside_a_busy_process(project, monkeypatch):
    """Issue 31: a 3x slower model, paired against the baseline's own model beside a process that
    takes a CPU, read +742 % and `inconclusive` (exit 0) while load vetoed verdicts."""
    monkeypatch.delenv("ROOFLINE_LOAD_LIMIT")
    matmul_chain(project.path / "mm.onnx", 2, size=256)
    project.makepyfile(test_perf='def test_mm(model_profile):\n    model_profile("mm.onnx", batch_size=16)\n')
    project.runpytest(*ORT).assert_outcomes(passed=1)
    matmul_chain(project.path / "mm.onnx", 6, size=256)  # three times the work
    with busy_neighbour():
        busy = project.runpytest(*ORT, "--roofline-report", "r.json")
    busy.assert_outcomes(failed=1)
    verdict = json.loads((project.path / "r.json").read_text())["results"][0]["verdict"]
    assert verdict["status"] == "regression" and verdict["mode"] == "paired", verdict
    assert verdict["ratio"] > 1.5


def test_a_pairing_on_shared_cpus_takes_one_thread_per_session():
    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.device.load import MachineLoad
    from pytest_roofline.gate.runner import paired_engine

    default = get_backend("onnxruntime", {})
    busy, quiet = MachineLoad(1.0, 0.5, 0.0, 1.0, 2), MachineLoad(1.0, 0.01, 0.0, 0.1, 2)
    one = paired_engine(default, busy)
    assert one is not None and one.options.get("intra_op_threads") in ("1", 1)
    assert paired_engine(default, quiet) is None and paired_engine(default, None) is None
    # each run timed by its thread's CPU time (issue 31: the wall clock charged it the load's slices)
    assert one.thread_timed and not default.thread_timed
    already = paired_engine(get_backend("onnxruntime", {"intra_op_threads": "1"}), busy)
    assert already is not None and already.thread_timed  # already one thread: only the clock changes


def test_a_one_thread_stored_figure_is_timed_by_its_threads_cpu_time(project):
    """Issue 35's false alarm: a one-thread stored figure read by the wall clock carries the slices
    busy neighbours held the core.  From 0.1 ms a run it is timed by the thread's CPU time (below,
    that clock's own cost is load-dependent: the wall clock), the entry says which, a baseline is
    re-timed by its own clock (an entry written before reads as the wall clock: still compared),
    and --roofline-update records by today's choice."""
    matmul_chain(project.path / "big.onnx", 4, size=256)  # ~0.3-1 ms a run at batch 32
    project.makepyfile(
        test_perf='def test_small(model_profile):\n    model_profile("mm.onnx", batch_size=4)\n\n'
        'def test_big(model_profile):\n    model_profile("big.onnx", batch_size=32)\n'
    )
    project.runpytest(*ORT).assert_outcomes(passed=2)
    path = project.path / ".roofline" / "test_perf.json"

    def clocks() -> dict[str, str]:
        entries = json.loads(path.read_text())["entries"].values()
        return {e["model"]: e["conditions"].get("clock", "(none)") for e in entries}

    assert clocks() == {"mm.onnx": "wall", "big.onnx": "thread"}
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        entry["conditions"].pop("clock")  # as entries written before the clock was kept
    path.write_text(json.dumps(data))
    # the stored figures 20x slower and a 90 % tolerance: compared (not incomparable), the verdict is
    # decided whatever this machine's load (a live 5 us model read +-39 % on a busy CI runner; an
    # improvement is inconclusive while the noise is above the tolerance, however far the ratio)
    scale_stored_latency(path, 20)
    again = project.runpytest(
        *ORT, "--roofline-retime", "--roofline-tolerance", "90", "--roofline-report", "r.json"
    )
    again.assert_outcomes(passed=2)
    for result in json.loads((project.path / "r.json").read_text())["results"]:
        assert result["verdict"]["status"] == "improved", result["verdict"]  # compared, by its clock
    project.runpytest(*ORT, "--roofline-update").assert_outcomes(passed=2)
    assert clocks() == {"mm.onnx": "wall", "big.onnx": "thread"}


def test_update_beside_a_busy_process_writes_every_entry_and_the_cli_writes_the_same(project, monkeypatch):
    """Issue 31: `--roofline-update` under one busy process writes every entry (with the load kept),
    and `roofline baseline update` on that run's results file writes the same entries."""
    from pytest_roofline.cli import main

    monkeypatch.delenv("ROOFLINE_LOAD_LIMIT")
    project.makepyfile(
        test_perf="".join(
            f'def test_b{batch}(model_profile):\n    model_profile("mm.onnx", batch_size={batch})\n\n'
            for batch in (1, 4, 8)
        )
    )
    project.runpytest(*ORT).assert_outcomes(passed=3)  # the first baselines
    path = project.path / ".roofline" / "test_perf.json"
    stored = json.loads(path.read_text())
    for entry in stored["entries"].values():  # a time no rewrite keeps (two runs in one second share one)
        entry["time"] = "2000-01-01T00:00:00+00:00"
    path.write_text(json.dumps(stored))
    first = stored["entries"]
    with busy_neighbour():
        busy = project.runpytest(
            *ORT, "--roofline-retime", "--roofline-update", "--roofline-report", "r.json"
        )
    busy.assert_outcomes(passed=3)
    written = json.loads(path.read_text())["entries"]
    assert sorted(written) == sorted(first) and len(written) == 3
    assert all(written[k]["time"] != first[k]["time"] for k in written), "an entry was not rewritten"
    assert max(e["load"]["other"] for e in written.values()) > 0.1  # the spinner took a share
    path.unlink()
    monkeypatch.chdir(project.path)
    assert main(["baseline", "update", "r.json"]) == 0
    again = json.loads(path.read_text())["entries"]
    assert sorted(again) == sorted(written)
    for key, entry in written.items():
        assert again[key]["sessions"] == entry["sessions"] and again[key]["figure"] == entry["figure"]
        assert again[key]["load"] == entry["load"] and again[key]["conditions"] == entry["conditions"]
