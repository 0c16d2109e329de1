"""The gate's sampling loop: subject and control timed interleaved, sampled until decided.

Each batch opens fresh sessions of the subject (the model) and the control (the control probe in
stored mode, the reference model in paired mode) and times them in interleaved rounds
(:func:`pytest_roofline.measure.sample_interleaved`); the per-session ratio of their p25s is the
figure.  When the verdict could be sharpened (inconclusive, or a new baseline noisier than half
the tolerance) another batch is sampled, until the time budget is spent.  The machine's load is
read around every batch: it widens the interval (:mod:`pytest_roofline.gate.noise`), never vetoes it.

The loop looks at its data after every batch, so it stops honestly (no optional stopping): an
interim look stops only on a verdict that holds at a 99.9 % interval (Haybittle-Peto: interim
looks spend almost none of the error rate), the last look the budget allows decides at the nominal
95 %; and it stops early when even the noise floor of the load would leave the verdict open
(more samples could not change it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from pytest_roofline.device.load import MachineLoad, between, snapshot
from pytest_roofline.gate.noise import noise_model, pressure
from pytest_roofline.gate.verdict import Verdict, compare, judge_ratio, needs_more, session_ratios

#: figures(subject samples, control samples) -> one figure per session
Figures = Callable[[Sequence[Sequence[float]], Sequence[Sequence[float]]], list[float]]

if TYPE_CHECKING:
    from pytest_roofline.backends.base import BackendSession, KernelProfile

__all__ = [
    "CONTROL_DRIFT_WEIGHT",
    "Decider",
    "GateDesign",
    "GateRun",
    "control_drift_noise",
    "fit_to_budget",
    "load_floor",
    "paired_budget",
    "profiled_run_seconds",
    "paired_decider",
    "run_gate",
    "settled",
    "stored_decider",
]

#: decide(figures, subject p25, control p25, load) -> verdict
Decider = Callable[[list[float], float, float, MachineLoad], Verdict]

#: How much of the control probe's log-drift (vs its baseline time) counts as a standard deviation
#: of the figure.  The probe cancels the machine's drift only in part.  Measured on the 2-core VM:
#: a tiny CNN at one thread (88 unchanged runs) moved by 0.1-1.45x the probe's drift (RMS 0.85x)
#: wherever the probe was 2.4-9 % off, and two runs with the probe at +7 and +9 % read +10 and +12 %;
#: MobileNetV2 read +5.4 % with the probe at +3.4 % once in 30 unchanged runs.  At the former 0.15
#: both were regressions; at 0.75 neither is (docs/plugin.md, "Decision").
CONTROL_DRIFT_WEIGHT = 0.75
#: Control-probe drift (relative) beyond which the verdict notes that the machine's speed moved.
CONTROL_DRIFT_NOTE = 0.03


@dataclass(frozen=True)
class GateDesign:
    """How many fresh sessions, interleaved rounds and warm-up runs one batch of sampling uses."""

    sessions: int = 4  # a batch; more batches only while the verdict could be sharpened
    rounds: int = 10
    iterations: int = 1
    warmup: int = 3
    budget: float = 10.0  # seconds of measuring before an inconclusive answer stands
    max_batches: int = 8
    run_estimate: float | None = (
        None  # seconds one run of the subject takes: fits the first batch to the budget
    )
    #: Keep a batch's sessions even when it is cut to the budget: paired mode's figure is a pair
    #: of sessions, one per opening order (``verdict.balanced_ratios``).
    even_sessions: bool = False


#: The fewest sessions and rounds a batch cut to the budget keeps (two sessions: a spread to judge).
MIN_SESSIONS, MIN_ROUNDS, FEW_ROUNDS = 2, 1, 3


def profiled_run_seconds(kernels: KernelProfile) -> float | None:
    """One run's time from a profiled run: its kernels' median times summed (None without any)."""
    times = [float(np.median(k.times)) for k in kernels.kernels if k.times]
    return sum(times) if times and kernels.timing == "device" else None


#: Paired rounds (old model beside new) a paired verdict wants at a 5 % tolerance: a full batch of
#: the default design (4 sessions x 10 rounds).  The per-round ratio's noise shrinks as 1/sqrt(rounds),
#: so a tolerance t wants ``PAIRED_ROUNDS * (0.05 / t)**2`` rounds.
PAIRED_ROUNDS = 40
#: The most seconds the paired sampling of a slow model may take (the budget is never lowered).
PAIRED_BUDGET_CAP = 60.0
#: Batches a paired budget leaves room for: a second one when the first left the verdict open.
PAIRED_BATCHES = 2


def paired_budget(budget: float, run_estimate: float | None, tolerance: float, design: GateDesign) -> float:
    """The time budget of a paired run: ``budget``, raised for a slow model to what enough paired
    rounds for a verdict at ``tolerance`` take, up to :data:`PAIRED_BUDGET_CAP`.

    A fixed budget sampled models over ~30 ms a run too thinly in paired mode: a 300 ms model got
    4 sessions x 3 rounds in 10 s, and BERT-base (+8.3 %), ViT-B/16 (+8.6 %) and Whisper (+6.7 %)
    stayed ``inconclusive``.  A round runs both models once (``design.iterations`` each); each
    session adds its warm-up.  Never below ``budget``, never above the cap (unless ``budget`` is).
    """
    if run_estimate is None or not math.isfinite(run_estimate) or run_estimate <= 0:
        return budget
    wanted = math.ceil(PAIRED_ROUNDS * (0.05 / max(tolerance, 0.01)) ** 2)
    per_round = 2 * design.iterations * run_estimate
    one_batch = (wanted + design.sessions * design.warmup) * per_round
    return max(budget, min(PAIRED_BUDGET_CAP, PAIRED_BATCHES * one_batch))


def fit_to_budget(design: GateDesign) -> tuple[GateDesign, str | None]:
    """``design`` with its first batch cut to fit the budget, given the subject's run time, and
    the verdict's note when it was cut (None when the whole batch fits, or no estimate is known).

    A round runs the subject and the control (about as long: the probe is fitted to the model, the
    reference is the model at another commit).  Rounds are cut to a few first, then sessions to
    two, then rounds and warm-up to one and none.
    """
    estimate = design.run_estimate
    if estimate is None or not math.isfinite(estimate) or estimate <= 0:
        return design, None
    per_round = 2 * design.iterations * estimate

    sessions, rounds, warmup = design.sessions, design.rounds, design.warmup

    def over() -> bool:
        return sessions * (rounds + warmup) * per_round > design.budget

    if not over():
        return design, None
    warmup = min(warmup, 1)
    while rounds > FEW_ROUNDS and over():
        rounds -= 1
    while sessions > MIN_SESSIONS and over():
        sessions -= 1
    if design.even_sessions and sessions % 2:  # one order each: then as many rounds as still fit
        sessions -= 1
        while rounds < design.rounds and not over():
            rounds += 1
        if over():
            rounds -= 1
    while rounds > MIN_ROUNDS and over():
        rounds -= 1
    if over():
        warmup = 0
    cut = replace(design, sessions=sessions, rounds=rounds, warmup=warmup)
    if (sessions, rounds) == (design.sessions, design.rounds):  # only warm-up runs went: no note
        return cut, None
    from pytest_roofline.fmt import fmt_seconds

    note = (
        f"the {design.budget:g} s budget allowed {sessions} sessions x {rounds} rounds of a model "
        f"taking about {fmt_seconds(estimate)} a run, fewer samples than the decision needs "
        f"({design.sessions} x {design.rounds}); raise --roofline-budget for a sharper verdict"
    )
    return cut, note


@dataclass(frozen=True)
class GateRun:
    """What the gate sampled: per-session figures, the subject's and control's raw p25s, the load."""

    figures: tuple[float, ...]
    subject_p25: float
    control_p25: float
    seconds: float
    load: MachineLoad
    verdict: Verdict | None = None
    control_session_p25s: tuple[float, ...] = ()
    subject_samples: tuple[tuple[float, ...], ...] = ()  # seconds, one tuple per fresh session
    floor_mode: str = ""  # the noise model's mode a paired run was judged with ("": not paired)


def _p25(samples: Sequence[Sequence[float]]) -> float:
    pooled = [x for session in samples for x in session]
    return float(np.percentile(pooled, 25)) if pooled else float("nan")


def run_gate(
    openers: Sequence[Callable[[], BackendSession]],
    decide: Decider | None,
    design: GateDesign,
    *,
    sampler: Callable[..., list[list[list[float]]]] | None = None,
    watch_load: bool = True,
    figures: Figures = session_ratios,
) -> GateRun:
    """Sample ``openers[0]`` (subject) interleaved with ``openers[1]`` (control) until decided.

    Args:
        openers: two callables opening a fresh backend session each: subject, control.
        decide: builds a verdict from (figures, subject p25, control p25, load); None samples once.
        design: sessions, rounds and the time budget.
        sampler: :func:`pytest_roofline.measure.sample_interleaved` (injectable for tests).
        watch_load: read the machine's load around each batch (False for backends whose times
            are not wall-clock: the load is then reported as unknown).
        figures: the per-session figures from the samples: ``p25 / p25`` (stored mode, against
            a control probe), or the median of per-round ratios (paired mode, ``round_ratios``).

    Returns:
        The figures (subject/control per session), the load while sampling and the last verdict.
    """
    if sampler is None:
        from pytest_roofline.measure.rounds import sample_interleaved

        sampler = sample_interleaved
    start = time.perf_counter()
    design, cut = fit_to_budget(design)
    batches: list[_Batch] = []
    verdict = None
    helpers: Callable[[], list[int]] = getattr(sampler, "pids", list)  # a helper samples: its CPU is ours
    for count in range(1, design.max_batches + 1):
        before = snapshot(helpers())
        result = sampler(
            list(openers),
            sessions=design.sessions,
            rounds=design.rounds,
            iterations=design.iterations,
            warmup=design.warmup,
        )
        load = between(before, snapshot(helpers())) if watch_load else _UNWATCHED
        batches.append(_Batch(result[0], result[1], load))
        subject, control, load = _usable(batches)
        if decide is None:
            break
        verdict = decide(figures(subject, control), _p25(subject), _p25(control), load)
        if cut is not None:
            verdict = replace(verdict, reasons=(*verdict.reasons, cut))
        elapsed = time.perf_counter() - start
        final = count == design.max_batches or elapsed * (count + 1) / count > stretched(design.budget, load)
        if final or settled(verdict):
            break
    subject, control, load = _usable(batches)
    return GateRun(
        figures=tuple(figures(subject, control)),
        subject_p25=_p25(subject),
        control_p25=_p25(control),
        seconds=time.perf_counter() - start,
        load=load,
        verdict=verdict,
        control_session_p25s=tuple(float(np.percentile(s, 25)) for s in control if len(s)),
        subject_samples=tuple(tuple(s) for s in subject if len(s)),
    )


@dataclass(frozen=True)
class _Batch:
    subject: list[list[float]]
    control: list[list[float]]
    load: MachineLoad


_UNWATCHED = MachineLoad(0.0, 0.0, 0.0, 0.0, 1, available=False)


def _usable(batches: Sequence[_Batch]) -> tuple[list[list[float]], list[list[float]], MachineLoad]:
    """The samples to decide on: the quiet batches when there are any (a busy moment's samples are
    dropped once quiet ones exist), else all of them; and the load they were taken under."""
    quiet = [b for b in batches if not b.load.disturbed]
    chosen = quiet or list(batches)
    subject = [s for b in chosen for s in b.subject]
    control = [s for b in chosen for s in b.control]
    return subject, control, MachineLoad.combine([b.load for b in chosen])


#: How far the budget stretches under load: ``budget * (1 + LOAD_STRETCH * pressure)``.  A busy
#: machine widens each session's spread (busy1 on the 2-core VM: ±10-100 % per 4 sessions against
#: ±1-3 % quiet), and more sessions are what narrows it; a verdict that settles early still stops
#: at its first interim look, and one the floor alone keeps open stops at once (:func:`settled`).
LOAD_STRETCH = 1.0


def stretched(budget: float, load: MachineLoad | None) -> float:
    """The seconds a gate may sample under ``load``: ``budget``, up to twice it on a fully taken
    machine (the futility and interim stops still end it early)."""
    return budget * (1.0 + LOAD_STRETCH * pressure(load))


#: How much wider than the nominal 95 % an interim look's interval is: 3.29 standard deviations
#: (99.9 %, Haybittle-Peto) against 1.96.
INTERIM_WIDENING = 3.29 / 1.96


def settled(verdict: Verdict) -> bool:
    """Whether sampling may stop at an interim look: the verdict holds at the interim interval,
    or no amount of sampling could move it (its noise floor alone leaves it open)."""
    if verdict.ratio is None or verdict.noise is None or verdict.ci is None:
        return not needs_more(verdict)  # new / not compared: sampled until its own noise is small
    ratio, tolerance = verdict.ratio, verdict.tolerance
    if verdict.status == "inconclusive":
        floor = verdict.floor
        best = judge_ratio(ratio, (ratio * math.exp(-floor), ratio * math.exp(floor)), floor, tolerance)
        return best == "inconclusive"  # futile: even an endless sample keeps it open
    k = INTERIM_WIDENING
    low, high = verdict.ci
    strict = (ratio * (low / ratio) ** k, ratio * (high / ratio) ** k) if low > 0 and high > 0 else verdict.ci
    return judge_ratio(ratio, strict, verdict.noise * k, tolerance) == verdict.status


def load_floor(mode: str, load: MachineLoad | None, baseline_pressure: float = 0.0) -> float:
    """The noise model's floor for ``mode`` under ``load`` (stored: the busier of now and the
    baseline's own measurement)."""
    return noise_model().floor(mode, max(pressure(load), baseline_pressure))


