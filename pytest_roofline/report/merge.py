"""Merge the results of one suite split across CI shards into one results document.

``roofline report merge a.json b.json -o all.json``: every shard's records in one
:class:`~pytest_roofline.results.RunResults`, so one report and one ``roofline baseline update``
cover the whole suite.  Shards must have measured the same commit; a test measured by two shards
is kept once (the later file's record).  Stale entries are those no shard produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pytest_roofline.errors import RooflineError
from pytest_roofline.results import ProfileRecord, RunResults, load_results

__all__ = ["merge_results"]


def merge_results(paths: Sequence[str | Path]) -> RunResults:
    """The shards at ``paths`` as one run (raises RooflineError, one line, on a mismatch)."""
    if not paths:
        raise RooflineError("report merge needs at least one results file")
    shards = [(Path(p), load_results(p)) for p in paths]
    first_path, first = shards[0]
    records: dict[tuple[str, str], ProfileRecord] = {}
    stale: set[str] = set()
    for path, shard in shards:
        if shard.commit != first.commit:
            raise RooflineError(
                f"{path} measured commit {shard.commit or 'none'}, {first_path} commit "
                f"{first.commit or 'none'}: merge the shards of one run only"
            )
        for record in shard.records:
            records[(record.test, record.key)] = record
        stale.update(shard.stale)
    produced = {key for _, key in records}
    roofline = next((s.roofline for _, s in shards if s.roofline is not None), None)
    return replace(
        first,
        records=tuple(records.values()),
        roofline=roofline,
        stale=tuple(sorted(stale - produced)),
        dirty=any(s.dirty for _, s in shards),
        created=max(s.created for _, s in shards),
        artifacts={},
    )
