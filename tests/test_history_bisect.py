"""``roofline bisect``: a real git repository of a tiny model where one commit adds blocks."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from _plugin_helpers import live_module, matmul_chain

from pytest_roofline.cli import main

BUILD = """
import sys
from pathlib import Path
sys.path.insert(0, {helpers!r})
from _plugin_helpers import matmul_chain
matmul_chain(Path("model.onnx"), int(Path("blocks.txt").read_text()), size=96)
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def _repo(root: Path, blocks: list[int], built: bool = False) -> list[str]:
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    if built:
        (root / "build.py").write_text(BUILD.format(helpers=str(Path(__file__).parent)))
        (root / ".gitignore").write_text("model.onnx\n")
    shas = []
    for i, count in enumerate(blocks):
        if built:
            (root / "blocks.txt").write_text(f"{count}\n")
        else:
            matmul_chain(root / "model.onnx", count, size=96)
        (root / "notes.txt").write_text(f"commit {i}\n")
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", f"commit {i}")
        shas.append(_git(root, "rev-parse", "HEAD"))
    return shas


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """Seven commits; the fifth doubles the model's blocks (the others touch only notes)."""
    root = tmp_path / "repo"
    shas = _repo(root, [3, 3, 3, 3, 6, 6, 6])
    monkeypatch.chdir(root)
    return root, shas


