"""Change points of a series: where a model (or one of its layers) became slower or faster, and stayed so.

The absolute figure is the gate's control-normalized one (model p25 over the control probe's,
measured interleaved in the same process; its logarithm, so a step is a ratio and the machine's
speed, which moves model and probe alike, mostly cancels):

1. **Where something that runs changed**: points carry a digest of what ran (model content,
   inputs, backend build, options, env: the gate's identity; the model hash for points recorded
   before it was kept).  A step goes only where it changed: a step under the same identity is the
   machine (this VM's speed jumps between two states for minutes) and is kept apart
   (``machine_steps``), never a change point.
2. **Paired evidence first**: where the point after a change carries a paired ratio (the new model
   timed interleaved with the previous point's in one process, per-round ratios,
   :mod:`~pytest_roofline.history.pairing`), that ratio decides: a step when the gate's interval
   of it (:meth:`~pytest_roofline.history.points.Paired.ci`: bootstrap over sessions widened in
   log space by the paired drift floor) at ``CONFIDENCE`` excludes 1 and it is at least
   ``min_change``; its 95 % interval is the step's CI.  No run of absolute figures is needed,
   so the step is found at the first run after it.
3. **Otherwise the absolute figure**: PELT (l2 cost; ``ruptures``' algorithm on prefix sums,
   :func:`pelt_l2`) with a penalty set from the series' own noise (``PENALTY × σ² × log n``, σ a
   MAD estimate on first differences so the steps do not inflate it) finds candidates, each moved
   onto a change of what ran within ``SNAP`` points; a segment has at least ``min_size`` points (a
   step must persist), and the step is kept when the seeded bootstrap interval of the segments'
   median ratio excludes 1.

Per layer the same detector runs on the layer's seconds in the figure's units
(:meth:`~pytest_roofline.history.points.HistoryPoint.layer_values`); for each model change point
the layers that moved are those whose median changed by more than their own noise and
``LAYER_MOVE``, or that appeared or vanished.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pytest_roofline.history.points import HistoryPoint, Paired

__all__ = [
    "ChangePoint",
    "LayerMove",
    "SeriesChanges",
    "detect",
    "find_changes",
    "robust_noise",
]

PENALTY = 4.0
MIN_SIZE = 3
MIN_CHANGE = 0.01
WINDOW = 20
SNAP = 2
CONFIDENCE = 0.99
BOOTSTRAP = 1000
LAYER_MOVE = 0.10
#: Session pairs a paired ratio needs to speak: the gate's batch (``GateDesign.sessions``), whose
#: per-round-ratio medians and drift-widened interval the gate itself decides on.
MIN_PAIRS = 4
NOISE_FLOOR = 0.002  # no figure reproduces better than 0.2 % between runs; a noiseless series is a fake


@dataclass(frozen=True)
class LayerMove:
    """One layer's change across a model change point (``change`` None: appeared or vanished)."""

    name: str
    before: float
    after: float
    change: float | None

    def describe(self) -> str:
        """``MatMul_83 +21 %``, ``Conv_9 new``, ``Relu_2 gone``."""
        if self.change is None:
            return f"{self.name} {'new' if self.before == 0 else 'gone'}"
        return f"{self.name} {self.change * 100:+.0f} %"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"name": self.name, "before": self.before, "after": self.after, "change": self.change}


@dataclass(frozen=True)
class ChangePoint:
    """A confirmed step: ``index`` is the first point after it."""

    index: int
    commit: str | None
    before: float
    after: float
    change: float  # after / before - 1
    ci: tuple[float, float] | None  # of the change
    runs_after: int
    previous_commit: str | None = None
    layers: tuple[LayerMove, ...] = ()
    explanation: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The contract's ``change_points[]`` item (``roofline history --format json``)."""
        return {
            "commit": self.commit,
            "before": self.before,
            "after": self.after,
            "change": self.change,
            "ci": list(self.ci) if self.ci else None,
            "layers": [layer.describe() for layer in self.layers],
            "explanation": self.explanation,
            "previous_commit": self.previous_commit,
            "runs_after": self.runs_after,
            "layer_moves": [layer.to_dict() for layer in self.layers],
        }

    def describe(self, test: str) -> str:
        """``test_x: +6.8 % since abc1234, 4 runs after; layer MatMul_83 +21 %``."""
        since = (self.commit or "?")[:7]
        runs = f"{self.runs_after} run{'s' if self.runs_after != 1 else ''}"
        text = f"{test}: {self.change * 100:+.1f} % since {since}, {runs} after"
        if self.layers:
            text += "; layer " + ", ".join(layer.describe() for layer in self.layers[:3])
        return text


