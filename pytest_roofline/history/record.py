"""What the plugin does with the history at session end: append the run, report confirmed steps."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_roofline.errors import RooflineError
from pytest_roofline.fmt import printable
from pytest_roofline.history.changepoints import find_changes
from pytest_roofline.history.points import HistoryPoint, points_of
from pytest_roofline.history.store import open_store

if TYPE_CHECKING:
    from pytest_roofline.results import RunResults

__all__ = ["confirmed_changes", "parent_commit", "record_or_note", "record_run"]

RECENT = 200


def parent_commit(rootdir: Path, commit: str | None) -> str | None:
    """The first parent of ``commit`` in the repository at ``rootdir`` (None when unknown)."""
    if not commit:
        return None
    from pytest_roofline.model.gitref import _git

    try:
        done = _git(["rev-parse", "--verify", "--quiet", f"{commit}^"], rootdir)
    except RooflineError:
        return None
    text = done.stdout.decode("utf-8", "replace").strip()
    return text or None


def confirmed_changes(stored: list[HistoryPoint], new_ids: set[str]) -> list[str]:
    """One line per change point that the points ``new_ids`` confirmed: found with them, not without."""
    lines = []
    series: dict[str, list[HistoryPoint]] = {}
    for point in stored:
        series.setdefault(point.series, []).append(point)
    for items in series.values():
        if not any(p.id in new_ids for p in items):
            continue
        items.sort(key=lambda p: p.order)
        items = items[-RECENT:]  # a step this run confirms is near its end
        now = find_changes(items)
        if not now.changes:
            continue
        earlier = find_changes([p for p in items if p.id not in new_ids], layers=False)
        known = {(c.commit, c.previous_commit) for c in earlier.changes}
        for change in now.changes:
            if (change.commit, change.previous_commit) not in known:
                lines.append(f"change point: {change.describe(items[0].test)}")
    return lines


def record_or_note(
    results: RunResults, url: str | None, default_dir: Path, rootdir: Path, errors: list[str]
) -> list[str]:
    """:func:`record_run`; a store that fails adds one line to ``errors`` instead of raising."""
    try:
        return record_run(results, url, default_dir, rootdir)
    except (RooflineError, OSError) as exc:
        errors.append(f"history not written: {exc}")
        return []


def record_run(results: RunResults, url: str | None, default_dir: Path, rootdir: Path) -> list[str]:
    """Append ``results``'s measured points to the history; the summary lines to print.

    Raises:
        RooflineError: the store cannot be opened, read or written (one line).
    """
    stored_at = time.time()
    points = [
        replace(p, recorded=stored_at)
        for p in points_of(results, parent=parent_commit(rootdir, results.commit), rootdir=rootdir)
    ]
    if not points:
        return []
    store = open_store(url, default_dir)
    try:
        added = store.append(points)
        tests = sorted({p.test for p in points})
        stored = [p for test in tests for p in store.points(test=test)]
    finally:
        store.close()
    lines = [f"history: {added} point{'s' if added != 1 else ''} added to {store.location}"]
    lines += [f"history: {note}" for note in store.notes]
    lines += [
        f"history: {p.test}: the model changed and was not timed beside the previous one ({p.unpaired}); "
        "its step is judged on the absolute figures"
        for p in points
        if p.unpaired
    ]
    try:
        lines += confirmed_changes(stored, {p.id for p in points})
    except RooflineError as exc:  # ruptures missing: the points are stored all the same
        lines.append(f"history: change points not checked ({exc})")
    return [printable(line) for line in lines]  # stored names: no escape sequence reaches the terminal