def _bisect(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code = main(["bisect", *args, "--test", "tests/test_m.py::test_model", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_bisect_names_the_commit_that_added_blocks(repo, capsys) -> None:
    root, shas = repo
    result = _bisect(capsys, shas[0], shas[-1], "--model", "model.onnx", "--threshold", "3")
    assert set(result) >= {"culprit", "steps", "verdicts", "explanation", "repro"}
    assert result["culprit"] == shas[4]
    assert result["steps"] <= math.ceil(math.log2(len(shas))) + 2
    by_commit = {v["commit"]: v for v in result["verdicts"]}
    assert by_commit[shas[-1]]["status"] == "different" and by_commit[shas[-1]]["ratio"] > 1.3
    assert all(v["status"] in ("same", "different", "unknown") for v in result["verdicts"])
    assert all(len(v["commit"]) == 40 for v in result["verdicts"])
    assert "graph changed: +" in result["explanation"]
    assert result["repro"].startswith(f"roofline bisect {shas[3]} {shas[4]} --test ")
    assert _git(root, "worktree", "list").count("\n") == 0  # every temporary worktree removed


def test_bisect_with_build_command(tmp_path, capsys, monkeypatch) -> None:
    root = tmp_path / "built"
    shas = _repo(root, [3, 3, 6, 6], built=True)
    monkeypatch.chdir(root)
    build = f"{sys.executable} build.py"
    result = _bisect(capsys, shas[0], shas[-1], "--model", "model.onnx", "--build", build, "--threshold", "3")
    assert result["culprit"] == shas[2]
    assert "--build" in result["repro"]


def test_no_slower_commit(repo, capsys) -> None:
    root, shas = repo
    result = _bisect(capsys, shas[0], shas[3], "--model", "model.onnx")
    assert result["culprit"] is None
    assert result["steps"] == 1 and result["verdicts"][0]["status"] == "same"  # same bytes: not timed


def test_dirty_tree_is_refused_in_one_line(repo, capsys) -> None:
    root, shas = repo
    (root / "notes.txt").write_text("edited\n")
    assert main(["bisect", shas[0], shas[-1], "--test", "t", "--model", "model.onnx"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "uncommitted changes" in err


def test_ref_names_never_reach_a_shell_or_an_option(repo, capsys) -> None:
    root, shas = repo
    for hostile in ("--output=/tmp/x", "$(touch pwned)", "HEAD; touch pwned"):
        assert main(["bisect", "--test", "t", "--model", "model.onnx", "--", hostile, shas[-1]]) == 2
        assert "does not exist" in capsys.readouterr().err
    assert not (root / "pwned").exists()


def test_model_from_the_history_or_one_line(repo, capsys) -> None:
    root, shas = repo
    assert main(["bisect", shas[0], shas[-1], "--test", "tests/test_m.py::test_model"]) == 2
    assert "name its model with --model PATH" in capsys.readouterr().err


def test_unknown_is_measured_again_with_more_sessions(repo, capsys, monkeypatch) -> None:
    """Pinpoint's rule: an unknown verdict gets more repeats (twice the sessions) within the budget."""
    from pytest_roofline.gate.verdict import Verdict

    paired = live_module("pytest_roofline.gate.paired")

    root, shas = repo
    asked: list[int] = []

    def noisy_then_clear(old, new, backend, *, sessions, **kwargs):
        asked.append(sessions)
        status = "inconclusive" if sessions < 20 else "regression"
        return Verdict(status=status, mode="paired", metric="latency", current=1.5, tolerance=0.03, ratio=1.5)

    monkeypatch.setattr(paired, "measure_change", noisy_then_clear)
    result = _bisect(capsys, shas[3], shas[4], "--model", "model.onnx", "--threshold", "3")
    assert asked == [5, 10, 20]
    assert result["culprit"] == shas[4]
    assert result["verdicts"][0]["status"] == "different" and result["verdicts"][0]["sessions"] == 20


def _slower_at_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``measure_change`` replaced by one that calls every candidate slower; the intra-op threads
    it was asked to time at, one per call."""
    from pytest_roofline.gate.verdict import Verdict

    paired = live_module("pytest_roofline.gate.paired")

    threads: list[str] = []

    def slower(old, new, backend, **kwargs):
        threads.append(backend.options.get("intra_op_threads", "default"))
        return Verdict(
            status="regression", mode="paired", metric="latency", current=1.5, tolerance=0.03, ratio=1.5
        )

    monkeypatch.setattr(paired, "measure_change", slower)
    return threads


def test_bisect_times_at_the_threads_the_history_recorded(repo, capsys, monkeypatch) -> None:
    """The history pairs at the test's configured threads; bisect, its model from the history, times
    at those threads too (and its repro says so); ``--option`` overrides them."""
    from dataclasses import replace

    from _history_data import point

    from pytest_roofline.history.store import JsonLinesStore

    load = live_module("pytest_roofline.device.load")
    quiet = load.MachineLoad(0.5, 0.0, 0.0, 0.1, 2)  # a busy machine times at one thread (below)
    monkeypatch.setattr(load, "between", lambda start, end: quiet)
    root, shas = repo
    settings = {"intra_op_threads": "1", "execution_mode": "sequential"}
    JsonLinesStore(root / ".roofline" / "history").append(
        [replace(point(0, 1.0, commit=shas[0]), detail={"settings": settings})]
    )
    threads = _slower_at_threads(monkeypatch)
    result = _bisect(capsys, shas[3], shas[4], "--threshold", "3")
    assert threads == ["1"] and result["repro"].endswith("--option intra_op_threads=1")
    result = _bisect(capsys, shas[3], shas[4], "--threshold", "3", "--option", "intra_op_threads=2")
    assert threads[-1] == "2"


def test_bisect_beside_other_processes_times_at_one_thread_and_says_so(repo, capsys, monkeypatch) -> None:
    """Beside other processes bisect times each candidate at one intra-op thread per session, as
    the gate's paired mode and the history's pairing (the threads the noise model was fitted at),
    and says so.  At load 10 on 2 cores, 2-thread sessions read MobileNetV2's +12 % commits at
    1.029 and 1.270 and named commit 15 of the 20-commit scenario where commit 6 was the first
    slower; at one thread two runs named 10 and 6 (docs/history.md, "Under load")."""
    load, pairing = live_module("pytest_roofline.device.load"), live_module("pytest_roofline.history.pairing")
    root, shas = repo
    busy = load.MachineLoad(0.5, 0.6, 0.0, 3.0, 2)
    monkeypatch.setattr(pairing, "LOAD_WINDOW", 0.0, raising=False)
    monkeypatch.setattr(load, "between", lambda start, end: busy)
    threads = _slower_at_threads(monkeypatch)
    result = _bisect(capsys, shas[3], shas[4], "--model", "model.onnx", "--threshold", "3")
    assert threads == ["1"] and result["culprit"] == shas[4]
    assert result["notes"] == [
        "1 of 1 timed commits ran at one intra-op thread per session: other processes shared the CPUs "
        "(as the gate's paired mode)"
    ]
