"""The gate's sampling loop: subject and control timed interleaved, sampled until decided.

Each batch opens fresh sessions of the subject (the model) and the control (the control probe in
stored mode, the reference model in paired mode) and times them in interleaved rounds
(:func:`pytest_roofline.measure.sample_interleaved`); the per-session ratio of their p25s is the
figure.  When the verdict could be sharpened (inconclusive, or a new baseline noisier than half
the tolerance) another batch is sampled, until the time budget is spent.  The machine's load is
read around every batch, so a verdict knows whether its measurement was disturbed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pytest_roofline.device.load import MachineLoad, between, snapshot
from pytest_roofline.gate.verdict import Verdict, compare, needs_more, session_ratios

if TYPE_CHECKING:
    from pytest_roofline.backends.base import BackendSession

__all__ = ["Decider", "GateDesign", "GateRun", "paired_decider", "run_gate", "stored_decider"]

#: decide(figures, subject p25, control p25, load) -> verdict
Decider = Callable[[list[float], float, float, MachineLoad], Verdict]


@dataclass(frozen=True)
class GateDesign:
    """How many fresh sessions, interleaved rounds and warm-up runs one batch of sampling uses."""

    sessions: int = 5
    rounds: int = 20
    iterations: int = 1
    warmup: int = 3
    budget: float = 10.0  # seconds of measuring before an inconclusive answer stands
    max_batches: int = 8


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


def _p25(samples: Sequence[Sequence[float]]) -> float:
    pooled = [x for session in samples for x in session]
    return float(np.percentile(pooled, 25)) if pooled else float("nan")


def run_gate(
    openers: Sequence[Callable[[], BackendSession]],
    decide: Decider | None,
    design: GateDesign,
    *,
    sampler: Callable[..., list[list[list[float]]]] | None = None,
) -> GateRun:
    """Sample ``openers[0]`` (subject) interleaved with ``openers[1]`` (control) until decided.

    Args:
        openers: two callables opening a fresh backend session each: subject, control.
        decide: builds a verdict from (figures, subject p25, control p25, load); None samples once.
        design: sessions, rounds and the time budget.
        sampler: :func:`pytest_roofline.measure.sample_interleaved` (injectable for tests).

    Returns:
        The figures (subject/control per session), the load while sampling and the last verdict.
    """
    if sampler is None:
        from pytest_roofline.measure import sample_interleaved

        sampler = sample_interleaved
    start = time.perf_counter()
    subject: list[list[float]] = []
    control: list[list[float]] = []
    loads: list[MachineLoad] = []
    verdict = None
    for _ in range(design.max_batches):
        before = snapshot()
        result = sampler(
            list(openers),
            sessions=design.sessions,
            rounds=design.rounds,
            iterations=design.iterations,
            warmup=design.warmup,
        )
        loads.append(between(before, snapshot()))
        subject.extend(result[0])
        control.extend(result[1])
        figures = session_ratios(subject, control)
        if decide is None:
            break
        verdict = decide(figures, _p25(subject), _p25(control), MachineLoad.combine(loads))
        elapsed = time.perf_counter() - start
        per_batch = elapsed / (len(subject) / design.sessions)
        if not needs_more(verdict) or elapsed + per_batch > design.budget:
            break
    return GateRun(
        figures=tuple(session_ratios(subject, control)),
        subject_p25=_p25(subject),
        control_p25=_p25(control),
        seconds=time.perf_counter() - start,
        load=MachineLoad.combine(loads),
        verdict=verdict,
        control_session_p25s=tuple(float(np.percentile(s, 25)) for s in control if len(s)),
        subject_samples=tuple(tuple(s) for s in subject if len(s)),
    )


def stored_decider(
    baseline_sessions: Sequence[float] | None,
    baseline_raw: float | None,
    tolerance: float,
) -> Decider:
    """A ``decide`` callable for stored mode against a baseline's per-session figures."""

    def decide(figures: list[float], subject_p25: float, control_p25: float, load: MachineLoad) -> Verdict:
        return compare(
            figures,
            list(baseline_sessions) if baseline_sessions else None,
            tolerance=tolerance,
            mode="stored",
            raw={"baseline": baseline_raw, "current": subject_p25},
        )

    return decide


def paired_decider(tolerance: float) -> Decider:
    """A ``decide`` callable for paired mode (figures are new/reference ratios)."""

    def decide(figures: list[float], subject_p25: float, control_p25: float, load: MachineLoad) -> Verdict:
        return compare(
            figures,
            None,
            tolerance=tolerance,
            mode="paired",
            raw={"baseline": control_p25, "current": subject_p25},
        )

    return decide
