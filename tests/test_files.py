"""Atomic writes keep ordinary permissions and leave no lock file in the baseline directory."""

from __future__ import annotations

import json
import os
import stat

from pytest_roofline.files import atomic_write_json, lock_path
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


def test_baseline_lock_lives_outside_the_repository(tmp_path):
    store = BaselineStore(tmp_path / ".roofline")
    with store._lock():
        assert lock_path(tmp_path / ".roofline", "baselines").exists()
    assert not any(p.name.endswith(".lock") for p in (tmp_path / ".roofline").iterdir())
