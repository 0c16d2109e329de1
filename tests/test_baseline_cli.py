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
    """A project with a first run (baselines written) and a second run's results JSON (+50%),
    compared with the stored figures (the model store keeps nothing: no paired run)."""
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("ROOFLINE_MODEL_STORE_MAX_BYTES", "0")
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
    assert sum(line.startswith("regression ") for line in out.splitlines()) == 4  # as recorded, re-judged
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


def test_diff_shows_the_runs_verdicts_and_rejudges_at_the_runs_tolerance(
    pytester, monkeypatch, tmp_path_factory, capsys
):
    """Issue 24 item 3: a run at a marker's 60 % passed +50 %; `baseline diff` re-judged it at 5 %."""
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("ROOFLINE_MODEL_STORE_MAX_BYTES", "0")  # stored figures, not a paired run
    relu_chain(pytester.path / "chain.onnx", 3)
    marked = (
        "import pytest\n\n@pytest.mark.roofline(tolerance=60)\n" + TESTS.split("\n\n")[0].lstrip("\n") + "\n"
    )
    pytester.makepyfile(test_perf=marked)
    pytester.runpytest(*FAKE).assert_outcomes(passed=1)
    relu_chain(pytester.path / "chain.onnx", 4)
    pytester.runpytest(*FAKE, "--roofline-report", "r.json").assert_outcomes(passed=1)
    monkeypatch.chdir(pytester.path)
    recorded = json.loads((pytester.path / "r.json").read_text())["results"][0]["verdict"]
    assert recorded["tolerance"] == pytest.approx(0.60)
    ci = f"{recorded['ci'][0]:.3f}-{recorded['ci'][1]:.3f}"

    assert main(["baseline", "diff", "r.json"]) == 0
    out = capsys.readouterr().out
    first, rejudged = out.split("re-judged against the baselines in", 1)
    assert "the run's verdicts, as recorded in r.json" in first
    assert recorded["status"] in first and ci in first and "60%" in first
    assert "at each result's own tolerance (the run's)" in rejudged
    assert f"{recorded['status']} " in rejudged and ci in rejudged and "60%" in rejudged  # same data, same CI

    assert main(["baseline", "diff", "r.json", "--tolerance", "5"]) == 1  # a re-judgement says its settings
    out = capsys.readouterr().out
    assert "at 5% tolerance" in out and "regression" in out.split("re-judged", 1)[1]


def test_update_names_the_real_reason_for_each_result_it_does_not_write(
    pytester, monkeypatch, tmp_path_factory, capsys
):
    """An unchanged model's results carry no entry: the command says so per test, not "paired or
    disabled runs store nothing" (issue 31)."""
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    relu_chain(pytester.path / "chain.onnx", 3)
    pytester.makepyfile(test_perf=TESTS)
    pytester.runpytest(*FAKE).assert_outcomes(passed=2)
    pytester.runpytest(*FAKE, "--roofline-report", "same.json").assert_outcomes(passed=2)
    monkeypatch.chdir(pytester.path)
    assert main(["baseline", "update", "same.json"]) == 0
    out = capsys.readouterr().out
    assert "test_perf.py::test_a chain: unchanged: nothing that runs changed" in out, out
    assert "test_perf.py::test_b chain: unchanged" in out
    assert "nothing to write: none of the 2 results carries a baseline entry" in out
    assert "paired or disabled" not in out