def control_drift_noise(control_p25: float, baseline_control_p25: float | None) -> float:
    """Noise to add when the control probe runs at another speed than when the baseline was taken.

    The probe cancels machine drift only in part: a model and its probe respond differently to a
    slower machine (other cache pressure, other thread behaviour).  The figure is allowed to move by
    :data:`CONTROL_DRIFT_WEIGHT` of the probe's own log-drift, as a standard deviation.
    """
    if not baseline_control_p25 or not math.isfinite(control_p25) or control_p25 <= 0:
        return 0.0
    return CONTROL_DRIFT_WEIGHT * abs(math.log(control_p25 / baseline_control_p25))


def _notes(
    verdict: Verdict, load: MachineLoad, control_p25: float, baseline_control_p25: float | None
) -> tuple[str, ...]:
    notes = []
    if load.disturbed:
        notes.append(
            f"measured under load ({load.describe()}): the interval carries it (noise floor "
            f"±{verdict.floor:.1%} of ±{verdict.noise or 0:.1%})"
            if verdict.status in ("pass", "regression", "improved")
            else f"measured under load ({load.describe()})"
        )
    if baseline_control_p25 and math.isfinite(control_p25) and control_p25 > 0:
        speed = control_p25 / baseline_control_p25
        if abs(math.log(speed)) > math.log(1 + CONTROL_DRIFT_NOTE):
            notes.append(
                f"the control probe ran x{speed:.2f} its baseline time: the machine is at another speed, "
                "which widens the noise"
            )
    if verdict.status == "inconclusive":
        notes.append(remedy(verdict, load))
    return tuple(notes)


