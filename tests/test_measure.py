"""The sampling design: session sets, interleaving, warm-up, closing, budgets."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_roofline import zoo
from pytest_roofline.backends.base import BackendSession, KernelProfile, get_backend
from pytest_roofline.measure.rounds import measure_latency, plan_rounds, sample_interleaved
from pytest_roofline.model import ModelSpec, bind_input_shapes, make_inputs


class Recorder(BackendSession):
    """A session that logs what is asked of it; ``time`` returns its subject's id as samples."""

    def __init__(self, subject: int, log: list) -> None:
        self.subject, self.log = subject, log
        log.append(("open", subject))

    def time(self, iterations: int) -> list[float]:
        self.log.append(("time", self.subject, iterations))
        return [float(self.subject)] * iterations

    def profile(self, iterations: int) -> KernelProfile:
        raise NotImplementedError

    def close(self) -> None:
        self.log.append(("close", self.subject))


def test_interleaved_shape_order_warmup_and_close():
    log: list = []
    openers = [lambda i=i: Recorder(i, log) for i in range(2)]
    progress: list = []
    result = sample_interleaved(
        openers, sessions=3, rounds=4, iterations=2, warmup=1, progress=lambda d, t: progress.append((d, t))
    )
    assert [[len(s) for s in subject] for subject in result] == [[8, 8, 8], [8, 8, 8]]
    assert all(x == i for i, subject in enumerate(result) for s in subject for x in s)
    opens = [entry[1] for entry in log if entry[0] == "open"]
    assert opens == [0, 1, 1, 0, 0, 1]  # the opening order alternates between session sets
    first_set = log[: log.index(("close", 0))]
    assert first_set[2:4] == [("time", 0, 1), ("time", 1, 1)]  # warm-up before any timed round
    timed = [entry[1] for entry in first_set[4:] if entry[0] == "time"]
    assert timed == [0, 1, 1, 0, 0, 1, 1, 0]  # rounds alternate the order too
    assert sorted(e for e in log if e[0] == "close") == [("close", 0)] * 3 + [("close", 1)] * 3
    assert progress[-1] == (12, 12) and len(progress) == 12


def test_sessions_are_closed_when_timing_fails():
    log: list = []

    class Failing(Recorder):
        def time(self, iterations: int) -> list[float]:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        sample_interleaved(
            [lambda: Recorder(0, log), lambda: Failing(1, log)], sessions=1, rounds=1, iterations=1, warmup=1
        )
    assert ("close", 0) in log and ("close", 1) in log


def test_bad_design_is_rejected():
    with pytest.raises(ValueError):
        sample_interleaved([], sessions=0, rounds=1, iterations=1, warmup=0)


def test_plan_rounds_fits_the_budget_and_keeps_a_minimum():
    assert plan_rounds(0.01, 0.05, sessions=5, rounds=20, iterations=1, warmup=3, budget=1.0) == 12
    assert plan_rounds(1.0, 0.05, sessions=5, rounds=20, iterations=1, warmup=3, budget=1.0) == 3
    assert plan_rounds(1e-5, 0.0, sessions=5, rounds=20, iterations=1, warmup=3, budget=10) == 20


def test_measure_latency_on_real_sessions():
    model = zoo.tiny_cnn(batch=1)
    spec = ModelSpec.create(model, 1)
    inputs = make_inputs(model, bind_input_shapes(model, 1))
    backend = get_backend("onnxruntime", {"intra_op_threads": "1"})
    stats = measure_latency(lambda: backend.open(spec, inputs), sessions=3, rounds=4, warmup=1)
    assert stats.n == 12 and len(stats.session_medians) == 3
    assert 0 < stats.min <= stats.median <= stats.p90 <= stats.max
    assert stats.median == pytest.approx(float(np.median(stats.samples)))
    capped = measure_latency(lambda: backend.open(spec, inputs), sessions=2, rounds=10**6, budget=0.2)
    assert 6 <= capped.n < 2 * 10**6  # the budget cut the rounds, never below 3 per session
