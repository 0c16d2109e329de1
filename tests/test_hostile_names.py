"""Names a user did not write: terminal escapes, bidi overrides and formulas stay inert (issue 14).

Node, graph, test and span names come from exported models and test suites.  Written raw, an
ESC/OSC sequence retitles, recolours or clears the terminal, an RTL override makes one name read
as another, a newline forges table rows, and a CSV cell starting with ``=`` runs as a spreadsheet
formula.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import unicodedata

import onnx
import pytest
from onnx import TensorProto, helper

from pytest_roofline.cli import main
from pytest_roofline.fmt import csv_cell, elide_names, printable, text_table
from pytest_roofline.report import csv as csv_report

ESCAPES = "\x1b]0;pwned\x07\x1b[31mred\u202eexe.txt\nsecond\x9bline\u2066iso\u200bzw\tt"
FORMULA = '=HYPERLINK("http://evil.example","click")'
FAST = ["--no-roofline", "--sessions", "2", "--rounds", "3", "--iterations", "2", "--quiet"]


def raw_controls(text: str) -> list[str]:
    """Characters a terminal would interpret, other than the newlines that separate lines."""
    return [
        c for line in text.split("\n") for c in line if unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp"}
    ]


@pytest.fixture(scope="module")
def hostile_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x\x1b[1m"], ["h"], name=ESCAPES),
            helper.make_node("Sigmoid", ["h"], ["y"], name=FORMULA),
        ],
        "graph\x1b[2J",
        [helper.make_tensor_value_info("x\x1b[1m", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("hostile") / "hostile.onnx"
    onnx.save(model, path)
    return str(path)


# --- the sanitizer ------------------------------------------------------------------------------


def test_printable_escapes_every_control_bidi_and_format_character() -> None:
    shown = printable(ESCAPES)
    assert raw_controls(shown) == [] and "\n" not in shown
    assert shown == (r"\x1b]0;pwned\x07\x1b[31mred\u202eexe.txt\x0asecond\x9bline\u2066iso\u200bzw\x09t")
    assert printable(shown) == shown  # idempotent: safe to apply at every edge


@pytest.mark.parametrize("text", ["Conv_0", "/encoder/layer.1/MatMul", "naïve 中文 ok", "a b"])
def test_printable_leaves_ordinary_names_alone(text: str) -> None:
    assert printable(text) == text


def test_text_table_escapes_cells_and_keeps_columns_aligned() -> None:
    lines = text_table(("name", "n"), [("a\nb", "1"), ("\x1b[2J", "22")])
    assert lines == ["name      n", r"a\x0ab    1", r"\x1b[2J  22"]


# --- CSV formulas ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["=1+1", "+cmd", "-2+3+cmd|' /C calc'!A0", "@SUM(A1)", "\tx"])
def test_csv_cell_neutralizes_formula_text(text: str) -> None:
    assert csv_cell(text) == "'" + text


def test_csv_cell_never_keeps_a_carriage_return() -> None:
    """Issue 36 H13: a raw CR (unquoted under a ``\\n`` line terminator) split the row."""
    assert csv_cell("\rx") == "\\x0dx" and csv_cell("a\r=1+1") == "a\\x0d=1+1"


@pytest.mark.parametrize("value", [-0.5, 3, 0.0, "-0.5", "+3", "1e-3", "Conv_0", ""])
def test_csv_cell_keeps_numbers_and_plain_text(value: object) -> None:
    assert csv_cell(value) == value


def test_csv_report_neutralizes_names_but_keeps_numbers() -> None:
    from _report_data import model_profile, result, results_of, run_results

    profile = model_profile(1, name="=model", layer_prefix=FORMULA, folded=0)
    results = results_of(run_results(result(profile, "pass", test="+test")))
    layer = results.records[0].profile.layers[0]
    results = results.with_records(
        [
            dataclasses.replace(
                results.records[0],
                profile=dataclasses.replace(
                    results.records[0].profile,
                    layers=(
                        dataclasses.replace(
                            layer, name=FORMULA, op_type="@op", onnx_nodes=("-x",), time=1e-3, flops=10
                        ),
                    ),
                ),
            )
        ]
    )
    rows = list(csv.DictReader(io.StringIO(csv_report.render(results))))
    assert rows[0]["layer"] == "'" + FORMULA and rows[0]["model"] == "'=model" and rows[0]["test"] == "'+test"
    assert rows[0]["op_type"] == "'@op" and rows[0]["onnx_nodes"] == "'-x"
    assert rows[0]["time_s"] == "0.001" and rows[0]["flops"] == "10"


# --- the command line -----------------------------------------------------------------------------


def test_analyze_table_and_csv(capsys: pytest.CaptureFixture[str], hostile_model: str) -> None:
    assert main(["analyze", hostile_model]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == []
    assert r"\x1b]0;pwned\x07\x1b[31mred\u202eexe.txt\x0asecond" in out and r"x\x1b[1m[1x64]" in out
    assert main(["analyze", hostile_model, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["name"] for r in rows} == {ESCAPES, "'" + FORMULA}  # CSV keeps the data, defuses formulas
    assert all(float(r["flops"]) >= 0 for r in rows)


def test_profile_table_and_csv(capsys: pytest.CaptureFixture[str], hostile_model: str) -> None:
    assert main(["profile", hostile_model, *FAST]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == []
    assert r"\u202eexe.txt\x0asecond" in out and "Sigmoid" in out
    assert main(["profile", hostile_model, *FAST, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert "'" + FORMULA in {r["layer"] for r in rows}
    assert all(float(r["time_s"]) > 0 for r in rows)  # numbers stay numbers


def test_error_line_escapes_the_name_it_quotes(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    missing = tmp_path / "no\x1b]0;pwned\x07such.onnx"
    assert main(["analyze", str(missing)]) == 2
    err = capsys.readouterr().err
    assert raw_controls(err) == [] and r"no\x1b]0;pwned\x07such.onnx: no such file" in err


# --- long names -------------------------------------------------------------------------------------


def test_elided_names_keep_both_ends_and_never_collide() -> None:
    scope = "/model/encoder/layers.10/self_attention/attention_core"
    names = [f"{scope}/q_proj/MatMul", f"{scope}/k_proj/MatMul", "Conv_0"]
    shown = elide_names(names, width=40)
    assert shown[2] == "Conv_0" and all(len(s) <= 40 for s in shown)
    assert shown[0].startswith("/model/enc") and shown[0].endswith("q_proj/MatMul") and "..." in shown[0]
    assert len(set(shown)) == 3
    same_ends = [f"{scope}/a/{i}/{'x' * 30}/MatMul" for i in range(2)]
    assert elide_names(same_ends, width=40) == same_ends  # would read the same once cut: shown in full


def test_profile_table_tells_long_layer_names_apart(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    scope = "/model/encoder/layers.10/self_attention/attention_core/projection"
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["h"], name=f"{scope}/Relu_1"),
            helper.make_node("Relu", ["h"], ["y"], name=f"{scope}/Relu_2"),
        ],
        "long",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "long.onnx")
    assert main(["profile", str(tmp_path / "long.onnx"), *FAST, "--sort", "name"]) == 0
    rows = capsys.readouterr().out.split("layers by name\n", 1)[1].splitlines()[1:]
    firsts = [row.split("  ")[0] for row in rows]
    assert len(firsts) == 2 and firsts[0] != firsts[1]
    assert firsts[0].endswith("Relu_1") and firsts[1].endswith("Relu_2")


def test_every_error_message_is_one_printable_line() -> None:
    from pytest_roofline.errors import ShapeError

    error = ShapeError(f"input {ESCAPES} is unknown")
    assert raw_controls(str(error)) == [] and "\n" not in str(error)
    assert r"\x1b]0;pwned\x07" in str(error) and r"\u202eexe.txt" in str(error)


def test_a_hostile_model_path_reaches_the_pytest_failure_escaped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_m(model_profile):\n    model_profile('no\\x1b]0;pwned\\x07such.onnx')\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--roofline-disable")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert raw_controls(text) == [] and r"no\x1b]0;pwned\x07such.onnx: no such file" in text