@dataclass(frozen=True)
class SeriesChanges:
    """The change points of one series, of its layers, and the steps put down to the machine."""

    series: str
    points: tuple[HistoryPoint, ...]
    changes: tuple[ChangePoint, ...]
    machine_steps: tuple[int, ...] = ()
    layer_changes: dict[str, tuple[ChangePoint, ...]] = field(default_factory=dict, hash=False)
    memory_changes: tuple[ChangePoint, ...] = ()  # steps of the peak memory (memory_changes)


def robust_noise(values: Sequence[float] | np.ndarray, skip: Sequence[int] = ()) -> float:
    """σ of the point-to-point noise: MAD of first differences / (0.6745 √2) (steps barely move it).

    ``skip``: indices whose difference to the point before is left out (where the model changed:
    that difference holds the step), unless too few differences would be left.
    """
    data = np.asarray(values, dtype=float)
    if len(data) < 3:
        return 0.0
    diffs = np.diff(data)
    keep = np.ones(len(diffs), dtype=bool)
    for index in skip:
        if 0 < index < len(data):
            keep[index - 1] = False
    if keep.sum() >= 3:
        diffs = diffs[keep]
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return mad / (0.6745 * math.sqrt(2.0))


def _candidates(logs: np.ndarray, min_size: int, changes_at: Sequence[int] = ()) -> list[int]:
    """PELT break indices (first index after each break) with a noise-scaled penalty."""
    n = len(logs)
    if n < 2 * min_size:
        return []
    sigma = max(robust_noise(logs, changes_at), NOISE_FLOOR)
    breaks = pelt_l2(logs, PENALTY * sigma * sigma * math.log(n), min_size)
    return [b for b in breaks if 0 < b < n]


