"""The decision order through pytest with the real onnxruntime backend: identity → paired → stored.

The model store is the real one (``pytest_roofline.gate.model_store``) under the test's
``$ROOFLINE_CACHE_DIR``.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import onnx
import pytest
from _plugin_helpers import fixed_calibration, matmul_chain

from pytest_roofline.gate.identity import content_hash
from pytest_roofline.gate.model_store import default_model_store

ONE_THREAD = "--roofline-option=intra_op_threads=1"
ARGS = ("-p", "no:cacheprovider", ONE_THREAD, "--roofline-budget=2", "--roofline-report=r.json")
TEST = """
def test_mm(model_profile):
    prof = model_profile("mm.onnx", batch_size=4)
    assert prof.latency.median > 0
"""


@pytest.fixture
def project(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("ROOFLINE_LOAD_LIMIT", "off")  # the logic under test, not this machine's load
    (tmp_path / "cache").mkdir()
    cache = fixed_calibration(tmp_path / "cache", {"intra_op_threads": "1"})
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(cache))
    store = default_model_store()
    matmul_chain(pytester.path / "mm.onnx", 2)
    pytester.makepyfile(test_mm=TEST)
    pytester.store = store  # type: ignore[attr-defined]
    return pytester


def verdict(pytester) -> dict:
    return json.loads((pytester.path / "r.json").read_text())["results"][0]["verdict"]


def gate_figures(pytester) -> dict:
    return json.loads((pytester.path / "r.json").read_text())["results"][0]["profile"]["extra"]["gate"]


def record(pytester, *extra: str) -> None:
    pytester.runpytest(*ARGS, *extra).assert_outcomes(passed=1)
    assert verdict(pytester)["status"] == "new"


def slower_model(pytester) -> None:
    # four times the blocks: a paired ratio far above 1.05 whatever the load (one more block of a
    # ~5 us model left a busy runner's pairing a narrow margin)
    matmul_chain(pytester.path / "mm.onnx", 8)


def test_nothing_changed_is_unchanged_with_the_drift_and_less_timing(project):
    record(project)
    entry = next(
        iter(json.loads((project.path / ".roofline" / "test_mm.json").read_text())["entries"].values())
    )
    assert entry["identity"]["model"] == content_hash(project.path / "mm.onnx")
    assert (
        entry["identity"]["settings"]["intra_op_threads"] == "1" and entry["identity"]["values"] == "seed=0"
    )
    assert list((project.store.root).iterdir())[0].name == entry["identity"]["model"]  # kept in the store
    result = project.runpytest(*ARGS)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_mm.py::test_mm*unchanged*",
            "UNCHANGED * nothing that runs changed; this machine ran ×*of baseline time",
        ]
    )
    found = verdict(project)
    assert found["mode"] == "identity" and found["sessions"] == 0 and found["raw"]["drift"] > 0
    assert gate_figures(project) == {"mode": "identity", "drift": found["raw"]["drift"]}  # no sampling loop
    _one_timed_outcome(project.runpytest(*ARGS, "--roofline-retime", "--roofline-tolerance=80"))
    assert verdict(project)["status"] != "unchanged" and gate_figures(project)["figures"]


def test_the_retime_marker_and_ini_key_force_the_timed_comparison(project):
    record(project)
    # the timed verdict itself is not under test: a 20 us model read +80.3 % on a busy CI runner
    project.makepyfile(
        test_mm="import pytest\n\n@pytest.mark.roofline(retime=True, tolerance=80)\n" + TEST.lstrip()
    )
    _one_timed_outcome(project.runpytest(*ARGS))
    assert verdict(project)["mode"] == "stored" and gate_figures(project)["figures"]
    project.makepyfile(test_mm=TEST)
    project.makeini("[pytest]\nroofline_retime = true\nroofline_tolerance = 80\n")
    _one_timed_outcome(project.runpytest(*ARGS))
    assert verdict(project)["status"] not in ("unchanged", "new")


def _one_timed_outcome(result: pytest.RunResult) -> None:
    """One test ran and was judged by its timing: passed, or failed on it (never an error)."""
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1 and "error" not in outcomes, outcomes


def test_a_changed_model_is_paired_with_the_baseline_model_from_the_store(project):
    record(project)
    slower_model(project)
    result = project.runpytest(*ARGS)
    found = verdict(project)
    assert found["mode"] == "paired", result.stdout.str()
    assert any(
        "timed interleaved with the baseline's model from the model store /" in r for r in found["reasons"]
    )
    assert found["ratio"] > 1.05  # 8 blocks against 2 (against its own 8 blocks it would read ~1)


def _git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True, capture_output=True
    )


def test_without_the_store_the_baseline_model_comes_from_git(project):
    _git(project.path, "init", "-q")
    _git(project.path, "add", "mm.onnx")
    _git(project.path, "commit", "-qm", "model")
    record(project)
    shutil.rmtree(project.store.root)  # the CI cache was lost
    slower_model(project)
    project.runpytest(*ARGS)
    found = verdict(project)
    assert found["mode"] == "paired"
    assert any("from git at" in r for r in found["reasons"]), found["reasons"]


def test_neither_store_nor_git_compares_stored_figures_naming_what_is_missing(project):
    record(project)
    shutil.rmtree(project.store.root)
    slower_model(project)
    result = project.runpytest(*ARGS)
    found = verdict(project)
    assert found["mode"] == "stored" and found["status"] != "unchanged"
    result.stdout.fnmatch_lines(
        [
            "*note: model * → *, and the baseline's model is unreachable (not in the model store *; "
            "the baseline recorded no git commit): compared with the stored figures; keep the cache dir*"
        ]
    )


def test_a_re_saved_copy_of_the_same_graph_is_unchanged(project):
    record(project)
    model = onnx.load(str(project.path / "mm.onnx"))
    model.producer_name = "re-exported"
    onnx.save(model, str(project.path / "mm.onnx"))
    project.runpytest(*ARGS).assert_outcomes(passed=1)
    found = verdict(project)
    assert found["status"] == "unchanged"
    assert "the model was re-saved: other bytes, the same graph" in found["reasons"]


def test_a_changed_backend_env_var_compares_stored_figures_naming_it(project, monkeypatch):
    record(project)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    _one_timed_outcome(project.runpytest(*ARGS, "--roofline-tolerance=80"))  # its route is under test
    found = verdict(project)
    assert found["mode"] == "stored" and found["status"] not in ("unchanged", "incomparable")
    assert "across a change: OMP_WAIT_POLICY (unset) → PASSIVE" in found["message"]


def test_another_device_class_is_incomparable_and_records_its_own_baseline(project, monkeypatch):
    project.makeconftest(
        "import os\n\ndef pytest_roofline_device_class(fingerprint):\n    return os.environ['DEVICE_CLASS']\n"
    )
    monkeypatch.setenv("DEVICE_CLASS", "runner-a")
    record(project)
    monkeypatch.setenv("DEVICE_CLASS", "runner-b")
    result = project.runpytest(*ARGS)
    result.assert_outcomes(passed=1)
    found = verdict(project)
    assert found["status"] == "incomparable" and found["reasons"] == ["device class runner-a → runner-b"]
    keys = json.loads((project.path / ".roofline" / "test_mm.json").read_text())["entries"]
    assert sorted(k.rsplit("|", 1)[1] for k in keys) == ["runner-a", "runner-b"]
    project.runpytest(*ARGS).assert_outcomes(passed=1)
    assert verdict(project)["status"] == "unchanged"


@pytest.mark.skipif(not __import__("importlib").util.find_spec("xdist"), reason="pytest-xdist not installed")
def test_under_xdist_only_the_controller_records_and_keeps_the_model(project):
    project.makepyfile(
        test_mm="import pytest\n\n@pytest.mark.parametrize('b', [1, 2])\n"
        "def test_mm(model_profile, b):\n    model_profile('mm.onnx', batch_size=b)\n"
    )
    result = project.runpytest_subprocess(*ARGS, "-n", "2")
    result.assert_outcomes(passed=2)
    entries = json.loads((project.path / ".roofline" / "test_mm.json").read_text())["entries"]
    assert len(entries) == 2 and all(e["identity"] for e in entries.values())
    assert [p.name for p in project.store.root.iterdir()] == [content_hash(project.path / "mm.onnx")]


def test_a_git_lfs_pointer_at_the_baseline_commit_is_named(project):
    real = (project.path / "mm.onnx").read_bytes()
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 1\n"
    (project.path / "mm.onnx").write_bytes(pointer)  # committed as an LFS pointer
    _git(project.path, "init", "-q")
    _git(project.path, "add", "mm.onnx")
    _git(project.path, "commit", "-qm", "model")
    (project.path / "mm.onnx").write_bytes(real)  # the checkout has the real file
    record(project)
    shutil.rmtree(project.store.root)
    slower_model(project)
    project.runpytest(*ARGS)
    found = verdict(project)
    assert found["mode"] == "stored"
    assert any("is a Git LFS pointer, not the file; fetch the LFS objects" in r for r in found["reasons"])
