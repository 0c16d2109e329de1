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
