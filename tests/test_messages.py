"""Messages a new user reads (issue 14): batch defaults, dims phrased for each front end, a wrong
layer name in one line, the report option's help."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from _plugin_helpers import FAKE, relu_chain
from onnx import TensorProto, helper

from pytest_roofline import profile_model
from pytest_roofline.cli import main
from pytest_roofline.errors import ShapeError, UnboundDim
from pytest_roofline.model import bind_input_shapes, needs_batch

FAST = ["--no-roofline", "--sessions", "2", "--rounds", "3", "--iterations", "2"]


def seq_model(path: Path, first: int | str = "N") -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "seq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [first, "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [first, "seq", 8])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


# --- batch: 1 by default, as in the fixture, and said -----------------------------------------------


def test_profile_defaults_a_symbolic_batch_to_1_and_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    relu_chain(tmp_path / "chain.onnx", 2)  # input [N, 8]
    assert main(["profile", str(tmp_path / "chain.onnx"), *FAST]) == 0
    out, err = capsys.readouterr()
    assert (
        out.splitlines()[0].startswith("model chain  backend onnxruntime") and "  batch 1 (default)  " in out
    )
    assert "roofline: batch 1 (default; choose another with --batch N" in err
    assert main(["profile", str(tmp_path / "chain.onnx"), *FAST, "--batch", "2", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "  batch 2  " in out and "(default)" not in out + err
    assert main(["profile", str(tmp_path / "chain.onnx"), *FAST, "--format", "json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["batch"] == 1 and data["input_shapes"] == {"x": [1, 8]} and data["extra"]["batch_default"]


def test_api_agrees_with_the_fixture(tmp_path) -> None:
    relu_chain(tmp_path / "chain.onnx", 2)
    prof = profile_model(tmp_path / "chain.onnx", sessions=2, rounds=3, profile_iterations=2)
    assert prof.batch == 1 and prof.extra["batch_default"] is True


def test_a_static_or_named_batch_is_not_defaulted(tmp_path) -> None:
    static = onnx.load(seq_model(tmp_path / "static.onnx", first=4))
    named = onnx.load(seq_model(tmp_path / "named.onnx"))
    assert not needs_batch(static) and needs_batch(named) and not needs_batch(named, {"N": 2})


# --- an unbound dim, phrased by each front end ------------------------------------------------------


def test_shape_error_carries_the_dim(tmp_path) -> None:
    model = onnx.load(seq_model(tmp_path / "seq.onnx"))
    with pytest.raises(ShapeError) as info:
        bind_input_shapes(model, batch=1)
    assert info.value.unbound == UnboundDim("x", 1, "seq")
    assert "bind it with --dim seq=VALUE" in str(info.value)  # the command line keeps its phrasing
    assert (
        info.value.for_pytest()
        == "input 'x' dim 1 'seq' is unknown; bind it with model_profile(..., dims={'seq': VALUE})"
    )
    with pytest.raises(ShapeError) as info:
        bind_input_shapes(model, batch=1, dims={"seq": 4, "sek": 2})
    assert info.value.unused == "sek" and info.value.known == ("N", "seq")
    assert info.value.for_pytest().startswith("dims={'sek': ...} names no symbolic dim")


def test_plugin_phrases_dims_in_python(pytester: pytest.Pytester, monkeypatch, tmp_path_factory) -> None:
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    seq_model(pytester.path / "seq.onnx")
    pytester.makepyfile(
        """
        def test_unbound(model_profile):
            model_profile("seq.onnx")

        def test_misspelt(model_profile):
            model_profile("seq.onnx", dims={"seq": 4, "sek": 2})
        """
    )
    result = pytester.runpytest(*FAKE)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "roofline: input 'x' dim 1 'seq' is unknown; bind it with model_profile(*, dims={'seq': VALUE})",
            "roofline: dims={'sek': ...} names no symbolic dim of the model's inputs (symbolic dims: N, seq)",
        ]
    )
    assert "--dim" not in result.stdout.str()


# --- a wrong layer name: the hint in one line, no frames of the library ---------------------------


def test_wrong_layer_name_is_one_line_with_the_hint(
    pytester: pytest.Pytester, monkeypatch, tmp_path_factory
) -> None:
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    relu_chain(pytester.path / "chain.onnx", 3)
    pytester.makepyfile(
        """
        def test_layer(model_profile):
            prof = model_profile("chain.onnx")
            assert prof.layer("relu").time > 0
        """
    )
    result = pytester.runpytest(*FAKE)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            '>       assert prof.layer("relu").time > 0',
            "E  *LayerNotFound: no layer or ONNX node 'relu' in the profile of chain; did you mean *?",
        ]
    )
    text = result.stdout.str()
    assert "pytest_roofline/profile.py" not in text
    hint = next(line for line in text.splitlines() if "did you mean" in line)
    assert sorted(hint.split("did you mean ")[1].rstrip("?").split(", ")) == ["'relu0'", "'relu1'", "'relu2'"]


# --- help ----------------------------------------------------------------------------------------------


def test_report_help_names_every_format(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    text = " ".join(result.stdout.str().split())
    assert "format from the extension: .json .html .md .csv .benchmark.json (repeatable)" in text
