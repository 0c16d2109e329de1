"""Paired mode's logic and errors with the fake backend and a real git repository."""

from __future__ import annotations

import subprocess

import pytest
from _plugin_helpers import FAKE, fails_with, relu_chain

TEST = """
def test_model(model_profile):
    model_profile("chain.onnx")
"""


def _git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True, capture_output=True
    )


@pytest.fixture
def repo(pytester, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    relu_chain(pytester.path / "chain.onnx", 4)
    pytester.makepyfile(test_perf=TEST)
    _git(pytester.path, "init", "-q")
    _git(pytester.path, "add", "chain.onnx")
    _git(pytester.path, "commit", "-qm", "model")
    return pytester


def test_unchanged_model_passes_and_slower_one_fails(repo):
    result = repo.runpytest(*FAKE, "--roofline-compare-ref", "HEAD", "--roofline-report", "r.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_perf.py::test_model*pass*x1.000*"])
    relu_chain(repo.path / "chain.onnx", 5)  # 6 nodes instead of 5: +20%
    fails_with(
        repo,
        [*FAKE, "--roofline-compare-ref", "HEAD"],
        "*time vs reference +20% exceeds the 5% tolerance*",
        "*why: graph changed: +1 block*measured +20*",
    )


def test_unknown_ref_is_a_one_line_error(repo):
    fails_with(
        repo,
        [*FAKE, "--roofline-compare-ref", "nosuchbranch"],
        "*roofline: git reference 'nosuchbranch' does not exist in*",
    )


def test_a_model_new_at_the_ref_is_new_and_passes_unless_strict(repo):
    relu_chain(repo.path / "new.onnx", 2)
    repo.makepyfile(test_perf="def test_model(model_profile):\n    model_profile('new.onnx')\n")
    result = repo.runpytest(*FAKE, "--roofline-compare-ref", "HEAD", "--roofline-report", "r.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_perf.py::test_model*new*"])
    # why it is new, in the terminal too (it was only in the JSON)
    result.stdout.fnmatch_lines(
        ["NEW test_perf.py::test_model :: * — latency: new.onnx is new at git reference 'HEAD'*"]
    )
    import json

    verdict = json.loads((repo.path / "r.json").read_text())["results"][0]["verdict"]
    assert verdict["status"] == "new" and verdict["mode"] == "paired"
    assert "new.onnx is new at git reference 'HEAD' (absent there, no rename found)" in verdict["message"]
    assert not (repo.path / ".roofline").exists()  # paired mode records no baseline
    fails_with(
        repo,
        [*FAKE, "--roofline-compare-ref", "HEAD", "--roofline-strict"],
        "*roofline new: new (batch 1) latency: new.onnx is new at git reference 'HEAD'*[--roofline-strict]*",
    )


def test_a_model_renamed_since_the_ref_is_compared_with_its_old_name(repo):
    _git(repo.path, "mv", "chain.onnx", "renamed.onnx")
    repo.makepyfile(test_perf="def test_model(model_profile):\n    model_profile('renamed.onnx')\n")
    result = repo.runpytest(*FAKE, "--roofline-compare-ref", "HEAD")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_perf.py::test_model*pass*x1.000*"])


def test_not_a_git_repository(pytester, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(pytester.path.parent))
    relu_chain(pytester.path / "chain.onnx", 2)
    pytester.makepyfile(test_perf=TEST)
    fails_with(
        pytester,
        [*FAKE, "--roofline-compare-ref", "HEAD"],
        "*roofline: * is not in a git repository*",
    )


def test_update_in_paired_mode_says_it_records_nothing_and_still_judges(repo):
    pytest.importorskip("xdist")
    relu_chain(repo.path / "chain.onnx", 5)  # slower than at HEAD: +20%
    result = repo.runpytest_subprocess(*FAKE, "-n", "2", "--roofline-update", "--roofline-compare-ref=HEAD")
    result.assert_outcomes(failed=1)  # --roofline-update accepts nothing here: the regression stands
    result.stdout.fnmatch_lines(["*roofline: --roofline-update records no baseline in paired mode*"])
    assert not (repo.path / ".roofline").exists()
