"""The history stores: embedded JSON lines and a real PostgreSQL server, one protocol."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest
from _history_data import point, postgres_url  # noqa: F401 - the session fixture

from pytest_roofline.errors import RooflineError
from pytest_roofline.history.points import HistoryPoint
from pytest_roofline.history.store import JsonLinesStore, PostgresStore, open_store

WRITERS, POINTS_EACH = 8, 100


def test_point_round_trips_through_json() -> None:
    original = point(3, 1.25, layers={"conv": 0.5})
    assert HistoryPoint.from_dict(json.loads(json.dumps(original.to_dict()))) == original


def test_point_of_newer_version_is_refused() -> None:
    data = {**point(0, 1.0).to_dict(), "v": 99}
    with pytest.raises(Exception, match="newer"):
        HistoryPoint.from_dict(data)


def test_open_store_picks_the_backend(tmp_path: Path) -> None:
    assert isinstance(open_store(None, tmp_path), JsonLinesStore)
    assert open_store(f"file://{tmp_path}/h", tmp_path).location == f"{tmp_path}/h"
    assert open_store(str(tmp_path / "x"), tmp_path).location == str(tmp_path / "x")


def test_embedded_layout_one_file_per_device_class_and_commit(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path)
    added = store.append(
        [point(0, 1.0, commit="a" * 40), point(1, 1.1, commit="b" * 40, device_class="GPU/x")]
    )
    assert added == 2
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.jsonl"))
    assert files == [f"CPU_x2/{'a' * 40}.jsonl", f"GPU_x/{'b' * 40}.jsonl"]
    assert [p.value for p in store.points()] == [1.0, 1.1]
    assert [p.value for p in store.points(device_class="GPU/x")] == [1.1]


def test_embedded_append_is_idempotent(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path)
    points = [point(i, 1.0 + i) for i in range(5)]
    assert store.append(points) == 5
    assert store.append(points) == 0
    assert store.append([*points, point(9, 2.0)]) == 1
    assert len(store.points()) == 6


def test_embedded_skips_a_torn_last_line_and_keeps_appending(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path)
    store.append([point(0, 1.0, commit="c" * 40)])
    path = next(tmp_path.rglob("*.jsonl"))
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"id": "torn", "val')  # a crash mid-write
    assert [p.id for p in store.points()] == [point(0, 1.0).id]
    store.append([point(1, 1.0, commit="c" * 40)])
    assert len(store.points()) == 2


def test_embedded_corrupt_line_is_named_and_skipped(tmp_path: Path) -> None:
    """One bad line costs that line, never the store (issue 36 H9)."""
    (tmp_path / "CPU").mkdir()
    (tmp_path / "CPU" / "x.jsonl").write_text("not json\n{}\n")
    store = JsonLinesStore(tmp_path)
    assert store.points() == []
    assert any("x.jsonl, line 1: not JSON; skipped" in note for note in store.notes)
    assert any("x.jsonl, line 2:" in note for note in store.notes)


def _write(url: str, writer: int) -> None:
    store = open_store(url, Path("."))
    try:
        for i in range(POINTS_EACH):
            # every writer also re-sends a shared point: it must be stored once
            shared = point(0, 1.0, writer="shared", commit="d" * 40)
            store.append([point(i, 1.0 + i, writer=f"w{writer}-", commit=f"{i % 7:040x}"), shared])
    finally:
        store.close()


def _concurrent(url: str) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write, args=(url, w)) for w in range(WRITERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0


def _assert_all_once(points: list[HistoryPoint]) -> None:
    ids = [p.id for p in points]
    assert len(ids) == len(set(ids)), "a point was stored twice"
    expected = {point(i, 1.0, writer=f"w{w}-").id for w in range(WRITERS) for i in range(POINTS_EACH)}
    assert set(ids) == expected | {point(0, 1.0, writer="shared").id}, "a point was lost"


def test_embedded_concurrent_writers_lose_nothing_and_double_nothing(tmp_path: Path) -> None:
    _concurrent(str(tmp_path / "history"))
    _assert_all_once(JsonLinesStore(tmp_path / "history").points())
    lines = sum(len(p.read_text().splitlines()) for p in (tmp_path / "history").rglob("*.jsonl"))
    assert lines == WRITERS * POINTS_EACH + 1


def test_embedded_append_waits_its_lock_limit_then_raises_in_one_line(tmp_path: Path) -> None:
    """Another process holds the file's lock: the append waits the store's ``lock_timeout``, raises
    naming it, and leaves the file as it was."""
    from pytest_roofline.files import file_lock

    one_commit = "c" * 40
    store = JsonLinesStore(tmp_path, lock_timeout=0.3)
    store.append([point(0, 1.0, commit=one_commit)])
    path = store.file_for(point(0, 1.0, commit=one_commit))
    before = path.read_bytes()
    with file_lock(path, None, keep=True):  # its own open file: flock conflicts as another process's
        with pytest.raises(RooflineError) as caught:
            store.append([point(1, 1.0, commit=one_commit), point(2, 1.0, commit=one_commit)])
    added = "0 of 2 points added"
    assert str(caught.value) == f"history {path} stayed locked for 0.3 s by another process; {added}"
    assert path.read_bytes() == before
    assert JsonLinesStore(tmp_path).lock_timeout == 120  # the default: a stuck writer, not a busy one


def test_postgres_round_trip_filters_and_idempotence(postgres_url: str) -> None:  # noqa: F811
    store = PostgresStore(postgres_url)
    try:
        store._conn.execute("TRUNCATE roofline_points")
        store._conn.commit()
        points = [point(i, 1.0 + i, test="t::a" if i % 2 else "t::b") for i in range(6)]
        assert store.append(points) == 6
        assert store.append(points) == 0
        assert store.points() == sorted(points, key=lambda p: p.order)
        assert [p.test for p in store.points(test="t::a")] == ["t::a"] * 3
        assert store.points(device_class="nothing") == []
    finally:
        store.close()


def test_postgres_schema_is_versioned_and_migrated_once(postgres_url: str) -> None:  # noqa: F811
    first, second = PostgresStore(postgres_url), PostgresStore(postgres_url)
    try:
        rows = first._conn.execute("SELECT version FROM roofline_schema_version").fetchall()
        assert rows == [(1,)]
        first._conn.execute("INSERT INTO roofline_schema_version VALUES (99)")
        first._conn.commit()
        with pytest.raises(RooflineError, match="schema 99, newer"):
            second.migrate()
    finally:
        first._conn.execute("DELETE FROM roofline_schema_version WHERE version = 99")
        first._conn.commit()
        first.close()
        second.close()


def test_postgres_concurrent_writers_lose_nothing_and_double_nothing(postgres_url: str) -> None:  # noqa: F811
    store = PostgresStore(postgres_url)
    store._conn.execute("TRUNCATE roofline_points")
    store._conn.commit()
    _concurrent(postgres_url)
    try:
        _assert_all_once(store.points())
        count = store._conn.execute("SELECT count(*) FROM roofline_points").fetchone()
        assert count == (WRITERS * POINTS_EACH + 1,)
    finally:
        store.close()


def test_postgres_unreachable_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(RooflineError, match="cannot connect") as caught:
        PostgresStore(f"postgresql://u:secret@/db?host={tmp_path}")
    assert "secret" not in str(caught.value)
    assert "\n" not in str(caught.value)


def test_postgres_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(RooflineError, match=r"pytest-roofline\[history\]"):
        open_store("postgresql://x@/db", Path("."))


def test_runs_within_one_second_keep_their_order(tmp_path: Path) -> None:
    """Results carry their time to the second: the time a point was stored orders runs within one."""
    from dataclasses import replace

    first = replace(point(0, 1.0, commit="e" * 40), recorded=100.5)
    second = replace(point(1, 2.0, commit="f" * 40), time=first.time, recorded=100.9)
    store = JsonLinesStore(tmp_path)
    store.append([second])
    store.append([first])
    assert [p.value for p in store.points()] == [1.0, 2.0]
