"""The serving gate: one ``model_load(...)`` call judged the way ``model_profile``'s latency is.

The scenario results live in the test's baseline entry for the model (``BaselineEntry.scenarios``,
one per settings).  What runs is that entry's identity, so the gate's decision order applies as it
is (:func:`pytest_roofline.gate.order.route`):

* nothing that runs changed and the entry holds a result of the same settings: ``unchanged`` per
  metric, LoadGen is not run again and the test gets the stored figures;
* the model changed and the baseline's model is reachable: old and new run **paired**, answering
  the same LoadGen tests in turn (:func:`pytest_roofline.serving.compare.compare_models`; at one
  intra-op thread when other processes share the CPUs, as the latency gate's pairing), a verdict
  per metric (p99: order statistics of each side's pooled queries; QPS: a t interval of the window
  ratios), each interval combined with the gate's noise model, judged by the gate's rule;
* no entry, no result of these settings yet, or ``--roofline-update``: the scenario runs and its
  result is written into the entry at run end (``new``);
* anything else (a changed backend build, option, env var or device; the old model unreachable):
  the scenario runs and is ``not-compared`` (a tail is compared paired only), the reason named.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.fmt import fmt_pct
from pytest_roofline.serving.compare import COVERAGE, ScenarioComparison
from pytest_roofline.serving.types import ScenarioResult, ScenarioSettings

if TYPE_CHECKING:
    from pytest_roofline.gate.baseline import BaselineEntry
    from pytest_roofline.gate.request import RunMode
    from pytest_roofline.gate.store import BaselineStore
    from pytest_roofline.gate.types import GateRequest
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.pipeline import ModelCall, PreparedModel

__all__ = [
    "GATED_METRICS",
    "ServingRecord",
    "gate_scenario",
    "matching",
    "record_scenarios",
    "with_scenarios",
]

#: The metrics a scenario is judged on (QPS where LoadGen reports one).
GATED_METRICS = ("p99", "qps")


@dataclass(frozen=True)
class ServingRecord:
    """One ``model_load`` call of one test: LoadGen's result, its verdicts, and whether the result
    goes into the baseline entry ``key`` at run end (``record``)."""

    test: str
    key: str
    model: str
    batch: int
    result: ScenarioResult
    verdicts: tuple[Verdict, ...]
    comparison: ScenarioComparison | None = None
    record: bool = False
    outcome: str = "passed"

    def failure_messages(self, baseline_file: Path, strict: bool) -> list[str]:
        """The test's failure text for this record's verdicts (``gate.judge.failure_messages``)."""
        from pytest_roofline.gate.judge import failure_messages

        return failure_messages(
            self.verdicts,
            model=f"{self.model} {self.result.scenario}",
            batch=self.batch,
            key=self.key,
            baseline_file=baseline_file,
            strict=strict,
        )

    def to_dict(self) -> dict[str, Any]:
        """The results-schema ``serving[]`` item."""
        return {
            "test": self.test,
            "key": self.key,
            "model": self.model,
            "batch": self.batch,
            "result": self.result.to_dict(),
            "verdicts": [v.to_dict() for v in self.verdicts],
            "comparison": self.comparison.to_dict() if self.comparison else None,
            "record": self.record,
            "outcome": self.outcome,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServingRecord:
        """Inverse of :meth:`to_dict` (raises KeyError, TypeError, ValueError)."""
        from pytest_roofline.gate.verdict import Verdict

        comparison = data.get("comparison")
        return cls(
            test=str(data["test"]),
            key=str(data["key"]),
            model=str(data["model"]),
            batch=int(data["batch"]),
            result=ScenarioResult.from_dict(data["result"]),
            verdicts=tuple(Verdict.from_dict(dict(v)) for v in data.get("verdicts") or ()),
            comparison=ScenarioComparison.from_dict(comparison) if comparison else None,
            record=bool(data.get("record", False)),
            outcome=str(data.get("outcome", "passed")),
        )


def asked(result: ScenarioResult) -> ScenarioSettings:
    """The settings ``result`` was asked for: a QPS search's result ran at the rate it found."""
    return dataclasses.replace(result.settings, target_qps=None) if result.searched else result.settings


def matching(entry: BaselineEntry | None, settings: ScenarioSettings) -> ScenarioResult | None:
    """The result ``entry`` keeps for ``settings`` (the same scenario asked the same way), or None."""
    for stored in entry.scenarios if entry is not None else ():
        if asked(stored) == settings:
            return stored
    return None


