"""Measure the latency change between two models: paired, interleaved, in fresh sessions.

The same design as the gate's paired mode (``--roofline-compare-ref``): both models run in
interleaved rounds inside each of several fresh session pairs, each session gives the median of
its per-round ratios ``new / old``, and :func:`~pytest_roofline.gate.verdict.compare` in ``paired`` mode
turns the ratios into a ratio, its confidence interval and a status.

:func:`paired_run` is that design sampled until decided (the gate's paired mode, the history's
pairing of a new model with the previous run's): per-round ratios, a budget scaled to the model's
run time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from pytest_roofline.measure.rounds import SessionOpener

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend, BackendSession
    from pytest_roofline.device.load import MachineLoad
    from pytest_roofline.gate.sampling import Decider, GateDesign, GateRun
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.model import ModelSource

__all__ = ["FreshInputs", "balanced_design", "floor_mode", "measure_change", "paired_run"]


class FreshInputs(SessionOpener):
    """A :class:`SessionOpener` whose every session binds its own fresh copy of the input arrays.

    What a pairing keeps from one session to the next is shared by all its sessions, so an effect
    of it on one model's speed is a bias no interval of the pairing sees: GPT-2 with KV cache
    against a copy of itself, timed by CPU time beside a busy process, read 0.888-0.925 in every
    session of one pairing and 1.04 in the next.  The inputs' memory is such a thing (its
    cache sets, its pages); copied per session, it varies between sessions, where the interval
    sees it.  The model is such a thing too: loaded from its path, GPT-2 KV against an identical
    file read 0.926-1.127 between pairings, so each session loads it from its own copy of the
    file's bytes (``Backend.own_bytes_copy``): 0.943-1.048, smaller but not gone."""

    def __call__(self) -> BackendSession:
        feeds = {k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for k, v in self.feeds.items()}
        return self.backend.open(self.spec, feeds)


def _fresh_inputs(openers: Sequence[Callable[[], BackendSession]]) -> list[Callable[[], BackendSession]]:
    return [
        FreshInputs(_own_bytes(o.backend), o.spec, o.feeds) if type(o) is SessionOpener else o
        for o in openers
    ]


def _own_bytes(backend: Backend) -> Backend:
    """``backend`` loading each session's model from its own bytes, where it can."""
    copy = getattr(backend, "own_bytes_copy", None)  # a stand-in engine may lack it
    return copy() if copy is not None else backend


def paired_run(
    openers: Sequence[Callable[[], BackendSession]],
    design: GateDesign,
    tolerance: float,
    *,
    sampler: Callable[..., list[list[list[float]]]] | None = None,
    watch_load: bool = True,
    step_pairs: int = 0,
) -> GateRun:
    """``openers`` (new model, reference model) timed interleaved in fresh sessions until the paired
    verdict at ``tolerance`` is decided: the figure per pair of sessions (one of each opening order)
    is the geometric mean of their medians of per-round ratios
    (:func:`~pytest_roofline.gate.verdict.balanced_ratios`), the budget raised for a slow model
    (:func:`~pytest_roofline.gate.sampling.paired_budget`).

    ``step_pairs``: a verdict of a change (not ``pass``) stops the sampling only with at least this
    many session pairs, or at the budget's end: stopping at the first batch whose interval clears
    the tolerance picks the batches that happen to read high (optional stopping), which called an
    A/A pairing of ConvNeXt a +2.0 % step on 8 pairs."""
    import dataclasses

    from pytest_roofline.gate.sampling import paired_budget, paired_decider, run_gate
    from pytest_roofline.gate.verdict import balanced_ratios

    design = balanced_design(design)
    budget = paired_budget(design.budget, design.run_estimate, tolerance, design)
    mode = floor_mode(openers)
    decide = paired_decider(tolerance, mode)
    if step_pairs:
        decide = _steady(decide, step_pairs)
    run = run_gate(
        _fresh_inputs(openers),
        decide,
        dataclasses.replace(design, budget=budget),
        sampler=sampler,
        watch_load=watch_load,
        # each round's old-beside-new ratio (the machine's drift cancels), a pair of sessions
        # per figure (the opening order's effect cancels)
        figures=balanced_ratios,
    )
    return dataclasses.replace(run, floor_mode=mode)


