"""Measure the latency change between two models: paired, interleaved, in fresh sessions.

The same design as the gate's paired mode (``--roofline-compare-ref``): both models run in
interleaved rounds inside each of several fresh session pairs, each session gives the ratio
``p25(new) / p25(old)``, and :func:`~pytest_roofline.gate.verdict.compare` in ``paired`` mode
turns the ratios into a ratio, its confidence interval and a status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.model import ModelSource

__all__ = ["measure_change"]


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
) -> Verdict:
    """The paired verdict of ``new`` against ``old`` on ``backend`` (ratio = new / old).

    Each model gets its own seeded random inputs at the bound shapes (the same arrays when
    their inputs agree).  ``raw`` of the verdict holds both models' p25 seconds.

    Raises:
        RooflineError: a model cannot be loaded, bound or run by the backend.
    """
    from pytest_roofline.gate.isolated import sampler_for
    from pytest_roofline.gate.verdict import compare, session_ratios
    from pytest_roofline.measure.rounds import SessionOpener, sample_interleaved
    from pytest_roofline.model import ModelSpec, bind_input_shapes, load_model, make_inputs

    def opener(model: ModelSource) -> SessionOpener:
        proto = load_model(model)
        feeds = make_inputs(proto, bind_input_shapes(proto, batch, dims), seed=0)
        return SessionOpener(backend, ModelSpec.create(model, batch, dims), feeds)

    openers = [opener(new), opener(old)]
    design = {"sessions": sessions, "rounds": rounds, "iterations": iterations, "warmup": warmup}
    helper = sampler_for(backend)  # two multi-threaded sessions share one pool there (gate/isolated.py)
    if helper is not None:
        samples = helper(openers, **design)
    else:
        samples = sample_interleaved(openers, progress=progress, **design)
    ratios = session_ratios(samples[0], samples[1])
    raw = {"baseline": _p25(samples[1]), "current": _p25(samples[0])}
    return compare(ratios, None, tolerance=tolerance, mode="paired", raw=raw)


def _p25(sessions: list[list[float]]) -> float | None:
    pooled = [x for session in sessions for x in session]
    return float(np.percentile(pooled, 25)) if pooled else None
