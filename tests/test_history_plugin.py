"""The plugin appends every measured run to the history and prints the change points a run confirmed."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _baselines import scale_stored_latency
from _history_data import postgres_url  # noqa: F401 - the session fixture
from _plugin_helpers import FAKE, live_module, relu_chain

pytest.importorskip("ruptures")

TEST = """
def test_model(model_profile):
    model_profile("model.onnx")
"""


def _git(project: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _commit(project: Path, nodes: int, message: str) -> str:
    relu_chain(project / "model.onnx", nodes)
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", message)
    return _git(project, "rev-parse", "HEAD")


@pytest.fixture
def project(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> pytest.Pytester:
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("ROOFLINE_HISTORY", raising=False)
    pytester.makepyfile(test_model=TEST)
    pytester.makefile(".gitignore", "\n".join([".roofline/", "__pycache__/"]))
    _git(pytester.path, "init", "-q")
    _git(pytester.path, "config", "user.email", "t@example.com")
    _git(pytester.path, "config", "user.name", "t")
    return pytester


def _points(folder: Path) -> list[dict]:
    return [
        json.loads(line) for path in sorted(folder.rglob("*.jsonl")) for line in path.read_text().splitlines()
    ]


def test_history_off_by_default(project: pytest.Pytester) -> None:
    _commit(project.path, 3, "model")
    project.runpytest(*FAKE).assert_outcomes(passed=1)
    assert not (project.path / ".roofline" / "history").exists()


def test_history_alone_writes_the_embedded_store(project: pytest.Pytester) -> None:
    sha = _commit(project.path, 3, "model")
    result = project.runpytest(*FAKE, "--roofline-history")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["roofline: history: 1 point added to *.roofline/history"])
    files = list((project.path / ".roofline" / "history").rglob("*.jsonl"))
    assert [f.name for f in files] == [f"{sha}.jsonl"]
    (point,) = _points(project.path / ".roofline" / "history")
    assert point["commit"] == sha and point["test"] == "test_model.py::test_model"
    assert point["value"] > 0 and point["verdict"] == "new" and point["layers"]
    assert point["parent"] is None  # the first commit has none
    assert point["model"] == "model.onnx"  # relative to the rootdir: how git finds it at a commit


def test_history_flag_never_takes_the_test_path(project: pytest.Pytester) -> None:
    """``pytest --roofline-history test_model.py`` (or a test folder) took the path as the store;
    refused in one line, while the flag after the paths, ``=URL`` and ``--roofline-history-url`` work."""
    _commit(project.path, 3, "model")
    (project.path / "suite").mkdir()
    (project.path / "suite" / "test_more.py").write_text(TEST.replace("model.onnx", "../model.onnx"))
    for path in ("test_model.py", "suite"):
        refused = project.runpytest(*FAKE, "--roofline-history", path)
        assert refused.ret == pytest.ExitCode.USAGE_ERROR
        refused.stderr.fnmatch_lines(
            [f"ERROR: --roofline-history took the test path '{path}' as its store: *"]
        )
        assert not (project.path / path / "history").exists() and not (project.path / ".roofline").exists()
    project.runpytest(*FAKE, "test_model.py", "--roofline-history").assert_outcomes(passed=1)
    assert len(_points(project.path / ".roofline" / "history")) == 1
    project.runpytest(*FAKE, "--roofline-history-url", "by-url", "suite").assert_outcomes(passed=1)
    assert [p["test"] for p in _points(project.path / "by-url")] == ["suite/test_more.py::test_model"]
    project.runpytest(*FAKE, "--roofline-history=by-equals", "test_model.py").assert_outcomes(passed=1)
    assert len(_points(project.path / "by-equals")) == 1


def test_history_from_ini_and_environment(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _commit(project.path, 3, "model")
    project.makeini("[pytest]\nroofline_history = from-ini\n")
    project.runpytest(*FAKE).assert_outcomes(passed=1)
    assert len(_points(project.path / "from-ini")) == 1
    project.makeini("[pytest]\n")
    monkeypatch.setenv("ROOFLINE_HISTORY", str(project.path / "from-env"))
    project.runpytest(*FAKE).assert_outcomes(passed=1)
    assert len(_points(project.path / "from-env")) == 1
    monkeypatch.setenv("ROOFLINE_HISTORY", "off")
    project.runpytest(*FAKE).assert_outcomes(passed=1)
    assert len(_points(project.path / "from-env")) == 1


def test_unreachable_postgres_fails_the_run_in_one_line(project: pytest.Pytester, tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    _commit(project.path, 3, "model")
    result = project.runpytest(*FAKE, f"--roofline-history=postgresql://u@/db?host={tmp_path}")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["roofline error: history not written: history postgresql://*cannot connect*"]
    )


def test_session_end_prints_the_change_point_this_run_confirmed(project: pytest.Pytester) -> None:
    _commit(project.path, 6, "model")
    store = project.path / "hist"
    noisy = (*FAKE, "--roofline-option=jitter=0.005", f"--roofline-history={store}", "--roofline-update")

    def run() -> pytest.RunResult:
        # the fake backend repeats its figures exactly, and a point's id hashes them with the run's
        # time to the second: two such runs within one second are one measurement; real ones differ
        time.sleep(1.02 - time.time() % 1)
        return project.runpytest(*noisy)

    for _ in range(5):
        run()
    slower = _commit(project.path, 8, "two more blocks")
    outputs = [run().stdout.str() for _ in range(3)]
    # the model changed: timed beside the previous commit's model in the same process, so the
    # first run after the step confirms it, on the paired ratio and its interval
    assert "change point: test_model.py::test_model: +" in outputs[0]
    assert f"since {slower[:7]}, 1 run after" in outputs[0]
    # later runs (the same model) do not announce it again
    assert "change point" not in outputs[1] + outputs[2]
    from pytest_roofline.history.store import JsonLinesStore

    points = sorted(JsonLinesStore(store).points(), key=lambda p: p.order)
    assert len({p.identity for p in points}) == 2 and all(p.identity for p in points)
    # only the first run of the new model is paired, against the previous commit's model
    assert [p.paired is not None for p in points] == [False] * 5 + [True, False, False]
    paired = points[5].paired
    assert paired is not None and paired.against == points[4].identity and paired.ratio > 1.0


def test_plugin_writes_postgres_and_import_adds_nothing_twice(
    project: pytest.Pytester,
    postgres_url: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_roofline.cli import main
    from pytest_roofline.history.store import PostgresStore

    sha = _commit(project.path, 3, "model")
    result = project.runpytest(*FAKE, f"--roofline-history={postgres_url}", "--roofline-report=run.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["roofline: history: 1 point added to postgresql://*"])
    store = PostgresStore(postgres_url)
    try:
        mine = [p for p in store.points(test="test_model.py::test_model") if p.commit == sha]
    finally:
        store.close()
    assert len(mine) == 1 and mine[0].value > 0
    monkeypatch.chdir(project.path)
    capsys.readouterr()
    assert main(["history", "import", "run.json", "--store", postgres_url]) == 0
    assert capsys.readouterr().out.startswith("0 of 1 points added")
    assert main(["history", "import", "run.json", "--store", str(project.path / "imported")]) == 0
    assert capsys.readouterr().out.startswith("1 of 1 points added")
    assert _points(project.path / "imported")[0]["id"] == mine[0].id


def test_each_point_of_a_series_is_normalized_by_the_series_control_probe(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No baseline fixes the control probe (a busy machine refuses one; here it is removed): the
    second run uses the probe the first run fitted and recorded, so both figures share one unit."""
    _commit(project.path, 6, "model")
    store = project.path / "hist"
    project.runpytest(*FAKE, f"--roofline-history={store}").assert_outcomes(passed=1)
    for baseline in (project.path / ".roofline").glob("*.json"):
        baseline.unlink()
    control_probe = live_module("pytest_roofline.gate.control_probe")

    def no_fit(*args: object, **kwargs: object) -> dict[str, int]:
        raise AssertionError("the series' probe is known: nothing to fit")

    monkeypatch.setattr(control_probe, "fit_probe", no_fit)
    time.sleep(1.02 - time.time() % 1)
    project.runpytest(*FAKE, f"--roofline-history={store}").assert_outcomes(passed=1)
    first, second = sorted(_points(store), key=lambda p: (p["time"], p["recorded"]))
    assert first["probe"] and second["probe"] == first["probe"]


