"""Plugin logic through pytester with the deterministic fake backend (no real timing)."""

from __future__ import annotations

import itertools
import json

import pytest
from _plugin_helpers import FAKE, fails_with, relu_chain

from pytest_roofline.backends import fake
from pytest_roofline.gate.sampling import GateDesign
from pytest_roofline.schema import BASELINE_FILE_SCHEMA

TEST_FILE = """
def test_model(model_profile):
    prof = model_profile("chain.onnx", batch_size=2)
    assert prof.latency.median > 0
"""


@pytest.fixture
def project(pytester, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    relu_chain(pytester.path / "chain.onnx", 3)
    pytester.makepyfile(test_perf=TEST_FILE)
    return pytester


def baseline(pytester):
    return json.loads((pytester.path / ".roofline" / "test_perf.json").read_text())


def test_first_run_writes_new_baseline_then_passes(project):
    result = project.runpytest(*FAKE)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*roofline*", "*test_perf.py::test_model*chain*2*new*", "*baseline written*"]
    )
    entries = baseline(project)["entries"]
    (key,) = entries
    assert key == "test_perf.py::test_model|chain.onnx|b2|fake|fake-device"
    entry = entries[key]
    assert entry["control"]["name"].startswith("control-probe")
    assert len(entry["sessions"]) >= GateDesign().sessions and entry["figure"] > 0  # a batch of sessions
    assert entry["layers"]["relu0"]["time"] > 0
    second = project.runpytest(*FAKE)
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["*test_perf.py::test_model*unchanged*", "*nothing that runs changed*"])
    timed = project.runpytest(*FAKE, "--roofline-retime")  # the stored figures compared
    timed.assert_outcomes(passed=1)
    timed.stdout.fnmatch_lines(["*test_perf.py::test_model*pass*x1.000*"])


def test_slower_model_fails_in_the_call_phase_with_a_table(project):
    project.runpytest(*FAKE).assert_outcomes(passed=1)
    relu_chain(project.path / "chain.onnx", 5)
    result = project.runpytest(*FAKE, "--roofline-report", "out.json")
    result.assert_outcomes(failed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*roofline regression: chain (batch 2) latency: time vs reference +50% exceeds the 5% tolerance*",
            "*metric*baseline*current*ratio*95% CI*noise*tolerance*",
            "*raw seconds*",
            "FAILED test_perf.py::test_model - Failed: roofline regression*",
        ]
    )
    assert "teardown" not in result.stdout.str()
    data = json.loads((project.path / "out.json").read_text())
    (item,) = data["results"]
    assert item["verdict"]["status"] == "regression"
    assert item["verdict"]["ratio"] == pytest.approx(1.5)
    assert item["verdict"]["mode"] == "paired"  # the baseline's model came from the model store
    assert item["outcome"] == "failed"
    assert len(item["history"]) == 1
    # not rewritten without --roofline-update
    assert len(baseline(project)["entries"][item["key"]]["history"]) == 0


def test_update_accepts_and_keeps_history(project):
    project.runpytest(*FAKE).assert_outcomes(passed=1)
    relu_chain(project.path / "chain.onnx", 5)
    project.runpytest(*FAKE, "--roofline-update").assert_outcomes(passed=1)
    (entry,) = baseline(project)["entries"].values()
    assert len(entry["history"]) == 1
    project.runpytest(*FAKE).assert_outcomes(passed=1)


def test_tolerance_option_and_marker(project):
    project.runpytest(*FAKE).assert_outcomes(passed=1)
    relu_chain(project.path / "chain.onnx", 5)
    project.runpytest(*FAKE, "--roofline-tolerance", "60").assert_outcomes(passed=1)
    project.makepyfile(
        test_perf="""
        import pytest

        @pytest.mark.roofline(tolerance=70)
        def test_model(model_profile):
            model_profile("chain.onnx", batch_size=2)
    """
    )
    project.runpytest(*FAKE).assert_outcomes(passed=1)


def test_ini_keys_and_command_line_wins(project):
    project.makeini("""
        [pytest]
        roofline_backend = fake
        roofline_tolerance = 60
        roofline_baseline_dir = perf-baselines
    """)
    project.runpytest("-p", "pytest_roofline.backends.fake").assert_outcomes(passed=1)
    assert (project.path / "perf-baselines" / "test_perf.json").exists()
    relu_chain(project.path / "chain.onnx", 5)
    project.runpytest("-p", "pytest_roofline.backends.fake").assert_outcomes(passed=1)
    project.runpytest("-p", "pytest_roofline.backends.fake", "--roofline-tolerance", "5").assert_outcomes(
        failed=1
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--roofline-tolerance", "five"), "*--roofline-tolerance*expected a percentage*"),
        (("--roofline-tolerance", "-3"), "*--roofline-tolerance*between 0 and 100*"),
        (("--roofline-budget", "0"), "*--roofline-budget*positive*"),
        (("--roofline-option", "novalue"), "*--roofline-option*KEY=VALUE*"),
    ],
)
def test_bad_option_values_are_usage_errors(project, args, words):
    result = project.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([words])


