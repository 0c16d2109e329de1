"""The gate through pytest (fake backend): conditions, odd baselines, stale entries, hooks, import cost."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from _baselines import make_entry
from _plugin_helpers import FAKE, relu_chain

from pytest_roofline.schema import BASELINE_FILE_SCHEMA

TWO_TESTS = """
def test_model(model_profile):
    model_profile("chain.onnx", batch_size=2)

def test_other(model_profile):
    model_profile("chain.onnx")
"""


@pytest.fixture
def project(pytester, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    relu_chain(pytester.path / "chain.onnx", 3)
    pytester.makepyfile(test_perf=TWO_TESTS)
    return pytester


def entries(pytester) -> dict:
    return json.loads((pytester.path / ".roofline" / "test_perf.json").read_text())["entries"]


def test_a_changed_option_compares_the_stored_figures_and_names_the_change(project):
    project.runpytest(*FAKE).assert_outcomes(passed=2)
    result = project.runpytest(*FAKE, "--roofline-option=unit=2e-4")  # model and probe twice as slow
    result.assert_outcomes(passed=2)
    assert result.ret == 0 and "INCOMPARABLE" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "* test_perf.py::test_model :: chain b2 — latency: *(across a change: unit (unset) → 2e-4)*",
            "  note: compared with the stored figures across a change: unit (unset) → 2e-4",
        ]
    )
    project.runpytest(*FAKE, "--roofline-option=unit=2e-4", "--roofline-update").assert_outcomes(passed=2)
    accepted = project.runpytest(*FAKE, "--roofline-option=unit=2e-4")
    accepted.stdout.fnmatch_lines(["*test_perf.py::test_model*unchanged*"])
    assert "across a change" not in accepted.stdout.str()


def test_a_nan_baseline_cannot_silence_the_gate(project):
    project.runpytest(*FAKE).assert_outcomes(passed=2)
    path = project.path / ".roofline" / "test_perf.json"
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        entry["sessions"] = [-1.0] * len(entry["sessions"])
    path.write_text(json.dumps(data))
    for extra in ([], ["--roofline-strict"]):
        result = project.runpytest(*FAKE, *extra)
        result.assert_outcomes(failed=2)
        result.stdout.fnmatch_lines(
            ["*roofline: baseline file*malformed entry*'sessions'[[]0[]]*--roofline-update*"]
        )
        assert " pass " not in result.stdout.str()


def test_update_of_one_test_keeps_the_others_and_the_malformed_one(project):
    project.runpytest(*FAKE).assert_outcomes(passed=2)
    path = project.path / ".roofline" / "test_perf.json"
    data = json.loads(path.read_text())
    broken = make_entry("test_perf.py::test_gone").to_dict()
    broken["figure"] = "fast"
    data["entries"][broken["key"]] = broken
    path.write_text(json.dumps(data))
    result = project.runpytest(*FAKE, "--roofline-update", "-k", "test_model")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*baseline written*", f"*kept malformed entry*{broken['key']}*"])
    after = entries(project)
    assert set(after) == set(data["entries"])  # three in, three out
    assert after[broken["key"]] == broken


def test_another_backends_or_devices_entries_are_never_stale(project):
    project.runpytest(*FAKE, "--roofline-option=device=gpu-a").assert_outcomes(passed=2)
    project.runpytest(*FAKE, "--roofline-option=device=gpu-b", "-k", "test_model").assert_outcomes(passed=1)
    project.makepyfile(test_perf=TWO_TESTS.split("def test_other")[0])  # test_other is gone
    result = project.runpytest(*FAKE, "--roofline-option=device=gpu-b")
    out = result.stdout.str()
    assert "stale baseline entries" not in out  # gpu-a's test_other is not this run's to judge
    result = project.runpytest(*FAKE, "--roofline-option=device=gpu-a")
    result.stdout.fnmatch_lines(
        ["*1 stale baseline entries*", "*test_perf.py::test_other|chain.onnx|b1|fake|gpu-a"]
    )


def test_inconclusive_says_why_and_what_to_do_in_the_terminal(project):
    project.runpytest(*FAKE, "-k", "test_model").assert_outcomes(passed=1)
    result = project.runpytest(
        *FAKE, "--roofline-option=jitter=0.4", "--roofline-budget=0.5", "-k", "test_model"
    )
    # a different option makes it incomparable; accept the noisy conditions first
    project.runpytest(*FAKE, "--roofline-option=jitter=0.4", "--roofline-update", "-k", "test_model")
    result = project.runpytest(
        *FAKE,
        "--roofline-option=jitter=0.4",
        "--roofline-budget=0.5",
        "--roofline-retime",
        "-k",
        "test_model",
    )
    result.stdout.fnmatch_lines(
        ["INCONCLUSIVE test_perf.py::test_model :: chain b2 — latency: noise*tolerance*--roofline-budget*"]
    )


def test_device_class_hook_keys_the_baselines(project):
    project.makeconftest(
        """
        def pytest_roofline_device_class(fingerprint):
            assert fingerprint["backend"] == "fake"
            return "shared-runners"
        """
    )
    project.runpytest(*FAKE).assert_outcomes(passed=2)
    assert all(key.endswith("|fake|shared-runners") for key in entries(project))


def test_update_results_hook_replaces_the_reported_results(project):
    project.makeconftest(
        """
        import dataclasses

        def pytest_roofline_update_results(config, results):
            return dataclasses.replace(results, project="demo", artifacts={"html": "https://ci/report.html"})
        """
    )
    project.runpytest(*FAKE, "--roofline-report=r.json", "--roofline-report=r.md").assert_outcomes(passed=2)
    data = json.loads((project.path / "r.json").read_text())
    assert data["project"] == "demo" and data["schema_version"] == 3
    assert "https://ci/report.html" in (project.path / "r.md").read_text()


def test_the_plugin_imports_neither_onnx_nor_numpy_until_a_fixture_is_used():
    code = (
        "import sys, pytest_roofline.plugin; "
        "print(sorted(m for m in ('numpy', 'onnx', 'onnxruntime') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_run_that_profiles_nothing_beside_baselines_imports_neither_onnx_nor_numpy(project):
    project.runpytest(*FAKE).assert_outcomes(passed=2)  # the baseline dir exists from here on
    project.makepyfile(
        test_plain="""
        import sys

        def test_plain():
            pass

        def test_zz_last(request):
            request.config.add_cleanup(
                lambda: print("HEAVY", sorted(m for m in ("numpy", "onnx") if m in sys.modules))
            )
        """
    )
    result = project.runpytest_subprocess("-s", "test_plain.py")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["HEAVY []"])


def test_baselines_are_written_at_the_current_schema(project):
    project.runpytest(*FAKE).assert_outcomes(passed=2)
    data = json.loads((project.path / ".roofline" / "test_perf.json").read_text())
    assert data["schema_version"] == BASELINE_FILE_SCHEMA
    entry = next(iter(data["entries"].values()))
    assert entry["conditions"]["settings"] == {} and entry["conditions"]["control"].startswith(
        "control-probe"
    )


def test_a_regression_says_whether_the_graph_changed(project):
    project.runpytest(*FAKE, "-k", "test_model").assert_outcomes(passed=1)
    relu_chain(project.path / "chain.onnx", 5)  # two more Relu nodes: the fake backend's time grows
    result = project.runpytest(
        *FAKE, "-k", "test_model", "--roofline-report=r.json", "--roofline-report=r.html"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*roofline regression*", "*why: graph changed: +1 block*relu*measured +*"])
    item = json.loads((project.path / "r.json").read_text())["results"][0]
    assert item["change"]["diff"]["added"] and item["change"]["explanation"]["graph"] == "changed"
    assert item["verdict"]["explanation"].startswith("graph changed")
    page = (project.path / "r.html").read_text()
    block = item["change"]["diff"]["blocks"][0]["name"]
    assert "<h3>What changed</h3>" in page and f'data-block="{block}"' in page


def test_an_unchanged_graph_that_got_slower_blames_the_runtime_or_the_machine(project):
    project.runpytest(*FAKE, "-k", "test_model").assert_outcomes(passed=1)
    path = project.path / ".roofline" / "test_perf.json"
    data = json.loads(path.read_text())
    for entry in data["entries"].values():  # the baseline says the same model used to be faster
        entry["sessions"] = [x * 0.8 for x in entry["sessions"]]
        entry["figure"] *= 0.8
    path.write_text(json.dumps(data))
    assert (
        "unchanged" in project.runpytest(*FAKE, "-k", "test_model").stdout.str()
    )  # nothing that runs changed
    result = project.runpytest(*FAKE, "-k", "test_model", "--roofline-retime")  # the machine is gated too
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*why: graph unchanged; measured +25*: the runtime or the machine*"])


def test_a_baseline_entry_keeps_a_compact_model_summary(project):
    project.runpytest(*FAKE).assert_outcomes(passed=2)
    entry = next(iter(entries(project).values()))
    assert entry["structure"]["model"] == "chain" and entry["structure"]["total"]["nodes"] == 4
    assert len(json.dumps(entry["structure"])) < 2000  # a summary, not the model
    assert entry["layers"]["relu0"]["nodes"] == ["relu0"] and entry["layers"]["relu0"]["op_type"] == "Relu"


def test_the_first_calibration_shows_progress_then_the_cache_is_spot_checked(project):
    first = project.runpytest(*FAKE, "-k", "test_model")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["roofline: calibrating fake*", "roofline: calibrated in *"])
    again = project.runpytest(*FAKE, "-k", "test_model")
    again.assert_outcomes(passed=1)
    assert "roofline: calibrating" not in again.stdout.str()  # cached, and the spot check agreed


def test_rows_of_one_test_at_other_dims_never_look_alike(pytester, monkeypatch, tmp_path_factory, capsys):
    import onnx
    from onnx import TensorProto, helper

    from pytest_roofline.cli import main

    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "seqmodel",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq"])],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        pytester.path / "s.onnx",
    )
    pytester.makepyfile(
        test_dims="""
        import pytest

        @pytest.mark.parametrize("seq", [8, 16])
        def test_seq(model_profile, seq):
            model_profile("s.onnx", dims={"seq": seq})
        """
    )
    result = pytester.runpytest(*FAKE)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_seq?8?*s b1 seq=8 *new*", "*test_seq?16?*s b1 seq=16 *new*"])
    assert main(["baseline", "show", "--baseline-dir", str(pytester.path / ".roofline")]) == 0
    shown = capsys.readouterr().out
    assert "s.onnx b1 seq=8" in shown and "s.onnx b1 seq=16" in shown


def test_recording_does_not_measure_again_what_the_session_already_measured(project):
    project.makepyfile(
        test_perf="""
        def test_model(model_profile):
            model_profile("chain.onnx")

        def test_same_model_again(model_profile):
            assert model_profile("chain.onnx").latency.median > 0
        """
    )
    project.runpytest(*FAKE, "--roofline-report=r.json").assert_outcomes(passed=2)
    first, second = (r["verdict"] for r in json.loads((project.path / "r.json").read_text())["results"])
    assert first["status"] == second["status"] == "new" and first["reasons"] == []
    assert second["reasons"] == [
        "figures measured earlier in this session (test_perf.py::test_model), not measured again"
    ]
    stored = entries(project)
    assert len(stored) == 2 and len({json.dumps(e["sessions"]) for e in stored.values()}) == 1
    again = project.runpytest(*FAKE, "--roofline-report=r.json")
    again.assert_outcomes(passed=2)
    assert [r["verdict"]["status"] for r in json.loads((project.path / "r.json").read_text())["results"]] == [
        "unchanged",
        "unchanged",
    ]


def test_another_backend_build_compares_stored_figures_naming_it(project):
    project.runpytest(*FAKE, "-k", "test_model").assert_outcomes(passed=1)
    path = project.path / ".roofline" / "test_perf.json"
    data = json.loads(path.read_text())
    for entry in data["entries"].values():  # recorded with an older build of the backend
        entry["identity"]["build"] = "0.9.0"
    path.write_text(json.dumps(data))
    result = project.runpytest(*FAKE, "-k", "test_model", "--roofline-report=r.json")
    result.assert_outcomes(passed=1)
    found = json.loads((project.path / "r.json").read_text())["results"][0]["verdict"]
    assert found["mode"] == "stored" and found["status"] not in ("unchanged", "incomparable")
    assert "(across a change: backend fake 0.9.0 → fake " in found["message"]


def test_update_summary_says_what_was_written_and_markdown_counts_pytest_outcomes(project):
    """Issue 24 items 4-5: after --roofline-update no "accept them with --roofline-update"; the
    Markdown summary counts failed tests (with or without a gate verdict) beside the verdicts."""
    project.makepyfile(
        test_more="""
        def test_asserts(model_profile):
            model_profile("chain.onnx")
            assert False, "the test's own assertion"

        def test_no_model(model_profile):
            model_profile("missing.onnx")
        """
    )
    project.runpytest(*FAKE, "-k", "test_perf")
    update = ("--roofline-option=unit=2e-4", "--roofline-update", "--roofline-report=s.md")
    updated = project.runpytest(*FAKE, *update)
    out = updated.stdout.str()
    assert "accept them with --roofline-update" not in out
    updated.stdout.fnmatch_lines(
        ["ACCEPTED test_perf.py::test_model :: chain b2 — latency: written as the baseline (was *"]
    )
    summary = (project.path / "s.md").read_text()
    assert "accept them with --roofline-update" not in summary
    assert "Baselines accepted (`--roofline-update`)" in summary
    assert "Tests: 2 failed, 2 passed." in summary
    assert "`test_more.py::test_asserts` failed (gate: NEW)" in summary
    assert "`test_more.py::test_no_model` failed (no gate verdict)" in summary


def test_notes_during_the_run_leave_the_progress_line_whole(project):
    """Issue 24 item 8: the first calibration's notes broke `test_perf.py ..` mid-file."""
    result = project.runpytest(*FAKE)
    result.assert_outcomes(passed=2)
    lines = result.stdout.lines
    progress = [i for i, line in enumerate(lines) if line.startswith("test_perf.py ")]
    assert len(progress) == 1, lines
    assert re.match(r"test_perf\.py \.\. +\[100%\]$", lines[progress[0]])
    calibrating = next(i for i, line in enumerate(lines) if line.startswith("roofline: calibrating fake"))
    section = next(i for i, line in enumerate(lines) if re.match(r"-+ roofline -+$", line))
    assert progress[0] < section < calibrating  # shown in the roofline section, after the progress
    assert any(line.startswith("roofline: calibrated in ") for line in lines[calibrating:])