def balanced_design(design: GateDesign) -> GateDesign:
    """``design`` for balanced figures: twice the sessions, half the rounds (at least
    ``FEW_ROUNDS``), an even count kept when cut to the budget, so that a batch yields as many
    figures as it has sessions in ``design``.

    A figure is two sessions (:func:`~pytest_roofline.gate.verdict.balanced_ratios`); at the former
    4 sessions a batch gave 2 figures, whose t interval (12.7 standard errors) decided nothing:
    beside one busy process T5's and Whisper's +8 % and +7 % variants read [1.115, 1.093] and
    [1.073, 1.052] in the one batch their budget held, `inconclusive` at noise ±12 %."""
    import dataclasses
    import math

    from pytest_roofline.gate.sampling import FEW_ROUNDS

    rounds = max(FEW_ROUNDS, math.ceil(design.rounds / 2))
    return dataclasses.replace(design, sessions=2 * design.sessions, rounds=rounds, even_sessions=True)


def floor_mode(openers: Sequence[Callable[[], BackendSession]]) -> str:
    """The noise model's mode a pairing of ``openers`` is judged with: ``paired-thread`` when
    every opener's backend times by its thread's CPU time (``Backend.thread_timed``), which the
    load disturbs far less than the wall clock, else ``paired``."""
    engines = [getattr(opener, "backend", None) for opener in openers]
    timed = bool(engines) and all(getattr(e, "thread_timed", False) for e in engines)
    return "paired-thread" if timed else "paired"


def _steady(decide: Decider, step_pairs: int) -> Decider:
    """``decide``, its change verdicts held open (``inconclusive``: sample on) below ``step_pairs``."""
    import dataclasses

    def steady(figures: list[float], subject_p25: float, control_p25: float, load: MachineLoad) -> Verdict:
        verdict = decide(figures, subject_p25, control_p25, load)
        sessions = 2 * len(figures)  # each figure is two sessions (balanced_ratios)
        if verdict.status not in ("pass", "inconclusive") and sessions < step_pairs:
            return dataclasses.replace(verdict, status="inconclusive")
        return verdict

    return steady


def measure_change(
    old: ModelSource,
    new: ModelSource,
    backend: Backend,
    *,
    batch: int | None = None,
    dims: Mapping[str, int] | None = None,
    sessions: int = 5,
    rounds: int = 20,
    iterations: int = 1,
    warmup: int = 3,
    tolerance: float = 0.05,
    progress: Callable[[int, int], None] | None = None,
    precision: float | None = None,
    max_sessions: int = 0,
) -> Verdict:
    """The paired verdict of ``new`` against ``old`` on ``backend`` (ratio = new / old).

    Each model gets its own seeded random inputs at the bound shapes (the same arrays when
    their inputs agree).  ``raw`` of the verdict holds both models' p25 seconds.

    ``precision``: sample ``sessions`` more session pairs at a time until the verdict's 95 %
    interval is at most this wide either side (its ``noise``, log space: 0.01 is about ±1 %), or
    ``max_sessions`` pairs ran.  The stop looks at the interval's width, never at the ratio, so
    it picks no batch for what it reads.

    Raises:
        RooflineError: a model cannot be loaded, bound or run by the backend.
    """
    from pytest_roofline.gate.isolated import sampler_for
    from pytest_roofline.gate.verdict import compare, round_ratios
    from pytest_roofline.measure.rounds import SessionOpener, sample_interleaved
    from pytest_roofline.model import ModelSpec, bind_input_shapes, load_model, make_inputs

    def opener(model: ModelSource) -> SessionOpener:
        proto = load_model(model)
        feeds = make_inputs(proto, bind_input_shapes(proto, batch, dims), seed=0)
        return SessionOpener(backend, ModelSpec.create(model, batch, dims), feeds)

    openers = [opener(new), opener(old)]
    design = {"sessions": sessions, "rounds": rounds, "iterations": iterations, "warmup": warmup}
    helper = sampler_for(backend)  # two multi-threaded sessions share one pool there (gate/isolated.py)
    samples: list[list[list[float]]] = [[], []]
    while True:
        if helper is not None:
            more = helper(openers, **design)
        else:
            more = sample_interleaved(openers, progress=progress, **design)
        samples = [samples[0] + more[0], samples[1] + more[1]]
        ratios = round_ratios(samples[0], samples[1])  # the gate's paired figure (per-round ratios)
        raw = {"baseline": _p25(samples[1]), "current": _p25(samples[0])}
        verdict = compare(ratios, None, tolerance=tolerance, mode="paired", raw=raw)
        wide = verdict.noise is not None and precision is not None and verdict.noise > precision
        if not wide or len(samples[0]) + sessions > max_sessions:
            return verdict


def _p25(sessions: list[list[float]]) -> float | None:
    pooled = [x for session in sessions for x in session]
    return float(np.percentile(pooled, 25)) if pooled else None
