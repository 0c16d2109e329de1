"""The sampling design: several fresh sessions, warm-up, interleaved rounds.

On shared machines the noise that matters is between sessions and between moments, not between
consecutive inferences (docs/plugin.md, "The gate").  So a figure samples several
freshly opened sessions, and subjects compared with each other (model A vs model B, or the model
vs a calibration probe) run in interleaved rounds inside each session set, so that drift of the
machine hits all of them alike.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_roofline.measure.stats import LatencyStats

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pytest_roofline.backends.base import Backend, BackendSession
    from pytest_roofline.model import ModelSpec

__all__ = ["SessionOpener", "measure_latency", "plan_rounds", "sample_interleaved"]


@dataclass(frozen=True)
class SessionOpener:
    """Opens a fresh session of ``spec`` with ``feeds`` on ``backend``; picklable, so the opening
    can happen in another process (:mod:`pytest_roofline.gate.isolated`)."""

    backend: Backend
    spec: ModelSpec
    feeds: Mapping[str, Any] = field(hash=False)

    def __call__(self) -> BackendSession:
        return self.backend.open(self.spec, self.feeds)


def sample_interleaved(
    openers: Sequence[Callable[[], BackendSession]],
    *,
    sessions: int,
    rounds: int,
    iterations: int,
    warmup: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[list[list[float]]]:
    """Time several subjects in interleaved rounds over ``sessions`` fresh session sets.

    For each session set, every subject's session is opened (the opening order alternates
    between sets so none is always first), warmed up with ``warmup`` inferences, then ``rounds``
    rounds run, each timing ``iterations`` inferences of every subject in turn (the order also
    alternates between rounds).  Sessions are closed before the next set opens.  ``progress``
    is called as ``progress(done_rounds, total_rounds)`` after each round.

    Returns:
        ``result[subject][session]``: the flat list of that session's samples, in seconds.
    """
    if sessions < 1 or rounds < 1 or iterations < 1 or warmup < 0:
        raise ValueError("sessions, rounds and iterations must be >= 1 and warmup >= 0")
    count = len(openers)
    result: list[list[list[float]]] = [[[] for _ in range(sessions)] for _ in range(count)]
    total, done = sessions * rounds, 0
    for set_index in range(sessions):
        order = list(range(count)) if set_index % 2 == 0 else list(range(count))[::-1]
        opened: dict[int, BackendSession] = {}
        try:
            for subject in order:
                opened[subject] = openers[subject]()
            for subject in order:
                if warmup:
                    opened[subject].time(warmup)
            for round_index in range(rounds):
                turn = order if round_index % 2 == 0 else order[::-1]
                for subject in turn:
                    result[subject][set_index].extend(opened[subject].time(iterations))
                done += 1
                if progress is not None:
                    progress(done, total)
        finally:
            for session in opened.values():
                session.close()
    return result


def plan_rounds(
    per_inference: float,
    open_seconds: float,
    *,
    sessions: int,
    rounds: int,
    iterations: int,
    warmup: int,
    budget: float,
) -> int:
    """Rounds that fit ``budget`` seconds given one inference's and one session opening's cost.

    Never fewer than 3 rounds (a median of fewer says little), never more than ``rounds``.
    """
    per_session = budget / sessions - open_seconds - warmup * per_inference
    fit = math.floor(per_session / max(per_inference * iterations, 1e-9))
    return max(3, min(rounds, fit))


def measure_latency(
    opener: Callable[[], BackendSession],
    *,
    sessions: int = 5,
    rounds: int = 20,
    iterations: int = 1,
    warmup: int = 3,
    budget: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> LatencyStats:
    """End-to-end latency of one model over ``sessions`` fresh sessions.

    With ``budget`` (seconds) a first session times the warm-up to estimate one inference's cost,
    and the number of rounds shrinks so the whole measurement fits the budget (at least 3).
    """
    if budget is not None:
        start = time.perf_counter()
        session = opener()
        try:
            opened = time.perf_counter() - start
            first = session.time(max(warmup, 2))
        finally:
            session.close()
        per_inference = sorted(first)[len(first) // 2]
        rounds = plan_rounds(
            per_inference,
            opened,
            sessions=sessions,
            rounds=rounds,
            iterations=iterations,
            warmup=warmup,
            budget=max(budget - (time.perf_counter() - start), 0.0),
        )
    samples = sample_interleaved(
        [opener], sessions=sessions, rounds=rounds, iterations=iterations, warmup=warmup, progress=progress
    )[0]
    return LatencyStats.from_samples([x for session in samples for x in session], sessions=samples)
