"""One model through the gate: profile it, sample it against its control, decide, build the entry.

:func:`run_model_gate` is what a ``model_profile(...)`` call does once the pytest side has resolved
the test's settings: it needs no pytest.  Stored mode normalizes the model by a control probe
fitted to it and compares with the baseline entry; paired mode compares the model with its file
at a git reference, interleaved.  A baseline recorded under other conditions (threads,
providers, backend release, control probe) gives ``incomparable``, never a verdict on speed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pytest_roofline.device.load import between, snapshot
from pytest_roofline.files import machine_temp_dir
from pytest_roofline.gate.conditions import Conditions, settings_of
from pytest_roofline.gate.sampling import GateDesign
from pytest_roofline.gate.types import GateOutcome, GateRequest

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend
    from pytest_roofline.device.load import MachineLoad
    from pytest_roofline.diff import ModelSummary
    from pytest_roofline.gate.baseline import BaselineEntry
    from pytest_roofline.gate.change import ChangeReport
    from pytest_roofline.gate.identity import RunIdentity
    from pytest_roofline.gate.order import Route
    from pytest_roofline.gate.sampling import GateRun
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.model import ModelSpec
    from pytest_roofline.pipeline import LayerRun, PreparedModel
    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.roofline import DeviceRoofline

__all__ = ["measure_lock", "paired_engine", "run_model_gate", "static_outcome"]

MEASURE_LOCK = machine_temp_dir() / "pytest-roofline-measure.lock"
#: Seconds a run waits on a measure lock whose file is another user's before it measures anyway.
FOREIGN_LOCK_WAIT = 60.0
#: Seconds a run waits on its own user's measure lock (each measurement is bounded by its timeout).
MEASURE_LOCK_WAIT = 3600.0
#: Another user's measure lock files (device, inode) that this process found held past the wait.
_FOREIGN_HELD: set[tuple[int, int]] = set()

#: One batch of the configured threads beside a one-thread figure: its latency, and a second check.
CONFIGURED_DESIGN = GateDesign(sessions=3, rounds=10, max_batches=1)
#: Profiled iterations of the layer times in a gated run (the gate's own samples give the latency).
PROFILE_ITERATIONS = 5


@contextlib.contextmanager
def measure_lock() -> Iterator[None]:
    """One measurement per machine at a time (xdist workers, concurrent pytest processes, every
    user, whatever its ``$TMPDIR``).  No other user can block or crash a run through it: a lock
    file that is another user's is waited on for :data:`FOREIGN_LOCK_WAIT` seconds at most (once per
    process and file: the same file still held later is not waited on again), and a lock that cannot
    be taken (refused file, timeout) is measured without, with a warning."""
    import warnings

    import filelock

    from pytest_roofline.files import file_lock

    try:
        info = os.lstat(MEASURE_LOCK)
        foreign = (info.st_dev, info.st_ino) if info.st_uid != os.geteuid() else None
    except OSError:
        foreign = None
    wait = MEASURE_LOCK_WAIT if foreign is None else FOREIGN_LOCK_WAIT
    lock = file_lock(MEASURE_LOCK, 0.0 if foreign in _FOREIGN_HELD else wait)
    try:
        lock.__enter__()
    except (OSError, filelock.Timeout) as exc:
        if foreign is not None and isinstance(exc, filelock.Timeout):
            _FOREIGN_HELD.add(foreign)  # the same file still held later: measured without at once
        why = f"held past {lock.timeout:g} s" if isinstance(exc, filelock.Timeout) else str(exc)
        warnings.warn(
            f"pytest-roofline: measured without the machine's measure lock {MEASURE_LOCK} ({why}); "
            "another measurement may have run beside this one",
            RuntimeWarning,
            stacklevel=3,
        )
        yield
        return
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def current_conditions(
    backend: Backend, control: str, figure: str = "configured", clock: str = "wall"
) -> Conditions:
    """The conditions of a run on ``backend`` normalized by control probe ``control``."""
    settings = settings_of(backend.fingerprint(), backend.options)
    return Conditions(backend.version(), settings, control, figure, clock)


#: The least run time (seconds, by the wall clock) from which a new stored figure is timed by its
#: thread's CPU time.  That clock is a system call (~0.6 us a run here) whose cost grows with the
#: load: a 5 us MatMul model read ~3 % slower by it when its baseline was recorded beside more busy
#: processes than its retime (0.933-1.042 over 8 such A/A pairs, 0.969-1.030 by the wall clock, whose
#: p25 a neighbour's scheduler slice seldom reaches in so short a run).
THREAD_CLOCK_FROM = 100e-6


def stored_figure_engine(
    engine: Backend, run_seconds: float | None, baseline_clock: str | None = None
) -> Backend:
    """The engine a stored figure (model and control probe) is timed on: ``engine`` timing each run
    by its thread's CPU time where a run executes on that thread alone (``Backend.thread_timed_copy``)
    and lasts at least :data:`THREAD_CLOCK_FROM` (``run_seconds``; None: not known, the wall clock),
    else ``engine``; against a baseline, by the clock
    its figure was timed by (``baseline_clock``; None under ``--roofline-update`` and for a new one).

    On shared CPUs the wall clock charges a run the slices a neighbour held its core: beside one busy
    process stored A/A ratios of the zoo read 0.853-1.159 by it, 0.980-1.049 by the thread's CPU time
    (docs/plugin.md, "Decision: stored mode").  The clock never follows the load, so a baseline and a
    later run are timed alike whatever load either saw."""
    timed = engine.thread_timed_copy()
    if timed is None:
        return engine
    long_enough = run_seconds is not None and run_seconds >= THREAD_CLOCK_FROM
    clock = baseline_clock or ("thread" if long_enough else "wall")
    return timed if clock == "thread" else engine


def static_outcome(request: GateRequest) -> GateOutcome:
    """A profile from static analysis alone (``--roofline-disable``): no timing, no gate."""
    from pytest_roofline.analysis import analyze
    from pytest_roofline.gate.verdict import new_verdict
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.model import model_hash
    from pytest_roofline.profile import ModelProfile

    bound = request.bound  # the batch and dims the call's arrays bind, and the arrays (If branches)
    dims = bound.dims if bound is not None else dict(request.dims)
    analysis = analyze(
        str(request.model),
        batch=request.batch,
        dims=dims,
        trips=request.trips,
        input_values=(bound.given or None) if bound is not None else None,
    )
    nan = math.nan
    profile = ModelProfile(
        model_name=request.model.stem,
        model_path=str(request.model),
        model_hash=model_hash(str(request.model)),
        backend=request.backend.name,
        backend_version="",
        options={},
        batch=request.batch,
        input_shapes=dict(bound.shapes) if bound is not None else {},
        latency=LatencyStats(0, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan),
        layers=(),
        attributed_fraction=0.0,
        total_flops=analysis.total.flops,
        total_macs=analysis.total.macs,
        total_bytes=analysis.total.bytes,
        dims=dims,
        extra={"analysis_only": True},
    )
    verdict = new_verdict(
        [], tolerance=request.tolerance, status="not-compared", message="timing disabled (--roofline-disable)"
    )
    return GateOutcome(profile, verdict)


def _quick_p25(opener: Callable[[], Any]) -> float:
    """The model's p25 latency from a few runs of one session (to size a new control probe)."""
    import numpy as np

    with opener() as session:
        session.time(2)
        return float(np.percentile(session.time(7), 25))


