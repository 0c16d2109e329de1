"""`roofline report RESULTS.json -o OUT`: format by extension, one-line errors."""

from __future__ import annotations

import json

import pytest
from _report_data import sample_run

from pytest_roofline.cli import main


@pytest.fixture
def results_file(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(sample_run(8)))
    return path


def test_every_format_by_extension(results_file, tmp_path, capsys) -> None:
    pytest.importorskip("jinja2")
    outs = [tmp_path / "out" / name for name in ("r.html", "r.md", "r.csv", "r.benchmark.json")]
    argv = ["report", str(results_file)]
    for out in outs:
        argv += ["-o", str(out)]
    assert main(argv) == 0
    assert all(out.exists() and out.stat().st_size > 0 for out in outs)
    assert outs[0].read_text().startswith("<!DOCTYPE html>")
    assert "Full report (roofline charts, per-layer tables, history): r.html" in outs[1].read_text()
    assert outs[2].read_text().startswith("test,model,batch,backend")
    assert len(json.loads(outs[3].read_text())["benchmarks"]) == 3
    assert "html report written to" in capsys.readouterr().out


def test_plain_json_needs_the_format_flag(results_file, tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    assert main(["report", str(results_file), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--format pytest-benchmark" in err
    assert main(["report", str(results_file), "-o", str(out), "--format", "pytest-benchmark"]) == 0
    assert "machine_info" in json.loads(out.read_text())


@pytest.mark.parametrize(
    "content", [None, "{not json", '{"schema_version": 1}', '{"schema_version": 9, "results": []}']
)
def test_bad_results_file_is_one_line(tmp_path, capsys, content) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    assert main(["report", str(path), "-o", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roofline: error:") and err.count("\n") == 1


def test_unknown_extension(results_file, tmp_path, capsys) -> None:
    assert main(["report", str(results_file), "-o", str(tmp_path / "r.pdf")]) == 2
    assert "unknown format" in capsys.readouterr().err
