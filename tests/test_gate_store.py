"""Typed baselines read strictly: schema-1 migration, malformed entries, nothing lost on update."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from _baselines import make_entry

from pytest_roofline.errors import BaselineError
from pytest_roofline.gate.baseline import BaselineEntry
from pytest_roofline.gate.conditions import Conditions
from pytest_roofline.gate.store import BaselineStore
from pytest_roofline.schema import BASELINE_FILE_SCHEMA, SchemaError, loads

#: A baseline file as the first pytest-roofline wrote it (the example suite's, as committed then).
SCHEMA_1 = Path(__file__).resolve().parent / "data" / "baselines" / "schema1_edgenet.json"


def test_a_schema_1_file_is_read_through_its_migration_and_rewritten_only_on_write(tmp_path):
    path = tmp_path / "test_edgenet_perf.json"
    shutil.copy(SCHEMA_1, path)
    before = path.read_bytes()
    assert json.loads(before)["schema_version"] == 1
    store = BaselineStore(tmp_path)
    file = store.read_file(path)
    assert file.version == 1 and not file.malformed and len(file.entries) == 5
    entry = next(iter(file.entries.values()))
    assert entry.control.name == "control-probe-v3" and entry.control.blocks["compute"] > 0
    assert entry.conditions.backend_version == "1.32.0"
    assert entry.conditions.settings["intra_op_threads"] == "1"  # from the fingerprint it recorded
    assert entry.conditions.settings["providers"] == "CPUExecutionProvider"
    assert path.read_bytes() == before  # reading never rewrites
    store.write([entry])
    data = json.loads(path.read_text())
    assert data["schema_version"] == BASELINE_FILE_SCHEMA and len(data["entries"]) == 5
    again = BaselineStore(tmp_path).read(path)[entry.key]
    assert again.history[-1].value == entry.figure and again.control == entry.control


def _bad(mutate) -> dict:
    data = make_entry().to_dict()
    mutate(data)
    return data


MALFORMED = {
    "nan session": (lambda d: d["sessions"].__setitem__(0, math.nan), "'sessions'[0]"),
    "negative figure": (lambda d: d.__setitem__("figure", -2.0), "'figure'"),
    "zero session": (lambda d: d.__setitem__("sessions", [0.0]), "'sessions'[0]"),
    "no sessions": (lambda d: d.__setitem__("sessions", []), "'sessions' is empty"),
    "huge batch": (lambda d: d.__setitem__("batch", 987654321987), "'batch'"),  # written as 1e999
    "layers as a list": (lambda d: d.__setitem__("layers", [1, 2]), "'layers'"),
    "layer time text": (lambda d: d["layers"].__setitem__("conv", {"time": "x"}), "'time'"),
    "no control": (lambda d: d.pop("control"), "'control'"),
    "control p25 of 0": (lambda d: d["control"].__setitem__("p25", 0), "'p25'"),
    "history as object": (lambda d: d.__setitem__("history", {"a": 1}), "'history'"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_entry_is_one_line_naming_file_key_and_field(tmp_path, case):
    mutate, field = MALFORMED[case]
    good = make_entry("tests/test_m.py::test_good")
    bad = _bad(mutate)
    path = tmp_path / "tests" / "test_m.json"
    path.parent.mkdir(parents=True)
    text = json.dumps(
        {"schema_version": BASELINE_FILE_SCHEMA, "entries": {good.key: good.to_dict(), bad["key"]: bad}},
        allow_nan=True,
    )
    path.write_text(text.replace("987654321987", "1e999"))
    store = BaselineStore(tmp_path)
    if case == "nan session":  # NaN is not JSON: the whole file is refused, never used
        with pytest.raises(BaselineError, match="corrupt.*not a number JSON allows"):
            store.get(good.key, good.test)
        return
    assert store.get(good.key, good.test) == good  # the other entries of the file stay usable
    with pytest.raises(BaselineError) as info:
        store.get(bad["key"], make_entry().test)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and bad["key"] in message and field in message
    assert "--roofline-update" in message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"schema_version": 2, "entries": []}', "'entries' is a list"),
        ("[" * 200_000 + "]" * 200_000, "nested more than"),
        ('{"schema_version": 2, "entries": {"k": {"figure": Infinity}}}', "not a number JSON allows"),
        ('{"entries": {}}', "no valid schema_version"),
    ],
)
def test_odd_files_are_one_line_not_a_traceback(tmp_path, text, words):
    path = tmp_path / "tests" / "test_m.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(BaselineError, match=words) as info:
        BaselineStore(tmp_path).get(make_entry().key, make_entry().test)
    assert "\n" not in str(info.value)


def test_update_keeps_every_entry_it_did_not_replace_and_says_what_it_kept(tmp_path):
    a, b = make_entry("tests/test_m.py::test_a"), make_entry("tests/test_m.py::test_b")
    broken = {"key": "tests/test_m.py::test_c|m.onnx|b1|onnxruntime|cpu x2", "figure": "fast"}
    path = tmp_path / "tests" / "test_m.json"
    path.parent.mkdir(parents=True)
    entries = {a.key: a.to_dict(), b.key: b.to_dict(), broken["key"]: broken}
    path.write_text(json.dumps({"schema_version": BASELINE_FILE_SCHEMA, "entries": entries}))
    store = BaselineStore(tmp_path)
    store.write([make_entry("tests/test_m.py::test_a", figure=3.0)], force=True)
    data = json.loads(path.read_text())["entries"]
    assert set(data) == {a.key, b.key, broken["key"]}  # three in, three out
    assert data[broken["key"]] == broken  # kept exactly as it was
    assert data[a.key]["figure"] == 3.0 and data[b.key] == b.to_dict()
    assert any("kept malformed entry" in note and broken["key"] in note for note in store.notes)


def test_a_malformed_entry_is_replaced_only_when_forced(tmp_path):
    entry = make_entry()
    path = tmp_path / "tests" / "test_m.json"
    path.parent.mkdir(parents=True)
    raw = {**entry.to_dict(), "figure": -1}
    path.write_text(json.dumps({"schema_version": BASELINE_FILE_SCHEMA, "entries": {entry.key: raw}}))
    store = BaselineStore(tmp_path)
    assert store.write([entry], replace_existing=False) == []  # a first-baseline write leaves it
    assert json.loads(path.read_text())["entries"][entry.key] == raw
    store.write([entry], force=True)
    assert BaselineStore(tmp_path).get(entry.key, entry.test) == entry


def test_entries_round_trip_and_refuse_wrong_types():
    entry = make_entry(settings={"intra_op_threads": "1"})
    assert BaselineEntry.from_dict(json.loads(json.dumps(entry.to_dict()))) == entry
    with pytest.raises(SchemaError, match="'key'"):
        BaselineEntry.from_dict({**entry.to_dict(), "key": 5})
    with pytest.raises(SchemaError, match="nested"):
        loads("{" * 100 + "}" * 100)


def test_conditions_compare_across_settings_and_releases_but_not_across_probes_or_figures():
    base = Conditions("1.32.0", {"intra_op_threads": "0", "providers": "CPUExecutionProvider"}, "probe-v3")
    threads = Conditions("1.32.0", {"intra_op_threads": "1", "providers": "CPUExecutionProvider"}, "probe-v3")
    assert base.differences(threads) == [] and base.changes(threads) == ["intra_op_threads 0 → 1"]
    assert base.notes(threads) == ["compared across a change: intra_op_threads 0 → 1"]
    minor = Conditions("1.33.0", base.settings, "probe-v3")
    assert base.differences(minor) == [] and base.changes(minor) == ["backend version 1.32.0 → 1.33.0"]
    patch = Conditions("1.32.1", base.settings, "probe-v3")
    assert base.differences(patch) == [] and base.notes(patch) == [
        "backend version 1.32.0 → 1.32.1 (patch release)"
    ]
    probe = Conditions("1.32.0", base.settings, "probe-v4")
    assert base.differences(probe) == ["control probe probe-v3 → probe-v4"]
    figure = Conditions("1.32.0", base.settings, "probe-v3", "one-thread")
    assert base.differences(figure) == ["gate figure at the configured threads → at one thread"]
    extra = Conditions("1.32.0", {**base.settings, "session.intra_op.allow_spinning": "0"}, "probe-v3")
    assert base.changes(extra) == ["session.intra_op.allow_spinning (unset) → 0"]


def test_a_rewritten_baseline_is_reviewable_one_line_per_layer_and_reads_back(tmp_path):
    """Issue 24 item 8: 259 KB for four models, most of it per-layer records indented over 7+ lines
    each with 16-digit times; the examples' committed files are read and rewritten, one line a layer."""
    examples = Path(__file__).resolve().parents[1] / "examples" / ".roofline"
    committed = BaselineStore(examples).all_entries()
    assert committed  # the committed files of the earlier layout still read
    store = BaselineStore(tmp_path)
    store.write(list(committed.values()), force=True)
    before = sum(p.stat().st_size for p in examples.glob("*.json"))
    after = sum(p.stat().st_size for p in tmp_path.rglob("*.json"))
    assert after <= 1.02 * before  # re-recorded in this layout (247 KB -> 171 KB); a rewrite keeps it
    layers = sum(len(e.layers) for e in committed.values())
    text = "".join(p.read_text() for p in tmp_path.rglob("*.json"))
    assert text.count('"op_type"') == layers and len(text.splitlines()) < 2 * layers + 1500
    one_line = [line for line in text.splitlines() if '"op_type"' in line]
    assert all(line.rstrip(",").endswith("}") and '"time"' in line for line in one_line)
    again = BaselineStore(tmp_path).all_entries()
    assert again.keys() == committed.keys()
    for key, entry in committed.items():
        for name, layer in entry.layers.items():
            reread = again[key].layers[name]
            assert reread.nodes == layer.nodes and reread.op_type == layer.op_type
            assert reread.time == pytest.approx(layer.time, rel=1e-3)