def run_model_gate(request: GateRequest, roofline: Callable[[], DeviceRoofline | None]) -> GateOutcome:
    """Profile, sample and judge ``request``'s model; ``roofline()`` gives the device roofline.

    The gate's own samples of the model (fresh sessions, profiler off) are the profile's latency
    statistics: the model is timed once, not once for the profile and again for the gate.

    Raises:
        RooflineError: bad model, inputs or backend failure (one line).
    """
    from pytest_roofline.gate.control_probe import PROBE_NAME, fit_probe, memory_share, probe_opener
    from pytest_roofline.gate.isolated import sampler_for
    from pytest_roofline.gate.judge import incomparable
    from pytest_roofline.gate.layers import layer_deltas, layer_verdicts
    from pytest_roofline.gate.order import route, short_latency, short_sample
    from pytest_roofline.gate.paired import paired_run
    from pytest_roofline.gate.sampling import GateDesign, profiled_run_seconds, run_gate, stored_decider
    from pytest_roofline.gate.verdict import new_verdict
    from pytest_roofline.measure.rounds import SessionOpener
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.pipeline import ModelCall, assemble, prepare, profile_layers
    from pytest_roofline.profile import build_layers

    engine, tolerance = request.backend, request.tolerance
    prepared = request.prepared or prepare(
        ModelCall(
            str(request.model),
            batch=request.batch,
            dims=dict(request.dims),
            inputs=request.inputs,
            backend=engine,
        )
    )
    way = route(request, prepared)  # identity first: nothing is timed to learn that nothing changed
    shortcut = way.kind == "unchanged" and not request.timed  # identity alone: nothing timed
    sampler = sampler_for(engine) if not shortcut else None  # warm when sampling begins
    before_profile = snapshot()
    layer_run = profile_layers(
        prepared,
        iterations=PROFILE_ITERATIONS,
        roofline=roofline(),
        trips=request.trips,
        # the short sample an unchanged run reports, or a stored run records for later drifts:
        # taken in the plain session the layer profile opens anyway (one model load less)
        sample_latency=short_sample if request.reference is None and way.kind != "paired" else None,
    )
    if shortcut:
        return _unchanged(request, prepared, layer_run, way)
    if way.kind == "paired":
        request = dataclasses.replace(request, reference=way.reference)
    shared = between(before_profile, snapshot()) if engine.wall_clock else None
    one_thread = paired_engine(engine, shared) if request.reference is not None else None
    design = GateDesign(budget=request.budget, run_estimate=profiled_run_seconds(layer_run.kernels))
    single = engine.single_thread() if request.reference is None else None
    figure_engine = stored_figure_engine(  # the configured threads are kept beside
        single or engine,
        (layer_run.latency.p25 if layer_run.latency else None) or design.run_estimate,
        request.baseline.conditions.clock if request.baseline and not request.update else None,
    )
    current = current_conditions(
        engine,
        PROBE_NAME,
        "one-thread" if single is not None else "configured",
        "thread" if figure_engine.thread_timed else "wall",
    )
    baseline = request.baseline if request.reference is None else None
    differences = baseline.conditions.differences(current) if baseline else []
    comparable = baseline if baseline is not None and not differences else None
    blocks: dict[str, int] = {}

    subject = SessionOpener(engine, prepared.spec, prepared.arrays)
    configured_run = None
    if request.reference is not None:
        pair_engine = one_thread or engine
        openers = [SessionOpener(pair_engine, s, prepared.arrays) for s in (prepared.spec, request.reference)]
        pair_sampler = sampler if one_thread is None else sampler_for(pair_engine)
        run = paired_run(openers, design, tolerance, sampler=pair_sampler, watch_load=engine.wall_clock)
        if one_thread is not None and shared is not None:
            clock = ", each run by its thread's CPU time" if pair_engine.thread_timed else ""
            one = (
                f"timed at one intra-op thread{clock}: other processes shared the CPUs ({shared.describe()})"
            )
            run = dataclasses.replace(run, verdict=_with_reason(run.verdict, one))
    else:
        figure_subject = SessionOpener(figure_engine, prepared.spec, prepared.arrays)
        if comparable is not None:
            blocks = dict(comparable.control.blocks) or {"compute": 1}
        elif request.probe:  # the history series' own probe: its points stay in one unit
            blocks = dict(request.probe)
        else:
            layers, _ = build_layers(layer_run.analysis, layer_run.kernels, layer_run.roofline)
            blocks = fit_probe(figure_engine, _quick_p25(figure_subject), memory_share(layers))
        decide = stored_decider(
            comparable.sessions if comparable else None,
            comparable.latency.gate_p25 if comparable else None,
            tolerance,
            comparable.control.p25 if comparable else None,
            comparable.pressure if comparable else 0.0,
        )
        run = run_gate(
            [figure_subject, probe_opener(figure_engine, **blocks)],
            decide,
            design,
            sampler=sampler_for(figure_engine),
            watch_load=engine.wall_clock,
        )
        if single is not None:  # the configured threads: the latency users see, and a second check
            before = comparable.configured if comparable is not None else None
            configured_run = run_gate(
                [subject, probe_opener(engine, **blocks)],
                stored_decider(
                    before.sessions if before else None,
                    before.subject_p25 if before else None,
                    tolerance,
                    before.control_p25 if before else None,
                    comparable.pressure if comparable is not None else 0.0,
                ),
                dataclasses.replace(  # what is left of the budget
                    CONFIGURED_DESIGN,
                    budget=max(request.budget - run.seconds, 1e-9),
                    run_estimate=design.run_estimate,
                ),
                sampler=sampler,
                watch_load=engine.wall_clock,
            )
    timing_run = configured_run or run
    latency = LatencyStats.from_samples(
        [x for session in timing_run.subject_samples for x in session],
        sessions=[list(s) for s in timing_run.subject_samples],
    )
    if one_thread is not None:  # the pairing ran at one thread: the test's latency at its own
        latency = short_latency(prepared)
    elif configured_run is None and figure_engine.thread_timed:  # CPU time is not the latency users see
        latency = layer_run.latency or short_latency(prepared)
    profile = assemble(
        prepared, layer_run, latency, {"gate": _gate_figures(run, configured_run, blocks, request.reference)}
    )
    profile = _with_rss_memory(request, prepared, layer_run, profile)
    verdict = run.verdict or new_verdict(run.figures, tolerance=tolerance)
    if differences:
        verdict = incomparable(differences, run.figures, tolerance)
    elif comparable is not None:
        notes = [] if way.changes else comparable.conditions.notes(current)
        deltas = layer_deltas(comparable.layers, {la.name: la.time for la in profile.layers})
        verdict = dataclasses.replace(verdict, layers=tuple(deltas), reasons=(*verdict.reasons, *notes))
    if configured_run is not None and configured_run.verdict is not None and not differences:
        verdict = with_configured(verdict, configured_run.verdict)
    verdict = _routed(verdict, way, request.other_device, request.device_class)
    extra = layer_verdicts(
        request.metrics,
        profile,
        comparable,
        timing_run.control_p25,
        tolerance,
        baseline_control_p25=_timing_control_p25(comparable),
        load=timing_run.load,
        baseline_pressure=comparable.pressure if comparable is not None else 0.0,
    )
    summary = _summary(prepared, layer_run)
    extra.extend(_memory_verdicts(request, profile, current, summary))
    change = None
    if not differences and (comparable is not None or request.reference is not None) and summary is not None:
        change = _change(request, prepared, layer_run.roofline, verdict, summary, profile)
        verdict = dataclasses.replace(verdict, explanation=change.text)
    if way.kind == "unchanged":  # timed for the history: identity decides, the timing is the drift
        verdict, extra = _timed_unchanged(request, verdict, way, run.load)
    entry = None
    if request.new_at_ref:  # paired mode records no baseline: a verdict `new`, nothing compared
        verdict = dataclasses.replace(
            new_verdict(run.figures, tolerance=tolerance, message=request.new_at_ref), mode="paired"
        )
    elif request.reference is None and run.figures:  # recorded under any load, with the load kept:
        alone = (layer_run.latency or short_latency(prepared)).p25  # what a later unchanged run measures
        entry = _entry(request, profile, run, blocks, current, summary, configured_run, way.identity, alone)
        if run.load.disturbed and verdict.status == "new":  # a later comparison widens by it
            kept = f"recorded under load ({run.load.describe()}); later comparisons carry that noise"
            verdict = dataclasses.replace(verdict, reasons=(*verdict.reasons, kept))
    recorded = request.baseline if way.kind == "paired" else baseline  # auto-paired: the trend still shows
    history = (*recorded.history, recorded.history_point()) if recorded else ()
    return GateOutcome(profile, verdict, tuple(extra), entry, history, change)