def pelt_l2(signal: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """PELT with an l2 cost: the breaks (first index after each, then ``len(signal)``) that minimize
    the segments' summed squared deviations plus ``penalty`` per segment, each at least ``min_size``.

    ``ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(signal).predict(pen=penalty)``, step
    for step (same admissible set, pruning and first-minimum ties), with each segment's cost read
    from prefix sums in O(1) instead of a variance over the segment: ruptures' own loop made a
    1,000-run history with 20 layers take minutes (issue 36 H14).
    """
    data = np.asarray(signal, dtype=float).ravel()
    n = len(data)
    data = data - (data.mean() if n else 0.0)  # centred: the prefix sums stay well conditioned
    sums = np.concatenate(([0.0], np.cumsum(data)))
    squares = np.concatenate(([0.0], np.cumsum(data * data)))
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    previous = np.zeros(n + 1, dtype=int)
    admissible = np.zeros(0, dtype=int)
    ends = [k for k in range(n) if k >= min_size] + [n]
    for end in ends:
        admissible = np.append(admissible, end - min_size)
        starts = admissible[admissible >= 0]
        starts = starts[np.isfinite(best[starts])]  # ruptures skips a start with no partition yet
        if not len(starts):
            continue
        length = end - starts
        cost = squares[end] - squares[starts] - (sums[end] - sums[starts]) ** 2 / length
        total = best[starts] + np.maximum(cost, 0.0) + penalty
        pick = int(np.argmin(total))
        best[end], previous[end] = total[pick], starts[pick]
        admissible = starts[total <= total[pick] + penalty]  # a start with no partition yet is dropped too
    breaks = [n]
    while breaks[-1] > 0 and np.isfinite(best[breaks[-1]]):
        breaks.append(int(previous[breaks[-1]]))
    return sorted(b for b in breaks if b > 0)


def _bootstrap_ratio(
    before: np.ndarray, after: np.ndarray, confidence: float, seed: int
) -> tuple[float, tuple[float, float], tuple[float, float]]:
    """Median(after) / median(before), its percentile-bootstrap interval at ``confidence`` (the
    test) and at 95 % (the reported CI), seeded."""
    ratio = float(np.median(after) / np.median(before))
    rng = np.random.default_rng(seed)
    b = rng.choice(before, size=(BOOTSTRAP, len(before)), replace=True)
    a = rng.choice(after, size=(BOOTSTRAP, len(after)), replace=True)
    ratios = np.median(a, axis=1) / np.median(b, axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high, low95, high95 = np.percentile(ratios, [tail, 100.0 - tail, 2.5, 97.5])
    return ratio, (float(low), float(high)), (float(low95), float(high95))


def _model_changes(hashes: Sequence[str]) -> list[int] | None:
    """Indices where the model hash differs from the point before; None when hashes are unknown."""
    if not hashes or any(not h for h in hashes):
        return None
    return [i for i in range(1, len(hashes)) if hashes[i] != hashes[i - 1]]


def _paired_steps(
    pairs: Sequence[Paired | None], changes_at: Sequence[int], min_change: float, confidence: float
) -> dict[int, tuple[float, float, float] | None]:
    """The paired evidence at each change of what runs that carries it: index → (ratio, 95 % low,
    95 % high) when it shows a step (its interval at ``confidence`` excludes 1 and the ratio is at
    least ``min_change`` off 1), None when it shows none."""
    decided: dict[int, tuple[float, float, float] | None] = {}
    for index in changes_at:
        pair = pairs[index]
        if pair is None:
            continue
        ratio, strict, reported = pair.ratio, pair.ci(confidence), pair.ci()
        if strict is None or reported is None or len(pair.figures) < MIN_PAIRS:
            continue  # too few session pairs: no evidence either way (the absolute figure decides)
        step = abs(ratio - 1.0) >= min_change and not strict[0] <= 1.0 <= strict[1]
        decided[index] = (ratio, reported[0], reported[1]) if step else None
    return decided


def detect(
    values: Sequence[float] | np.ndarray,
    hashes: Sequence[str] = (),
    *,
    paired: Sequence[Paired | None] = (),
    min_size: int = MIN_SIZE,
    min_change: float = MIN_CHANGE,
    confidence: float = CONFIDENCE,
) -> tuple[list[tuple[int, float, float, float, float, float]], list[int]]:
    """The confirmed steps of ``values`` and the steps put down to the machine.

    ``hashes``: what ran at each point (identity digest or model hash); a step goes only where it
    changed.  ``paired``: each point's paired ratio against the point before's model (None where
    none was timed); where one exists it decides the step alone (module docstring).

    Returns ``([(index, before, after, change, ci_low, ci_high), ...], machine_indices)``; index is
    the first point after the step, ``change`` and its 95 % interval are fractions.
    """
    data = np.asarray(values, dtype=float)
    if len(data) < 2 or not np.all(np.isfinite(data)) or np.any(data <= 0):
        return [], []
    logs = np.log(data)
    changes_at = _model_changes(list(hashes)) if len(hashes) == len(data) else None
    pairs = list(paired) if len(paired) == len(data) else [None] * len(data)
    decided = _paired_steps(pairs, changes_at or (), min_change, confidence)
    machine: list[int] = []
    breaks = [index for index, step in decided.items() if step is not None]
    for index in _candidates(logs, min_size, changes_at or ()):
        if changes_at is not None:
            near = [j for j in changes_at if abs(j - index) <= SNAP]
            if not near:
                machine.append(index)
                continue
            if any(j in decided for j in near):
                continue  # the paired figure there spoke (a step is in ``breaks`` already)
            index = min(near, key=lambda j: (abs(j - index), j))
        if index not in breaks:
            breaks.append(index)
    breaks.sort()
    confirmed = []
    bounds = [0, *breaks, len(data)]
    for k, index in enumerate(breaks):
        start = max(bounds[k], index - WINDOW)
        stop = min(bounds[k + 2], index + WINDOW)
        before, after = data[start:index], data[index:stop]
        step = decided.get(index)
        if step is not None:  # the paired ratio: the step's size and interval
            ratio, low95, high95 = step
            level = float(np.median(before))
            confirmed.append((index, level, level * ratio, ratio - 1.0, low95 - 1.0, high95 - 1.0))
            continue
        if len(before) < min_size or len(after) < min_size:
            continue
        ratio, (low, high), (low95, high95) = _bootstrap_ratio(before, after, confidence, seed=index)
        if abs(ratio - 1.0) < min_change or low <= 1.0 <= high:
            continue
        confirmed.append(
            (index, float(np.median(before)), float(np.median(after)), ratio - 1.0, low95 - 1.0, high95 - 1.0)
        )
    return confirmed, machine


def _layer_moves(points: Sequence[HistoryPoint], index: int, start: int, stop: int) -> tuple[LayerMove, ...]:
    """Layers whose time moved across ``index``: beyond their own noise and :data:`LAYER_MOVE`."""
    before_points, after_points = points[start:index], points[index:stop]
    names = {n for p in (*before_points, *after_points) for n in p.layers}
    moves = []
    for name in names:
        before = [p.layer_values()[name] for p in before_points if name in p.layers]
        after = [p.layer_values()[name] for p in after_points if name in p.layers]
        if not before and after:
            moves.append(LayerMove(name, 0.0, float(np.median(after)), None))
            continue
        if before and not after:
            moves.append(LayerMove(name, float(np.median(before)), 0.0, None))
            continue
        b, a = float(np.median(before)), float(np.median(after))
        if b <= 0:
            continue
        noise = robust_noise(np.log(np.maximum([*before, *after], 1e-15)))
        change = a / b - 1.0
        if abs(change) >= max(LAYER_MOVE, 3.0 * noise):
            moves.append(LayerMove(name, b, a, change))
    total = sum(max(m.before, m.after) for m in moves) or 1.0
    moves.sort(key=lambda m: (-abs(m.after - m.before) / total, m.name))
    return tuple(moves)


def find_changes(
    points: Sequence[HistoryPoint],
    *,
    layers: bool = True,
    layer_series: bool = False,
    min_size: int = MIN_SIZE,
) -> SeriesChanges:
    """The change points of one series (points in time order): of its model figure, with the layers
    that moved across each (``layers``), and of every layer's own series (``layer_series``)."""
    points = tuple(points)
    values = [p.value for p in points]
    hashes = [p.runs for p in points]
    found, machine = detect(values, hashes, paired=[p.paired for p in points], min_size=min_size)
    changes = []
    bounds = [0, *[f[0] for f in found], len(points)]
    for k, (index, before, after, change, low, high) in enumerate(found):
        start, stop = max(bounds[k], index - WINDOW), min(bounds[k + 2], index + WINDOW)
        moved = _layer_moves(points, index, start, stop) if layers else ()
        changes.append(_change_point(points, (index, before, after, change, low, high), moved))
    layer_changes: dict[str, tuple[ChangePoint, ...]] = {}
    if layer_series:
        names = sorted({n for p in points for n in p.layers})
        per_point = [p.layer_values() for p in points]  # once per point, not once per layer
        for name in names:
            present = [p for p in points if name in p.layers]
            series = [v[name] for v in per_point if name in v]
            steps, _ = detect(series, [p.runs for p in present], min_size=min_size, min_change=LAYER_MOVE)
            if steps:
                layer_changes[name] = tuple(_change_point(present, step) for step in steps)
    series_name = points[0].series if points else ""
    return SeriesChanges(
        series_name, points, tuple(changes), tuple(machine), layer_changes, memory_changes(points)
    )


#: A peak that moves less than this between runs is the same peak (an allocator reads the same
#: bytes; a peak RSS moves by pages): the issue's repeatability bound.
MEMORY_SAME = 0.001


def memory_changes(points: Sequence[HistoryPoint]) -> tuple[ChangePoint, ...]:
    """Steps of the peak memory: memory is decided on one run, so a step is any point whose peak
    differs from the previous measured one by more than :data:`MEMORY_SAME`; the layers whose
    allocations moved across it are named (bytes before and after)."""
    measured = [p for p in points if p.memory is not None and p.memory > 0]
    found = []
    for index in range(1, len(measured)):
        before, after = measured[index - 1], measured[index]
        assert before.memory is not None and after.memory is not None
        change = after.memory / before.memory - 1
        if abs(change) <= MEMORY_SAME:
            continue
        names = sorted(set(before.layer_memory) | set(after.layer_memory))
        moves = [
            LayerMove(name, float(was), float(now), now / was - 1 if was > 0 and now >= 0 else None)
            for name in names
            for was, now in [(before.layer_memory.get(name, 0), after.layer_memory.get(name, 0))]
            if was != now
        ]
        moves.sort(key=lambda move: -abs(move.after - move.before))
        found.append(
            ChangePoint(
                index=points.index(after),
                commit=after.commit,
                previous_commit=before.commit,
                before=float(before.memory),
                after=float(after.memory),
                change=change,
                ci=(change, change),  # one run decides: the bytes are the bytes
                runs_after=len(measured) - index,
                layers=tuple(moves[:5]),
            )
        )
    return tuple(found)


def with_explanation(change: ChangePoint, explanation: str) -> ChangePoint:
    """``change`` with its graph-diff explanation."""
    return replace(change, explanation=explanation)


def _change_point(
    points: Sequence[HistoryPoint],
    step: tuple[int, float, float, float, float, float],
    layers: tuple[LayerMove, ...] = (),
) -> ChangePoint:
    """The :class:`ChangePoint` of one step :func:`detect` found in ``points``."""
    index, before, after, change, low, high = step
    return ChangePoint(
        index=index,
        commit=points[index].commit,
        previous_commit=points[index - 1].commit,
        before=before,
        after=after,
        change=change,
        ci=(low, high),
        runs_after=len(points) - index,
        layers=layers,
    )
