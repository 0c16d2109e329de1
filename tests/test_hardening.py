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