def paired_engine(engine: Backend, load: MachineLoad | None) -> Backend | None:
    """The one-thread engine a pairing runs on when other processes share the CPUs, else None.

    Two sessions' thread pools on busy cores wait on their slowest thread, and two different
    graphs (many small kernels against a few large ones) suffer that differently: a bias in the
    ratio that no interval carries.  One thread per session keeps the ratio unbiased.  Where the
    backend can, each run is timed by its thread's CPU time (``Backend.thread_timed_copy``): the
    scheduler slices the load takes from a run are not charged to it, which spread a one-thread
    pairing's sessions ±10-100 % by the wall clock (docs/plugin.md, "Load is a noise")."""
    if load is None or not load.disturbed:
        return None
    one = engine.single_thread()
    return (one or engine).thread_timed_copy() or one


def _with_reason(verdict: Verdict | None, reason: str) -> Verdict | None:
    return None if verdict is None else dataclasses.replace(verdict, reasons=(*verdict.reasons, reason))


def _timed_unchanged(
    request: GateRequest, timed: Verdict, way: Route, load: MachineLoad
) -> tuple[Verdict, list[Verdict]]:
    """The ``unchanged`` verdicts of a run timed for the history although nothing that runs changed:
    the stored comparison's ratio is the machine's (or the runtime's) drift, never a regression;
    a busy machine is named (the drift is read through it), a baseline is never at stake."""
    from pytest_roofline.gate.order import unchanged_verdict

    ratio = timed.ratio if timed.ratio is not None and math.isfinite(timed.ratio) else None
    # the timed comparison's seconds (its baseline and current are probe-normalized figures)
    raw = {"baseline": timed.raw.get("baseline"), "current": timed.raw.get("current"), "drift": ratio}
    busy = (f"measured while busy: {load.describe()}",) if load.disturbed else ()
    verdict, extra = unchanged_verdict(request.metrics, request.tolerance, raw, (*way.reasons, *busy))
    return verdict, [*extra, *_memory_unchanged(request, way)]


