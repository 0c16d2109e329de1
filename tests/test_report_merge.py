"""``roofline report merge``: CI shards of one suite as one results document."""

from __future__ import annotations

import json
from pathlib import Path

from _report_data import model_profile, result, run_results

from pytest_roofline.cli import main
from pytest_roofline.results import load_results


def _shard(path: Path, *tests: str, commit: str | None = None, stale: tuple[str, ...] = ()) -> Path:
    document = run_results(*(result(model_profile(4, seed=i), "pass", test=t) for i, t in enumerate(tests)))
    if commit:
        document["commit"] = commit
    document["stale"] = list(stale)
    path.write_text(json.dumps(document))
    return path


def test_merge_joins_shards_into_one_results_file(tmp_path: Path, capsys) -> None:
    a = _shard(tmp_path / "a.json", "t.py::a", "t.py::b", stale=("gone-key",))
    b = _shard(tmp_path / "b.json", "t.py::c")
    out = tmp_path / "all.json"
    assert main(["report", "merge", str(a), str(b), "-o", str(out), "-o", str(tmp_path / "all.md")]) == 0
    merged = load_results(out)
    assert sorted(r.test for r in merged.records) == ["t.py::a", "t.py::b", "t.py::c"]
    assert merged.stale == ("gone-key",)
    assert (tmp_path / "all.md").read_text().count("t.py::") >= 3
    assert "3 results of 2 shards" in capsys.readouterr().out


def test_merge_refuses_shards_of_other_commits(tmp_path: Path, capsys) -> None:
    a = _shard(tmp_path / "a.json", "t.py::a")
    b = _shard(tmp_path / "b.json", "t.py::b", commit="f" * 40)
    assert main(["report", "merge", str(a), str(b), "-o", str(tmp_path / "all.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "merge the shards of one run only" in err


def test_report_still_renders_one_file_and_refuses_two(tmp_path: Path, capsys) -> None:
    a = _shard(tmp_path / "a.json", "t.py::a")
    assert main(["report", str(a), "-o", str(tmp_path / "r.md")]) == 0
    assert main(["report", str(a), str(a), "-o", str(tmp_path / "r.md")]) == 2
    assert "roofline report merge" in capsys.readouterr().err


def test_merge_of_real_shards_keeps_every_shards_outcomes(pytester, monkeypatch, tmp_path: Path) -> None:
    """Two pytest shards (two tests each, one failing in the second shard): the merged summary counts
    all four tests and the failure (it counted the first shard's two passes only)."""
    from _plugin_helpers import FAKE, relu_chain

    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    relu_chain(pytester.path / "model.onnx", 3)
    body = "def test_{0}(model_profile):\n    model_profile('model.onnx')\n    assert {1}\n"
    pytester.makepyfile(
        test_a=body.format("a1", True) + body.format("a2", True),
        test_b=body.format("b1", True) + body.format("b2", False),
    )
    pytester.runpytest(*FAKE, "test_a.py", "--roofline-report=a.json").assert_outcomes(passed=2)
    pytester.runpytest(*FAKE, "test_b.py", "--roofline-report=b.json").assert_outcomes(passed=1, failed=1)
    out = pytester.path / "all.json"
    assert (
        main(
            ["report", "merge", str(pytester.path / "a.json"), str(pytester.path / "b.json"), "-o", str(out)]
        )
        == 0
    )
    merged = load_results(out)
    assert sorted(merged.outcomes.items()) == [
        ("test_a.py::test_a1", "passed"),
        ("test_a.py::test_a2", "passed"),
        ("test_b.py::test_b1", "passed"),
        ("test_b.py::test_b2", "failed"),
    ]
    assert main(["report", str(out), "-o", str(pytester.path / "all.md")]) == 0
    assert "Tests: 1 failed, 3 passed." in (pytester.path / "all.md").read_text()
