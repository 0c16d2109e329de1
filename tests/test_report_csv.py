"""CSV export: one row per layer per result."""

from __future__ import annotations

import csv
import io

from _report_data import results_of, sample_run

from pytest_roofline.report import csv as csv_report


def test_one_row_per_layer_per_result(tmp_path) -> None:
    run = sample_run(10)
    path = tmp_path / "layers.csv"
    csv_report.write(results_of(run), path)
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    expected = sum(len(r["profile"]["layers"]) for r in run["results"])
    assert len(rows) == expected
    assert tuple(rows[0]) == csv_report.COLUMNS
    first_layer = run["results"][0]["profile"]["layers"][0]
    row = rows[0]
    assert row["test"] == run["results"][0]["test"] and row["model"] == "resnet" and row["batch"] == "1"
    assert row["backend"] == "onnxruntime" and row["layer"] == first_layer["name"]
    assert float(row["time_s"]) == first_layer["time"] and int(row["flops"]) == first_layer["flops"]
    assert row["onnx_nodes"] == ";".join(first_layer["onnx_nodes"]) and row["verdict"] == "regression"
    assert row["memory_level"] == first_layer["memory_level"] in ("L1", "L2", "DRAM")  # issue 21
    folded = [r for r in rows if r["kind"] == "folded"]
    assert folded and all(r["roofline_fraction"] == "" for r in folded)


def test_stdlib_csv_is_not_shadowed() -> None:
    assert csv.DictWriter is not None and csv.__name__ == "csv"
    assert csv_report.csv is csv
