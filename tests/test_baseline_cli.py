"""``roofline baseline {update,show,diff,prune}`` on results written by the plugin."""

from __future__ import annotations

import json

import pytest
from _plugin_helpers import FAKE, relu_chain

from pytest_roofline.cli import main

TESTS = """
def test_a(model_profile):
    model_profile("chain.onnx")

def test_b(model_profile):
    model_profile("chain.onnx", batch_size=2)
"""


@pytest.fixture
def results(pytester, monkeypatch, tmp_path_factory):
    """A project with a first run (baselines written) and a second run's results JSON (+50%)."""
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    relu_chain(pytester.path / "chain.onnx", 3)
    pytester.makepyfile(test_perf=TESTS)
    pytester.runpytest(*FAKE).assert_outcomes(passed=2)
    relu_chain(pytester.path / "chain.onnx", 5)
    pytester.runpytest(*FAKE, "--roofline-report", "r.json").assert_outcomes(failed=2)
    monkeypatch.chdir(pytester.path)
    return pytester.path / "r.json"


def test_show_table_and_json(results, capsys):
    assert main(["baseline", "show"]) == 0
    out = capsys.readouterr().out
    assert "test_perf.py::test_a" in out and "chain.onnx" in out and "fake-device" in out
    assert main(["baseline", "show", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data) == 2
    assert all(entry["figure"] > 0 for entry in data.values())


def test_diff_flags_regressions_with_exit_1(results, capsys):
    assert main(["baseline", "diff", str(results)]) == 1
    out = capsys.readouterr().out
    assert out.count("regression") == 2
    assert "x1.500" in out and "95% CI" in out
    assert main(["baseline", "diff", str(results), "--tolerance", "60"]) == 0


def test_update_accepts_results_then_diff_passes(results, capsys):
    assert main(["baseline", "update", str(results)]) == 0
    assert "updated 2 entries in 1 files" in capsys.readouterr().out
    assert main(["baseline", "diff", str(results)]) == 0
    data = json.loads((results.parent / ".roofline" / "test_perf.json").read_text())
    assert all(len(entry["history"]) == 1 for entry in data["entries"].values())


def test_prune_by_key_and_from_results(results, pytester, capsys):
    key = "test_perf.py::test_a|chain.onnx|b1|fake|fake-device"
    assert main(["baseline", "prune", "--keys", key, "--dry-run"]) == 0
    assert f"would remove {key}" in capsys.readouterr().out
    assert main(["baseline", "prune", "--keys", key]) == 0
    assert "1 entries removed" in capsys.readouterr().out
    pytester.makepyfile(test_perf="def test_b(model_profile):\n    model_profile('chain.onnx')\n")
    pytester.runpytest(*FAKE, "--roofline-update", "--roofline-report", "full.json")
    assert json.loads((pytester.path / "full.json").read_text())["stale"] == [
        "test_perf.py::test_b|chain.onnx|b2|fake|fake-device"
    ]
    assert main(["baseline", "prune", "full.json"]) == 0
    assert main(["baseline", "show", "--format", "json"]) == 0
    assert list(json.loads(capsys.readouterr().out.split("entries removed\n", 1)[1])) == [
        "test_perf.py::test_b|chain.onnx|b1|fake|fake-device"
    ]


def test_errors_are_one_line(results, tmp_path, capsys):
    assert main(["baseline", "diff", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    (results.parent / ".roofline" / "test_perf.json").write_text("{broken")
    assert main(["baseline", "show"]) == 2
    err = capsys.readouterr().err
    assert "test_perf.json is corrupt" in err and len(err.strip().splitlines()) == 1
