"""A history point's evidence of a step: what runs, and the new model timed beside the previous one.

Before anything is timed the gate knows what runs (:class:`~pytest_roofline.gate.identity.RunIdentity`:
model content, inputs, backend build, options, backend env vars).  The history keeps a digest of
it in each point, so a series' change points go only where something that runs changed: a step of
the machine under the same identity is never a model's change point.

Where the model changed since the series' previous point and that point's model is reachable (the
model store under the cache dir, else git at the previous point's commit), the new model is timed
interleaved with the previous one in this process, as the gate's paired mode does (fresh session
pairs, per-session p25 ratios, at one thread where the backend runs several).  That ratio and its
interval are the step's evidence: far sharper than two runs' absolute figures on a machine whose
speed jumps between states.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.history.points import Paired

if TYPE_CHECKING:
    from pytest_roofline.gate.types import GateOutcome, GateRequest
    from pytest_roofline.history.points import HistoryPoint

__all__ = [
    "PAIR_BUDGET",
    "PAIR_SESSIONS",
    "PAIR_TOLERANCE",
    "Paired",
    "identity_of",
    "pair_with_previous",
    "previous_point",
]

#: The paired run samples until its interval decides against this change (or the budget ends):
#: the history wants a step's size, not the gate's pass/fail at the test's tolerance.
PAIR_TOLERANCE = 0.01
#: Fresh session pairs of the first batch: enough for an order-statistic interval of the median
#: (with 4, the gate's batch, the interval is the range; a step is rare, so its run may take longer).
PAIR_SESSIONS = 8
#: Seconds the pairing may sample at least (more when the test's budget is larger): a model change
#: is rare, and on this 2-core VM under load one batch of 8 pairs scattered 0.986-1.038 (p5-p95,
#: MobileNetV2, 18 A/A pairings), too wide for a 3 % step; later batches sharpen it.
PAIR_BUDGET = 10.0


def identity_of(request: GateRequest) -> tuple[str, str]:
    """(digest of what runs, the model's content hash) for ``request`` ("" when not prepared)."""
    if request.prepared is None:
        return "", ""
    from pytest_roofline.gate.order import current_identity

    identity = current_identity(request, request.prepared).to_dict()
    identity.pop("graph", None)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:32], str(identity.get("model") or "")


def previous_point(points: Sequence[HistoryPoint], key: str) -> HistoryPoint | None:
    """The latest point of ``key`` whose figure is the series' own (not a compare-ref ratio)."""
    mine = [p for p in points if p.key == key and p.mode != "paired"]
    return max(mine, key=lambda p: p.order) if mine else None


def _previous_model(request: GateRequest, previous: HistoryPoint) -> tuple[Path | None, str]:
    """The previous point's model: the model store by content hash, else git at its commit."""
    from pytest_roofline.gate.order import baseline_model

    content = previous.content
    if not content:
        return None, "the previous point recorded no content hash"
    return baseline_model(request, content, previous.commit)


def pair_with_previous(
    request: GateRequest, outcome: GateOutcome, previous: HistoryPoint | None
) -> dict[str, Any]:
    """What the history records of this run beyond the gate's figures: the identity, and where the
    model changed since ``previous`` and its model is reachable, the paired ratio against it.

    Returns ``profile.extra["history"]``: ``{"identity", "content", "paired"?, "unpaired"?}``.
    """
    from pytest_roofline.errors import RooflineError

    identity, content = identity_of(request)
    found: dict[str, Any] = {"identity": identity, "content": content}
    if request.models is not None and content:
        try:  # the next run pairs against this model even when it is not committed
            request.models.put(request.model)
        except (OSError, RooflineError):
            pass
    if previous is None or not identity or request.prepared is None:
        return found
    before = previous.identity
    before_content = previous.content
    if not before or before == identity or not before_content or before_content == content:
        return found  # unchanged, unknown, or another change than the model's (no pair to time)
    reference, where = _previous_model(request, previous)
    if reference is None:
        found["unpaired"] = where
        return found
    try:
        figures = _paired_figures(request, reference)
    except RooflineError as exc:
        found["unpaired"] = str(exc)
        return found
    if figures:
        found["paired"] = Paired(figures, before, where).to_dict()
    return found


def _paired_figures(request: GateRequest, reference: Path) -> tuple[float, ...]:
    """Per-session-pair ratios of the new model over ``reference``, interleaved (the gate's paired
    sampling, at one thread where the backend runs several: the steadier figure)."""
    from pytest_roofline.gate.isolated import sampler_for
    from pytest_roofline.gate.sampling import GateDesign, paired_decider, run_gate
    from pytest_roofline.measure.rounds import SessionOpener
    from pytest_roofline.model import ModelSpec

    prepared = request.prepared
    assert prepared is not None
    engine = request.backend.single_thread() or request.backend
    spec = ModelSpec.create(str(reference), request.batch, dict(request.dims))
    run = run_gate(
        [SessionOpener(engine, prepared.spec, prepared.arrays), SessionOpener(engine, spec, prepared.arrays)],
        paired_decider(PAIR_TOLERANCE),
        GateDesign(sessions=PAIR_SESSIONS, budget=max(request.budget, PAIR_BUDGET)),
        sampler=sampler_for(engine),
        watch_load=engine.wall_clock,
    )
    return tuple(float(f) for f in run.figures if math.isfinite(f) and f > 0)


def with_history(
    request: GateRequest, outcome: GateOutcome, url: str | None, default_dir: Path
) -> GateOutcome:
    """``outcome`` with ``profile.extra["history"]`` (:func:`pair_with_previous`), the series'
    previous point read from the history at ``url`` (a store that cannot be read: no pairing)."""
    import dataclasses

    from pytest_roofline.errors import RooflineError
    from pytest_roofline.history.store import open_store

    previous = None
    try:
        store = open_store(url, default_dir)
        try:
            previous = previous_point(store.points(test=request.test), request.key)
        finally:
            store.close()
    except RooflineError:
        pass  # the session end names the unreadable store when it appends
    extra = {**outcome.profile.extra, "history": pair_with_previous(request, outcome, previous)}
    return dataclasses.replace(outcome, profile=dataclasses.replace(outcome.profile, extra=extra))
