"""``roofline history``: the JSON contract, filters, explanations from git, export, the dashboard file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _history_data import series
from _plugin_helpers import relu_chain

from pytest_roofline.cli import main
from pytest_roofline.history.store import JsonLinesStore

pytest.importorskip("ruptures")

SERIES_KEYS = {"test", "key", "device_class", "points", "change_points"}
POINT_KEYS = {"commit", "time", "value", "ci", "verdict"}
CHANGE_KEYS = {"commit", "before", "after", "change", "ci", "layers", "explanation"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """A git repository of 4 commits of one model; the third adds two Relu blocks."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    shas = []
    for i, nodes in enumerate([4, 4, 6, 6]):
        relu_chain(root / "model.onnx", nodes)
        (root / "notes.txt").write_text(f"commit {i}\n")
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", f"commit {i}")
        shas.append(_git(root, "rev-parse", "HEAD"))
    monkeypatch.chdir(root)
    monkeypatch.delenv("ROOFLINE_HISTORY", raising=False)
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))  # an empty model store
    return root, shas


def _history(repo: tuple[Path, list[str]], store: Path) -> list:
    """Five runs per commit; the model gets 8 % slower at the third commit."""
    root, shas = repo
    values, hashes, commits = [], [], []
    noise = [1.0, 1.004, 0.997, 1.002, 0.999]
    for k, sha in enumerate(shas):
        for r in range(5):
            values.append((1.08 if k >= 2 else 1.0) * noise[r])
            hashes.append("new" if k >= 2 else "old")
            commits.append(sha)
    points = series(values, hashes)
    points = [
        p.__class__(**{**p.__dict__, "commit": c, "layers": {"relu4": 0.1} if k >= 10 else {}})
        for k, (p, c) in enumerate(zip(points, commits, strict=True))
    ]
    JsonLinesStore(store).append(points)
    return points


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["history", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_contract_with_explained_change_point(repo, tmp_path, capsys) -> None:
    store = tmp_path / "store"
    _history(repo, store)
    view = _json(capsys, "--store", str(store))
    (series_view,) = view["series"]
    assert SERIES_KEYS <= set(series_view)
    assert all(POINT_KEYS <= set(p) for p in series_view["points"])
    assert all(len(p["commit"]) == 40 for p in series_view["points"])  # full SHAs
    (change,) = series_view["change_points"]
    assert CHANGE_KEYS <= set(change)
    assert change["commit"] == repo[1][2]
    assert change["change"] == pytest.approx(0.08, abs=0.01)
    assert change["ci"][0] > 0
    assert change["layers"] == ["relu4 new"]
    assert change["explanation"].startswith("graph changed: +")


def test_explanation_says_when_models_are_not_reachable(repo, tmp_path, capsys, monkeypatch) -> None:
    store = tmp_path / "store"
    _history(repo, store)
    monkeypatch.chdir(tmp_path)  # outside the repository
    (change,) = _json(capsys, "--store", str(store))["series"][0]["change_points"]
    assert change["explanation"].startswith("models not reachable")


def test_filters_test_device_class_and_since(repo, tmp_path, capsys) -> None:
    store = tmp_path / "store"
    _history(repo, store)
    assert _json(capsys, "--store", str(store), "--test", "nothing")["series"] == []
    assert _json(capsys, "--store", str(store), "--device-class", "GPU")["series"] == []
    since = _json(capsys, "--store", str(store), "--since", repo[1][2], "--test", "test_model")
    assert {p["commit"] for p in since["series"][0]["points"]} == set(repo[1][2:])
    assert main(["history", "--store", str(store), "--since", "no-such-ref"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_table_names_the_change_point(repo, tmp_path, capsys) -> None:
    store = tmp_path / "store"
    _history(repo, store)
    assert main(["history", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "tests/test_m.py::test_model" in out
    assert "+8.0 % (CI" in out and f"at {repo[1][2][:12]}" in out


def test_export_writes_json_lines_that_import_back(repo, tmp_path, capsys) -> None:
    store = tmp_path / "store"
    points = _history(repo, store)
    assert main(["history", "export", "--store", str(store), "-o", str(tmp_path / "all.jsonl")]) == 0
    lines = (tmp_path / "all.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(p.id for p in points)


def test_store_from_environment(repo, tmp_path, capsys, monkeypatch) -> None:
    store = tmp_path / "env-store"
    _history(repo, store)
    monkeypatch.setenv("ROOFLINE_HISTORY", str(store))
    assert len(_json(capsys)["series"]) == 1


def test_html_dashboard_is_self_contained(repo, tmp_path, capsys) -> None:
    store = tmp_path / "store"
    _history(repo, store)
    out = tmp_path / "dash.html"
    assert main(["history", "html", str(out), "--store", str(store)]) == 0
    page = out.read_text()
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    assert "<script src" not in page and "<link" not in page
    assert repo[1][2] in page


def test_explanation_from_the_model_store_without_git(repo, tmp_path, capsys, monkeypatch) -> None:
    """Models the model store holds (every baseline's) explain a change point outside the repository."""
    from pytest_roofline.gate.model_store import default_model_store
    from pytest_roofline.model import model_hash

    root, shas = repo
    old, new = relu_chain(tmp_path / "old" / "model.onnx", 4), relu_chain(tmp_path / "new" / "model.onnx", 6)
    store = default_model_store()
    store.put(old)
    store.put(new)
    points = _history(repo, tmp_path / "unused")
    hashes = {"old": model_hash(old), "new": model_hash(new)}
    points = [
        p.__class__(**{**p.__dict__, "model_hash": hashes[p.model_hash], "commit": None}) for p in points
    ]
    JsonLinesStore(tmp_path / "store").append(points)
    monkeypatch.chdir(tmp_path)  # outside the repository: git cannot help
    (change,) = _json(capsys, "--store", str(tmp_path / "store"))["series"][0]["change_points"]
    assert change["explanation"].startswith("graph changed: +")


def test_since_past_the_first_commit_clamps_to_it(repo, tmp_path, capsys) -> None:
    """docs/ci.md's ``--since HEAD~200`` in a repository of 4 commits: every commit, one line saying so."""
    store = tmp_path / "store"
    _history(repo, store)
    assert main(["history", "--store", str(store), "--since", "HEAD~200", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert {p["commit"] for p in json.loads(captured.out)["series"][0]["points"]} == set(repo[1])
    assert captured.err == "--since HEAD~200: HEAD has only 4 commits; from the first one on\n"
    assert main(["history", "--store", str(store), "--since", "nobranch~200"]) == 2
    assert "does not exist" in capsys.readouterr().err
