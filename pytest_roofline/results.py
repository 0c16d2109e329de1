"""The results of a run: one typed model, one schema constant, one loader.

A :class:`RunResults` is what ``pytest --roofline-report=PATH.json`` writes, what every report
format renders, what ``roofline baseline update`` accepts, and what ``roofline profile --html``
builds for the profiles it measured.  Its JSON form is documented in docs/results-schema.md;
older documents are read through :func:`results_to_2` (a step of schema.MIGRATIONS, asv-style).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_roofline.errors import RooflineError
from pytest_roofline.files import read_document
from pytest_roofline.schema import (
    RESULTS,
    RESULTS_SCHEMA,
    SchemaError,
    as_mapping,
    check_kind,
    loads,
    migrate,
    migration,
    read_list,
)
from pytest_roofline.stamp import __version__, now

if TYPE_CHECKING:
    from pytest_roofline.gate.baseline import BaselineEntry, HistoryPoint
    from pytest_roofline.gate.change import ChangeReport
    from pytest_roofline.gate.types import GateOutcome
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.model.gitref import GitInfo
    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.roofline import DeviceRoofline
    from pytest_roofline.serving.gate import ServingRecord

__all__ = [
    "RESULTS_KIND",
    "ProfileRecord",
    "RunResults",
    "load_results",
    "parse_results",
    "serving_records",
    "with_outcomes",
    "with_spans",
]

#: The ``kind`` of a run-results document (beside its ``schema_version``).
RESULTS_KIND = "results"
TOOL = "pytest-roofline"


@dataclass(frozen=True)
class ProfileRecord:
    """One profiled model in one test: its profile, verdicts, history and baseline candidate."""

    test: str
    key: str
    profile: ModelProfile
    verdict: Verdict
    extra_verdicts: tuple[Verdict, ...] = ()
    entry: BaselineEntry | None = None
    history: tuple[HistoryPoint, ...] = ()
    outcome: str = "passed"
    change: ChangeReport | None = None  # what changed in the graph since the baseline / reference

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        """The main verdict and the others (layer metrics)."""
        return (self.verdict, *self.extra_verdicts)

    @classmethod
    def of_outcome(cls, test: str, key: str, outcome: GateOutcome) -> ProfileRecord:
        """The record of what the gate found for one model of ``test`` (baseline key ``key``)."""
        return cls(
            test=test,
            key=key,
            profile=outcome.profile,
            verdict=outcome.verdict,
            extra_verdicts=outcome.extra_verdicts,
            entry=outcome.entry,
            history=outcome.history,
            change=outcome.change,
        )

    def failure_messages(self, baseline_file: Path, strict: bool) -> list[str]:
        """The test's failure text for this record's verdicts (``gate.judge.failure_messages``)."""
        from pytest_roofline.gate.judge import failure_messages

        return failure_messages(
            self.verdicts,
            model=self.profile.model_name,
            batch=self.profile.batch,
            key=self.key,
            baseline_file=baseline_file,
            strict=strict,
        )

    def to_dict(self, include_samples: bool = True) -> dict[str, Any]:
        """The results-schema ``results[]`` item."""
        return {
            "test": self.test,
            "key": self.key,
            "profile": self.profile.to_dict(include_samples),
            "verdict": self.verdict.to_dict(),
            "verdicts": [v.to_dict() for v in self.extra_verdicts],
            "history": [h.to_dict() for h in self.history],
            "outcome": self.outcome,
            "entry": self.entry.to_dict() if self.entry else None,
            "change": self.change.to_dict() if self.change else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfileRecord:
        """Inverse of :meth:`to_dict` (raises SchemaError, KeyError, TypeError, ValueError)."""
        from pytest_roofline.gate.baseline import BaselineEntry, HistoryPoint
        from pytest_roofline.gate.change import ChangeReport
        from pytest_roofline.gate.verdict import Verdict
        from pytest_roofline.profile import ModelProfile

        entry, change = data.get("entry"), data.get("change")
        return cls(
            test=str(data["test"]),
            key=str(data.get("key", "")),
            profile=ModelProfile.from_dict(as_mapping(data["profile"], "'profile'")),
            verdict=Verdict.from_dict(as_mapping(data.get("verdict") or _NOT_COMPARED, "'verdict'")),
            extra_verdicts=tuple(
                Verdict.from_dict(as_mapping(v, "a verdict")) for v in read_list(data, "verdicts")
            ),
            entry=BaselineEntry.from_dict(as_mapping(entry, "'entry'")) if entry else None,
            history=tuple(
                HistoryPoint.from_dict(as_mapping(h, "a history point")) for h in read_list(data, "history")
            ),
            outcome=str(data.get("outcome", "passed")),
            change=ChangeReport.from_dict(as_mapping(change, "'change'")) if change else None,
        )


_NOT_COMPARED = {"status": "not-compared", "mode": "stored", "metric": "latency", "tolerance": 0.0}


@dataclass(frozen=True)
class RunResults:
    """Everything a run produced."""

    records: tuple[ProfileRecord, ...]
    backend: str
    roofline: DeviceRoofline | None = None
    stale: tuple[str, ...] = ()
    commit: str | None = None
    branch: str | None = None
    dirty: bool = False
    created: str = field(default_factory=now)
    version: str = ""
    artifacts: dict[str, str] = field(default_factory=dict, hash=False)
    project: str | None = None
    tool: str = TOOL
    outcomes: dict[str, str] = field(default_factory=dict, hash=False)  # every test's pytest outcome
    accepted: bool = False  # run with --roofline-update: its figures became the baselines
    baselines_written: tuple[str, ...] = ()
    serving: tuple[ServingRecord, ...] = ()  # model_load calls: LoadGen's results and their verdicts

    @classmethod
    def of_profiles(cls, profiles: Sequence[ModelProfile], label: str = "roofline profile") -> RunResults:
        """Results holding bare profiles (``roofline profile --html``): no verdicts, no baselines."""
        from pytest_roofline.gate.verdict import new_verdict

        records = tuple(
            ProfileRecord(
                test=f"{label} {p.model_name} batch {p.batch}",
                key="",
                profile=p,
                verdict=new_verdict([], tolerance=0.0, status="not-compared", message="profiled, not gated"),
            )
            for p in profiles
        )
        roof = next((p.roofline for p in profiles if p.roofline is not None), None)
        backend = profiles[0].backend if profiles else ""
        return cls(records=records, backend=backend, roofline=roof, version=__version__)

    def to_dict(self, include_samples: bool = True) -> dict[str, Any]:
        """JSON-ready dict (non-finite numbers are left to the writer: see report.finite)."""
        data: dict[str, Any] = {
            "kind": RESULTS_KIND,
            "schema_version": RESULTS_SCHEMA,
            "tool": self.tool,
            "version": self.version or __version__,
            "created": self.created,
            "commit": self.commit,
            "branch": self.branch,
            "dirty": self.dirty,
            "backend": self.backend,
            "roofline": self.roofline.to_dict() if self.roofline else None,
            "results": [r.to_dict(include_samples) for r in self.records],
            "stale": sorted(self.stale),
        }
        if self.artifacts:
            data["artifacts"] = dict(self.artifacts)
        if self.project:
            data["project"] = self.project
        if self.outcomes:
            data["outcomes"] = dict(sorted(self.outcomes.items()))
        if self.accepted:
            data["accepted"] = True
        if self.baselines_written:
            data["baselines_written"] = list(self.baselines_written)
        if self.serving:
            data["serving"] = [r.to_dict() for r in self.serving]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResults:
        """Inverse of :meth:`to_dict`, for a document of the current schema."""
        from pytest_roofline.roofline import DeviceRoofline

        roofline = data.get("roofline")
        artifacts = data.get("artifacts") or {}
        if isinstance(artifacts, list):  # an early form: a list of paths
            artifacts = {"html": next((str(a) for a in artifacts if str(a).endswith(".html")), "")}
        return cls(
            records=tuple(
                ProfileRecord.from_dict(as_mapping(r, "a result")) for r in read_list(data, "results")
            ),
            backend=str(data.get("backend") or ""),
            roofline=DeviceRoofline.from_dict(as_mapping(roofline, "'roofline'")) if roofline else None,
            stale=tuple(str(k) for k in read_list(data, "stale")),
            commit=data.get("commit"),
            branch=data.get("branch"),
            dirty=bool(data.get("dirty", False)),
            created=str(data.get("created") or ""),
            version=str(data.get("version") or ""),
            artifacts={str(k): str(v) for k, v in as_mapping(artifacts, "'artifacts'").items() if v},
            project=data.get("project"),
            tool=str(data.get("tool") or TOOL),
            outcomes={
                str(k): str(v) for k, v in as_mapping(data.get("outcomes") or {}, "'outcomes'").items()
            },
            accepted=bool(data.get("accepted", False)),
            baselines_written=tuple(str(p) for p in read_list(data, "baselines_written")),
            serving=serving_records(read_list(data, "serving")),
        )

    @classmethod
    def of_run(
        cls,
        records: Sequence[ProfileRecord],
        *,
        backend: str,
        rooflines: Iterable[DeviceRoofline | None],
        stale: Sequence[str],
        git: GitInfo,
        outcomes: Mapping[str, str],
        accepted: bool,
        baselines_written: Sequence[str],
        serving: Sequence[ServingRecord] = (),
    ) -> RunResults:
        """A test run's results; its roofline is the first calibrated one, else a profile's."""
        roofline = next((r for r in rooflines if r is not None), None)
        if roofline is None:
            roofline = next((r.profile.roofline for r in records if r.profile.roofline), None)
        return cls(
            records=tuple(records),
            backend=backend,
            roofline=roofline,
            stale=tuple(stale),
            commit=git.commit,
            branch=git.branch,
            dirty=git.dirty,
            outcomes=dict(outcomes),
            accepted=accepted,
            baselines_written=tuple(baselines_written),
            serving=tuple(serving),
        )

    def with_records(self, records: Sequence[ProfileRecord]) -> RunResults:
        """A copy holding ``records``."""
        return replace(self, records=tuple(records))


def with_spans(
    records: Sequence[ProfileRecord], test: str, spans: Mapping[str, LatencyStats]
) -> list[ProfileRecord]:
    """``records`` with ``test``'s application spans added to its profiles."""
    return [
        replace(r, profile=replace(r.profile, spans={**r.profile.spans, **spans})) if r.test == test else r
        for r in records
    ]


