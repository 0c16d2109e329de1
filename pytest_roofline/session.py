"""Per-run state of the pytest plugin: profiles, gate verdicts, baselines, results.

The plugin's hooks and fixtures delegate here.  A :class:`RooflineSession` measures models for
the ``model_profile`` fixture, gates them against stored baselines (or a git reference), keeps the
records, and at session end (controller only, never an xdist worker) merges workers' records,
writes accepted baselines once, lists stale entries and writes the requested reports.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import filelock
import numpy as np

from pytest_roofline.device import device_class
from pytest_roofline.gate import Verdict, compare, new_verdict, verdict_table
from pytest_roofline.gate.baseline import BaselineEntry, BaselineStore, entry_key, module_of

from .bounded import run_bounded
from .errors import BaselineError, OptionError, RooflineError
from .options import Settings, backend_options, parse_budget, parse_percent
from .profile import ModelProfile
from .stats import LatencyStats

if TYPE_CHECKING:
    import pytest

    from pytest_roofline.roofline import DeviceRoofline

    from .backends.base import Backend
    from .gitref import GitInfo

__all__ = ["ProfileRecord", "RooflineSession", "RunResults"]

RESULTS_SCHEMA_VERSION = 1
MEASURE_LOCK = Path(tempfile.gettempdir()) / "pytest-roofline-measure.lock"


# --- records ------------------------------------------------------------------------------------


@dataclass
class ProfileRecord:
    """One profiled model in one test: its profile, verdicts and baseline candidate."""

    test: str
    key: str
    profile: ModelProfile
    verdict: Verdict
    extra_verdicts: list[Verdict] = field(default_factory=list)
    entry: BaselineEntry | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    outcome: str = "passed"

    def to_dict(self) -> dict[str, Any]:
        """The results-schema ``results[]`` item (plus ``entry`` for baseline updates)."""
        return {
            "test": self.test,
            "key": self.key,
            "profile": self.profile.to_dict(),
            "verdict": self.verdict.to_dict(),
            "verdicts": [v.to_dict() for v in self.extra_verdicts],
            "history": list(self.history),
            "outcome": self.outcome,
            "entry": self.entry.to_dict() if self.entry else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfileRecord:
        """Inverse of :meth:`to_dict`."""
        return cls(
            test=data["test"],
            key=data["key"],
            profile=ModelProfile.from_dict(data["profile"]),
            verdict=Verdict.from_dict(data["verdict"]),
            extra_verdicts=[Verdict.from_dict(v) for v in data.get("verdicts", [])],
            entry=BaselineEntry.from_dict(data["entry"]) if data.get("entry") else None,
            history=list(data.get("history", [])),
            outcome=data.get("outcome", "passed"),
        )


@dataclass
class RunResults:
    """Everything a run produced (the results JSON, see notes/results-schema.md)."""

    records: list[ProfileRecord]
    backend: str
    roofline: DeviceRoofline | None = None
    stale: list[str] = field(default_factory=list)
    commit: str | None = None
    branch: str | None = None
    dirty: bool = False
    created: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        from . import __version__

        return {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "tool": "pytest-roofline",
            "version": __version__,
            "created": self.created or _now(),
            "commit": self.commit,
            "branch": self.branch,
            "dirty": self.dirty,
            "backend": self.backend,
            "roofline": self.roofline.to_dict() if self.roofline else None,
            "results": [r.to_dict() for r in self.records],
            "stale": sorted(self.stale),
        }


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@contextlib.contextmanager
def measure_lock() -> Iterator[None]:
    """One measurement per machine at a time (xdist workers, concurrent pytest processes)."""
    with filelock.FileLock(str(MEASURE_LOCK), timeout=3600):
        yield


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


def analysis_only_profile(path: Path, backend: str, batch: int, dims: Mapping[str, int]) -> ModelProfile:
    """A profile from static analysis alone (``--roofline-disable``): no latency, no layers' times."""
    from .analysis import analyze
    from .model import model_hash

    analysis = analyze(str(path), batch=batch, dims=dict(dims))
    nan = math.nan
    latency = LatencyStats(0, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan)
    return ModelProfile(
        model_name=path.stem,
        model_path=str(path),
        model_hash=model_hash(str(path)),
        backend=backend,
        backend_version="",
        options={},
        batch=batch,
        input_shapes={},
        latency=latency,
        layers=(),
        attributed_fraction=0.0,
        total_flops=analysis.total.flops,
        total_macs=analysis.total.macs,
        total_bytes=analysis.total.bytes,
        dims=dict(dims),
        extra={"analysis_only": True},
    )