def with_scenarios(entry: BaselineEntry, results: Sequence[ScenarioResult]) -> BaselineEntry:
    """``entry`` keeping ``results`` (stored form), each replacing a result of the same settings."""
    kept = {asked(r): r for r in entry.scenarios}
    kept.update({asked(r): r.stored() for r in results})
    ordered = sorted(kept.values(), key=lambda r: (r.scenario, str(sorted(r.settings.to_dict().items()))))
    return dataclasses.replace(entry, scenarios=tuple(ordered))


def _verdict(
    status: str, metric: str, settings: ScenarioSettings, tolerance: float, message: str, **kw: Any
) -> Verdict:
    from pytest_roofline.gate.verdict import Verdict

    figure = kw.pop("current", math.nan)
    return Verdict(
        status=status,
        mode=kw.pop("mode", "paired"),
        metric=f"{settings.scenario} {metric}",
        current=figure,
        tolerance=tolerance,
        message=f"{settings.scenario} {metric}: {message}",
        **kw,
    )


def _metrics(result: ScenarioResult) -> list[tuple[str, float]]:
    """The gated metrics ``result`` has, with their figures (seconds, queries/s)."""
    figures = [("p99", result.p99)]
    if result.achieved_qps is not None:
        figures.append(("qps", result.achieved_qps))
    return figures


def _plain(
    result: ScenarioResult, status: str, message: str, tolerance: float, reasons: Sequence[str] = ()
) -> tuple[Verdict, ...]:
    """Verdicts without a comparison (``new``, ``unchanged``, ``not-compared``), one per metric."""
    return tuple(
        _verdict(
            status,
            metric,
            result.settings,
            tolerance,
            message,
            current=figure,
            mode="identity" if status == "unchanged" else "stored",
            reasons=tuple(reasons),
        )
        for metric, figure in _metrics(result)
    )


#: What a paired verdict's figures are, per clock: (throughput's reason, latencies' reason).
CLOCKS = {
    "wall": ((), ()),
    "cpu": (
        ("samples per second of the worker threads' CPU time: other processes shared the CPUs",),
        ("percentiles of each query's CPU time in its worker thread: other processes shared the CPUs",),
    ),
}


def _why(
    status: str, ratio: float, noise: float, tolerance: float, coverage: float = 1.0, short: str = ""
) -> str:
    """A paired serving verdict's reason, worded as the latency gate words its own; ``short``: what
    the time budget bought and the remedy, for a verdict it left undecided."""
    if status == "inconclusive" and short and (coverage < COVERAGE or math.isnan(ratio)):
        return short
    worse = f"{fmt_pct(ratio - 1, 1)} worse than the baseline's model"
    if status == "regression":
        return f"{worse}, beyond the {fmt_pct(tolerance, 0)} tolerance"
    if status == "improved":
        return f"{fmt_pct(1 - ratio, 1)} better than the baseline's model"
    if status == "pass":
        return f"ratio {ratio:.3f} within {fmt_pct(tolerance, 0)} (noise ±{fmt_pct(noise, 1)})"
    if coverage < COVERAGE:
        return f"too few queries for this percentile's interval (it covers {coverage:.0%}, not 95 %)"
    if noise > tolerance:
        return f"noise ±{fmt_pct(noise, 1)} is above the {fmt_pct(tolerance, 0)} tolerance"
    beyond = f"a change beyond the {fmt_pct(tolerance, 0)} tolerance"
    return f"ratio {ratio:.3f}: {beyond} neither shown nor ruled out"


