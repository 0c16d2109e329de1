"""Per-run state of the pytest plugin: the pytest bookkeeping around the gate.

A :class:`RooflineSession` turns a test's ``model_profile(...)`` call into a
:class:`~pytest_roofline.gate.runner.GateRequest` (test settings, model path, backend, baseline),
runs it through :func:`~pytest_roofline.gate.runner.run_model_gate` under the measure lock and the
timeout, keeps the records, and at session end (controller only, never an xdist worker) merges
workers' records, writes accepted baselines once, lists stale entries and writes the reports.
Everything that judges performance lives in :mod:`pytest_roofline.gate`, free of pytest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.errors import BaselineError, OptionError, RooflineError
from pytest_roofline.pytest.options import Settings, backend_options, parse_budget, parse_percent

if TYPE_CHECKING:
    import pytest

    from pytest_roofline.backends.base import Backend
    from pytest_roofline.gate.baseline import BaselineEntry
    from pytest_roofline.gate.order import ModelStoreLike
    from pytest_roofline.gate.runner import GateOutcome, GateRequest
    from pytest_roofline.gate.store import BaselineStore
    from pytest_roofline.gitref import GitInfo
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.results import ProfileRecord, RunResults
    from pytest_roofline.roofline import DeviceRoofline

__all__ = ["RooflineSession", "GateSettings", "relative_to_root", "resolve_model_path"]

METRICS_HELP = "latency, layer:<name>"


@dataclasses.dataclass(frozen=True)
class GateSettings:
    """A test's gate settings: the session's, overridden by its ``roofline`` marker."""

    tolerance: float
    budget: float
    metrics: tuple[str, ...] = ("latency",)
    retime: bool = False


def resolve_model_path(path: str | os.PathLike[str], test_dir: Path, rootdir: Path) -> Path:
    """An absolute model path: as given if absolute, else the test file's dir, then rootdir."""
    candidate = Path(path)
    if candidate.is_absolute():
        return candidate
    for base in (test_dir, rootdir):
        if (base / candidate).exists():
            return (base / candidate).resolve()
    return (test_dir / candidate).resolve()


