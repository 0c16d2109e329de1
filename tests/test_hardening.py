"""Hostile inputs and settings (issue 25): one line naming what is wrong, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from _plugin_helpers import fixed_calibration, relu_chain
from onnx import TensorProto, helper


def _identity(path: Path, elem_type: int) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", elem_type, [2, 3])],
        [helper.make_tensor_value_info("y", elem_type, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def _roofline(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from pytest_roofline.cli import entry_point; entry_point()", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


ODD_INPUTS = [
    (TensorProto.STRING, "input 'x' is a string tensor, which roofline cannot feed"),
    (TensorProto.FLOAT8E4M3FN, "input 'x' is a float8e4m3fn tensor, which roofline cannot feed"),
    (TensorProto.UNDEFINED, "input 'x' has no element type (UNDEFINED) in the model"),
]


@pytest.mark.parametrize(("elem_type", "line"), ODD_INPUTS)
def test_an_input_roofline_cannot_feed_is_one_line_in_the_cli(
    tmp_path: Path, elem_type: int, line: str
) -> None:
    _identity(tmp_path / "m.onnx", elem_type)
    done = _roofline("profile", "m.onnx", cwd=tmp_path)
    assert done.returncode == 2 and line in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(("elem_type", "line"), ODD_INPUTS)
def test_an_input_roofline_cannot_feed_is_one_line_in_pytest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, elem_type: int, line: str
) -> None:
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(fixed_calibration(tmp_path)))
    _identity(pytester.path / "m.onnx", elem_type)
    pytester.makepyfile(test_m="def test_m(model_profile):\n    model_profile('m.onnx')\n")
    result = pytester.runpytest("--roofline-budget=1")
    result.assert_outcomes(failed=1)
    assert line in result.stdout.str() and "Traceback" not in result.stdout.str()


def test_an_absurd_thread_count_names_the_option(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    line = "onnxruntime option intra_op_threads=99999999999 is out of range (at most 4096)"
    relu_chain(tmp_path / "r.onnx", 2)
    done = _roofline(
        "profile", str(tmp_path / "r.onnx"), "--option", "intra_op_threads=99999999999", cwd=tmp_path
    )
    assert done.returncode == 2 and line in done.stderr and "Traceback" not in done.stderr, done.stderr
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path))
    relu_chain(pytester.path / "r.onnx", 2)
    pytester.makepyfile(test_r="def test_r(model_profile):\n    model_profile('r.onnx')\n")
    result = pytester.runpytest("--roofline-option=intra_op_threads=99999999999")
    assert line in result.stdout.str() + result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("flag", ["--roofline-budget=1e300", "--roofline-timeout=1e300"])
def test_an_absurd_budget_or_timeout_is_a_usage_error(pytester: pytest.Pytester, flag: str) -> None:
    result = pytester.runpytest(flag)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is out of range (at most 604800 s, a week)" in result.stderr.str()


# --- item 10: only regular files, with a size limit ---------------------------------------------


def test_a_device_or_fifo_is_refused_in_one_line_without_reading_it(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "baselines" / "t.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)  # nothing ever writes: a read would hang for good
    for args in (
        ("report", "/dev/zero", "-o", "r.html"),
        ("baseline", "diff", "/dev/zero"),
        ("baseline", "update", "/dev/zero"),
        ("baseline", "prune", "/dev/zero"),
        ("baseline", "show", "--baseline-dir", str(fifo.parent)),
    ):
        done = _roofline(*args, cwd=tmp_path)  # bounded: a hang is a TimeoutExpired
        assert done.returncode != 0 and "Traceback" not in done.stderr, (args, done.stderr)
        assert "not a regular file; roofline reads only regular files" in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_document_over_the_size_limit_says_how_to_raise_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.results import load_results

    big = tmp_path / "results.json"
    big.write_text('{"results": []}' + " " * 4096)
    monkeypatch.setenv("ROOFLINE_MAX_FILE_BYTES", "1KiB")
    with pytest.raises(
        RooflineError,
        match=r"larger than the 1.02 kB roofline reads from one file; raise the limit with ROOFLINE_MAX",
    ):
        load_results(big)
    monkeypatch.setenv("ROOFLINE_MAX_FILE_BYTES", "1M")
    assert load_results(big).records == ()


# --- items 5 and 6: reports never replace a baseline; each written atomically, on its own --------


def _run_with_baseline(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    from _plugin_helpers import FAKE

    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path))
    relu_chain(pytester.path / "m.onnx", 3)
    pytester.makepyfile(test_m="def test_m(model_profile):\n    model_profile('m.onnx')\n")
    pytester.runpytest(*FAKE, "--roofline-update").assert_outcomes(passed=1)
    baseline = pytester.path / ".roofline" / "test_m.json"
    assert baseline.is_file()
    return baseline


def test_a_report_path_naming_a_baseline_is_refused_and_the_other_reports_are_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from _plugin_helpers import FAKE

    baseline = _run_with_baseline(pytester, monkeypatch, tmp_path)
    before = baseline.read_bytes()
    (pytester.path / "adir.html").mkdir()
    (pytester.path / "notes.md").write_text("my own notes\n")
    reports = [".roofline/test_m.json", "adir.html", "notes.md", "ok.md", "ok.json", "ok.csv"]
    result = pytester.runpytest(*FAKE, *(f"--roofline-report={r}" for r in reports))
    out = result.stdout.str() + result.stderr.str()
    assert "report .roofline/test_m.json would replace a baseline file of pytest-roofline" in out
    assert "report adir.html is a directory; name a file" in out
    assert "report notes.md would replace a file that is not a report of pytest-roofline" in out
    assert baseline.read_bytes() == before and (pytester.path / "notes.md").read_text() == "my own notes\n"
    for name in ("ok.md", "ok.json", "ok.csv"):
        assert (pytester.path / name).stat().st_size > 0, name
    assert "Traceback" not in out
    again = pytester.runpytest(*FAKE, "--roofline-report=ok.md", "--roofline-report=ok.json")
    again.assert_outcomes(passed=1)  # a report of this tool is replaced without a word
    assert "would replace" not in again.stdout.str() + again.stderr.str()


def test_documents_carry_their_kind_and_a_results_file_is_never_read_as_a_baseline(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json

    from pytest_roofline.errors import BaselineError, RooflineError
    from pytest_roofline.gate.store import BaselineStore
    from pytest_roofline.results import load_results

    baseline = _run_with_baseline(pytester, monkeypatch, tmp_path)
    document = json.loads(baseline.read_text())
    assert document["kind"] == "baseline" and document["schema_version"] == 2
    calibrations = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert calibrations and all(c["kind"] == "calibration" for c in calibrations)
    results = pytester.path / "r.json"
    from _plugin_helpers import FAKE

    pytester.runpytest(*FAKE, f"--roofline-report={results}")
    assert json.loads(results.read_text())["kind"] == "results"
    with pytest.raises(
        RooflineError, match="it is a baseline document of pytest-roofline, not a results file"
    ):
        load_results(baseline)
    stray = pytester.path / ".roofline" / "test_x.json"
    stray.write_text(results.read_text())  # a results document where a baseline belongs
    with pytest.raises(BaselineError, match="it is a results document of pytest-roofline, not a baseline"):
        BaselineStore(stray.parent).read_file(stray)
    del document["kind"]  # a file written before `kind` still reads
    baseline.write_text(json.dumps(document))
    assert BaselineStore(baseline.parent).read_file(baseline).entries


def test_a_failed_write_leaves_no_partial_file_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from _report_data import results_of, sample_run

    import pytest_roofline.files as files
    from pytest_roofline.report import write_reports

    (tmp_path / "old.html").write_text("<h1>pytest-roofline report</h1> the last run")

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full_disk)
    failed: list[str] = []
    paths = [str(tmp_path / n) for n in ("r.html", "old.html", "r.md")]
    assert write_reports(results_of(sample_run(3)), paths, failed) == []
    assert failed == [f"report {p} cannot be written: No space left on device" for p in paths]
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "r.md").exists()
    assert (tmp_path / "old.html").read_text().endswith("the last run")  # the old report stays whole
    assert [p.name for p in tmp_path.iterdir()] == ["old.html"]  # no temp file left


def test_every_format_writes_through_a_symlinked_report_path(tmp_path: Path) -> None:
    from _report_data import results_of, sample_run

    from pytest_roofline.report import write_reports

    (tmp_path / "real").mkdir()
    names = ["r.html", "r.json", "r.md", "r.csv"]
    for name in names:
        (tmp_path / name).symlink_to(tmp_path / "real" / name)
    assert write_reports(results_of(sample_run(3)), [str(tmp_path / n) for n in names]) == [
        str(tmp_path / n) for n in names
    ]
    for name in names:
        assert (tmp_path / name).is_symlink() and (tmp_path / "real" / name).stat().st_size > 0, name


# --- item 9: the budget bounds the first batch too ------------------------------------------------


def test_the_first_batch_is_cut_to_the_budget_and_the_verdict_says_so() -> None:
    from pytest_roofline.gate.sampling import GateDesign, fit_to_budget, paired_decider, run_gate

    unchanged, note = fit_to_budget(GateDesign(budget=10, run_estimate=1e-4))
    assert unchanged == GateDesign(budget=10, run_estimate=1e-4) and note is None
    cut, note = fit_to_budget(GateDesign(budget=1, run_estimate=0.17))  # the 0.17 s model
    assert (cut.sessions, cut.rounds, cut.warmup) == (2, 1, 0)
    assert cut.sessions * (cut.rounds + cut.warmup) * 2 * 0.17 <= 1
    assert note is not None and "the 1 s budget allowed 2 sessions x 1 rounds" in note
    assert "fewer samples than the decision needs (4 x 10); raise --roofline-budget" in note
    middle, _ = fit_to_budget(GateDesign(budget=3, run_estimate=0.1))  # rounds go first, then sessions
    assert (middle.sessions, middle.rounds, middle.warmup) == (3, 3, 1)
    calls = []

    def sampler(openers, *, sessions, rounds, iterations, warmup):
        calls.append((sessions, rounds, warmup))
        return [[[0.17] * rounds] * sessions, [[0.17] * rounds] * sessions]

    run = run_gate(
        [None, None], paired_decider(0.05), GateDesign(budget=1, run_estimate=0.17), sampler=sampler
    )
    assert calls[0] == (2, 1, 0) and note in run.verdict.reasons


def test_a_slow_model_under_a_small_budget_is_measured_within_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json

    from _plugin_helpers import FAKE

    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path))
    relu_chain(pytester.path / "m.onnx", 3)  # 5 nodes x 0.05 s: a 0.25 s model
    pytester.makepyfile(test_m="def test_m(model_profile):\n    model_profile('m.onnx')\n")
    result = pytester.runpytest(
        *FAKE, "--roofline-option=unit=0.05", "--roofline-budget=1", "--roofline-report=r.json"
    )
    result.assert_outcomes(passed=1)
    reasons = json.loads((pytester.path / "r.json").read_text())["results"][0]["verdict"]["reasons"]
    assert any("the 1 s budget allowed 2 sessions x 1 rounds" in r for r in reasons), reasons