# --- the session ----------------------------------------------------------------------------------


class RooflineSession:
    """State of one pytest run (one per process; the xdist controller merges workers')."""

    def __init__(self, settings: Settings, rootdir: Path, is_worker: bool = False) -> None:
        self.settings = settings
        self.rootdir = rootdir
        self.is_worker = is_worker
        self.store = BaselineStore(settings.baseline_dir)
        self.records: list[ProfileRecord] = []
        self.collected: set[str] = set()
        self.outcomes: dict[str, str] = {}
        self.failures: dict[str, list[str]] = {}
        self.rooflines: dict[str, DeviceRoofline | None] = {}
        self.stale: list[str] = []
        self.written: list[Path] = []
        self.reports_written: list[str] = []
        self.errors: list[str] = []
        self.last_results: RunResults | None = None
        self._git: GitInfo | None = None

    # -- fixtures --------------------------------------------------------------------------------

    def backend(self, name: str | None, options: Mapping[str, str] | None) -> tuple[str, Backend]:
        """The backend a test asked for (session options apply to the session's backend)."""
        from .backends.base import get_backend

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
            self.rooflines[ident] = calibrate(backend, force=force)
        return self.rooflines[ident]

    def profile(
        self,
        node: pytest.Item,
        path: str | os.PathLike[str],
        *,
        batch_size: int = 1,
        dims: Mapping[str, int] | None = None,
        inputs: Any = None,
        backend: str | None = None,
        options: Mapping[str, str] | None = None,
        check_outputs: Any = None,
    ) -> ModelProfile:
        """Measure one model for ``node``, gate it, record it; returns the profile."""
        settings = self.settings
        marker = node.get_closest_marker("roofline")
        tolerance, budget, metrics = self._marker_settings(marker)
        model_path = resolve_model_path(path, Path(str(node.path)).parent, self.rootdir)
        dims = dict(dims or {})
        backend_name, engine = self.backend(backend, options)
        rel = relative_to_root(model_path, self.rootdir)
        fingerprint = engine.fingerprint()
        device = device_class(fingerprint)
        key = entry_key(node.nodeid, rel, batch_size, dims, backend_name, device)
        baseline = None
        if not settings.disable and not settings.compare_ref:
            try:
                baseline = self.store.get(key, node.nodeid)  # a corrupt file fails this test here
            except BaselineError:
                if not settings.update:  # --roofline-update rewrites the file
                    raise

        if check_outputs:
            self._check_outputs(model_path, backend_name, check_outputs, inputs, batch_size, dims)
        if settings.disable:
            prof = analysis_only_profile(model_path, backend_name, batch_size, dims)
            verdict = new_verdict(
                [], tolerance=tolerance, status="not-compared", message="timing disabled (--roofline-disable)"
            )
            self._record(ProfileRecord(node.nodeid, key, prof, verdict))
            return prof

        from pytest_roofline.gate.control import GateDesign, paired_decider, run_gate, stored_decider

        from .api import profile_model

        spec, feeds = self._spec_and_inputs(model_path, batch_size, dims, inputs)
        design = GateDesign(budget=budget * 0.7)  # the profile's own latency gets the rest
        # a bad --roofline-compare-ref fails before anything is measured
        ref_spec = self._reference_spec(model_path, batch_size, dims) if settings.compare_ref else None

        def measure() -> tuple[ModelProfile, Any, BaselineEntry | None, bool]:
            stale_probe, stored = False, baseline
            roofline = self.roofline_for(backend_name, engine)
            prof = profile_model(
                str(model_path),
                backend=engine,
                batch=batch_size,
                dims=dims or None,
                inputs=inputs,
                roofline=roofline,
                sessions=3,
                budget=budget * 0.3,
            )
            if ref_spec is not None:
                run = run_gate(
                    [lambda: engine.open(spec, feeds), lambda: engine.open(ref_spec, feeds)],
                    paired_decider(tolerance),
                    design,
                )
            else:
                from pytest_roofline.gate.control import PROBE_NAME, fit_probe, memory_share, probe_opener

                if stored is not None and stored.probe.get("name") == PROBE_NAME:
                    blocks = {k: int(v) for k, v in (stored.probe.get("blocks") or {"compute": 1}).items()}
                else:
                    stale_probe = stored is not None
                    stored = None
                    blocks = fit_probe(engine, prof.latency.p25, memory_share(prof.layers))
                decide = stored_decider(
                    stored.sessions if stored else None,
                    stored.latency.get("gate_p25") if stored else None,
                    tolerance,
                )
                run = run_gate(
                    [lambda: engine.open(spec, feeds), probe_opener(engine, **blocks)],
                    decide,
                    design,
                )
                run = dataclasses.replace(run, probe_blocks=blocks)
            return prof, run, stored, stale_probe

        with measure_lock():  # held by this thread, released even when the measurement hangs
            what = f"{rel} (batch {batch_size})"
            prof, run, baseline, stale_probe = run_bounded(measure, settings.timeout, what)
        verdict = run.verdict or new_verdict(run.figures, tolerance=tolerance)
        if stale_probe:
            verdict = new_verdict(
                run.figures,
                tolerance=tolerance,
                status="not-compared",
                message="baseline measured with another control probe; rewrite it with --roofline-update",
            )
        if baseline is not None and verdict.mode == "stored":
            from pytest_roofline.gate.control import layer_deltas

            deltas = layer_deltas(baseline.layers, {la.name: la.time for la in prof.layers})
            verdict = dataclasses.replace(verdict, layers=tuple(deltas))
        extra = self._layer_verdicts(metrics, prof, baseline, run.control_p25, tolerance)
        prof = dataclasses.replace(
            prof,
            extra={
                **prof.extra,
                "gate": {
                    "figures": list(run.figures),
                    "subject_p25": run.subject_p25,
                    "control_p25": run.control_p25,
                    "seconds": run.seconds,
                },
            },
        )
        entry = None
        if not settings.compare_ref and run.figures:
            entry = self._entry(key, node.nodeid, rel, batch_size, dims, backend_name, device, prof, run)
        history = list(baseline.history) + [baseline.history_point()] if baseline else []
        self._record(ProfileRecord(node.nodeid, key, prof, verdict, extra, entry, history))
        self._judge(node.nodeid, key, prof, [verdict, *extra])
        self._junit_properties(node, prof, verdict)
        return prof

    @staticmethod
    def _junit_properties(node: pytest.Item, prof: ModelProfile, verdict: Verdict) -> None:
        """Figures for ``--junitxml`` (``<property name="roofline_..."/>``)."""
        from .report.junit import properties

        result = {"profile": prof.to_dict(include_samples=False), "verdict": verdict.to_dict()}
        node.user_properties.extend(properties(result))

    def _marker_settings(self, marker: pytest.Mark | None) -> tuple[float, float, list[str]]:
        kwargs = dict(marker.kwargs) if marker else {}
        unknown = sorted(set(kwargs) - {"tolerance", "metrics", "budget"})
        if unknown:
            raise OptionError(f"roofline marker has no argument {unknown[0]!r} (tolerance, metrics, budget)")
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
                raise OptionError(f"roofline marker: unknown metric {metric!r} (latency, layer:<name>)")
        return tolerance, budget, list(metrics)

    @staticmethod
    def _spec_and_inputs(path: Path, batch: int, dims: Mapping[str, int], inputs: Any) -> tuple[Any, Any]:
        from .model import ModelSpec, bind_input_shapes, load_model, make_inputs

        spec = ModelSpec.create(str(path), batch, dims)
        model = load_model(str(path))
        if inputs is None:
            return spec, make_inputs(model, bind_input_shapes(model, batch, dims))
        if isinstance(inputs, Mapping):
            return spec, {k: np.asarray(v) for k, v in inputs.items()}
        from .inputs import load_inputs
        from .model import graph_inputs

        return spec, load_inputs(inputs, [vi.name for vi in graph_inputs(model)])

    def _reference_spec(self, path: Path, batch: int, dims: Mapping[str, int]) -> Any:
        import onnx

        from .gitref import read_at_ref
        from .model import ModelSpec

        data = read_at_ref(path, str(self.settings.compare_ref))
        try:
            proto = onnx.load_from_string(data)
        except Exception:
            raise RooflineError(
                f"{path.name} at {self.settings.compare_ref!r} is not a valid ONNX model"
            ) from None
        return ModelSpec.create(proto, batch, dims)

    def _check_outputs(
        self, path: Path, backend: str, others: Any, inputs: Any, batch: int, dims: Mapping[str, int]
    ) -> None:
        """``check_outputs=True`` (vs onnxruntime, or openvino when the backend is onnxruntime),
        a backend name, or a list of names: outputs must match the test's backend's."""
        from .check import check_outputs

        if isinstance(others, bool):
            names = ["onnxruntime" if backend != "onnxruntime" else "openvino"]
        else:
            names = [others] if isinstance(others, str) else list(others)
        backends = [backend, *[n for n in names if n != backend]]
        result = check_outputs(str(path), backends=backends, inputs=inputs, batch=batch, dims=dims or None)
        if not result.passed:
            details = "; ".join(c.describe() for c in result.failures[:3])
            raise RooflineError(f"outputs of {path.name} differ between backends: {details}")

    def _layer_verdicts(
        self,
        metrics: Sequence[str],
        prof: ModelProfile,
        baseline: BaselineEntry | None,
        control_p25: float,
        tolerance: float,
    ) -> list[Verdict]:
        verdicts = []
        for metric in metrics:
            if not metric.startswith("layer:"):
                continue
            name = metric.split(":", 1)[1]
            try:
                layer = prof.layer(name)
            except LookupError as exc:  # LayerNotFound: the marker names a layer the model lacks
                raise OptionError(f"roofline marker metric {metric!r}: {exc}") from None
            current = layer.time / control_p25 if control_p25 > 0 else math.nan
            stored = (baseline.layers.get(layer.name) or {}) if baseline else {}
            probe_p25 = baseline.probe.get("p25") if baseline else None
            if baseline is None or not stored.get("time") or not probe_p25:
                verdicts.append(new_verdict([current], tolerance=tolerance, metric=metric))
                continue
            verdicts.append(
                compare(
                    [current],
                    [stored["time"] / probe_p25],
                    tolerance=tolerance,
                    metric=metric,
                    drift=0.03,
                    raw={"baseline": stored["time"], "current": layer.time},
                )
            )
        return verdicts

    def _entry(
        self,
        key: str,
        test: str,
        rel: str,
        batch: int,
        dims: Mapping[str, int],
        backend: str,
        device: str,
        prof: ModelProfile,
        run: Any,
    ) -> BaselineEntry:
        from pytest_roofline.gate.control import PROBE_NAME

        lat = prof.latency
        return BaselineEntry(
            key=key,
            test=test,
            model=rel,
            batch=batch,
            dims=dict(dims),
            backend=backend,
            device_class=device,
            figure=float(np.median(run.figures)),
            sessions=tuple(run.figures),
            probe={"name": PROBE_NAME, "p25": run.control_p25, "blocks": run.probe_blocks},
            latency={
                "median": lat.median,
                "mean": lat.mean,
                "min": lat.min,
                "p25": lat.p25,
                "p75": lat.p75,
                "p90": lat.p90,
                "std": lat.std,
                "session_medians": list(lat.session_medians),
                "gate_p25": run.subject_p25,
            },
            layers={la.name: {"time": la.time, "fraction": la.roofline_fraction} for la in prof.layers},
            fingerprint=dict(prof.fingerprint),
            backend_version=prof.backend_version,
            options=dict(prof.options),
            model_hash=prof.model_hash,
            commit=self.git().commit,
            time=_now(),
        )

    def _record(self, record: ProfileRecord) -> None:
        self.records.append(record)

    def _judge(self, test: str, key: str, prof: ModelProfile, verdicts: Sequence[Verdict]) -> None:
        messages = self.failures.setdefault(test, [])
        if self.settings.update:  # the run's figures are being accepted
            return
        for verdict in verdicts:
            head = f"roofline {verdict.status}: {prof.model_name} (batch {prof.batch}) {verdict.message}"
            if verdict.status == "regression":
                messages.append("\n".join([head, *verdict_table(verdict)]))
            elif self.settings.strict and verdict.status == "inconclusive":
                messages.append("\n".join([f"{head} [--roofline-strict]", *verdict_table(verdict)]))
            elif self.settings.strict and verdict.status == "new" and not self.settings.update:
                messages.append(
                    f"roofline: no baseline for {key} in {self.store.file_for(test)} "
                    "[--roofline-strict]; record one with --roofline-update"
                )

    def attach_spans(self, test: str, spans: Mapping[str, LatencyStats]) -> None:
        """Add a test's application spans to the profiles it recorded."""
        for record in self.records:
            if record.test == test:
                record.profile = dataclasses.replace(record.profile, spans={**record.profile.spans, **spans})

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
        for record in self.records:
            record.outcome = self.outcomes.get(record.test, record.outcome)
        return json.dumps(
            {
                "records": [r.to_dict() for r in self.records],
                "collected": sorted(self.collected),
            }
        )

    def merge_worker(self, payload: str) -> None:
        """Take a worker's records and collected node ids."""
        data = json.loads(payload)
        self.records.extend(ProfileRecord.from_dict(r) for r in data.get("records", []))
        self.collected.update(data.get("collected", []))

    # -- session end -----------------------------------------------------------------------------

    def finish(self) -> RunResults | None:
        """Write baselines (controller only) and reports; returns the run's results.

        A run that profiled nothing, has no baseline directory and asked for no report costs
        nothing (no git calls): None.
        """
        if not self.records and not self.settings.reports and not self.settings.baseline_dir.is_dir():
            return None
        for record in self.records:
            record.outcome = self.outcomes.get(record.test, record.outcome)
        if not self.is_worker:
            self._write_baselines()
            self.stale = self._find_stale()
        results = self.results()
        self.last_results = results
        if not self.is_worker and self.settings.reports:
            from .report import write_reports

            data = results.to_dict()
            try:
                self.reports_written = write_reports(data, list(self.settings.reports))
            except (RooflineError, OSError) as exc:
                self.errors.append(str(exc))
        return results

    def git(self) -> GitInfo:
        """Commit, branch and dirtiness of the rootdir's repository (asked once per run)."""
        if self._git is None:
            from .gitref import git_info

            self._git = git_info(self.rootdir)
        return self._git

    def results(self) -> RunResults:
        """The run's results as a value."""
        info = self.git()
        roofline = next((r for r in self.rooflines.values() if r is not None), None)
        if roofline is None:
            roofline = next((r.profile.roofline for r in self.records if r.profile.roofline), None)
        return RunResults(
            records=list(self.records),
            backend=self.settings.backend,
            roofline=roofline,
            stale=list(self.stale),
            commit=info.commit,
            branch=info.branch,
            dirty=info.dirty,
        )

    def _write_baselines(self) -> None:
        ran = [r for r in self.records if r.entry is not None and r.outcome != "skipped"]
        if self.settings.update:
            chosen, replace = [r.entry for r in ran], True
        else:
            chosen, replace = [r.entry for r in ran if r.verdict.status == "new"], False
        by_file: dict[Path, list[BaselineEntry]] = {}
        for entry in chosen:
            by_file.setdefault(self.store.file_for(entry.test), []).append(entry)  # type: ignore[union-attr]
        for path, entries in sorted(by_file.items()):
            try:
                self.written.extend(
                    self.store.write(entries, replace_existing=replace, force=self.settings.update)
                )
            except (BaselineError, OSError) as exc:
                self.errors.append(f"baselines not written to {path}: {exc}")

    def _find_stale(self) -> list[str]:
        if not self.collected:
            return []
        produced = {r.key for r in self.records}
        producing_tests = {r.test for r in self.records}
        modules = {module_of(t) for t in self.collected}
        stale = []
        for path in {self.store.file_for(t) for t in self.collected}:
            try:
                entries = self.store.read(path)
            except BaselineError:
                continue
            for key, entry in entries.items():
                if module_of(entry.test) not in modules or key in produced:
                    continue
                if entry.test not in self.collected or entry.test in producing_tests:
                    stale.append(key)
        return sorted(stale)

    def summary(self) -> list[str]:
        """The terminal summary's lines (after :meth:`finish`)."""
        from .report.terminal import summary_lines

        if self.last_results is None:
            return []
        lines = summary_lines(
            self.last_results.to_dict(),
            reports=self.reports_written,
            baseline_files=[str(p) for p in self.written],
        )
        return lines + [f"roofline error: {e}" for e in self.errors]
