"""Cross-backend output check: real onnxruntime vs OpenVINO, and mismatches that must fail clearly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pytest_roofline.check import check_outputs, compare_arrays
from pytest_roofline.cli import main
from pytest_roofline.errors import OptionError, ShapeError

pytest.importorskip("openvino")

from pytest_roofline.backends.openvino import OpenVinoSession  # noqa: E402


def two_input_model() -> onnx.ModelProto:
    """y = softmax(a @ W + b_in) and z = tanh(a) * 2: two inputs, two outputs, symbolic batch."""
    rng = np.random.default_rng(3)
    weight = numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "W")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("MatMul", ["a", "W"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b_in"], ["s"], name="add"),
        helper.make_node("Softmax", ["s"], ["y"], name="softmax", axis=-1),
        helper.make_node("Tanh", ["a"], ["t"], name="tanh"),
        helper.make_node("Mul", ["t", "two"], ["z"], name="scale"),
    ]
    graph = helper.make_graph(
        nodes,
        "two_in",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 8]),
            helper.make_tensor_value_info("b_in", TensorProto.FLOAT, ["N", 6]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 8]),
        ],
        [weight, two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    path = tmp_path / "two_in.onnx"
    onnx.save(two_input_model(), path)
    return path


def test_onnxruntime_and_openvino_agree(model_path: Path) -> None:
    result = check_outputs(model_path, batch=4)
    assert result.passed and result.backends == ("onnxruntime", "openvino")
    assert [(c.reference, c.candidate, c.output) for c in result.comparisons] == [
        ("onnxruntime", "openvino", "y"),
        ("onnxruntime", "openvino", "z"),
    ]
    for comparison in result.comparisons:
        assert comparison.mismatched == 0 and comparison.max_abs_error < 1e-4
    assert result.comparisons[0].elements == 4 * 6
    data = result.to_dict()
    assert data["passed"] is True and data["reference"] == "onnxruntime"


def test_inputs_from_npz_bind_the_batch(model_path: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    inputs = tmp_path / "in.npz"
    np.savez(
        inputs,
        a=rng.standard_normal((3, 8)).astype(np.float32),
        b_in=rng.standard_normal((3, 6)).astype(np.float32),
    )
    result = check_outputs(model_path, inputs=inputs)
    assert result.passed and result.comparisons[1].elements == 3 * 8


def test_a_perturbed_backend_fails_with_its_errors(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = OpenVinoSession.outputs

    def perturbed(self: OpenVinoSession) -> dict[str, np.ndarray]:
        out = real(self)
        out["z"] = out["z"] + np.float32(0.01)
        return out

    monkeypatch.setattr(OpenVinoSession, "outputs", perturbed)
    result = check_outputs(model_path, batch=2)
    assert not result.passed
    (failure,) = result.failures
    assert failure.output == "z" and failure.mismatched == failure.elements == 16
    assert failure.max_abs_error == pytest.approx(0.01, rel=1e-3)
    assert "output 'z': openvino vs onnxruntime: max abs error 0.01" in failure.describe()


def test_shape_and_missing_outputs_fail(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = OpenVinoSession.outputs
    monkeypatch.setattr(OpenVinoSession, "outputs", lambda self: {"y": real(self)["y"][:1]})
    result = check_outputs(model_path, batch=2)
    problems = {c.output: c.problem for c in result.failures}
    assert "shape [1, 6] differs from the reference's [2, 6]" in problems["y"]
    assert problems["z"] == "openvino returned no output 'z'"
    assert json.dumps(result.to_dict(), allow_nan=False)  # infinite errors serialize as null


def test_compare_arrays_nan_and_tolerances() -> None:
    ref = np.array([1.0, np.nan, 0.0, 100.0], np.float32)
    assert compare_arrays(ref, ref.copy(), 1e-3, 1e-4) == (0.0, 0.0, 0, "")
    abs_err, rel_err, mismatched, _ = compare_arrays(ref, np.array([1.0, 0.0, 0.0, 100.05]), 1e-3, 1e-4)
    assert mismatched == 1 and abs_err == np.inf  # NaN on one side only
    assert compare_arrays(ref[[0, 2, 3]], np.array([1.0, 0.0, 100.05]), 1e-3, 1e-4)[2] == 0  # within rtol
    assert compare_arrays(np.array([1, 2]), np.array([1, 3]), 0, 0)[:3] == (1.0, 0.5, 1)


def test_bad_requests(model_path: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="two or more"):
        check_outputs(model_path, ["onnxruntime"], batch=1)
    with pytest.raises(OptionError, match="twice"):
        check_outputs(model_path, ["openvino", "openvino"], batch=1)
    with pytest.raises(ShapeError, match="no array given for input 'b_in'"):
        check_outputs(model_path, inputs={"a": np.zeros((1, 8), np.float32)})


def test_cli_pass_mismatch_and_bad_input(
    model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(model_path), "--batch", "2", "--backends", "onnxruntime,openvino"]) == 0
    out = capsys.readouterr().out
    assert "reference onnxruntime" in out and "MISMATCH" not in out

    assert main(["check", str(model_path), "--batch", "2", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True

    real = OpenVinoSession.outputs
    monkeypatch.setattr(OpenVinoSession, "outputs", lambda self: {k: v * 1.5 for k, v in real(self).items()})
    assert main(["check", str(model_path), "--batch", "2", "--rtol", "1e-2"]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out
    assert "roofline: mismatch: output 'y': openvino vs onnxruntime: max abs error" in captured.err
    assert "rtol=0.01" in captured.err

    bad = tmp_path / "bad.npz"
    np.savez(bad, wrong=np.zeros((2, 8), np.float32))
    assert main(["check", str(model_path), "--inputs", str(bad)]) == 2
    assert "has no input 'wrong'" in capsys.readouterr().err
    assert main(["check", str(model_path), "--batch", "2", "--backends", "onnxruntime"]) == 2
    assert main(["check", str(model_path), "--batch", "2", "--option", "trtexec:precision=fp16"]) == 2
    assert "names no backend" in capsys.readouterr().err
