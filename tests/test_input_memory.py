"""Absurd dims and huge static inputs are refused in one line before anything is allocated (issue 14
item 7): before, ``--dim N=1000000000000`` or a 1e6 x 1e6 input grew to several GB and ended in a
numpy MemoryError traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from _peak_rss import CLI, peak_rss_of
from onnx import TensorProto, helper

from pytest_roofline.errors import OptionError, ShapeError
from pytest_roofline.model import (
    INPUT_LIMIT_ENV,
    MAX_DIM,
    ModelSpec,
    bind_input_shapes,
    check_input_memory,
    input_memory_limit,
    make_inputs,
)

ROOFLINE = [sys.executable, "-c", "from pytest_roofline.cli import entry_point; entry_point()"]


def relu(path: Path, shape: list[int | str], dtype: int = TensorProto.FLOAT) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "relu",
        [helper.make_tensor_value_info("x", dtype, shape)],
        [helper.make_tensor_value_info("y", dtype, shape)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_static_huge_input_is_refused_before_allocating(tmp_path: Path) -> None:
    relu(tmp_path / "static.onnx", [1_000_000, 1_000_000])
    proc = subprocess.run(
        [*ROOFLINE, "profile", "static.onnx", "--no-roofline"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("roofline: error: making the inputs would take 12 TB of memory (largest: 'x' ")
    assert "[1000000x1000000], 4 TB)" in line and f"{INPUT_LIMIT_ENV}=SIZE" in line


def test_absurd_dim_is_a_usage_error(tmp_path: Path) -> None:
    relu(tmp_path / "sym.onnx", ["N", 64])
    proc = subprocess.run(
        [*ROOFLINE, "profile", "sym.onnx", "--no-roofline", "--dim", "N=1000000000000"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].endswith(
        f"argument --dim: dim 'N'=1000000000000 is beyond any real input (at most {MAX_DIM})"
    )


def test_a_large_dim_is_caught_by_the_estimate_with_little_memory(
    tmp_path: Path,
) -> None:
    relu(tmp_path / "sym.onnx", ["N", 4096])
    args = ["profile", "sym.onnx", "--no-roofline", "--dim", f"N={MAX_DIM}"]
    status, out, err, peak = peak_rss_of(CLI, args, tmp_path)
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1 and "making the inputs would take" in err
    assert peak < 1 << 30, f"peak RSS {peak / 2**20:.0f} MiB"  # nothing of the ~100 TB was allocated


def test_plugin_fails_the_test_with_one_line(pytester: pytest.Pytester) -> None:
    relu(pytester.path / "static.onnx", [1_000_000, 1_000_000])
    relu(pytester.path / "dynamic.onnx", ["N", 8])  # an absurd size for a dim the model has
    pytester.makepyfile(
        """
        def test_big(model_profile):
            model_profile("static.onnx")

        def test_absurd_dim(model_profile):
            model_profile("dynamic.onnx", dims={"N": 10**30})
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "roofline: making the inputs would take 12 TB of memory (largest: 'x' *",
            f"roofline: dim N=1000000000000000000000000000000 must be a positive integer up to {MAX_DIM}",
        ]
    )
    assert "MemoryError" not in result.stdout.str() and "Traceback" not in result.stdout.str()


def test_the_estimate_counts_every_input_and_the_largest_temporary(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["x", "f"], ["y"]),
        ],
        "two",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert check_input_memory(model, bind_input_shapes(model)) == 2 * 3 * 4 + 3 * 8 + 8 * 6


@pytest.mark.parametrize(
    ("text", "limit"),
    [("1k", 1000), ("2KiB", 2048), ("1.5G", 1_500_000_000), ("2e9", 2 * 10**9), ("0", None)],
)
def test_the_limit_can_be_set(monkeypatch: pytest.MonkeyPatch, text: str, limit: int | None) -> None:
    monkeypatch.setenv(INPUT_LIMIT_ENV, text)
    assert input_memory_limit() == limit


def test_a_set_limit_applies_and_a_bad_one_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model = onnx.load(relu(tmp_path / "m.onnx", [16, 64]))
    monkeypatch.setenv(INPUT_LIMIT_ENV, "1k")
    with pytest.raises(ShapeError, match=r"at most 1 kB may be allocated \(\$ROOFLINE_MAX_INPUT_BYTES\)"):
        make_inputs(model, bind_input_shapes(model))
    monkeypatch.setenv(INPUT_LIMIT_ENV, "0")
    assert make_inputs(model, bind_input_shapes(model))["x"].shape == (16, 64)
    monkeypatch.setenv(INPUT_LIMIT_ENV, "lots")
    with pytest.raises(OptionError, match="ROOFLINE_MAX_INPUT_BYTES='lots': expected bytes such as 8G"):
        make_inputs(model, bind_input_shapes(model))


def test_default_limit_is_half_the_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INPUT_LIMIT_ENV, raising=False)
    with open("/proc/meminfo") as handle:
        available = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("MemAvailable:"))
    assert input_memory_limit() == pytest.approx(available // 2, rel=0.2)


def test_spec_refuses_absurd_batch_and_dims() -> None:
    with pytest.raises(ShapeError, match="batch must be a positive integer up to"):
        ModelSpec.create("m.onnx", batch=MAX_DIM + 1)
    with pytest.raises(ShapeError, match="dim seq="):
        ModelSpec.create("m.onnx", dims={"seq": 10**30})
    assert ModelSpec.create("m.onnx", batch=MAX_DIM).batch == MAX_DIM