Record = TypeVar("Record", "ProfileRecord", "ServingRecord")


def with_outcomes(records: Sequence[Record], outcomes: Mapping[str, str]) -> list[Record]:
    """``records`` with each test's pytest outcome from ``outcomes`` (test → outcome) where known."""
    return [replace(r, outcome=outcomes.get(r.test, r.outcome)) for r in records]


def serving_records(items: list[Any]) -> tuple[ServingRecord, ...]:
    """A results document's serving records (serving/ loads only when it has some)."""
    if not items:
        return ()
    from pytest_roofline.serving.gate import ServingRecord

    return tuple(ServingRecord.from_dict(as_mapping(item, "a serving result")) for item in items)


# --- migrations and the one loader ---------------------------------------------------------------


@migration(RESULTS, 2)
def results_to_2(document: dict[str, Any]) -> dict[str, Any]:
    """Results schema 1 → 2: each result's baseline candidate follows baseline schema 2."""
    from pytest_roofline.gate.baseline import entry_to_2

    results = document.get("results")
    if isinstance(results, list):
        document["results"] = [
            {**item, "entry": entry_to_2(item["entry"])}
            if isinstance(item, Mapping) and item.get("entry")
            else item
            for item in results
        ]
    return document


@migration(RESULTS, 3)
def results_to_3(document: dict[str, Any]) -> dict[str, Any]:
    """Results schema 2 → 3: profiles and their layers say ``memory: null`` (none was measured)."""
    for item in document.get("results") or []:
        profile = item.get("profile") if isinstance(item, Mapping) else None
        if isinstance(profile, dict):
            profile.setdefault("memory", None)
            for layer in profile.get("layers") or []:
                if isinstance(layer, dict):
                    layer.setdefault("memory", None)
    return document


