"""The gate's decision order: identity → paired → stored.

Before anything is timed, :func:`route` compares this run's :class:`RunIdentity` with the
baseline's:

* nothing that runs changed (or the model was re-saved with the same graph): ``unchanged`` —
  a short latency sample gives the test its figures and the machine's drift, nothing is compared;
* the model changed and the baseline's model is reachable (the model store under the cache dir,
  else git at the baseline's commit): ``paired`` — both models timed interleaved;
* otherwise (the old model unreachable; a changed backend build, option, env var or input):
  ``stored`` — today's comparison with the stored figures, the reason naming the change or what
  was missing.

The model store is :mod:`pytest_roofline.gate.model_store` (``default_model_store()``, ``put``,
``get``); the request carries it as a :class:`~pytest_roofline.gate.types.ModelStoreLike`, so a
test can hand in another.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.gate.identity import Change, RunIdentity

if TYPE_CHECKING:
    from pytest_roofline.gate.model_store import ModelStore
    from pytest_roofline.gate.types import GateOutcome, GateRequest
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.model import ModelSpec
    from pytest_roofline.pipeline import PreparedModel

__all__ = [
    "MeasuredIdentities",
    "baseline_model",
    "Route",
    "current_identity",
    "default_models",
    "measured_again",
    "route",
    "short_latency",
    "unchanged_verdict",
]

#: The unchanged path's latency sample: at least this many timed runs, more up to the time below.
SHORT_MIN_RUNS = 5
SHORT_MAX_RUNS = 50
SHORT_SECONDS = 0.12  # ~13 runs of a 9 ms model: the drift figure, not a verdict
REMEDY = (
    "keep the cache dir between runs ($ROOFLINE_CACHE_DIR, e.g. a CI cache) so the baseline's model "
    "stays in the model store, or record baselines from committed models"
)


def default_models(hold: bool = False) -> ModelStore | None:
    """The model store under the calibration cache dir, or None where it cannot be made (then a
    changed model falls back to git, then to the stored figures); ``hold``: a session's store,
    evicting only at its ``release()``."""
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.gate.model_store import default_model_store

    try:
        return default_model_store(hold=hold)
    except (OSError, RooflineError):
        return None


@dataclass(frozen=True)
class Route:
    """How the gate judges one run: ``unchanged``, ``paired`` or ``stored``, and why."""

    kind: str
    identity: RunIdentity
    changes: tuple[Change, ...] = ()
    reference: ModelSpec | None = None  # paired: the baseline's model
    reasons: tuple[str, ...] = ()


def current_identity(request: GateRequest, prepared: PreparedModel, graph: bool = False) -> RunIdentity:
    """This run's identity (``graph`` also hashes the graph: for a baseline entry)."""
    from pytest_roofline.gate.identity import content_hash, graph_hash

    extra = {f"trips.{k}": str(v) for k, v in sorted((request.trips or {}).items())}
    return RunIdentity.of(
        content_hash(request.model),
        request.backend,
        prepared.arrays,
        given_inputs=request.inputs is not None,
        device_class=request.device_class,
        extra=extra,
        graph=graph_hash(request.model) if graph else "",
    )


def route(request: GateRequest, prepared: PreparedModel) -> Route:
    """Where this run goes in the decision order (module docstring)."""
    identity = current_identity(request, prepared)
    baseline = request.baseline
    if baseline is None or baseline.identity is None or request.reference is not None or request.new_at_ref:
        return Route("stored", identity)  # paired mode (--roofline-compare-ref) decides by itself
    if request.retime:  # the user asked for the timed comparison: nothing to explain
        return Route("stored", identity)
    changes = baseline.identity.changes(identity)
    reasons: list[str] = []
    if any(c.kind == "model" for c in changes) and _same_graph(baseline.identity.graph, request.model):
        changes = [c for c in changes if c.kind != "model"]
        reasons.append("the model was re-saved: other bytes, the same graph")
    if not changes:
        return Route("unchanged", identity, reasons=tuple(reasons))
    if request.timed:  # the history's figure is the stored comparison's; its own pairing follows
        reasons.append("timed for the history: " + "; ".join(c.text for c in changes))
        return Route("stored", identity, tuple(changes), reasons=tuple(reasons))
    if any(c.kind == "model" for c in changes):
        reference, where = baseline_model(request, baseline.identity.model, baseline.commit)
        model = next(c.text for c in changes if c.kind == "model")
        if reference is not None:
            from pytest_roofline.model import ModelSpec

            spec = ModelSpec.create(str(reference), request.batch, request.dims)
            why = f"{model}: timed interleaved with the baseline's model from {where}"
            return Route("paired", identity, tuple(changes), spec, (*reasons, why))
        unreachable = f"the baseline's model is unreachable ({where}): compared with the stored figures"
        reasons.append(f"{model}, and {unreachable}; {REMEDY}")
        return Route("stored", identity, tuple(changes), reasons=tuple(reasons))
    what = "; ".join(c.text for c in changes)
    reasons.append(f"compared with the stored figures across a change: {what}")
    return Route("stored", identity, tuple(changes), reasons=tuple(reasons))


def _same_graph(recorded: str, model: Path) -> bool:
    """Whether ``model`` computes the graph of hash ``recorded`` (False when none was recorded)."""
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.gate.identity import graph_hash

    if not recorded:
        return False
    try:
        return graph_hash(model) == recorded
    except (RooflineError, OSError, ValueError):
        return False