def test_bad_ini_value_is_a_usage_error(project):
    project.makeini("[pytest]\nroofline_tolerance = lots\n")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*roofline_tolerance*expected a percentage*"])


def test_disabled_plugin_leaves_no_trace(project):
    project.makepyfile(test_perf="def test_plain():\n    assert True\n")
    result = project.runpytest_subprocess("-p", "no:roofline", "--help")
    assert "--roofline-backend" not in result.stdout.str()
    result = project.runpytest_subprocess("-p", "no:roofline")
    result.assert_outcomes(passed=1)
    assert "roofline" not in result.stdout.str()
    assert not (project.path / ".roofline").exists()


def test_marker_is_registered(project):
    result = project.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.roofline(tolerance=*metrics=*budget=*"])
    project.makepyfile(
        test_perf="""
        import pytest

        @pytest.mark.roofline(tolerance=5)
        def test_x():
            pass
    """
    )
    project.runpytest("--strict-markers").assert_outcomes(passed=1)


def test_unavailable_backend_skips_with_reason(project):
    result = project.runpytest(*FAKE[:2], "--roofline-backend", "fake-missing", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*backend 'fake-missing' is not installed*pip install*"])


def test_backend_error_is_a_clear_failure(project):
    result = fails_with(
        project,
        [*FAKE, "--roofline-option", "fail=1"],
        "*roofline: fake backend cannot open *: fail option set*",
    )
    assert "Traceback" not in result.stdout.str()


def test_unknown_backend_option_fails_clearly(project):
    fails_with(project, [*FAKE, "--roofline-option", "bogus=1"], "*backend 'fake' has no option 'bogus'*")


def test_missing_model_fails_with_path(project):
    project.makepyfile(
        test_perf="""
        def test_model(model_profile):
            model_profile("nope.onnx")
    """
    )
    fails_with(project, [*FAKE], "*roofline: *nope.onnx: no such file*")


def test_missing_model_names_both_places_looked(project):
    """A relative path is looked for beside the test file, then at the rootdir: the error names both."""
    (project.path / "sub").mkdir()
    (project.path / "sub" / "test_sub.py").write_text(
        "def test_model(model_profile):\n    model_profile('nope.onnx')\n"
    )
    result = project.runpytest(*FAKE, "sub")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"roofline: nope.onnx: no such file in {project.path / 'sub'} or {project.path}; *"]
    )


def test_relative_path_resolves_against_test_dir_then_rootdir(project):
    relu_chain(project.path / "sub" / "local.onnx", 2)
    (project.path / "sub").joinpath("test_sub.py").write_text(
        "def test_local(model_profile):\n"
        "    assert model_profile('local.onnx').model_name == 'local'\n"
        "    assert model_profile('chain.onnx').model_name == 'chain'\n"
    )
    project.runpytest(*FAKE, "sub").assert_outcomes(passed=1)
    data = json.loads((project.path / ".roofline" / "sub" / "test_sub.json").read_text())
    assert sorted(e["model"] for e in data["entries"].values()) == ["chain.onnx", "sub/local.onnx"]


@pytest.mark.parametrize(
    ("content", "words"), [("{oops", "corrupt"), ('{"schema_version": 7}', "schema_version 7")]
)
def test_corrupt_or_future_baseline_fails_naming_file(project, content, words):
    path = project.path / ".roofline" / "test_perf.json"
    path.parent.mkdir()
    path.write_text(content)
    fails_with(project, [*FAKE], f"*baseline file {path}*{words}*")
    assert path.read_text() == content
    result = project.runpytest(*FAKE, "--roofline-update")
    result.assert_outcomes(passed=1)
    if "schema_version" in content:  # written by a newer pytest-roofline: never downgraded
        assert result.ret == 1 and path.read_text() == content
        result.stdout.fnmatch_lines(["*roofline error: baselines not written*upgrade pytest-roofline*"])
        return
    assert json.loads(path.read_text())["schema_version"] == BASELINE_FILE_SCHEMA
    assert path.with_name("test_perf.json.corrupt").read_text() == content  # nothing lost


def test_strict_fails_without_baseline(project):
    result = project.runpytest(*FAKE, "--roofline-strict")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*no baseline for test_perf.py::test_model*--roofline-strict*--roofline-update*"]
    )


