"""Per-run state of the pytest plugin: the pytest bookkeeping around the gate.

A :class:`RooflineSession` turns a test's ``model_profile(...)`` call into a
:class:`~pytest_roofline.gate.runner.GateRequest` (test settings, model path, backend, baseline),
runs it through :func:`~pytest_roofline.gate.runner.run_model_gate` under the measure lock and the
timeout, keeps the records, and at session end (controller only, never an xdist worker) merges
workers' records, writes accepted baselines once, lists stale entries and writes the reports.
Everything that judges performance lives in :mod:`pytest_roofline.gate`, free of pytest.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import RooflineError
from pytest_roofline.gate.request import (
    GateSettings,
    ModelCall,
    RunMode,
    build_request,
    gate_settings,
    resolve_model_path,
)
from pytest_roofline.pytest.options import Settings, backend_options, parse_budget, parse_percent
from pytest_roofline.roofline.engines import Engines

if TYPE_CHECKING:
    import pytest

    from pytest_roofline.gate.order import MeasuredIdentities, ModelStoreLike
    from pytest_roofline.gate.runner import GateOutcome, GateRequest
    from pytest_roofline.gate.store import BaselineStore
    from pytest_roofline.gitref import GitInfo
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.results import ProfileRecord, RunResults

__all__ = ["RooflineSession"]

#: Said after a paired run asked to update: it compared with the reference and recorded nothing.
PAIRED_UPDATE_NOTE = (
    "roofline: --roofline-update records no baseline in paired mode: --roofline-compare-ref compares "
    "each model with its file at the reference and stores nothing (its verdicts still count); run "
    "without --roofline-compare-ref to record baselines"
)


class RooflineSession:
    """State of one pytest run (one per process; the xdist controller merges workers').

    ``device_class`` names the device class of a fingerprint (the plugin passes the
    ``pytest_roofline_device_class`` hook, falling back to :func:`pytest_roofline.device.device_class`);
    ``progress`` takes the calibration's progress lines (the plugin writes its notes to the terminal).
    """

    def __init__(
        self,
        settings: Settings,
        rootdir: Path,
        is_worker: bool = False,
        device_class: Callable[[Mapping[str, Any]], str] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.rootdir = rootdir
        self.is_worker = is_worker
        self.engines = Engines(
            settings.backend,
            lambda name: backend_options(settings.options, name),
            recalibrate=settings.recalibrate,
            progress=progress,
            device_class=device_class,
        )
        self._store: BaselineStore | None = None
        self.records: list[ProfileRecord] = []
        self.collected: set[str] = set()
        self.outcomes: dict[str, str] = {}
        self.failures: dict[str, list[str]] = {}
        self.backends_used: set[tuple[str, str]] = set()  # (backend, device class) this run measured
        self.stale: list[str] = []
        self.written: list[Path] = []
        self.reports_written: list[str] = []
        self.errors: list[str] = []
        self.last_results: RunResults | None = None
        self.history_lines: list[str] = []
        self._git: GitInfo | None = None
        self._models: ModelStoreLike | None = None
        self._models_made = False
        self._measured: MeasuredIdentities | None = None  # what this session measured, by identity

    @property
    def store(self) -> BaselineStore:
        """The baseline store of this run (made on first use)."""
        if self._store is None:
            from pytest_roofline.gate.store import BaselineStore

            self._store = BaselineStore(self.settings.baseline_dir)
        return self._store

    # -- fixtures --------------------------------------------------------------------------------

    def gate_settings(self, marker: pytest.Mark | None) -> GateSettings:
        """The session's gate settings overridden by the test's ``roofline`` marker."""
        # a history needs the same figure every run: the identity shortcut would leave holes
        retime = self.settings.retime or self.settings.history is not None
        defaults = GateSettings(self.settings.tolerance, self.settings.budget, retime=retime)
        return gate_settings(dict(marker.kwargs) if marker else {}, defaults, parse_percent, parse_budget)

    def request(self, node: pytest.Item, call: ModelCall) -> GateRequest:
        """The gate request of one ``model_profile(...)`` call (a corrupt baseline fails here)."""
        settings = self.settings
        return build_request(
            node.nodeid,
            resolve_model_path(call.path, Path(str(node.path)).parent, self.rootdir),
            self.rootdir,
            backend=self.engines.backend(call.backend, call.options),
            settings=self.gate_settings(node.get_closest_marker("roofline")),
            mode=RunMode(settings.disable, settings.update, settings.compare_ref),
            store=self.store,
            device_class=self.engines.device_class,
            commit=lambda: self.git().commit,
            models=lambda: self.models,
            batch_size=call.batch_size,
            dims=call.dims,
            inputs=call.inputs,
            trips=call.trips,
        )

    @property
    def measured(self) -> MeasuredIdentities:
        """What this session measured, by identity (made on first use)."""
        if self._measured is None:
            from pytest_roofline.gate.order import MeasuredIdentities

            self._measured = MeasuredIdentities()
        return self._measured

    @property
    def models(self) -> ModelStoreLike | None:
        """The model store that keeps baselines' models (made on first use; None in builds without)."""
        if not self._models_made:
            from pytest_roofline.gate.order import default_models

            self._models = default_models()
            self._models_made = True
        return self._models

    def profile(self, node: pytest.Item, call: ModelCall) -> ModelProfile:
        """Measure one model for ``node``, gate it, record it; returns the profile."""
        from pytest_roofline.backends.bounded import run_bounded
        from pytest_roofline.gate.runner import measure_lock, run_model_gate, static_outcome

        request = self.request(node, call)
        if call.check_outputs:
            from pytest_roofline.check import check_test_outputs

            engine, checks = request.backend.name, call.check_outputs
            check_test_outputs(
                request.model, engine, checks, inputs=call.inputs, batch=request.batch, dims=call.dims
            )
        if self.settings.disable:
            outcome = static_outcome(request)
        elif (found := self.measured.before(request, self.settings.update)) is not None:
            outcome = found
        else:
            name = request.backend.name
            self.backends_used.add((name, request.device_class))
            with measure_lock():  # held by this thread, released even when the measurement hangs
                outcome = run_bounded(
                    lambda: run_model_gate(request, lambda: self.engines.roofline_for(name, request.backend)),
                    self.settings.timeout,
                    f"{request.model_rel} (batch {request.batch})",
                )
        if not self.settings.disable:
            self.measured.remember(request, outcome)
        self._record(node, request, outcome)
        return outcome.profile

    def _record(self, node: pytest.Item, request: GateRequest, outcome: GateOutcome) -> None:
        from pytest_roofline.report.junit import properties
        from pytest_roofline.results import ProfileRecord

        record = ProfileRecord(
            test=node.nodeid,
            key=request.key,
            profile=outcome.profile,
            verdict=outcome.verdict,
            extra_verdicts=outcome.extra_verdicts,
            entry=outcome.entry,
            history=outcome.history,
            change=outcome.change,
        )
        self.records.append(record)
        messages = self.failures.setdefault(record.test, [])
        if not self.settings.update or self.settings.compare_ref:  # else the figures are being accepted
            from pytest_roofline.gate.judge import failure_messages

            prof = record.profile
            messages += failure_messages(
                record.verdicts,
                model=prof.model_name,
                batch=prof.batch,
                key=record.key,
                baseline_file=self.store.file_for(record.test),
                strict=self.settings.strict,
            )
        node.user_properties.extend(properties(record))
        from pytest_roofline.report.benchmark_bridge import feed_pytest_benchmark

        feed_pytest_benchmark(node.config, record)

    def attach_spans(self, test: str, spans: Mapping[str, LatencyStats]) -> None:
        """Add a test's application spans to the profiles it recorded."""
        for index, record in enumerate(self.records):
            if record.test == test:
                profile = dataclasses.replace(record.profile, spans={**record.profile.spans, **spans})
                self.records[index] = dataclasses.replace(record, profile=profile)

    def note_outcome(self, test: str, when: str, outcome: str) -> None:
        """Record a test's pytest outcome from one of its phase reports."""
        if when == "call":
            self.outcomes[test] = outcome
        elif outcome == "skipped":
            self.outcomes.setdefault(test, "skipped")
        elif outcome == "failed":
            self.outcomes[test] = "error" if self.outcomes.get(test) != "failed" else "failed"

    def take_failures(self, test: str) -> list[str]:
        """The gate failures of ``test`` (consumed)."""
        return self.failures.pop(test, [])

    # -- xdist -----------------------------------------------------------------------------------

    def _with_outcomes(self) -> list[ProfileRecord]:
        return [dataclasses.replace(r, outcome=self.outcomes.get(r.test, r.outcome)) for r in self.records]

    def worker_payload(self) -> str:
        """What a worker sends to the controller (JSON text)."""
        from pytest_roofline.report import finite

        return json.dumps(
            finite(
                {
                    "records": [r.to_dict() for r in self._with_outcomes()],
                    "collected": sorted(self.collected),
                    "backends_used": sorted(self.backends_used),
                }
            )
        )

    def merge_worker(self, payload: str) -> None:
        """Take a worker's records and collected node ids."""
        from pytest_roofline.results import ProfileRecord

        data = json.loads(payload)
        self.records.extend(ProfileRecord.from_dict(r) for r in data.get("records", []))
        self.collected.update(data.get("collected", []))
        self.backends_used.update((str(b), str(d)) for b, d in data.get("backends_used", []))

    # -- session end -----------------------------------------------------------------------------

    def finish(
        self, update_results: Callable[[RunResults], RunResults | None] | None = None
    ) -> RunResults | None:
        """Write baselines (controller only) and reports; returns the run's results.

        ``update_results`` (the ``pytest_roofline_update_results`` hook) may return replaced
        results before they are reported.  A run that profiled nothing, has no baseline directory
        and asked for no report costs nothing (no git calls): None.
        """
        if not self.records and not self.settings.reports and not self.settings.baseline_dir.is_dir():
            return None
        self.records = self._with_outcomes()
        if not self.is_worker:
            from pytest_roofline.gate.store import find_stale, write_baselines

            done = write_baselines(
                self.store,
                self.records,
                update=self.settings.update,
                models=lambda: self.models,
                rootdir=self.rootdir,
            )
            self.written.extend(done.paths)
            self.errors.extend(done.errors)
            self.stale = find_stale(self.store, self.records, self.collected, self.backends_used)
        results = self.results()
        if update_results is not None:
            results = update_results(results) or results
        self.last_results = results
        if not self.is_worker and self.settings.history is not None and not self.settings.disable:
            self._record_history(results)
        if not self.is_worker and self.settings.reports:
            from pytest_roofline.report import write_reports

            failed: list[str] = []  # one line per report not written; the others are still written
            self.reports_written = write_reports(results, list(self.settings.reports), failed)
            self.errors.extend(failed)
        return results

    def _record_history(self, results: RunResults) -> None:
        """Append the run to the history and keep the change points it confirmed for the summary."""
        from pytest_roofline.history.record import record_run

        try:
            self.history_lines = record_run(
                results, self.settings.history, self.settings.baseline_dir / "history", self.rootdir
            )
        except (RooflineError, OSError) as exc:
            self.errors.append(f"history not written: {exc}")

    def git(self) -> GitInfo:
        """Commit, branch and dirtiness of the rootdir's repository (asked once per run)."""
        if self._git is None:
            from pytest_roofline.gitref import git_info

            self._git = git_info(self.rootdir)
        return self._git

    def results(self) -> RunResults:
        """The run's results as a value."""
        from pytest_roofline.results import RunResults

        info = self.git()
        roofline = next((r for r in self.engines.rooflines.values() if r is not None), None)
        if roofline is None:
            roofline = next((r.profile.roofline for r in self.records if r.profile.roofline), None)
        return RunResults(
            records=tuple(self.records),
            backend=self.settings.backend,
            roofline=roofline,
            stale=tuple(self.stale),
            commit=info.commit,
            branch=info.branch,
            dirty=info.dirty,
            outcomes=dict(self.outcomes),
            accepted=self.settings.update and not self.is_worker,
            baselines_written=tuple(str(p) for p in self.written),
        )

    def summary(self) -> list[str]:
        """The terminal summary's lines (after :meth:`finish`)."""
        from pytest_roofline.report.terminal import summary_lines

        if self.last_results is None:
            return [f"roofline error: {e}" for e in self.errors]
        lines = summary_lines(
            self.last_results,
            reports=self.reports_written,
            baseline_files=[str(p) for p in self.written],
        )
        notes = [f"roofline: {n}" for n in self.store.notes] if self._store is not None else []
        if self.settings.update and self.settings.compare_ref and not self.settings.disable:
            notes.append(PAIRED_UPDATE_NOTE)
        notes += [f"roofline: {line}" for line in self.history_lines]
        return lines + notes + [f"roofline error: {e}" for e in self.errors]