def _memory_verdicts(
    request: GateRequest, profile: ModelProfile, current: Conditions, summary: ModelSummary | None
) -> list[Verdict]:
    """The memory verdict beside latency (gate.memory): on whenever the backend reports memory.

    Decided against the stored baseline's memory on one run, in paired mode too (the timings are
    paired; the bytes need no pairing).  A regression is explained by the buffers this run's graph
    (``summary``) keeps alive longer than the baseline's (the summary its entry keeps)."""
    from pytest_roofline.gate.memory import MemoryTolerance, against_entry, memory_verdict

    tolerance = request.memory_tolerance or MemoryTolerance()
    explicit = "memory" in request.metrics
    baseline = request.baseline
    differences = baseline.conditions.differences(current) if baseline is not None else []
    record = baseline.memory if baseline else None
    verdict = memory_verdict(profile, record, tolerance, explicit)
    if (
        verdict is not None
        and verdict.status == "regression"
        and baseline is not None
        and summary is not None
    ):
        from pytest_roofline.gate.change import stored_summary
        from pytest_roofline.memory.change import kept_longer

        old = stored_summary(baseline)
        if old is not None:
            kept = kept_longer(old.lifetimes(), summary.lifetimes())
            verdict = memory_verdict(profile, record, tolerance, explicit, kept)
    return [] if verdict is None else [against_entry(verdict, baseline, differences, tolerance)]