def test_strict_without_baseline_fails_before_measuring(project):
    """It measured (80 s on a real model) before failing on what it knew at the start: now nothing
    is timed, no record made, no first baseline written."""
    result = project.runpytest(*FAKE, "--roofline-strict", "--roofline-report=r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*roofline: no baseline for test_perf.py::test_model*[--roofline-strict]*"])
    assert json.loads((project.path / "r.json").read_text())["results"] == []
    assert not (project.path / ".roofline").exists()
    project.runpytest(*FAKE).assert_outcomes(passed=1)  # a run without strict records the baseline
    project.runpytest(*FAKE, "--roofline-strict").assert_outcomes(passed=1)


def test_noisy_gate_is_inconclusive_and_fails_only_under_strict(project, monkeypatch):
    # 40 % noise per session.  Each run samples exactly one batch (a budget spent by the first) from
    # seeds of its own, so the verdicts do not hang on how fast this machine is right now, nor on
    # the seeds whatever ran before in this process consumed
    seeds = iter(range(0, 3000, 1000))
    noisy = (*FAKE, "--roofline-option", "jitter=0.4", "--roofline-budget", "0.001", "--roofline-retime")

    def for_run() -> None:
        monkeypatch.setattr(fake, "_SESSION_SEED", itertools.count(next(seeds)))

    for_run()
    project.runpytest(*noisy).assert_outcomes(passed=1)
    for_run()
    result = project.runpytest(*noisy)
    assert result.parseoutcomes().get("passed") == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_perf.py::test_model*inconclusive*"])
    for_run()
    fails_with(project, [*noisy, "--roofline-strict"], "*roofline inconclusive*noise*[--roofline-strict]*")


def test_stale_entries_listed_not_removed(project):
    project.makepyfile(
        test_perf=TEST_FILE + "\n\ndef test_other(model_profile):\n    model_profile('chain.onnx')\n"
    )
    project.runpytest(*FAKE).assert_outcomes(passed=2)
    project.makepyfile(test_perf=TEST_FILE)
    result = project.runpytest(*FAKE, "--roofline-update")
    result.stdout.fnmatch_lines(
        ["*1 stale baseline entries*roofline baseline prune*", "*test_perf.py::test_other|chain.onnx|b1*"]
    )
    assert len(baseline(project)["entries"]) == 2
    # a deselected test is not stale
    project.makepyfile(
        test_perf=TEST_FILE + "\n\ndef test_other(model_profile):\n    model_profile('chain.onnx')\n"
    )
    result = project.runpytest(*FAKE, "-k", "test_model")
    assert "stale baseline entries" not in result.stdout.str()
    # nor is one left out by naming another by node id (only that one is collected)
    result = project.runpytest(*FAKE, "test_perf.py::test_model")
    result.assert_outcomes(passed=1)
    assert "stale baseline entries" not in result.stdout.str(), result.stdout.str()
    # a module named whole still lists a test gone from it
    project.makepyfile(test_perf=TEST_FILE)
    result = project.runpytest(*FAKE, "test_perf.py")
    result.stdout.fnmatch_lines(["*1 stale baseline entries*"])


def test_layer_metric_gates_a_layer(project):
    project.makepyfile(
        test_perf="""
        import pytest

        @pytest.mark.roofline(metrics=["latency", "layer:relu0"], tolerance=60)
        def test_model(model_profile):
            model_profile("chain.onnx", batch_size=2)
    """
    )
    project.runpytest(*FAKE, "--roofline-option", "unit=1e-4").assert_outcomes(passed=1)
    result = project.runpytest(*FAKE, "--roofline-option", "unit=2e-4")
    # every node doubles: the probe doubles too so the normalized latency holds, and so does relu0
    result.assert_outcomes(passed=1)


def test_bad_marker_argument_fails_clearly(project):
    project.makepyfile(
        test_perf="""
        import pytest

        @pytest.mark.roofline(tolerence=5)
        def test_model(model_profile):
            model_profile("chain.onnx")
    """
    )
    fails_with(project, [*FAKE], "*roofline marker has no argument 'tolerence'*")


def test_disable_mode_is_analysis_only(project):
    result = project.runpytest(*FAKE, "--roofline-disable", "--roofline-report", "r.json")
    result.assert_outcomes(passed=0, failed=1)  # the test asserts a latency, which is not measured
    data = json.loads((project.path / "r.json").read_text())
    assert data["results"][0]["verdict"]["status"] == "not-compared"
    assert data["results"][0]["profile"]["extra"]["analysis_only"] is True
    assert not (project.path / ".roofline").exists()


