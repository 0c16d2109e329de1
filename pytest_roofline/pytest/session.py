"""Per-run state of the pytest plugin: the pytest bookkeeping around the gate.

A :class:`RooflineSession` turns a test's ``model_profile(...)`` call into a
:class:`~pytest_roofline.gate.types.GateRequest` (test settings, model path, backend, baseline),
runs it through the gate (:func:`~pytest_roofline.gate.request.run_request`), keeps the records, and
at session end (controller only) merges workers' records, writes accepted baselines once, lists stale
entries and writes the reports.  What judges performance lives in :mod:`pytest_roofline.gate`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import OptionError, RooflineError
from pytest_roofline.gate.request import (
    GateSettings,
    RunMode,
    build_request,
    check_call_outputs,
    gate_settings,
    resolve_model_path,
    run_request,
)
from pytest_roofline.pytest.options import Settings, backend_options, parse_budget, parse_percent
from pytest_roofline.roofline.engines import Engines

if TYPE_CHECKING:
    import pytest

    from pytest_roofline.gate.model_store import ModelStore
    from pytest_roofline.gate.order import MeasuredIdentities
    from pytest_roofline.gate.store import BaselineStore
    from pytest_roofline.gate.types import GateOutcome, GateRequest, ModelStoreLike
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.model.gitref import GitInfo
    from pytest_roofline.pipeline import ModelCall
    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.results import ProfileRecord, RunResults
    from pytest_roofline.serving.gate import ServingRecord
    from pytest_roofline.serving.types import ScenarioResult, ScenarioSettings

__all__ = ["RooflineSession", "narrowed_modules"]


def narrowed_modules(args: Sequence[str], invocation_dir: Path, items: Sequence[pytest.Item]) -> set[str]:
    """The modules of ``items`` that ``args`` (relative to ``invocation_dir``) named by node id
    (``test_x.py::test_y``): collected in part, so a test of theirs that was not collected was not
    asked for, not gone from the module."""
    named = {(invocation_dir / arg.split("::", 1)[0]).resolve() for arg in args if "::" in arg}
    if not named:  # no node id asked for (the usual run): no path of any item resolved
        return set()
    return {item.nodeid.split("::", 1)[0] for item in items if Path(str(item.path)).resolve() in named}


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
        self.mode = RunMode(settings.disable, settings.update, settings.compare_ref)  # of every request
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
        self.serving: list[ServingRecord] = []  # model_load calls: LoadGen's results and verdicts
        self.collected: set[str] = set()
        self.narrowed: set[str] = set()  # modules collected in part (node ids on the command line)
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
        self._models: ModelStore | None = None
        self._models_made = False
        self._measured: MeasuredIdentities | None = None

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
        # a history needs the same figure every run: timed even where identity says nothing changed
        timed = self.settings.history is not None
        from pytest_roofline.gate.memory import MemoryTolerance

        memory = MemoryTolerance(self.settings.memory_tolerance, self.settings.memory_tolerance_bytes)
        defaults = GateSettings(
            self.settings.tolerance,
            self.settings.budget,
            retime=self.settings.retime,
            timed=timed,
            memory_tolerance=memory,
        )
        return gate_settings(dict(marker.kwargs) if marker else {}, defaults, parse_percent, parse_budget)

    def request(self, node: pytest.Item, call: ModelCall) -> GateRequest:
        """The gate request of one ``model_profile(...)`` call (a corrupt baseline fails here)."""
        if not isinstance(call.model, (str, os.PathLike)) or not isinstance(call.backend, (str, type(None))):
            raise OptionError("model_profile takes a model's path and a backend's name")
        return build_request(
            node.nodeid,
            resolve_model_path(call.model, Path(str(node.path)).parent, self.rootdir),
            self.rootdir,
            backend=self.engines.backend(call.backend, call.options),
            settings=self.gate_settings(node.get_closest_marker("roofline")),
            mode=self.mode,
            store=self.store,
            device_class=self.engines.device_class,
            commit=lambda: self.git().commit,
            models=lambda: self.models,
            call=call,
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
        """The model store that keeps baselines' models (made on first use; None in builds without).

        It evicts nothing until :meth:`release_models` at session end: a test puts its model while
        later tests still need the previous run's."""
        if not self._models_made:
            from pytest_roofline.gate.order import default_models

            self._models = default_models(hold=True)
            self._models_made = True
        return self._models

    def release_models(self) -> None:
        """Session end: the model store evicts what this run did not use (a note where it did)."""
        if self._models is not None:
            self._models.release()

    def profile(self, node: pytest.Item, call: ModelCall) -> ModelProfile:
        """Measure one model for ``node``, gate it, record it; returns the profile."""
        return self._profile(node, call, self.request(node, call))

    def load(
        self,
        node: pytest.Item,
        call: ModelCall,
        scenario: ScenarioSettings,
        budget: float,
        windows: int,
        log_dir: Path,
    ) -> ScenarioResult:
        """Serve one model for ``node`` under a LoadGen scenario, gate it, record it (serving.gate).

        The results are kept in the test's baseline entry for the model: where there is none yet
        (or under ``--roofline-update``) the model's latency is measured first, as ``model_profile``
        would, unless this test already did."""
        from pytest_roofline.serving.gate import gate_scenario

        started = time.monotonic()  # the call's budget counts from here (serving.budget)
        request = self.request(node, call)
        mode = self.mode
        entry_due = request.baseline is None or mode.update
        if entry_due and not (mode.disable or mode.compare_ref):
            if not any(r.key == request.key for r in self.records):
                self._profile(node, call, request)
                started = time.monotonic()  # the latency's own time is --roofline-budget's
        tolerance = self.gate_settings(node.get_closest_marker("roofline")).tolerance
        record = gate_scenario(
            request,
            scenario,
            log_dir,
            mode=mode,
            budget=budget,
            tolerance=tolerance,
            windows=windows,
            started=started,
        )
        self.serving.append(record)
        if not self.settings.update or self.settings.compare_ref:
            messages = self.failures.setdefault(node.nodeid, [])
            messages += record.failure_messages(self.store.file_for(record.test), self.settings.strict)
        return record.result

    def _profile(self, node: pytest.Item, call: ModelCall, request: GateRequest) -> ModelProfile:
        settings = self.settings
        gated = not (settings.update or settings.compare_ref or settings.disable)
        if settings.strict and gated and request.baseline is None:  # known before timing: fail now
            from pytest_roofline.gate.judge import missing_baseline

            raise RooflineError(missing_baseline(request.key, self.store.file_for(request.test)))
        check_call_outputs(request, call)
        name = request.backend.name
        if not self.settings.disable:  # (a request measured before added the same pair already)
            self.backends_used.add((name, request.device_class))
        then = None
        if self.settings.history is not None:
            request, then = self._history_for(request)
        outcome = run_request(
            request,
            self.mode,
            self.measured,
            lambda: self.engines.roofline_for(name, request.backend),
            self.settings.timeout,
            then,
        )
        self._record(node, request, outcome)
        return outcome.profile

    def _record(self, node: pytest.Item, request: GateRequest, outcome: GateOutcome) -> None:
        from pytest_roofline.report.junit import properties
        from pytest_roofline.results import ProfileRecord

        record = ProfileRecord.of_outcome(node.nodeid, request.key, outcome)
        self.records.append(record)
        messages = self.failures.setdefault(record.test, [])
        if not self.settings.update or self.settings.compare_ref:  # else the figures are being accepted
            messages += record.failure_messages(self.store.file_for(record.test), self.settings.strict)
        node.user_properties.extend(properties(record))
        from pytest_roofline.report.benchmark_bridge import feed_pytest_benchmark

        feed_pytest_benchmark(node.config, record)

    def attach_spans(self, test: str, spans: Mapping[str, LatencyStats]) -> None:
        """Add a test's application spans to the profiles it recorded."""
        from pytest_roofline.results import with_spans

        self.records = with_spans(self.records, test, spans)

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

    def worker_payload(self) -> str:
        """What a worker sends to the controller (JSON text)."""
        from pytest_roofline.report.merge import WorkerPayload
        from pytest_roofline.results import with_outcomes

        records = tuple(with_outcomes(self.records, self.outcomes))
        return WorkerPayload(
            records,
            frozenset(self.collected),
            frozenset(self.backends_used),
            frozenset(self.narrowed),
            tuple(with_outcomes(self.serving, self.outcomes)),
        ).to_json()

    def merge_worker(self, payload: str) -> None:
        """Take a worker's records and collected node ids."""
        from pytest_roofline.report.merge import WorkerPayload

        worker = WorkerPayload.from_json(payload)
        self.records.extend(worker.records)
        self.serving.extend(worker.serving)
        self.collected.update(worker.collected)
        self.narrowed.update(worker.narrowed)
        self.backends_used.update(worker.backends_used)

    # -- session end -----------------------------------------------------------------------------

    def finish(
        self, update_results: Callable[[RunResults], RunResults | None] | None = None
    ) -> RunResults | None:
        """Write baselines (controller only) and reports; returns the run's results.

        ``update_results`` (the ``pytest_roofline_update_results`` hook) may return replaced
        results before they are reported.  A run that profiled nothing and asked for no report
        costs nothing (no git calls, no baseline file read, no import of onnx): None.
        """
        if not self.records and not self.serving and not self.settings.reports:
            return None
        from pytest_roofline.results import RunResults, with_outcomes

        self.records = with_outcomes(self.records, self.outcomes)
        self.serving = with_outcomes(self.serving, self.outcomes)
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
            if self.serving:
                from pytest_roofline.serving.gate import record_scenarios

                paths, errors = record_scenarios(self.store, self.serving)
                self.written.extend(p for p in paths if p not in self.written)
                self.errors.extend(errors)
            used, narrowed = self.backends_used, self.narrowed
            served = {r.key for r in self.serving}  # an entry a model_load call judged is not stale
            stale = find_stale(self.store, self.records, self.collected, used, narrowed)
            self.stale = [key for key in stale if key not in served]
        results = RunResults.of_run(
            self.records,
            backend=self.settings.backend,
            rooflines=self.engines.rooflines.values(),
            stale=self.stale,
            git=self.git(),
            outcomes=self.outcomes,
            accepted=self.settings.update and not self.is_worker,
            baselines_written=[str(p) for p in self.written],
            serving=self.serving,
        )
        if update_results is not None:
            results = update_results(results) or results
        self.last_results = results
        if not self.is_worker and self.settings.history is not None and not self.settings.disable:
            from pytest_roofline.history.record import record_or_note

            folder, url = self.settings.baseline_dir / "history", self.settings.history
            self.history_lines = record_or_note(results, url, folder, self.rootdir, self.errors)
        if not self.is_worker and self.settings.reports:
            from pytest_roofline.report import write_reports

            failed: list[str] = []  # one line per report not written; the others are still written
            self.reports_written = write_reports(results, list(self.settings.reports), failed)
            self.errors.extend(failed)
        return results

    def _history_for(
        self, request: GateRequest
    ) -> tuple[GateRequest, Callable[[GateRequest, GateOutcome], GateOutcome]]:
        """``request`` with its history series' control probe, and what follows its measurement
        (under the lock): the new model paired with the series' last."""
        from pytest_roofline.history.pairing import series_before, with_history

        folder = self.settings.baseline_dir / "history"
        request, previous = series_before(request, self.settings.history, folder)
        return request, lambda req, outcome: with_history(req, outcome, previous)

    def git(self) -> GitInfo:
        """Commit, branch and dirtiness of the rootdir's repository (asked once per run)."""
        if self._git is None:
            from pytest_roofline.model.gitref import git_info

            self._git = git_info(self.rootdir)
        return self._git

    def summary(self) -> list[str]:
        """The terminal summary's lines (after :meth:`finish`)."""
        from pytest_roofline.report.terminal import session_summary

        settings = self.settings
        return session_summary(
            self.last_results,
            reports=self.reports_written,
            baseline_files=[str(p) for p in self.written],
            store_notes=[
                *(self.store.notes if self._store is not None else ()),
                *(self._models.notes if self._models is not None else ()),
            ],
            paired_update=bool(settings.update and settings.compare_ref) and not settings.disable,
            history_lines=self.history_lines,
            errors=self.errors,
        )
