"""Atomic writes keep ordinary permissions and leave no lock file in the baseline directory."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import filelock
import onnx
import pytest

from pytest_roofline.files import atomic_write_json, file_lock
from pytest_roofline.gate.store import BaselineStore


def test_atomic_write_has_umask_permissions_and_no_temp_left(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "b.json", {"b": 1, "a": [1, 2]})
    finally:
        os.umask(old)
    path = tmp_path / "b.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    assert path.read_text().index('"a"') < path.read_text().index('"b"')  # sorted keys
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


def test_baseline_lock_is_the_folder_itself_and_leaves_no_file(tmp_path):
    """The baseline directory is locked in place (issue 36 H2): no lock file in the repository."""
    store = BaselineStore(tmp_path / ".roofline")
    with store._lock():
        assert list((tmp_path / ".roofline").iterdir()) == []
        with pytest.raises(filelock.Timeout), file_lock(tmp_path / ".roofline", timeout=0.2):
            pass
    assert list((tmp_path / ".roofline").iterdir()) == []


# --- locks that clean up after themselves (issue 14 item 11) ------------------------------------

COUNTER = """
import sys
from pathlib import Path
from pytest_roofline.files import file_lock

lock, counter = Path(sys.argv[1]), Path(sys.argv[2])
for _ in range(int(sys.argv[3])):
    with file_lock(lock, timeout=60):
        value = int(counter.read_text())  # read-modify-write: only safe under the lock
        counter.write_text(str(value + 1))
"""


def test_file_lock_removes_its_file(tmp_path):
    path = tmp_path / "locks" / "x.lock"
    lock = file_lock(path, timeout=5)
    with lock:
        assert path.exists()
    assert not path.exists() and list(path.parent.iterdir()) == []
    with lock:  # reusable
        assert path.exists()
    assert not path.exists()


def test_file_lock_excludes_other_processes_across_the_unlink(tmp_path):
    """Each release unlinks the file a waiter may already have opened: no increment may be lost."""
    counter = tmp_path / "counter"
    counter.write_text("0")
    script = tmp_path / "count.py"
    script.write_text(COUNTER)
    procs = [
        subprocess.Popen([sys.executable, str(script), str(tmp_path / "c.lock"), str(counter), "150"])
        for _ in range(4)
    ]
    assert [p.wait(timeout=240) for p in procs] == [0, 0, 0, 0]
    assert counter.read_text() == "600"
    assert not (tmp_path / "c.lock").exists()


def test_file_lock_never_holds_an_unlinked_file(tmp_path, monkeypatch):
    """The race, made certain: between our open() and our flock() the holder releases (unlinks)
    and a third process locks a new file at the same path.  Our flock on the old inode succeeds,
    but the lock is the third process's: we must keep waiting (here: time out), not go ahead."""
    import fcntl

    path = tmp_path / "race.lock"
    path.touch()
    real_open, third = os.open, []

    def open_then_lose_the_race(name, flags, mode=0o777, **kwargs):
        fd = real_open(name, flags, mode, **kwargs)
        if os.fspath(name) == str(path) and not third:
            os.unlink(path)  # the previous holder releases...
            third.append(real_open(path, os.O_RDWR | os.O_CREAT, 0o600))
            fcntl.flock(third[0], fcntl.LOCK_EX)  # ...and another process takes the new file
        return fd

    monkeypatch.setattr(os, "open", open_then_lose_the_race)
    try:
        with pytest.raises(filelock.Timeout), file_lock(path, timeout=0.3):
            pass
    finally:
        os.close(third[0])


def test_file_lock_times_out_while_held(tmp_path):
    path = tmp_path / "held.lock"
    with file_lock(path, timeout=5):
        start = time.monotonic()
        with pytest.raises(filelock.Timeout), file_lock(path, timeout=0.2):
            pass
        assert time.monotonic() - start < 5
        assert path.exists()  # the holder's file is untouched by the waiter that gave up


def test_a_roofline_profile_run_leaves_no_lock_file(tmp_path):
    """The calibration lock (in the cache dir) and every lock in the temp dir are gone after a run."""
    from pytest_roofline import zoo

    onnx.save(zoo.tiny_cnn(), tmp_path / "cnn.onnx")
    temp, cache = tmp_path / "tmp", tmp_path / "cache"
    temp.mkdir()
    # cached even when the roofs did not settle beside this busy machine's other work: the test is about locks
    env = {
        **os.environ,
        "TMPDIR": str(temp),
        "ROOFLINE_CACHE_DIR": str(cache),
        "ROOFLINE_CACHE_UNSETTLED": "1",
    }
    cli = "import sys; from pytest_roofline.cli import main; sys.exit(main())"
    argv = [sys.executable, "-c", cli, "profile", "cnn.onnx", "--batch", "1", "--quiet"]
    argv += ["--sessions", "2", "--rounds", "3", "--iterations", "2", "--option", "intra_op_threads=1"]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert any(cache.rglob("calibration-*.json"))  # it did calibrate, under a lock
    assert sorted(p.name for p in (*temp.rglob("*.lock"), *cache.rglob("*.lock"))) == []


def test_the_ci_recipes_outputs_are_git_ignored_and_the_baselines_are_not():
    """Issue 24 item 8: the recipe's `roofline/` and `.roofline-cache/` showed up in `git status`."""
    root = Path(__file__).resolve().parents[1]
    recipe = (root / ".github" / "workflows" / "perf-example.yml").read_text(encoding="utf-8")
    readme = (root / "README.md").read_text(encoding="utf-8")
    for folder in ("roofline/", ".roofline-cache/"):
        assert f"#   {folder}" in recipe and f"\n{folder}\n" in readme
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(
        ["git", "check-ignore", "roofline/summary.md", ".roofline-cache/x.json", ".roofline/test_a.json"],
        cwd=root,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert ignored == ["roofline/summary.md", ".roofline-cache/x.json"]
