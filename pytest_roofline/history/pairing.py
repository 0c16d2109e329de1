"""A history point's evidence of a step: what runs, and the new model timed beside the previous one.

Before anything is timed the gate knows what runs (:class:`~pytest_roofline.gate.identity.RunIdentity`:
model content, inputs, backend build, options, backend env vars).  The history keeps a digest of
it in each point, so a series' change points go only where something that runs changed: a step of
the machine under the same identity is never a model's change point.

Where the model changed since the series' previous point and that point's model is reachable (the
model store under the cache dir, else git at the previous point's commit), the new model is timed
interleaved with the previous one in this process by the gate's paired machinery
(:func:`~pytest_roofline.gate.paired.paired_run`: fresh session pairs, each session's figure the
median of its per-round ratios, a budget scaled to the model's run time) at the test's configured
threads, as the gate's paired mode and ``roofline bisect`` time.  Where the gate itself already
timed this run paired against the previous point's model (``--roofline-compare-ref``, or its
automatic pairing), those figures are kept instead of timing a second pairing.  That ratio and the
gate's interval of it are the step's evidence: far sharper than two runs' absolute figures on a
machine whose speed jumps between states.

Before the run, :func:`series_before` hands the gate the series' control probe (the blocks its
previous point was normalized with), so every point of a series is in one unit even where no
baseline fixes the probe.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.history.points import Paired

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend
    from pytest_roofline.gate.sampling import GateDesign
    from pytest_roofline.gate.types import GateOutcome, GateRequest
    from pytest_roofline.history.points import HistoryPoint
    from pytest_roofline.model import ModelSpec

__all__ = [
    "PAIR_BUDGET",
    "PAIR_TOLERANCE",
    "Paired",
    "identity_of",
    "judged_by_pairing",
    "pair_rounds",
    "pair_with_previous",
    "pairing_engine",
    "previous_point",
    "series_before",
    "time_pairing",
    "with_history",
]

#: The paired run samples until the gate's verdict at this tolerance is decided (or the budget
#: ends): the history wants a step's size, not the gate's pass/fail at the test's tolerance.
PAIR_TOLERANCE = 0.01
#: Seconds the pairing may sample at least (more when the test's budget is larger, or the model is
#: slow: ``gate.sampling.paired_budget``): a model change is rare, so its run may take longer.
PAIR_BUDGET = 10.0
#: Session pairs a step needs before the pairing stops on it (``gate.paired.paired_run``): the
#: gate's 4-pair batches stopped at the first that cleared 1 %, and an A/A pairing read +2.0 %.
STEP_PAIRS = 16
#: Seconds of load read before a pairing, to pick its threads (``time_pairing``).
LOAD_WINDOW = 0.5
#: ``Paired.reference`` of figures the gate's own paired run gave (nothing timed twice).
FROM_GATE = "the gate's paired run"


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
    reused = _gate_pairing(outcome, before_content)
    if reused:
        mode = _gate_mode(outcome)
        found["paired"] = Paired(
            reused, before, FROM_GATE, pressure=_gate_pressure(outcome), mode=mode
        ).to_dict()
        return found
    reference, where = _previous_model(request, previous)
    if reference is None:
        found["unpaired"] = where
        return found
    try:
        figures, busy, mode = _paired_figures(request, reference, outcome.profile.latency.p25)
    except RooflineError as exc:
        found["unpaired"] = str(exc)
        return found
    if figures:
        found["paired"] = Paired(figures, before, where, pressure=busy, mode=mode).to_dict()
    else:
        found["unpaired"] = "the paired run timed no session pair"
    return found


def _gate_pairing(outcome: GateOutcome, previous_content: str) -> tuple[float, ...]:
    """The gate's own paired figures of this run when its reference was the model of content hash
    ``previous_content`` (the previous point's); empty otherwise."""
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.gate.identity import content_hash

    gate = outcome.profile.extra.get("gate")
    if outcome.verdict.mode != "paired" or not isinstance(gate, dict) or not gate.get("reference"):
        return ()
    try:
        if content_hash(Path(str(gate["reference"]))) != previous_content:
            return ()
    except (OSError, RooflineError):
        return ()
    return _positive(gate.get("figures") or ())


def _gate_pressure(outcome: GateOutcome) -> float:
    """The load share the gate's own sampling ran under (0 when it did not say)."""
    from pytest_roofline.device.load import MachineLoad
    from pytest_roofline.gate.noise import pressure

    gate = outcome.profile.extra.get("gate")
    load = gate.get("load") if isinstance(gate, dict) else None
    try:
        return pressure(MachineLoad.from_dict(load)) if isinstance(load, dict) else 0.0
    except (KeyError, TypeError, ValueError):
        return 0.0


def _gate_mode(outcome: GateOutcome) -> str:
    """The noise model's mode the gate judged its own pairing with ("paired" when it did not say)."""
    gate = outcome.profile.extra.get("gate")
    mode = gate.get("floor_mode") if isinstance(gate, dict) else None
    return mode if isinstance(mode, str) and mode else "paired"


def _positive(figures: Sequence[Any]) -> tuple[float, ...]:
    return tuple(float(f) for f in figures if isinstance(f, (int, float)) and math.isfinite(f) and f > 0)


def _paired_figures(
    request: GateRequest, reference: Path, run_estimate: float | None
) -> tuple[tuple[float, ...], float, str]:
    """Per-session figures of the request's model over ``reference`` (:func:`time_pairing`), the
    load share it ran under and the noise model's mode it is judged with."""
    from pytest_roofline.model import ModelSpec

    prepared = request.prepared
    assert prepared is not None
    spec = ModelSpec.create(str(reference), request.batch, dict(request.dims))
    return time_pairing(
        request.backend,
        prepared.spec,
        spec,
        prepared.arrays,
        budget=max(request.budget, PAIR_BUDGET),
        run_estimate=run_estimate,
    )


def time_pairing(
    engine: Backend,
    new: ModelSpec,
    reference: ModelSpec,
    arrays: Mapping[str, Any],
    *,
    budget: float = PAIR_BUDGET,
    run_estimate: float | None = None,
) -> tuple[tuple[float, ...], float, str]:
    """Per-session figures (median of per-round ratios) of ``new`` over ``reference``, interleaved
    in fresh session pairs on ``engine`` (the gate's paired run), the load share it ran under
    (the noise model's pressure), and the noise model's mode the gate judges such a pairing with
    (``paired-thread`` when its runs were timed by their thread's CPU time).

    As the gate's paired mode, it runs at the configured threads on a quiet machine and at one
    intra-op thread per session when others share the CPUs (``gate.runner.paired_engine``, the
    load read over :data:`LOAD_WINDOW` before it): beside other processes two 2-thread sessions
    read A/A ratios of 0.70-1.07 on the zoo (docs/history.md, "Under load"), and the paired floor
    the pairing is judged with was fitted on one-thread pairings.

    The history's pairing at a model change; ``benchmarks/history_under_load.py`` times it too."""
    import dataclasses

    from pytest_roofline.gate.isolated import sampler_for
    from pytest_roofline.gate.noise import pressure
    from pytest_roofline.gate.paired import paired_run
    from pytest_roofline.gate.sampling import GateDesign
    from pytest_roofline.measure.rounds import SessionOpener

    engine, _ = pairing_engine(engine)
    estimate = run_estimate if run_estimate is not None and math.isfinite(run_estimate) else None
    design = GateDesign(budget=budget, run_estimate=estimate)
    run = paired_run(
        [SessionOpener(engine, new, arrays), SessionOpener(engine, reference, arrays)],
        dataclasses.replace(design, rounds=pair_rounds(design)),
        PAIR_TOLERANCE,
        sampler=sampler_for(engine),
        watch_load=engine.wall_clock,
        step_pairs=STEP_PAIRS,
    )
    return _positive(run.figures), pressure(run.load), run.floor_mode or "paired"


def pairing_engine(engine: Backend) -> tuple[Backend, bool]:
    """The engine a pairing runs on now, and whether it is the one-thread one: the configured
    threads on a quiet machine, one intra-op thread per session when others share the CPUs
    (``gate.runner.paired_engine``, the load read over :data:`LOAD_WINDOW`).  The history's
    pairing and ``roofline bisect`` pick their threads here."""
    import time

    from pytest_roofline.device.load import between, snapshot
    from pytest_roofline.gate.runner import paired_engine

    if not engine.wall_clock:
        return engine, False
    start = snapshot()
    time.sleep(LOAD_WINDOW)
    one = paired_engine(engine, between(start, snapshot()))
    return (one, True) if one is not None else (engine, False)


def pair_rounds(design: GateDesign) -> int:
    """Rounds per session that let :data:`STEP_PAIRS` session pairs fit the pairing's budget
    (``gate.sampling.paired_budget``), between ``FEW_ROUNDS`` and ``design.rounds``.

    A pairing's figures differ between session pairs far more than a session's median of 10
    round ratios is uncertain (the opening order alone moved them 3 %), so a slow model wants
    more session pairs, not more rounds: at 10 rounds ViT-B/16 (300 ms a run) got 4 session
    pairs in its 60 s and BERT 4-8.  Models under ~0.15 s a run keep ``design.rounds``."""
    from pytest_roofline.gate.sampling import FEW_ROUNDS, paired_budget

    estimate = design.run_estimate
    if estimate is None or estimate <= 0:
        return design.rounds
    budget = paired_budget(design.budget, estimate, PAIR_TOLERANCE, design)
    per_round = 2 * design.iterations * estimate
    fit = math.floor(budget / (STEP_PAIRS * per_round)) - design.warmup
    return max(FEW_ROUNDS, min(design.rounds, fit))


def _read_previous(request: GateRequest, url: str | None, default_dir: Path) -> HistoryPoint | None:
    """The series' previous point from the history at ``url`` (None when there is none, or the store
    cannot be read: the session end names an unreadable store when it appends)."""
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.history.store import open_store

    try:
        store = open_store(url, default_dir)
        try:
            return previous_point(store.points(test=request.test), request.key)
        finally:
            store.close()
    except RooflineError:
        return None


def series_before(
    request: GateRequest, url: str | None, default_dir: Path
) -> tuple[GateRequest, HistoryPoint | None]:
    """``request`` with its series' control probe (the blocks the previous point was normalized
    with), and that previous point (read once: :func:`with_history` pairs against it)."""
    import dataclasses

    previous = _read_previous(request, url, default_dir)
    if previous is not None and previous.probe:
        request = dataclasses.replace(request, probe=dict(previous.probe))
    return request, previous


def with_history(request: GateRequest, outcome: GateOutcome, previous: HistoryPoint | None) -> GateOutcome:
    """``outcome`` with ``profile.extra["history"]`` (:func:`pair_with_previous` against the series'
    ``previous`` point, :func:`series_before`)."""
    import dataclasses

    found = pair_with_previous(request, outcome, previous)
    extra = {**outcome.profile.extra, "history": found}
    outcome = dataclasses.replace(outcome, profile=dataclasses.replace(outcome.profile, extra=extra))
    return judged_by_pairing(request, outcome, Paired.from_dict(found.get("paired")), previous)


def judged_by_pairing(
    request: GateRequest, outcome: GateOutcome, paired: Paired | None, previous: HistoryPoint | None
) -> GateOutcome:
    """``outcome`` with its verdict decided by the history's pairing where that pairing timed the
    new model beside the baseline's own and only the model changed since the baseline.

    Under the history a changed model's verdict is the stored comparison's (its figure is the
    series' point, ``gate.order.route``), weaker than the paired comparison the gate makes without
    the history: on the zoo a retrained tiny MLP (10 us a run) read +64 % stored and failed, its
    pairing 1.004.  The pairing that just ran is that paired comparison, so it decides; the stored
    figures stay the point's, and the stored reading is kept as a reason."""
    import dataclasses

    from pytest_roofline.gate.order import current_identity

    verdict, baseline = outcome.verdict, request.baseline
    if paired is None or previous is None or not request.timed or verdict.mode != "stored":
        return outcome
    if baseline is None or baseline.identity is None or request.prepared is None:
        return outcome
    if verdict.status in ("new", "incomparable") or baseline.identity.model != previous.content:
        return outcome
    changes = baseline.identity.changes(current_identity(request, request.prepared))
    if not changes or any(change.kind != "model" for change in changes):
        return outcome  # the pairing times the model alone: another change is the stored figure's
    judged = paired.verdict(request.tolerance, verdict.metric)
    why = f"judged on the history's pairing with the baseline's model ({len(paired.figures)} session pairs)"
    if verdict.ratio is not None:
        why += f"; the stored comparison read {verdict.status}, ratio {verdict.ratio:.3f}"
    decided = dataclasses.replace(
        verdict,
        status=judged.status,
        message=judged.message + " (the model timed beside the baseline's)",
        reasons=(why, *verdict.reasons),
    )
    return dataclasses.replace(outcome, verdict=decided)
