"""``roofline analyze``: formats, options and one-line errors with exit status 2."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from pytest_roofline import zoo
from pytest_roofline.cli import main


@pytest.fixture(scope="module")
def transformer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny_transformer.onnx"
    onnx.save(zoo.tiny_transformer(), path)
    return path


def test_json_contract(transformer_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(transformer_path), "--batch", "2", "--dim", "seq=8", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["total"]) >= {"flops", "macs", "params", "bytes"}
    assert {"name", "op_type", "flops", "macs", "bytes", "params"} <= set(data["nodes"][0])
    assert data["uncosted"] == [] and data["inputs"]["input_ids"] == [2, 8]
    assert data["total"]["flops"] == sum(n["flops"] for n in data["nodes"])


def test_table_states_totals_convention_and_method(
    transformer_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(transformer_path), "--batch", "1", "--dim", "seq=16", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "GFLOPs" in out and "GMACs" in out and "FLOPs = 2 x MACs" in out
    assert "shapes resolved by: onnx+fold" in out
    assert "top 3 nodes by FLOPs" in out and "by op type" in out


def test_csv_has_one_row_per_node(transformer_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(transformer_path), "--batch", "1", "--dim", "seq=4", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == len(zoo.tiny_transformer().graph.node)
    assert rows[0]["name"] and int(rows[0]["bytes"]) >= 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["missing.onnx", "--batch", "1"], "no such file"),
        (["{model}"], "'seq' is unknown"),  # batch defaults to 1; seq has no default
        (["{model}", "--batch", "1", "--dim", "seq=4", "--dim", "nope=3"], "--dim nope"),
        (["{model}", "--batch", "x", "--dim", "seq=4"], "--batch"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    transformer_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    argv = [a.replace("{model}", str(transformer_path)) for a in argv]
    assert main(["analyze", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roofline: error:") and message in err and err.count("\n") == 1


def test_subprocess_exit_status(tmp_path: Path) -> None:
    (tmp_path / "bad.onnx").write_text("not a model")
    code = "import sys; from pytest_roofline.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, "analyze", str(tmp_path / "bad.onnx")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "not a valid ONNX model" in proc.stderr


@pytest.mark.parametrize("verb", ["analyze", "diff"])
def test_a_symbolic_batch_dim_is_bound_to_1_by_default_as_profile_does(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23 item 6: `roofline analyze llama.onnx --dim seq=64` and `roofline diff old new`
    stopped with "dim 0 'batch' is unknown"; `roofline profile` binds it to 1."""
    path = tmp_path / "cnn.onnx"
    onnx.save(zoo.tiny_cnn(), str(path))  # input N x 3 x 32 x 32
    models = [str(path)] if verb == "analyze" else [str(path), str(path)]
    assert main([verb, *models, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    if verb == "analyze":
        assert data["total"]["macs"] == main_macs(path, batch=1) > 0
    else:
        assert data["added"] == [] and data["removed"] == []
    assert main([verb, *models, "--batch", "2", "--format", "json"]) == 0  # still bound on request


def main_macs(path: Path, batch: int) -> int:
    from pytest_roofline.analysis import analyze

    return analyze(str(path), batch=batch).total.macs