def _with_rss_memory(
    request: GateRequest, prepared: PreparedModel, layer_run: LayerRun, profile: ModelProfile
) -> ModelProfile:
    """``profile`` with its memory from a helper's peak RSS (memory.rss) where the test asks for the
    memory metric and the backend's profile reported none (OpenVINO): a process and a model load
    more, so only when asked for."""
    if profile.memory is not None or "memory" not in request.metrics or prepared.spec.path is None:
        return profile
    from pytest_roofline.memory.estimate import static_memory
    from pytest_roofline.memory.rss import peak_rss_memory

    engine = request.backend
    memory = peak_rss_memory(
        str(prepared.spec.path),
        engine.name,
        engine.options,
        prepared.arrays,
        prepared.batch,
        prepared.dims,
        weights=static_memory(layer_run.analysis).weights,
    )
    return dataclasses.replace(profile, memory=memory)


def _memory_unchanged(request: GateRequest, way: Route) -> list[Verdict]:
    """Nothing that runs changed: the memory verdict is ``unchanged`` too, nothing measured."""
    from pytest_roofline.gate.order import unchanged_verdict

    baseline = request.baseline
    if baseline is None or baseline.memory is None or "memory" in request.metrics:
        return []  # none kept, or unchanged_verdict gave it already
    raw: dict[str, float | None] = {"current": float(baseline.memory.memory.peak)}
    return list(unchanged_verdict(("memory",), request.tolerance, raw, way.reasons)[1])