def paired_verdicts(found: ScenarioComparison, reasons: Sequence[str]) -> tuple[Verdict, ...]:
    """One verdict per gated metric of a paired comparison (ratios above 1: the new model worse)."""
    verdicts = []
    for metric in GATED_METRICS:
        try:
            item = found.verdict(metric)
        except KeyError:
            continue  # MultiStream: LoadGen reports no QPS
        if math.isnan(item.ratio):  # no window fitted the budget: the new model's own figure only
            figure = dict(_metrics(representative(found))).get(metric, math.nan)
            why = _short(found, metric) or "no window both models answered"
            verdicts.append(
                _verdict("inconclusive", metric, found.settings, found.tolerance, why, current=figure)
            )
            continue
        old, new = item.old, item.new
        load = f"others took {found.pressure:.0%} of the CPUs; noise floor {fmt_pct(found.floor, 2)}"
        verdicts.append(
            _verdict(
                item.status,
                metric,
                found.settings,
                found.tolerance,
                _why(
                    item.status, item.ratio, item.noise, found.tolerance, item.coverage, _short(found, metric)
                ),
                current=new,
                baseline=old,
                ratio=item.ratio,
                ci=(item.low, item.high),
                noise=item.noise,
                sessions=len(found.new),
                raw={"baseline": old, "current": new} if metric != "qps" else {},
                reasons=(
                    *reasons,
                    f"{len(found.new)} windows both models answered in turn; {load}",
                    *CLOCKS[found.clock][metric != "qps"],
                ),
            )
        )
    return tuple(verdicts)


def _short(found: ScenarioComparison, metric: str) -> str:
    """What ``found``'s time budget bought of ``metric`` and the one remedy, where it bought too
    little (a p99's 95 % interval; any metric where no window fitted), else ""."""
    plan = found.plan
    if plan is None or not plan.short or (metric != "p99" and plan.runnable):
        return ""
    bought = min(sum(f.queries for f in side) for side in (found.old, found.new))
    return plan.shortfall(bought)


def _unrun(result: ScenarioResult, budget: float) -> str:
    """The reason a run cut by its budget gives: LoadGen's figures count samples never run."""
    return (
        f"the {budget:g} s budget ran out: {result.unrun_samples} samples were answered unrun"
        " (LoadGen's figures count them); raise the budget"
    )


def representative(found: ScenarioComparison) -> ScenarioResult:
    """What the test gets back: LoadGen's run of the new model by itself, else the last shared window."""
    return found.alone if found.alone is not None else found.windows[-1]


def gate_scenario(
    request: GateRequest,
    settings: ScenarioSettings,
    log_dir: Path,
    *,
    mode: RunMode,
    budget: float,
    tolerance: float,
    windows: int,
    progress: Any = None,
    started: float | None = None,
) -> ServingRecord:
    """Run or judge one scenario of ``request``'s model (module docstring: the decision order),
    within ``budget`` seconds from ``started`` (a ``time.monotonic()``: the ``model_load`` call's
    start; this call if None)."""
    from pytest_roofline.gate.order import route
    from pytest_roofline.pipeline import prepare
    from pytest_roofline.serving.runner import run_scenario

    started = time.monotonic() if started is None else started
    prepared = request.prepared or prepare(_call(request, request.model))  # --roofline-disable: not yet

    def done(result: ScenarioResult, verdicts: tuple[Verdict, ...], **kw: Any) -> ServingRecord:
        return ServingRecord(
            request.test, request.key, request.model_rel, request.batch, result, verdicts, **kw
        )

    def fresh(status: str, message: str, reasons: Sequence[str] = (), keep: bool = False) -> ServingRecord:
        left = budget - (time.monotonic() - started)
        result = run_scenario(prepared, settings, log_dir, budget=left, progress=progress)
        if result.unrun_samples:  # never silently: LoadGen's figures count them
            reasons = (*reasons, _unrun(result, budget))
        return done(result, _plain(result, status, message, tolerance, reasons), record=keep)

    if mode.disable:
        return fresh("not-compared", "gate disabled (--roofline-disable)")
    if mode.compare_ref:
        return fresh("not-compared", "serving scenarios are not compared with a git reference yet")
    baseline = request.baseline
    if baseline is None or mode.update:
        why = (
            "recorded with --roofline-update"
            if mode.update
            else "no baseline yet; this run's figures become it"
        )
        return fresh("new", why, keep=True)
    way = route(request, prepared)
    stored = matching(baseline, settings)
    if way.kind == "unchanged":
        if stored is None:
            return fresh(
                "new",
                "no result of these settings yet; this run's figures join the baseline",
                way.reasons,
                True,
            )
        note = (
            f"nothing that runs changed; LoadGen's figures recorded at {baseline.commit or 'an earlier run'}"
        )
        return done(stored, _plain(stored, "unchanged", note, tolerance, way.reasons))
    if way.kind == "paired" and way.reference is not None:
        return _paired(
            request,
            prepared,
            settings,
            stored,
            Path(str(way.reference.path)),
            log_dir,
            tolerance,
            windows,
            budget,
            started,
            way.reasons,
            done,
        )
    changed = "; ".join(way.reasons) or "the baseline recorded no identity"
    return fresh("not-compared", f"{changed}; serving figures are compared paired only", way.reasons)


