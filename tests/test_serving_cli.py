"""``roofline load`` and the ``model_load`` fixture: real onnxruntime under real MLPerf LoadGen.

The bounds judged are ones no real run can miss (10 s) or meet (1 ns): nothing here depends on
what the busy machine measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _plugin_helpers import fixed_calibration, matmul_chain

from pytest_roofline.cli import main
from pytest_roofline.serving.compare import ScenarioComparison
from pytest_roofline.serving.logs import read_summary
from pytest_roofline.serving.types import ScenarioResult

pytest.importorskip("mlperf_loadgen")

SHORT = ["--duration", "0.3", "--queries", "16", "--option", "intra_op_threads=1"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(matmul_chain(tmp_path_factory.mktemp("load") / "mm.onnx", blocks=2, size=32))


def test_load_json_is_loadgens_summary_of_the_run(model: str, tmp_path: Path, capsys) -> None:
    argv = ["load", model, "--scenario", "server", "--qps", "100", "--p99", "10", "--log-dir", str(tmp_path)]
    assert main([*argv, *SHORT, "--format", "json"]) == 0
    result = ScenarioResult.from_dict(json.loads(capsys.readouterr().out))
    assert result.scenario == "server" and result.settings.target_qps == 100.0 and result.constraint_met
    assert Path(result.summary_log) == tmp_path / "mlperf_log_summary.txt"
    summary = read_summary(tmp_path / "mlperf_log_summary.txt")
    assert result.p99 == int(summary["99.00 percentile latency (ns)"]) * 1e-9
    assert result.achieved_qps == float(summary["Completed samples per second"])


def test_load_table_names_the_scenario_the_bound_and_the_logs(model: str, tmp_path: Path, capsys) -> None:
    argv = ["load", model, "--scenario", "single-stream", "--p99", "1e-9", "--log-dir", str(tmp_path)]
    assert main([*argv, *SHORT]) == 0
    out = capsys.readouterr().out
    assert "mm on onnxruntime: SingleStream, concurrency 1" in out
    assert "p99 bound 1 ns: MISSED" in out
    assert f"LoadGen logs: {tmp_path / 'mlperf_log_summary.txt'}" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "server"], "the server scenario needs --qps Q, --p99 S"),
        (["--concurrency", "0"], "at least 1"),
        (["--option", "nosuch=1"], "has no option 'nosuch'"),
    ],
)
def test_load_user_errors_are_one_line_and_exit_2(model: str, capsys, argv: list[str], message: str) -> None:
    assert main(["load", model, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_load_without_loadgen_names_the_extra(model: str, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "mlperf_loadgen", None)  # import fails as if not installed
    assert main(["load", model]) == 2
    assert 'pip install "pytest-roofline[serving]"' in capsys.readouterr().err


def test_model_load_fixture_serves_at_the_runs_options(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a first run measures the model's latency for its baseline entry: a fixed roofline, no calibration
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(fixed_calibration(tmp_path, {"intra_op_threads": "1"})))
    matmul_chain(pytester.path / "models" / "mm.onnx", blocks=2, size=32)
    pytester.makepyfile(
        test_serve="""
        from pathlib import Path

        def test_loose(model_load, tmp_path):
            result = model_load("models/mm.onnx", "server", qps=100, p99=10.0, duration=0.3, queries=16)
            assert result.scenario == "server" and result.backend == "onnxruntime"
            assert result.constraint_met
            assert Path(result.summary_log).parent == tmp_path / "loadgen"

        def test_tight(model_load):
            result = model_load("models/mm.onnx", "offline", p99=1e-9, duration=0.3, queries=16)
            assert result.constraint_met, "the bound was missed"

        def test_typo(model_load):
            model_load("models/mm.onnx", "server", qsp=100)
    """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--roofline-option", "intra_op_threads=1")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        ["*AssertionError: the bound was missed*", "*model_load has no keyword 'qsp'*"]
    )

    bad = pytester.runpytest("-p", "no:cacheprovider", "--roofline-option", "nosuch=1", "-k", "loose")
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines(["*roofline: backend 'onnxruntime' has no option 'nosuch'*"])


def test_load_against_an_old_model_prints_the_paired_verdicts(model: str, tmp_path: Path, capsys) -> None:
    argv = ["load", model, "--against", model, "--windows", "2", "--log-dir", str(tmp_path), *SHORT]
    assert main([*argv, "--format", "json"]) == 0
    found = ScenarioComparison.from_dict(json.loads(capsys.readouterr().out))
    assert [m.metric for m in found.metrics] == ["p50", "p99", "qps"] and len(found.old) == 2
    assert found.tolerance == 0.10 and found.windows[0].summary_log == str(
        tmp_path / "window-0" / "mlperf_log_summary.txt"
    )
    assert main([*argv, "--tolerance", "25"]) == 0
    out = capsys.readouterr().out
    assert (
        "mm against mm: SingleStream, 2 windows of 0.3 s both models answered in turn, tolerance 25%" in out
    )
    assert all(f"\n{metric} " in out for metric in ("p50", "p99", "qps"))


def test_load_against_refuses_a_tolerance_of_100_percent_or_more(model: str, capsys) -> None:
    assert main(["load", model, "--against", model, "--tolerance", "100"]) == 2
    assert "--tolerance is a percentage below 100" in capsys.readouterr().err


def test_load_past_its_timeout_is_one_line_and_exit_2(model: str) -> None:
    code = "import sys; from pytest_roofline.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = ["load", model, "--scenario", "server", "--qps", "50", "--duration", "3", "--timeout", "0.5"]
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if not line.startswith(":::MLLOG")]
    assert len(lines) == 1 and "did not finish within 0.5 s" in lines[0] and "--timeout" in lines[0]
