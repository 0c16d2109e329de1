"""Merge the results of one suite split across CI shards into one results document.

``roofline report merge a.json b.json -o all.json``: every shard's records in one
:class:`~pytest_roofline.results.RunResults`, so one report and one ``roofline baseline update``
cover the whole suite.  Shards must have measured the same commit; a test measured by two shards
is kept once (the later file's record).  Every shard's pytest outcomes are kept (the summary
counts the whole suite's tests).  Stale entries are those no shard produced.

:class:`WorkerPayload` is the same join inside one pytest run: what an xdist worker sends the
controller (its records, the node ids it collected, the backends it measured), as JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_roofline.errors import RooflineError
from pytest_roofline.results import ProfileRecord, RunResults, load_results, serving_records

if TYPE_CHECKING:
    from pytest_roofline.serving.gate import ServingRecord

__all__ = ["WorkerPayload", "merge_results"]


@dataclass(frozen=True)
class WorkerPayload:
    """What one xdist worker hands the controller at its session end."""

    records: tuple[ProfileRecord, ...] = ()
    collected: frozenset[str] = frozenset()
    backends_used: frozenset[tuple[str, str]] = frozenset()  # (backend, device class) measured
    narrowed: frozenset[str] = frozenset()  # modules collected in part (node ids asked for)
    serving: tuple[ServingRecord, ...] = ()  # model_load calls

    def to_json(self) -> str:
        """The payload as JSON text (non-finite numbers as null)."""
        from pytest_roofline.report import finite

        return json.dumps(
            finite(
                {
                    "records": [r.to_dict() for r in self.records],
                    "collected": sorted(self.collected),
                    "backends_used": sorted(self.backends_used),
                    "narrowed": sorted(self.narrowed),
                    "serving": [r.to_dict() for r in self.serving],
                }
            )
        )

    @classmethod
    def from_json(cls, payload: str) -> WorkerPayload:
        """Inverse of :meth:`to_json`."""
        data = json.loads(payload)
        return cls(
            records=tuple(ProfileRecord.from_dict(r) for r in data.get("records", [])),
            collected=frozenset(data.get("collected", [])),
            backends_used=frozenset((str(b), str(d)) for b, d in data.get("backends_used", [])),
            narrowed=frozenset(data.get("narrowed", [])),
            serving=serving_records(data.get("serving") or []),
        )


def merge_results(paths: Sequence[str | Path]) -> RunResults:
    """The shards at ``paths`` as one run (raises RooflineError, one line, on a mismatch)."""
    if not paths:
        raise RooflineError("report merge needs at least one results file")
    shards = [(Path(p), load_results(p)) for p in paths]
    first_path, first = shards[0]
    records: dict[tuple[str, str], ProfileRecord] = {}
    outcomes: dict[str, str] = {}
    written: set[str] = set()
    stale: set[str] = set()
    for path, shard in shards:
        if shard.commit != first.commit:
            raise RooflineError(
                f"{path} measured commit {shard.commit or 'none'}, {first_path} commit "
                f"{first.commit or 'none'}: merge the shards of one run only"
            )
        for record in shard.records:
            records[(record.test, record.key)] = record
        outcomes.update(shard.outcomes)
        written.update(shard.baselines_written)
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
        outcomes=outcomes,
        accepted=any(s.accepted for _, s in shards),
        baselines_written=tuple(sorted(written)),
        serving=tuple(r for _, s in shards for r in s.serving),
    )