def _routed(verdict: Verdict, way: Route, other_device: str | None, device_class: str) -> Verdict:
    """The verdict with the decision order's reasons: the change compared across (named in the
    message too), what was unreachable, or the other device class a baseline exists for."""
    if other_device is not None and verdict.status == "new":
        message = (
            f"{verdict.metric}: no baseline for device class {device_class}; one exists for {other_device}, "
            "which cannot be compared; this run's figure becomes this device class's baseline"
        )
        why = f"device class {other_device} → {device_class}"
        return dataclasses.replace(verdict, status="incomparable", message=message, reasons=(why,))
    if not way.reasons:
        return verdict
    message = verdict.message
    if way.changes and way.kind == "stored":
        message += " (across a change: " + "; ".join(c.text for c in way.changes) + ")"
    return dataclasses.replace(verdict, message=message, reasons=(*way.reasons, *verdict.reasons))


def _unchanged(request: GateRequest, prepared: PreparedModel, layer_run: LayerRun, way: Route) -> GateOutcome:
    """Nothing that runs changed: a short latency sample for the test and the report, no comparison."""
    import math

    from pytest_roofline.gate.order import short_latency, unchanged_verdict
    from pytest_roofline.pipeline import assemble

    baseline = request.baseline
    assert baseline is not None
    latency = layer_run.latency or short_latency(prepared)
    before = baseline.latency.alone_p25 or baseline.latency.p25
    drift = latency.p25 / before if before > 0 and math.isfinite(latency.p25) else None
    raw = {"baseline": before, "current": latency.p25, "drift": drift}
    profile = assemble(prepared, layer_run, latency, {"gate": {"mode": "identity", "drift": drift}})
    verdict, extra = unchanged_verdict(request.metrics, request.tolerance, raw, way.reasons)
    history = (*baseline.history, baseline.history_point())
    extra = (*extra, *_memory_unchanged(request, way))
    return GateOutcome(profile, verdict, extra, None, history, None)