def baseline_model(request: GateRequest, digest: str, commit: str | None) -> tuple[Path | None, str]:
    """The baseline's model (content hash ``digest``) from the model store, else git at ``commit``;
    with where it came from, or what was missing."""
    from pytest_roofline.errors import RooflineError
    from pytest_roofline.gate.identity import content_hash

    missing = []
    store = request.models
    if store is None:
        missing.append("no model store in this build")
    else:
        where = f"the model store {getattr(store, 'root', '')}".rstrip()
        try:
            found = store.get(digest)
        except (OSError, RooflineError) as exc:
            found, where = None, f"{where} ({exc})"
        if found is not None:
            return found, where
        missing.append(f"not in {where}")
    if not commit:
        missing.append("the baseline recorded no git commit")
        return None, "; ".join(missing)
    from pytest_roofline.model.gitref import model_at_ref

    short = commit[:12]
    try:
        copy = model_at_ref(request.model, commit)
        if content_hash(copy) == digest:
            return copy, f"git at {short}"
        missing.append(f"git at {short} holds another version of {request.model_rel} (recorded uncommitted?)")
    except RooflineError as exc:
        missing.append(f"not in git at {short}: {exc}")
    return None, "; ".join(missing)


def short_latency(prepared: PreparedModel) -> LatencyStats:
    """A short latency sample of one fresh session at the configured settings (seconds)."""
    with prepared.open() as session:
        return short_sample(session)


def short_sample(session: Any) -> LatencyStats:
    """A short latency sample of an open backend session: 2 warm-up runs, then at least
    :data:`SHORT_MIN_RUNS` and up to :data:`SHORT_MAX_RUNS` runs within :data:`SHORT_SECONDS`."""
    import time

    from pytest_roofline.measure.stats import LatencyStats

    session.time(2)  # warm-up
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < SHORT_MIN_RUNS or (
        len(samples) < SHORT_MAX_RUNS and time.perf_counter() - start < SHORT_SECONDS
    ):
        samples.extend(session.time(1))
    return LatencyStats.from_samples(samples, sessions=[samples])


def unchanged_verdict(
    metrics: Sequence[str], tolerance: float, raw: dict[str, float | None], reasons: Sequence[str]
) -> tuple[Verdict, tuple[Verdict, ...]]:
    """The ``unchanged`` verdicts (one per metric): a pass that says so and gives the machine's drift
    (``raw``: this run's and the baseline's latency p25 in seconds, and their ratio ``drift``)."""
    import math

    from pytest_roofline.gate.verdict import Verdict

    current, drift = raw.get("current") or math.nan, raw.get("drift")
    speed = f"this machine ran ×{drift:.2f} of baseline time" if drift and math.isfinite(drift) else ""
    message = "nothing that runs changed" + (f"; {speed}" if speed else "")
    verdicts = [
        Verdict(
            status="unchanged",
            mode="identity",
            metric=metric,
            current=current,
            tolerance=tolerance,
            message=f"{metric}: {message}",
            raw=raw if metric == "latency" else {},
            reasons=tuple(reasons),
        )
        for metric in ("latency", *[m for m in metrics if m != "latency"])
    ]
    return verdicts[0], tuple(verdicts[1:])


def measured_again(request: GateRequest, earlier: GateOutcome, earlier_test: str) -> GateOutcome:
    """A first baseline for ``request`` from what this session already measured of the same identity
    (same model bytes, inputs, backend build, settings, env vars, device class) in ``earlier_test``:
    its figures, profile and entry, under this test's key; nothing is timed again."""
    import dataclasses

    from pytest_roofline.gate.verdict import new_verdict
    from pytest_roofline.stamp import now

    assert earlier.entry is not None
    entry = dataclasses.replace(
        earlier.entry, key=request.key, test=request.test, model=request.model_rel, time=now(), history=()
    )
    verdict = new_verdict(entry.sessions, tolerance=request.tolerance)
    reused = f"figures measured earlier in this session ({earlier_test}), not measured again"
    verdict = dataclasses.replace(verdict, reasons=(reused,))
    return dataclasses.replace(earlier, verdict=verdict, extra_verdicts=(), entry=entry, history=())


class MeasuredIdentities:
    """What this session already measured, by identity (model bytes, inputs, backend build, settings,
    env vars, device class, batch, dims): a later first baseline of the same identity takes the
    earlier test's figures under its own key instead of being timed again."""

    def __init__(self) -> None:
        self._measured: dict[str, tuple[str, GateOutcome]] = {}  # identity -> first test, its outcome

    @staticmethod
    def key(request: GateRequest) -> str | None:
        """What a measurement of ``request`` measures (its identity, batch, dims), as a lookup key."""
        if request.prepared is None or request.reference is not None or request.metrics != ("latency",):
            return None
        identity = current_identity(request, request.prepared).to_dict()
        return json.dumps([identity, request.batch, sorted(request.dims.items())], sort_keys=True)

    def before(self, request: GateRequest, update: bool) -> GateOutcome | None:
        """A first baseline this session already measured under the same identity (recorded, not
        measured again), or None."""
        if request.baseline is not None and not update:
            return None
        key = self.key(request)
        if key is None or key not in self._measured:
            return None
        test, earlier = self._measured[key]
        return measured_again(request, earlier, test)

    def remember(self, request: GateRequest, outcome: GateOutcome) -> None:
        """Keep ``outcome`` of a measured request for the tests after it."""
        if outcome.entry is not None:
            key = self.key(request)
            if key is not None:
                self._measured.setdefault(key, (request.test, outcome))