def relative_to_root(path: Path, rootdir: Path) -> str:
    """``path`` relative to the rootdir (posix), or absolute when outside it."""
    try:
        return path.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


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
        self._progress = progress
        self.rootdir = rootdir
        self.is_worker = is_worker
        self._device_class = device_class
        self._store: BaselineStore | None = None
        self.records: list[ProfileRecord] = []
        self.collected: set[str] = set()
        self.outcomes: dict[str, str] = {}
        self.failures: dict[str, list[str]] = {}
        self.rooflines: dict[str, DeviceRoofline | None] = {}
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
        self._measured: dict[str, tuple[str, GateOutcome]] = {}  # identity -> first test, its outcome

    @property
    def store(self) -> BaselineStore:
        """The baseline store of this run (made on first use)."""
        if self._store is None:
            from pytest_roofline.gate.store import BaselineStore

            self._store = BaselineStore(self.settings.baseline_dir)
        return self._store

    # -- fixtures --------------------------------------------------------------------------------

    def backend(self, name: str | None, options: Mapping[str, str] | None) -> tuple[str, Backend]:
        """The backend a test asked for (session options apply to the session's backend)."""
        from pytest_roofline.backends.base import get_backend

        chosen = name or self.settings.backend
        merged = backend_options(self.settings.options, chosen) if chosen == self.settings.backend else {}
        merged.update(options or {})
        return chosen, get_backend(chosen, merged)

    def roofline_for(self, name: str, backend: Backend) -> DeviceRoofline | None:
        """The device roofline through ``backend``, calibrated once per session (cached on disk)."""
        ident = f"{name}|{sorted(backend.options.items())}"
        if ident not in self.rooflines:
            from pytest_roofline.roofline.calibrate import calibrate

            force = self.settings.recalibrate and not any(self.rooflines.values())
            # a cached calibration is spot-checked (<= 0.5 s) and measured again when it is off
            self.rooflines[ident] = calibrate(
                backend, force=force, spot_check=not force, progress=self._progress
            )
        return self.rooflines[ident]

    def device_class(self, fingerprint: Mapping[str, Any]) -> str:
        """The device class that keys baselines (the hook's answer, else the built-in rule)."""
        if self._device_class is not None:
            return self._device_class(fingerprint)
        from pytest_roofline.device import device_class

        return device_class(fingerprint)

    def gate_settings(self, marker: pytest.Mark | None) -> GateSettings:
        """The session's gate settings overridden by the test's ``roofline`` marker."""
        kwargs = dict(marker.kwargs) if marker else {}
        unknown = sorted(set(kwargs) - {"tolerance", "metrics", "budget", "retime"})
        if unknown:
            raise OptionError(
                f"roofline marker has no argument {unknown[0]!r} (tolerance, metrics, budget, retime)"
            )
        # a history needs the same figure every run: the identity shortcut would leave holes
        retime = kwargs.get("retime", self.settings.retime or self.settings.history is not None)
        if not isinstance(retime, bool):
            raise OptionError(f"roofline marker: retime must be True or False, got {retime!r}")
        try:
            tolerance = (
                parse_percent(kwargs["tolerance"]) if "tolerance" in kwargs else self.settings.tolerance
            )
            budget = parse_budget(kwargs["budget"]) if "budget" in kwargs else self.settings.budget
        except argparse.ArgumentTypeError as exc:
            raise OptionError(f"roofline marker: {exc}") from None
        metrics = kwargs.get("metrics", ["latency"])
        if isinstance(metrics, str):
            metrics = [metrics]
        for metric in metrics:
            if metric != "latency" and not str(metric).startswith("layer:"):
                raise OptionError(f"roofline marker: unknown metric {metric!r} ({METRICS_HELP})")
        return GateSettings(tolerance, budget, tuple(metrics), retime)

    def request(
        self,
        node: pytest.Item,
        path: str | os.PathLike[str],
        *,
        batch_size: int | None = None,
        dims: Mapping[str, int] | None = None,
        inputs: Any = None,
        backend: str | None = None,
        options: Mapping[str, str] | None = None,
        trips: Mapping[str, int] | None = None,
    ) -> GateRequest:
        """The gate request of one ``model_profile(...)`` call (a corrupt baseline fails here)."""
        from pytest_roofline.gate.baseline import entry_key
        from pytest_roofline.gate.runner import GateRequest

        test = self.gate_settings(node.get_closest_marker("roofline"))
        model_path = resolve_model_path(path, Path(str(node.path)).parent, self.rootdir)
        backend_name, engine = self.backend(backend, options)
        prepared = None
        if not self.settings.disable:  # load and bind now: a bad model or input fails before measuring
            from pytest_roofline.api import prepare

            prepared = prepare(str(model_path), backend=engine, batch=batch_size, dims=dims, inputs=inputs)
            batch_size = prepared.batch or 1
        elif batch_size is None:  # 1 for a symbolic batch dim, the model's own when it is static
            from pytest_roofline.model import default_batch, load_model

            batch_size = default_batch(load_model(str(model_path)), dims)
        rel = relative_to_root(model_path, self.rootdir)
        device = self.device_class(engine.fingerprint())
        key = entry_key(node.nodeid, rel, batch_size, dict(dims or {}), backend_name, device)
        baseline, other_device = None, None
        if not self.settings.disable and not self.settings.compare_ref:
            try:
                baseline = self.store.get(key, node.nodeid)
            except BaselineError:
                if not self.settings.update:  # --roofline-update rewrites the entry
                    raise
            if baseline is None and not self.settings.update:
                other_device = self._other_device(key, node.nodeid)
        reference, new_at_ref = None, ""
        if self.settings.compare_ref and not self.settings.disable:  # a bad ref fails before measuring
            from pytest_roofline.gitref import NotAtRef

            try:
                reference = self._reference_spec(model_path, batch_size, dims or {})
            except NotAtRef as exc:  # a model the change adds: measured, nothing to compare
                new_at_ref = str(exc)
        return GateRequest(
            test=node.nodeid,
            key=key,
            model=model_path,
            model_rel=rel,
            batch=batch_size,
            backend=engine,
            device_class=device,
            tolerance=test.tolerance,
            budget=test.budget,
            dims=dict(dims or {}),
            inputs=inputs,
            metrics=test.metrics,
            baseline=baseline,
            reference=reference,
            new_at_ref=new_at_ref,
            commit=self.git().commit if not self.settings.disable else None,
            trips=dict(trips) if trips else None,
            prepared=prepared,
            retime=test.retime or self.settings.update,  # an accepted figure is a timed one
            models=self.models if not self.settings.disable else None,
            other_device=other_device,
        )

    @property
    def models(self) -> ModelStoreLike | None:
        """The model store that keeps baselines' models (made on first use; None in builds without)."""
        if not self._models_made:
            from pytest_roofline.gate.order import default_models

            self._models = default_models()
            self._models_made = True
        return self._models

    def _other_device(self, key: str, test: str) -> str | None:
        """The device class of another entry of the same test, model, shape and backend, or None."""
        from pytest_roofline.errors import BaselineError as Unreadable

        stem = key.rsplit("|", 1)[0]
        try:
            entries = self.store.load(self.store.file_for(test)).entries
        except Unreadable:
            return None
        found = sorted(e.device_class for k, e in entries.items() if k.rsplit("|", 1)[0] == stem and k != key)
        return found[0] if found else None

    def profile(
        self,
        node: pytest.Item,
        path: str | os.PathLike[str],
        *,
        batch_size: int | None = None,
        dims: Mapping[str, int] | None = None,
        inputs: Any = None,
        backend: str | None = None,
        options: Mapping[str, str] | None = None,
        check_outputs: Any = None,
        trips: Mapping[str, int] | None = None,
    ) -> ModelProfile:
        """Measure one model for ``node``, gate it, record it; returns the profile."""
        from pytest_roofline.backends.bounded import run_bounded
        from pytest_roofline.gate.runner import measure_lock, run_model_gate, static_outcome

        request = self.request(
            node,
            path,
            batch_size=batch_size,
            dims=dims,
            inputs=inputs,
            backend=backend,
            options=options,
            trips=trips,
        )
        if check_outputs:
            self._check_outputs(
                request.model, request.backend.name, check_outputs, inputs, request.batch, dims or {}
            )
        if self.settings.disable:
            outcome = static_outcome(request)
        elif (found := self._measured_before(request)) is not None:
            outcome = found
        else:
            name = request.backend.name
            self.backends_used.add((name, request.device_class))
            with measure_lock():  # held by this thread, released even when the measurement hangs
                outcome = run_bounded(
                    lambda: run_model_gate(request, lambda: self.roofline_for(name, request.backend)),
                    self.settings.timeout,
                    f"{request.model_rel} (batch {request.batch})",
                )
        self._remember(request, outcome)
        self._record(node, request, outcome)
        return outcome.profile

    def _identity_key(self, request: GateRequest) -> str | None:
        """What a measurement of ``request`` measures (its identity, batch, dims), as a lookup key."""
        if request.prepared is None or request.reference is not None or request.metrics != ("latency",):
            return None
        from pytest_roofline.gate.order import current_identity

        identity = current_identity(request, request.prepared).to_dict()
        return json.dumps([identity, request.batch, sorted(request.dims.items())], sort_keys=True)

    def _measured_before(self, request: GateRequest) -> GateOutcome | None:
        """A first baseline this session already measured under the same identity (recorded, not
        measured again), or None."""
        if request.baseline is not None and not self.settings.update:
            return None
        key = self._identity_key(request)
        if key is None or key not in self._measured:
            return None
        from pytest_roofline.gate.order import measured_again

        test, earlier = self._measured[key]
        return measured_again(request, earlier, test)

    def _remember(self, request: GateRequest, outcome: GateOutcome) -> None:
        if outcome.entry is not None and not self.settings.disable:
            key = self._identity_key(request)
            if key is not None:
                self._measured.setdefault(key, (request.test, outcome))

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
        self._judge(record)
        node.user_properties.extend(properties(record))
        from pytest_roofline.report.benchmark_bridge import feed_pytest_benchmark

        feed_pytest_benchmark(node.config, record)

    def _reference_spec(self, path: Path, batch: int, dims: Mapping[str, int]) -> Any:
        """The model at ``--roofline-compare-ref`` with its external data at the same ref."""
        from pytest_roofline.gitref import model_at_ref
        from pytest_roofline.model import ModelSpec

        return ModelSpec.create(str(model_at_ref(path, str(self.settings.compare_ref))), batch, dims)

    def _check_outputs(
        self, path: Path, backend: str, others: Any, inputs: Any, batch: int, dims: Mapping[str, int]
    ) -> None:
        """``check_outputs=True`` (vs onnxruntime, or openvino when the backend is onnxruntime),
        a backend name, or a list of names: outputs must match the test's backend's."""
        from pytest_roofline.check import check_outputs

        if isinstance(others, bool):
            names = ["onnxruntime" if backend != "onnxruntime" else "openvino"]
        else:
            names = [others] if isinstance(others, str) else list(others)
        backends = [backend, *[n for n in names if n != backend]]
        result = check_outputs(str(path), backends=backends, inputs=inputs, batch=batch, dims=dims or None)
        if not result.passed:
            details = "; ".join(c.describe() for c in result.failures[:3])
            raise RooflineError(f"outputs of {path.name} differ between backends: {details}")

    def _judge(self, record: ProfileRecord) -> None:
        """The test's failure messages: regressions, and under --roofline-strict the undecided."""
        from pytest_roofline.fmt import printable
        from pytest_roofline.gate.verdict import verdict_table

        messages = self.failures.setdefault(record.test, [])
        if self.settings.update and not self.settings.compare_ref:  # the run's figures are being accepted
            return
        prof = record.profile
        for verdict in record.verdicts:
            head = printable(
                f"roofline {verdict.status}: {prof.model_name} (batch {prof.batch}) {verdict.message}"
            )
            if verdict.explanation:
                head += f"\n  why: {printable(verdict.explanation)}"
            table = [printable(line) for line in verdict_table(verdict)]
            if verdict.status == "regression":
                messages.append("\n".join([head, *table]))
            elif self.settings.strict and verdict.status in ("inconclusive", "incomparable"):
                messages.append("\n".join([f"{head} [--roofline-strict]", *table]))
            elif self.settings.strict and verdict.status == "new" and verdict.mode == "paired":
                messages.append(f"{head} [--roofline-strict]")
            elif self.settings.strict and verdict.status == "new":
                messages.append(
                    printable(
                        f"roofline: no baseline for {record.key} in {self.store.file_for(record.test)} "
                        "[--roofline-strict]; record one with --roofline-update"
                    )
                )

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
            self._write_baselines()
            self.stale = self._find_stale()
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
        roofline = next((r for r in self.rooflines.values() if r is not None), None)
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

    def _write_baselines(self) -> None:
        ran = [r for r in self.records if r.entry is not None and r.outcome != "skipped"]
        chosen: Sequence[BaselineEntry]
        if self.settings.update:
            chosen, replace = [r.entry for r in ran if r.entry], True
        else:  # a first baseline (new here, or of another device class than the ones recorded)
            firsts = ("new", "incomparable")
            chosen, replace = [r.entry for r in ran if r.entry and r.verdict.status in firsts], False
        by_file: dict[Path, list[BaselineEntry]] = {}
        for entry in chosen:
            by_file.setdefault(self.store.file_for(entry.test), []).append(entry)
        for path, entries in sorted(by_file.items()):
            try:
                written = self.store.write(entries, replace_existing=replace, force=self.settings.update)
            except (BaselineError, OSError) as exc:
                self.errors.append(f"baselines not written to {path}: {exc}")
                continue
            self.written.extend(written)
            if written:
                self._keep_models(entries)

    def _keep_models(self, entries: Sequence[BaselineEntry]) -> None:
        """Put the recorded models in the model store: a later changed model is timed against them."""
        store = self.models
        if store is None:
            return
        for model in sorted({e.model for e in entries if e.identity is not None}):
            path = Path(model) if Path(model).is_absolute() else self.rootdir / model
            try:
                store.put(path)
            except (RooflineError, OSError) as exc:
                self.store.notes.append(
                    f"{model} not kept in the model store ({exc}); a changed model will be compared "
                    "with the stored figures"
                )

    def _find_stale(self) -> list[str]:
        """Entries this run could have produced and did not: same backend and device class as a
        measurement of this run, test module run, test selected (or gone from the module)."""
        if not self.collected or not self.backends_used:
            return []
        from pytest_roofline.gate.baseline import module_of

        produced = {r.key for r in self.records}
        producing_tests = {r.test for r in self.records}
        modules = {module_of(t) for t in self.collected}
        stale = []
        for path in {self.store.file_for(t) for t in self.collected}:
            try:
                entries = self.store.read_file(path).entries
            except BaselineError:
                continue
            for key, entry in entries.items():
                if module_of(entry.test) not in modules or key in produced:
                    continue
                if (entry.backend, entry.device_class) not in self.backends_used:
                    continue  # another backend's or device's baseline: this run says nothing of it
                if entry.test not in self.collected or entry.test in producing_tests:
                    stale.append(key)
        return sorted(stale)

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