def test_the_gates_paired_run_against_the_previous_model_is_kept_not_timed_again(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--roofline-compare-ref`` pairs the new model with the previous commit's, which is the
    history's previous point's model: its figures are the point's pairing, nothing timed twice."""
    _commit(project.path, 6, "model")
    store = project.path / "hist"
    project.runpytest(*FAKE, f"--roofline-history={store}").assert_outcomes(passed=1)
    _commit(project.path, 8, "two more blocks")
    pairing = live_module("pytest_roofline.history.pairing")

    def no_second(*args: object, **kwargs: object) -> tuple[float, ...]:
        raise AssertionError("the gate's paired figures are at hand")

    monkeypatch.setattr(pairing, "_paired_figures", no_second)
    time.sleep(1.02 - time.time() % 1)
    run = project.runpytest(*FAKE, f"--roofline-history={store}", "--roofline-compare-ref=HEAD~1")
    run.assert_outcomes(failed=1)  # two more blocks: +29 %, a regression against HEAD~1
    first, second = sorted(_points(store), key=lambda p: (p["time"], p["recorded"]))
    assert second["mode"] == "paired" and second["paired"]["reference"] == pairing.FROM_GATE
    assert second["paired"]["figures"] == second["sessions"] and second["paired"]["ratio"] > 1.0
    assert second["paired"]["against"] == first["identity"]


def test_the_pairing_times_at_the_configured_threads_with_the_gates_round_ratios(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real onnxruntime: the new model is timed beside the previous one by the gate's paired run,
    at the configured threads on a quiet machine (as the gate's paired mode and ``roofline
    bisect``), not at one (beside other processes it is one: test_history_changepoints)."""
    import os

    from _plugin_helpers import fixed_calibration, matmul_chain

    paired, pairing = (
        live_module("pytest_roofline.gate.paired"),
        live_module("pytest_roofline.history.pairing"),
    )
    load = live_module("pytest_roofline.device.load")
    quiet = load.MachineLoad(0.5, 0.0, 0.0, 0.1, 2)  # what this test's machine is, whatever it runs beside
    monkeypatch.setattr(load, "between", lambda start, end: quiet)
    engines = []
    real = paired.paired_run

    def watched(openers, *args, **kwargs):  # type: ignore[no-untyped-def]
        engines.append(openers[0].backend)
        return real(openers, *args, **kwargs)

    monkeypatch.setattr(paired, "paired_run", watched)
    monkeypatch.setattr(pairing, "PAIR_BUDGET", 1.0)
    fixed_calibration(Path(os.environ["ROOFLINE_CACHE_DIR"]), {"intra_op_threads": "2"})
    store = project.path / "hist"
    options = (f"--roofline-history={store}", "--roofline-budget=1", "--roofline-option=intra_op_threads=2")
    # the added block is a real +30-90 %: the gate fails the second run where the first recorded a
    # baseline (a quiet machine); the test is about the history's pairing
    options += ("--roofline-tolerance=99",)
    for blocks in (2, 3):
        matmul_chain(project.path / "model.onnx", blocks)
        _git(project.path, "add", "-A")
        _git(project.path, "commit", "-qm", f"{blocks} blocks")
        time.sleep(1.02 - time.time() % 1)
        outcomes = project.runpytest(*options).parseoutcomes()  # the gate's verdict is not the point
        assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1, outcomes
    (engine,) = engines
    assert engine.single_thread() is not None  # the configured two threads, not the one-thread copy
    second = sorted(_points(store), key=lambda p: (p["time"], p["recorded"]))[1]
    assert second["paired"]["figure"] == "round-ratio" and len(second["paired"]["figures"]) >= 2


TWO_MODELS = """
import numpy as np
import pytest

@pytest.mark.parametrize("name", ["a", "b"])
def test_model(model_profile, name):
    model_profile(f"{name}.onnx")
"""


def _two_model_runs(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, bound: str) -> list[Any]:
    """Two runs of two real onnxruntime tests, each run's models new (uncommitted: the model store
    is the only way back to the previous run's), under a model store bound of ``bound``; the
    second run's result."""
    import os

    from _plugin_helpers import fixed_calibration, matmul_chain

    monkeypatch.setattr(live_module("pytest_roofline.history.pairing"), "PAIR_BUDGET", 1.0)
    monkeypatch.setenv("ROOFLINE_MODEL_STORE_MAX_BYTES", bound)
    fixed_calibration(Path(os.environ["ROOFLINE_CACHE_DIR"]))
    project.makepyfile(test_model=TWO_MODELS)
    options = (
        f"--roofline-history={project.path / 'hist'}",
        "--roofline-budget=1",
        "--roofline-tolerance=99",  # microsecond models time noisily: these tests judge the pairing
    )
    runs = []
    for seed in (0, 1):  # retrained: every model changes between the runs, its cost does not
        for name, blocks in (("a", 2), ("b", 3)):
            matmul_chain(project.path / f"{name}.onnx", blocks, seed=seed)
        time.sleep(1.02 - time.time() % 1)
        runs.append(project.runpytest(*options))
        runs[-1].assert_outcomes(passed=2)
        # a model the store no longer holds is judged on the stored figures: 20x slower ones, so a
        # busy runner's timing of a microsecond model never turns that verdict into a regression
        scale_stored_latency(project.path / ".roofline" / "test_model.json", 20)
    return runs


def test_a_suite_filling_the_model_store_still_pairs_every_changed_model(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store evicts at session end, never a model a later test of the run still needs: with a
    bound of 2.5 models, putting the second run's first model had evicted the first run's, and that
    test's model change went unpaired."""
    from _plugin_helpers import matmul_chain

    size = matmul_chain(project.path / "probe.onnx", 3).stat().st_size
    _, second = _two_model_runs(project, monkeypatch, str(int(2.5 * size)))
    points = sorted(_points(project.path / "hist"), key=lambda p: (p["time"], p["recorded"]))
    assert len(points) == 4
    for point in points[2:]:
        assert point["paired"] is not None, point["unpaired"]
        assert point["unpaired"] == ""
    text = second.stdout.str()
    assert "the model changed and was not timed beside" not in text
    assert "over its bound" in text and "ROOFLINE_MODEL_STORE_MAX_BYTES" in text


def test_a_model_change_the_history_cannot_pair_is_said_and_kept_with_the_point(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, second = _two_model_runs(project, monkeypatch, "0")  # a store that keeps nothing
    points = sorted(_points(project.path / "hist"), key=lambda p: (p["time"], p["recorded"]))
    for point in points[2:]:
        assert point["paired"] is None and "not in the model store" in point["unpaired"]
    lines = [line for line in second.stdout.lines if "was not timed beside the previous one" in line]
    assert len(lines) == 2 and "judged on the absolute figures" in lines[0]


def _baseline_twice_as_fast(project: pytest.Pytester) -> None:
    """The stored baseline as if recorded while the machine ran twice as fast: the stored (timed)
    comparison now fails the model, whatever the run's identity says."""
    path = project.path / ".roofline" / "test_model.json"
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        entry["sessions"] = [figure / 2 for figure in entry["sessions"]]
    path.write_text(json.dumps(data))
    project.runpytest(*FAKE, "--roofline-retime").assert_outcomes(failed=1)  # the timed comparison's word


def test_an_unchanged_model_timed_for_the_history_is_judged_by_its_identity(project: pytest.Pytester) -> None:
    """The history times every run (a point per run), but nothing that runs changed decides the
    verdict: a timing that reads slower is the machine, never a regression (it was the stored
    comparison's verdict, which failed unchanged zoo models on a machine changing speed)."""
    _commit(project.path, 6, "model")
    store = project.path / "hist"
    options = (*FAKE, f"--roofline-history={store}")
    project.runpytest(*options).assert_outcomes(passed=1)  # the first run records the baseline
    _baseline_twice_as_fast(project)
    time.sleep(1.02 - time.time() % 1)
    result = project.runpytest(*options)
    result.assert_outcomes(passed=1)
    assert "UNCHANGED" in result.stdout.str() or "unchanged" in result.stdout.str()
    points = sorted(_points(store), key=lambda p: (p["time"], p["recorded"]))
    assert [p["verdict"] for p in points] == ["new", "unchanged"]
    assert points[1]["mode"] == "identity" and points[1]["value"] == pytest.approx(points[0]["value"])


def test_a_model_change_timed_for_the_history_is_judged_on_its_pairing_with_the_baseline(
    project: pytest.Pytester,
) -> None:
    """Under the history a changed model is timed against its stored figures (the series' point),
    which failed a retrained tiny MLP on the zoo (+64 % stored, its pairing 1.004); the history's
    pairing times the new model beside the baseline's own, the gate's paired comparison, and decides."""
    import onnx
    from onnx import numpy_helper

    _commit(project.path, 6, "model")
    store = project.path / "hist"
    options = (*FAKE, f"--roofline-history={store}")
    project.runpytest(*options).assert_outcomes(passed=1)  # the baseline, and the series' first point
    model = onnx.load(str(project.path / "model.onnx"))  # retrained: other weights, the same cost
    model.graph.initializer.append(numpy_helper.from_array(np.ones(3, dtype=np.float32), "unused"))
    onnx.save(model, str(project.path / "model.onnx"))
    _git(project.path, "commit", "-qam", "retrained")
    _baseline_twice_as_fast(project)
    time.sleep(1.02 - time.time() % 1)
    result = project.runpytest(*options, "-rA")
    result.assert_outcomes(passed=1)
    assert "judged on the history's pairing with the baseline's model" in result.stdout.str()
    points = sorted(_points(store), key=lambda p: (p["time"], p["recorded"]))
    assert [p["verdict"] for p in points] == ["new", "pass"] and points[1]["mode"] == "stored"
    assert points[1]["paired"] is not None


def test_an_unchanged_run_timed_for_the_history_reports_raw_seconds(project: pytest.Pytester) -> None:
    """Under the history an unchanged model is timed against its baseline; its ``raw`` held the
    probe-normalized figures, which the HTML report printed as seconds ("raw 4.1 s" for 246 ms)."""
    _commit(project.path, 6, "model")
    store = f"--roofline-history={project.path / 'hist'}"
    project.runpytest(*FAKE, store).assert_outcomes(passed=1)
    project.runpytest(
        *FAKE, store, "--roofline-report=run.json", "--roofline-report=run.html"
    ).assert_outcomes(passed=1)
    (record,) = json.loads((project.path / "run.json").read_text())["results"]
    verdict, latency = record["verdict"], record["profile"]["latency"]
    assert verdict["status"] == "unchanged"
    for side in ("baseline", "current"):  # seconds: within 2x of the model's measured latency
        assert 0.5 < verdict["raw"][side] / latency["p25"] < 2, (verdict, latency)
    html = (project.path / "run.html").read_text()
    assert re.search(r"raw [\d.]+ µs → [\d.]+ µs", html), re.findall(r"raw [^<]*", html)  # 700 us here