def _summary(prepared: PreparedModel, layer_run: LayerRun) -> ModelSummary | None:
    """The model's structural summary (None when it cannot be made: the gate goes on without it)."""
    from pytest_roofline.diff import summarize
    from pytest_roofline.errors import RooflineError

    try:
        return summarize(
            prepared.proto, batch=prepared.batch, dims=prepared.dims, analysis=layer_run.analysis
        )
    except (RooflineError, KeyError, ValueError):
        return None


def _change(
    request: GateRequest,
    prepared: PreparedModel,
    roofline: DeviceRoofline | None,
    verdict: Verdict,
    summary: ModelSummary,
    profile: ModelProfile,
) -> ChangeReport:
    """What changed since the baseline (stored) or the reference (paired), explaining ``verdict``."""
    from pytest_roofline.diff import summarize
    from pytest_roofline.gate.change import baseline_profile, explain_change, stored_summary

    if request.reference is not None:
        from pytest_roofline.analysis import analyze
        from pytest_roofline.model import load_model
        from pytest_roofline.pipeline import ModelCall, assemble, prepare, profile_layers

        # the reference loaded once: for its summary and, when that differs, its layers' profile
        call = ModelCall(
            request.reference.source, batch=prepared.batch, dims=prepared.dims, backend=request.backend
        )
        proto = load_model(call.model)
        analysis = analyze(call.model, batch=prepared.batch, dims=prepared.dims, proto=proto)
        old = summarize(proto, batch=prepared.batch, dims=prepared.dims, analysis=analysis)
        old_profile = None
        if old.to_dict() != summary.to_dict():  # profile the reference's layers only when it differs
            ref = prepare(call, proto)
            ref_run = profile_layers(
                ref, iterations=PROFILE_ITERATIONS, roofline=roofline, trips=request.trips
            )
            old_profile = assemble(ref, ref_run, profile.latency)
        return explain_change(verdict, old, summary, roofline, old_profile)
    baseline = request.baseline
    assert baseline is not None
    same = baseline.model_hash == profile.model_hash
    return explain_change(
        verdict, stored_summary(baseline), summary, roofline, baseline_profile(baseline), same
    )


def _gate_figures(
    run: GateRun,
    configured: GateRun | None = None,
    probe: dict[str, int] | None = None,
    reference: ModelSpec | None = None,
) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "figures": list(run.figures),
        "subject_p25": run.subject_p25,
        "control_p25": run.control_p25,
        "seconds": run.seconds,
        "load": run.load.to_dict(),
    }
    if probe:  # the control probe's blocks (stored mode): the unit of the figures
        figures["probe"] = dict(probe)
    if reference is not None and reference.path is not None:  # paired mode: the ratios' reference
        figures["reference"] = str(reference.path)
    if run.floor_mode:  # the noise model's mode it was judged with (the history judges it so too)
        figures["floor_mode"] = run.floor_mode
    if configured is not None:
        figures["configured"] = {
            "figures": list(configured.figures),
            "subject_p25": configured.subject_p25,
            "control_p25": configured.control_p25,
            "seconds": configured.seconds,
        }
    return figures


def _timing_control_p25(baseline: BaselineEntry | None) -> float | None:
    """The baseline's control p25 at the threads the layer times were measured at."""
    if baseline is None:
        return None
    return baseline.configured.control_p25 if baseline.configured is not None else baseline.control.p25