def _paired(
    request: GateRequest,
    prepared: PreparedModel,
    settings: ScenarioSettings,
    stored: ScenarioResult | None,
    reference: Path,
    log_dir: Path,
    tolerance: float,
    windows: int,
    budget: float,
    started: float,
    reasons: Sequence[str],
    done: Any,
) -> ServingRecord:
    """Old and new answering ``windows`` LoadGen tests in turn, all within ``budget`` seconds from
    ``started`` (the windows sized from one query's measured time: serving.budget)."""
    from pytest_roofline.device.load import between, snapshot
    from pytest_roofline.gate.runner import paired_engine
    from pytest_roofline.pipeline import prepare
    from pytest_roofline.serving.compare import compare_models

    at = settings
    if settings.scenario == "server" and settings.target_qps is None:  # a search: pair at its rate
        rate = stored.settings.target_qps if stored is not None else None
        if rate is None:
            from pytest_roofline.serving.runner import run_scenario

            # the search spends at most half the budget, the pairing the rest
            found_rate = run_scenario(prepared, settings, log_dir / "search", budget=budget / 2)
            rate = found_rate.settings.target_qps
        at = dataclasses.replace(settings, target_qps=rate)
    before = snapshot()
    old = prepare(_call(request, reference))
    one_thread = paired_engine(prepared.engine, between(before, _settled(before)))
    if one_thread is not None:  # shared CPUs: one thread per session keeps the ratio unbiased
        old, prepared = _on(old, one_thread), _on(prepared, one_thread)
        reasons = (*reasons, "timed at one intra-op thread: other processes shared the CPUs")
    found = compare_models(
        old, prepared, at, log_dir, windows=windows, tolerance=tolerance, budget=budget, started=started
    )
    took = time.monotonic() - started
    if took > budget:  # never silently: a model slower than its timing said, or one query past it
        reasons = (*reasons, f"the comparison took {took:.1f} s, past its {budget:g} s budget")
    verdicts = paired_verdicts(found, reasons)
    return done(representative(found), verdicts, comparison=found)


#: Seconds of the machine's load read before a paired run, to choose its threads.
LOAD_READING = 0.25


def _settled(before: Any) -> Any:
    """A snapshot at least :data:`LOAD_READING` seconds after ``before``."""
    from pytest_roofline.device.load import snapshot

    time.sleep(max(0.0, before.wall + LOAD_READING - time.monotonic()))
    return snapshot()


def _on(prepared: PreparedModel, engine: Any) -> PreparedModel:
    """``prepared`` opened on ``engine`` (the same model, inputs and shapes)."""
    return dataclasses.replace(prepared, engine=engine)


def _call(request: GateRequest, model: Path) -> ModelCall:
    """``model`` bound as ``request``'s model is: its batch, dims, inputs, trips and backend."""
    from pytest_roofline.pipeline import ModelCall

    return ModelCall(
        str(model),
        batch=request.batch,
        dims=dict(request.dims),
        inputs=request.inputs,
        backend=request.backend,
        trips=request.trips,
    )


def record_scenarios(store: BaselineStore, records: Sequence[ServingRecord]) -> tuple[list[Path], list[str]]:
    """Run end, after the latency entries are written: each result a record asks to keep joins its
    test's entry for the model (one per settings).  Returns the files written and one line per
    entry that could not take its results."""
    from pytest_roofline.errors import BaselineError

    by_key: dict[str, list[ServingRecord]] = {}
    for item in records:
        if item.record and item.outcome != "skipped":
            by_key.setdefault(item.key, []).append(item)
    entries, errors = [], []
    for key, group in sorted(by_key.items()):
        try:
            entry = store.get(key, group[0].test)
        except BaselineError as exc:
            errors.append(f"serving results not kept: {exc}")
            continue
        if entry is None:
            errors.append(f"serving results not kept: no baseline entry {key} (its latency was not recorded)")
            continue
        entries.append(with_scenarios(entry, [r.result for r in group]))
    if not entries:
        return [], errors
    try:
        return store.write(entries, replace_existing=True), errors
    except (BaselineError, OSError) as exc:
        return [], [*errors, f"serving results not written: {exc}"]