def remedy(verdict: Verdict, load: MachineLoad) -> str:
    """The one thing the data says would decide an inconclusive verdict."""
    floor, noise, tolerance = verdict.floor, verdict.noise or 0.0, verdict.tolerance
    if floor > tolerance and load.disturbed:
        return (
            f"remedy: the load alone keeps the noise at ±{floor:.1%}, above the {tolerance:.1%} tolerance; "
            "run where fewer processes share the CPUs"
        )
    if floor > tolerance:
        return (
            f"remedy: this comparison's noise floor is ±{floor:.1%}, above the {tolerance:.1%} tolerance; "
            "raise the tolerance (--roofline-tolerance or the marker's tolerance=)"
        )
    if noise > floor * 1.2:
        return "remedy: more sessions would narrow the interval; raise --roofline-budget"
    return (
        f"remedy: the change sits at the {tolerance:.1%} tolerance; accept it with --roofline-update "
        "or set the tolerance the change should be judged by"
    )


def stored_decider(
    baseline_sessions: Sequence[float] | None,
    baseline_raw: float | None,
    tolerance: float,
    baseline_control_p25: float | None = None,
    baseline_pressure: float = 0.0,
) -> Decider:
    """A ``decide`` callable for stored mode against a baseline's per-session figures.

    ``baseline_pressure`` is the load the baseline was recorded under: its figures carry that
    noise, so the busier of the two sides sets the floor."""

    def decide(figures: list[float], subject_p25: float, control_p25: float, load: MachineLoad) -> Verdict:
        verdict = compare(
            figures,
            list(baseline_sessions) if baseline_sessions else None,
            tolerance=tolerance,
            mode="stored",
            raw={"baseline": baseline_raw, "current": subject_p25},
            drift=load_floor("stored", load, baseline_pressure),
            extra_noise=control_drift_noise(control_p25, baseline_control_p25),
        )
        notes = _notes(verdict, load, control_p25, baseline_control_p25)
        return replace(verdict, reasons=(*verdict.reasons, *notes))

    return decide


def paired_decider(tolerance: float, floor_mode: str = "paired") -> Decider:
    """A ``decide`` callable for paired mode (figures are new/reference ratios); ``floor_mode`` is
    the noise model's mode its floor is read from (``paired-thread``: timed by CPU time)."""

    def decide(figures: list[float], subject_p25: float, control_p25: float, load: MachineLoad) -> Verdict:
        verdict = compare(
            figures,
            None,
            tolerance=tolerance,
            mode="paired",
            raw={"baseline": control_p25, "current": subject_p25},
            drift=load_floor(floor_mode, load),
        )
        return replace(verdict, reasons=(*verdict.reasons, *_notes(verdict, load, control_p25, None)))

    return decide