def with_configured(verdict: Verdict, configured: Verdict) -> Verdict:
    """The one-thread verdict, with the configured threads' figure beside it.

    The one-thread figure is steady and says *whether* the model got slower; the configured one
    says *how much* at the threads users run, but on a shared machine it also jumps with the
    machine's parallel speed (docs/plugin.md, "The gate").  So:

    * a one-thread regression is a regression;
    * a significant one-thread slowdown below the tolerance (its CI above 1) with a regression at
      the configured threads is a regression too: the model is slower, and by more than the
      tolerance where it runs (extra layers that parallelize worse than the rest do this);
    * a regression only at the configured threads, with no one-thread slowdown, is inconclusive:
      the model's parallel scaling or the machine's parallel speed, which one cannot be told.
    """
    note = "judged at one thread (steady on shared runners)"
    if configured.ratio is not None and configured.ci is not None:
        low, high = configured.ci
        note += f"; at the configured threads ratio {configured.ratio:.3f} (95% CI {low:.3f}-{high:.3f})"
    if verdict.status in ("regression", "inconclusive", "improved") or configured.status == "regression":
        verdict = dataclasses.replace(verdict, reasons=(*verdict.reasons, note))  # said where it matters
    if configured.status != "regression" or verdict.status == "regression":
        return verdict
    at_configured = configured.message.split(": ", 1)[-1]
    if verdict.ci is not None and verdict.ci[0] > 1.0 and verdict.ratio is not None:
        message = (
            f"{verdict.metric}: slower at one thread ({verdict.ratio - 1:+.1%}, beyond its noise) and at "
            f"the configured threads {at_configured}"
        )
        return dataclasses.replace(verdict, status="regression", message=message)
    if verdict.status in ("pass", "improved", "inconclusive"):
        message = (
            f"{verdict.message}; but at the configured threads {at_configured}: parallel speed, "
            "the model's or this machine's, got slower"
        )
        verdict = dataclasses.replace(verdict, status="inconclusive", message=message)
    return verdict


def _entry(
    request: GateRequest,
    profile: ModelProfile,
    run: GateRun,
    blocks: dict[str, int],
    conditions: Conditions,
    summary: ModelSummary | None,
    configured: GateRun | None = None,
    identity: RunIdentity | None = None,
    alone_p25: float | None = None,
) -> BaselineEntry:
    import numpy as np

    from pytest_roofline.errors import RooflineError
    from pytest_roofline.gate.baseline import (
        BaselineEntry,
        ControlRecord,
        FigureRecord,
        LatencyRecord,
        LayerRecord,
    )
    from pytest_roofline.gate.identity import graph_hash
    from pytest_roofline.gate.memory import memory_record
    from pytest_roofline.stamp import now

    lat = profile.latency
    try:
        graph = graph_hash(request.model)  # a re-saved copy of the same graph is judged unchanged
    except (RooflineError, OSError, ValueError):
        graph = ""
    return BaselineEntry(
        key=request.key,
        test=request.test,
        model=request.model_rel,
        batch=request.batch,
        dims=dict(request.dims),
        backend=request.backend.name,
        device_class=request.device_class,
        figure=float(np.median(run.figures)),
        sessions=tuple(run.figures),
        control=ControlRecord(conditions.control, run.control_p25, dict(blocks)),
        latency=LatencyRecord(
            median=lat.median,
            mean=lat.mean,
            min=lat.min,
            p25=lat.p25,
            p75=lat.p75,
            p90=lat.p90,
            std=lat.std,
            gate_p25=run.subject_p25,
            session_medians=tuple(lat.session_medians),
            alone_p25=alone_p25 if alone_p25 is not None and math.isfinite(alone_p25) else None,
        ),
        conditions=conditions,
        layers={
            la.name: LayerRecord(la.time, la.roofline_fraction, la.op_type, la.onnx_nodes, la.kind, la.serves)
            for la in profile.layers
        },
        fingerprint=dict(profile.fingerprint),
        backend_version=profile.backend_version,
        options=dict(profile.options),
        model_hash=profile.model_hash,
        commit=request.commit,
        time=now(),
        structure=summary.to_dict(packed=True) if summary is not None else None,
        configured=(
            FigureRecord(tuple(configured.figures), configured.control_p25, configured.subject_p25)
            if configured is not None and configured.figures
            else None
        ),
        identity=dataclasses.replace(identity, graph=graph) if identity is not None else None,
        memory=memory_record(profile),
        load=run.load if run.load.available else None,
    )