def load_results(path: str | Path) -> RunResults:
    """Read a run-results JSON file of any schema this version knows.

    Raises:
        RooflineError: the file is missing, not JSON, not a results document, of a newer schema,
            or holds a malformed result (one line naming the file).
    """
    path = Path(path)
    try:
        text = read_document(path)
    except FileNotFoundError:
        raise RooflineError(
            f"results file {path}: no such file; write one with pytest --roofline-report={path}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RooflineError(f"results file {path} cannot be read ({exc})") from None
    try:
        data = loads(text)
        if isinstance(data, dict):
            check_kind(data, RESULTS_KIND, "a results file")
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise SchemaError(
                "not a pytest-roofline results file (no 'results' list); "
                f"write one with pytest --roofline-report={path}"
            )
        return parse_results(data)
    except (SchemaError, KeyError, TypeError, ValueError) as exc:
        reason = str(exc) if isinstance(exc, SchemaError) else f"{type(exc).__name__}: {exc}"
        raise RooflineError(f"results file {path}: {reason}") from None


def parse_results(data: Mapping[str, Any]) -> RunResults:
    """A results document of any schema this version knows, migrated and read.

    Raises:
        SchemaError, KeyError, TypeError, ValueError: what is wrong with the document.
    """
    document = dict(data)
    document.setdefault("schema_version", 1)  # the first results files carried none
    document, _ = migrate(document, RESULTS, "it")
    return RunResults.from_dict(document)