def test_results_json_follows_schema(project):
    project.runpytest(*FAKE, "--roofline-report", "r.json").assert_outcomes(passed=1)
    data = json.loads((project.path / "r.json").read_text())
    for key in (
        "schema_version",
        "tool",
        "version",
        "created",
        "commit",
        "branch",
        "dirty",
        "backend",
        "roofline",
        "results",
        "stale",
    ):
        assert key in data
    item = data["results"][0]
    assert set(item) >= {"test", "key", "profile", "verdict", "history", "outcome"}
    assert set(item["verdict"]) >= {
        "status",
        "mode",
        "metric",
        "baseline",
        "current",
        "ratio",
        "ci",
        "noise",
        "tolerance",
        "message",
        "raw",
        "layers",
    }
    assert item["outcome"] == "passed"


def test_unknown_report_extension_is_reported(project):
    result = project.runpytest(*FAKE, "--roofline-report", "r.xyz")
    result.stdout.fnmatch_lines(["*roofline error: report r.xyz: unknown format*"])


def test_spans_are_reported_beside_the_model(project):
    project.makepyfile(
        test_perf="""
        def test_model(model_profile, roofline_span):
            prof = model_profile("chain.onnx")
            for _ in range(3):
                with roofline_span("preprocess"):
                    sum(range(1000))
    """
    )
    result = project.runpytest(*FAKE, "--roofline-report", "r.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*span preprocess: median * (n=3) beside model*"])
    spans = json.loads((project.path / "r.json").read_text())["results"][0]["profile"]["spans"]
    assert spans["preprocess"]["n"] == 3


def test_junit_properties_and_other_report_formats(project):
    result = project.runpytest(
        *FAKE, "--junitxml", "j.xml", "--roofline-report", "r.md", "--roofline-report", "r.csv"
    )
    result.assert_outcomes(passed=1)
    xml = (project.path / "j.xml").read_text()
    assert 'name="roofline_verdict" value="new"' in xml
    assert (project.path / "r.md").read_text().strip()
    assert (project.path / "r.csv").read_text().strip()
    result.stdout.fnmatch_lines(["*report written: r.md*", "*report written: r.csv*"])


def test_ini_option_lines_reach_the_backend(project):
    project.makeini("""
        [pytest]
        roofline_backend = fake
        roofline_option =
            unit=2e-4
            device=ci-runner
    """)
    project.runpytest("-p", "pytest_roofline.backends.fake").assert_outcomes(passed=1)
    (entry,) = baseline(project)["entries"].values()
    assert entry["device_class"] == "ci-runner"
    assert entry["latency"]["median"] == pytest.approx(2e-4 * 4)


def test_spans_recorded_before_profiling_are_on_the_returned_profile(project):
    project.makepyfile(
        test_perf="""
        def test_model(model_profile, roofline_span):
            for _ in range(4):
                with roofline_span("decode"):
                    sum(range(1000))
            prof = model_profile("chain.onnx")
            assert prof.spans["decode"].n == 4
            with roofline_span("encode"):
                pass
    """
    )
    result = project.runpytest(*FAKE, "--roofline-report", "r.json")
    result.assert_outcomes(passed=1)
    spans = json.loads((project.path / "r.json").read_text())["results"][0]["profile"]["spans"]
    assert spans["decode"]["n"] == 4 and spans["encode"]["n"] == 1


def test_backend_scoped_options_apply_only_to_their_backend():
    from pytest_roofline.pytest.options import backend_options

    options = {"unit": "2", "onnxruntime:intra_op_threads": "1", "fake:jitter": "0"}
    assert backend_options(options, "fake") == {"unit": "2", "jitter": "0"}
    assert backend_options(options, "onnxruntime") == {"unit": "2", "intra_op_threads": "1"}


def test_an_ini_scoped_to_another_backend_does_not_break_this_one(project):
    project.makeini("[pytest]\nroofline_option =\n    onnxruntime:intra_op_threads=1\n")
    project.makepyfile(test_perf="def test_model(model_profile):\n    model_profile('chain.onnx')\n")
    project.runpytest(*FAKE).assert_outcomes(passed=1)


def test_a_fake_backend_run_neither_waits_for_nor_holds_the_machines_measure_lock(
    project, monkeypatch, tmp_path
):
    """The fake backend's times are synthetic: a real measurement of another process holding the
    machine-wide measure lock does not hold it up (before: it waited up to an hour for every real
    measurement on the machine, which timed out the fault tests' pytest runs on a shared host)."""
    from pytest_roofline.files import file_lock
    from pytest_roofline.gate import runner

    monkeypatch.setattr(runner, "MEASURE_LOCK", tmp_path / "measure.lock")
    monkeypatch.setattr(runner, "MEASURE_LOCK_WAIT", 2.0)
    with file_lock(runner.MEASURE_LOCK, 5.0):  # as another process's real measurement holds it
        result = project.runpytest(*FAKE)
    result.assert_outcomes(passed=1)
    assert "measured without the machine's measure lock" not in result.stdout.str()
