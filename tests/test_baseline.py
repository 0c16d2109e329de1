"""Baseline store: schema, atomic writes, merge, history, corrupt files, concurrency."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from _baselines import make_entry

from pytest_roofline.device import device_class
from pytest_roofline.errors import BaselineError
from pytest_roofline.gate.baseline import HISTORY_LIMIT, entry_key
from pytest_roofline.gate.store import BaselineStore
from pytest_roofline.schema import BASELINE_FILE_SCHEMA


def test_entry_key_is_logical_identity():
    key = entry_key("t.py::test", "models/m.onnx", 4, {"seq": 128}, "openvino", "Xeon x2")
    assert key == "t.py::test|models/m.onnx|b4,seq=128|openvino|Xeon x2"


def test_device_class_prefers_accelerator_then_cpu():
    assert device_class({"gpu": "NVIDIA H100"}) == "NVIDIA H100"
    assert device_class({"cpu": {"model": "EPYC", "cores": 2}}) == "EPYC x2"
    assert " x" in device_class({})


def test_file_per_module_sorted_and_versioned(tmp_path):
    store = BaselineStore(tmp_path / ".roofline")
    entries = [make_entry("tests/test_m.py::test_b"), make_entry("tests/test_m.py::test_a")]
    written = store.write(entries)
    path = tmp_path / ".roofline" / "tests" / "test_m.json"
    assert written == [path]
    data = json.loads(path.read_text())
    assert data["schema_version"] == BASELINE_FILE_SCHEMA
    assert list(data["entries"]) == sorted(data["entries"])
    assert path.read_text() == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert BaselineStore(tmp_path / ".roofline").get(entries[0].key, entries[0].test) == entries[0]


def test_update_keeps_bounded_history(tmp_path):
    store = BaselineStore(tmp_path)
    for i in range(HISTORY_LIMIT + 5):
        store.write([make_entry(figure=float(i + 1))])
    entry = BaselineStore(tmp_path).get(make_entry().key, make_entry().test)
    assert entry.figure == HISTORY_LIMIT + 5
    assert len(entry.history) == HISTORY_LIMIT
    assert entry.history[-1].value == HISTORY_LIMIT + 4
    assert entry.history[-1].commit == "abc"


def test_merge_keeps_entries_written_by_others(tmp_path):
    BaselineStore(tmp_path).write([make_entry("tests/test_m.py::test_a")])
    BaselineStore(tmp_path).write([make_entry("tests/test_m.py::test_b")])
    assert len(BaselineStore(tmp_path).all_entries()) == 2


def test_replace_existing_false_only_adds(tmp_path):
    store = BaselineStore(tmp_path)
    store.write([make_entry(figure=1.0)])
    assert store.write([make_entry(figure=9.0)], replace_existing=False) == []
    assert store.get(make_entry().key, make_entry().test).figure == 1.0


@pytest.mark.parametrize(
    ("content", "words"),
    [("{not json", "corrupt"), (json.dumps({"schema_version": 99, "entries": {}}), "schema_version 99")],
)
def test_corrupt_or_future_file_is_reported_and_not_rewritten(tmp_path, content, words):
    store = BaselineStore(tmp_path)
    path = store.file_for(make_entry().test)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(BaselineError, match=words) as info:
        store.get(make_entry().key, make_entry().test)
    assert str(path) in str(info.value)
    with pytest.raises(BaselineError):
        store.write([make_entry()])
    assert path.read_text() == content
    if "99" in content:  # a newer schema is never rewritten by this version, not even when forced
        with pytest.raises(BaselineError, match="upgrade pytest-roofline"):
            store.write([make_entry()], force=True)
        assert path.read_text() == content
        return
    store.write([make_entry()], force=True)
    assert store.read(path)[make_entry().key].figure == 2.0
    assert path.with_name(path.name + ".corrupt").read_text() == content  # nothing lost


def test_remove_deletes_entries_and_empty_files(tmp_path):
    store = BaselineStore(tmp_path)
    a, b = make_entry("tests/test_m.py::test_a"), make_entry("tests/test_n.py::test_b")
    store.write([a, b])
    assert store.remove([a.key, "nothing"]) == [a.key]
    assert list(store.all_entries()) == [b.key]
    assert not store.file_for(a.test).exists()


def _writer(directory: str, index: int) -> None:
    BaselineStore(directory).write([make_entry(f"tests/test_m.py::test_{index}")])


def test_concurrent_writers_lose_nothing(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), i)) for i in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert len(BaselineStore(tmp_path).all_entries()) == 6


def test_sigkill_between_temp_write_and_replace_leaves_old_file_valid(tmp_path):
    store = BaselineStore(tmp_path)
    store.write([make_entry(figure=1.0)])
    path = store.file_for(make_entry().test)
    before = path.read_text()
    script = textwrap.dedent(f"""
        import os, signal
        import pytest_roofline.gate.store as b
        def stop(src, dst):
            print("TEMP", src, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        b.os.replace = stop
        from tests_helper_entry import make
        b.BaselineStore({str(tmp_path)!r}).write([make()])
    """)
    helper = tmp_path / "tests_helper_entry.py"
    helper.write_text(
        textwrap.dedent("""
        from _baselines import make_entry
        def make():
            return make_entry(figure=5.0, sessions=(5.0,))
    """)
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.path.dirname(__file__)])},
    )
    assert proc.returncode == -signal.SIGKILL
    temp = proc.stdout.split("TEMP", 1)[1].split()[0]
    assert os.path.exists(temp)  # the new content was fully written, then the process died
    assert path.read_text() == before
    assert store.read(path)[make_entry().key].figure == 1.0
