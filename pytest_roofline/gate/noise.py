"""How load widens the gate's interval: the noise model, fitted from A/A data under load.

A busy machine is the normal case (a CI sibling job, an xdist worker, a cloud VM's steal), so the
gate never refuses to decide because of load: it measures the load around every batch
(:mod:`pytest_roofline.device.load`) and widens the interval by what that load does to a figure.
The *pressure* of a window is the share of our CPUs that other processes, the hypervisor and our
control group's CPU quota took (``other + steal + throttled``, 0 quiet, 0.5 one busy process on
2 cores, ~1 two or more).  The model gives,
per mode (``paired``; ``paired-thread``, a pairing timed by its threads' CPU time under load;
``stored``, ``layer``), a relative standard deviation — the *floor* — that no
amount of sampling removes: between-process drift on a quiet machine, and what a neighbour adds.
The floor is folded into the bootstrap interval in log space (:func:`pytest_roofline.gate.verdict.compare`).

The knots live in ``noise_model.json`` beside this module, written by
``benchmarks/gate_under_load.py --refit`` from A/A records (a model against itself, paired and
against its own stored baseline) at each load condition: for each pressure bin the smallest floor
that keeps the A/A ratios inside their own 99 % interval in all but 1 % of verdicts
(:func:`fit_floors`).  The floors are this project's 2-core VM's: a team fits its own runner's with
the same script and points the gate at the file with ``ROOFLINE_NOISE_MODEL=path``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_roofline.device.load import MachineLoad

__all__ = [
    "MODES",
    "NOISE_MODEL_FILE",
    "NoiseModel",
    "NoiseRecord",
    "NOISE_MODEL_ENV",
    "fit_floors",
    "noise_model",
    "packaged_noise_model",
    "pressure",
]

MODES = ("paired", "paired-thread", "stored", "layer")
#: A mode a model file has no knots for reads its fallback's: a pairing timed by its threads' CPU
#: time (``paired-thread``) is judged with the wall clock's wider floor until a fit of its own exists.
FALLBACK = {"paired-thread": "paired"}
NOISE_MODEL_FILE = Path(__file__).with_name("noise_model.json")
#: A noise model file to use instead of the packaged one (a runner's own ``--refit``).
NOISE_MODEL_ENV = "ROOFLINE_NOISE_MODEL"
#: The floors before any fit, at pressure 0 (the former constant drift floors), and the least a fit
#: may give.  ``paired-thread``'s is wider than its fit (±1.4-1.6 % on 108 A/A verdicts): GPT-2 with
#: its KV cache, paired against an identical file, spreads between pairings beyond their own errors.
#: Loading each session from its own copy of the model's bytes (``Backend.own_bytes_copy``) cut that
#: spread (pairing means 0.926-1.127 -> 0.943-1.048 over 44 pairings, quiet and beside one busy
#: process); what is left, the means' distance from 1 beyond their own errors (χ²/df 2.0-3.1, a lean
#: of about -2.5 % included), is a standard deviation of about 2-3 %, which ±2.5 % carries: under
#: ``verdict.judge_ratio`` an A/A pairing is a false regression only past ~1.067 with a sampled
#: 95 % half-width under 1 %, past ~1.12 with more (GPT-2 KV's, standard errors ~2 %: past ~1.16;
#: the worst of the 44 read 1.048) (docs/measurements.md, "The paired-thread floor lowered").
QUIET_FLOORS = {"paired": 0.003, "paired-thread": 0.025, "stored": 0.015, "layer": 0.03}
#: Two-sided 99 % normal quantile: the interval the fit keeps A/A ratios inside.
Z99 = 2.5758
#: Share of A/A verdicts allowed outside their 99 % interval in a fitted bin.
OUTSIDE = 0.01
#: Edges of the pressure bins a fit groups records in.
BIN_EDGES = (0.0, 0.1, 0.35, 0.65, 1.0001)
#: Fewest records a bin needs to be fitted; a thinner bin takes the next lower bin's floor.
MIN_RECORDS = 20


def pressure(load: MachineLoad | None) -> float:
    """The share of our CPUs others took during ``load``'s window (0 when unknown or quiet).

    ``ROOFLINE_LOAD_LIMIT=off`` says other processes are known not to disturb the measurement:
    their share is left out (the hypervisor's steal and a CPU quota's throttling still count)."""
    from pytest_roofline.device.load import other_limit

    if load is None or not load.available:
        return 0.0
    value = (load.other if math.isfinite(other_limit()) else 0.0) + load.steal + load.throttled
    return min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0


@dataclass(frozen=True)
class NoiseModel:
    """Per mode, knots ``(pressure, floor)`` interpolated linearly and held flat past the ends."""

    knots: Mapping[str, tuple[tuple[float, float], ...]] = field(hash=False)
    source: str = "built-in quiet floors"

    def floor(self, mode: str, at: float) -> float:
        """The relative standard deviation no sampling removes, for ``mode`` at pressure ``at``."""
        points = (
            self.knots.get(mode)
            or self.knots.get(FALLBACK.get(mode, mode))
            or ((0.0, QUIET_FLOORS.get(mode, QUIET_FLOORS["stored"])),)
        )
        at = min(max(at, 0.0), 1.0)
        if at <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
            if at <= x1:
                return y0 + (y1 - y0) * (at - x0) / (x1 - x0) if x1 > x0 else y1
        return points[-1][1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the file's layout)."""
        return {
            "version": 1,
            "source": self.source,
            "pressure": "other processes' + steal + quota-throttled share of our CPUs (0 quiet, 1 all taken)",
            "modes": {mode: [list(p) for p in points] for mode, points in sorted(self.knots.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NoiseModel:
        """Inverse of :meth:`to_dict`; knots sorted by pressure, floors never below the quiet ones.

        Raises:
            ValueError: a knot that is not two finite numbers in range.
        """
        knots: dict[str, tuple[tuple[float, float], ...]] = {}
        for mode, points in dict(data.get("modes") or {}).items():
            parsed = []
            for point in points:
                x, y = (float(v) for v in point)
                if not (0.0 <= x <= 1.0 and math.isfinite(y) and 0.0 <= y < 1.0):
                    raise ValueError(f"noise model knot {point!r} of mode {mode!r} is out of range")
                parsed.append((x, max(y, QUIET_FLOORS.get(str(mode), 0.0))))
            knots[str(mode)] = tuple(sorted(parsed))
        return cls(knots, str(data.get("source", "")))


def noise_model() -> NoiseModel:
    """The model in force: the file ``ROOFLINE_NOISE_MODEL`` names, else the packaged one.

    Raises:
        OptionError: the variable names a file that is not a noise model.
    """
    path = os.environ.get(NOISE_MODEL_ENV, "").strip()
    return _model_file(path) if path else packaged_noise_model()


@lru_cache(maxsize=4)
def _model_file(path: str) -> NoiseModel:
    from pytest_roofline.errors import OptionError

    try:
        return _read(Path(path))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise OptionError(f"{NOISE_MODEL_ENV}={path}: not a noise model file ({exc})") from None


@lru_cache(maxsize=1)
def packaged_noise_model() -> NoiseModel:
    """The packaged model (``noise_model.json``); the quiet floors alone if the file is missing."""
    try:
        return _read(NOISE_MODEL_FILE)
    except (OSError, ValueError, TypeError):
        return NoiseModel({mode: ((0.0, floor),) for mode, floor in QUIET_FLOORS.items()})


def _read(path: Path) -> NoiseModel:
    return NoiseModel.from_dict(json.loads(path.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class NoiseRecord:
    """One A/A verdict for the fit: its mode, the pressure it was measured under, its log ratio,
    and the relative standard deviation its interval had without the floor (bootstrap and probe)."""

    mode: str
    pressure: float
    log_ratio: float
    sigma: float

    def needed_floor(self) -> float:
        """The smallest floor that puts this record's ratio inside its 99 % interval."""
        wanted = abs(self.log_ratio) / Z99
        return math.sqrt(max(wanted * wanted - self.sigma * self.sigma, 0.0))


def fit_floors(records: Iterable[NoiseRecord], source: str = "") -> NoiseModel:
    """The floors that keep all but :data:`OUTSIDE` of each pressure bin's A/A ratios inside
    their 99 % intervals, made non-decreasing in pressure (more load never narrows an interval).

    A bin with fewer than :data:`MIN_RECORDS` records is not fitted (its knot is left out); a
    :data:`FALLBACK` mode without any fitted bin is left out (it reads its fallback's knots), and
    one fitted only under load holds its lowest fitted floor down to pressure 0."""
    by_mode: dict[str, list[NoiseRecord]] = {}
    for record in records:
        by_mode.setdefault(record.mode, []).append(record)
    knots: dict[str, tuple[tuple[float, float], ...]] = {}
    for mode in MODES:
        found = by_mode.get(mode, [])
        points: list[tuple[float, float]] = []
        for low, high in zip(BIN_EDGES, BIN_EDGES[1:], strict=False):
            inside = [r for r in found if low <= r.pressure < high]
            if len(inside) < MIN_RECORDS:
                continue
            points.append((_median([r.pressure for r in inside]), _allowed_floor(inside)))
        if not points and mode in FALLBACK:  # judged with its fallback's floor until it has records
            continue
        floor, kept = QUIET_FLOORS[mode], []
        for x, y in points:
            floor = max(floor, y)
            kept.append((round(x, 3), math.ceil(floor * 1e5) / 1e5))  # rounded up: never narrower
        if not kept or kept[0][0] > 0.0:
            # a mode only measured under load (FALLBACK's) keeps its lowest fitted floor down to 0
            carried = bool(kept) and (kept[0][0] <= 0.1 or mode in FALLBACK)
            kept.insert(0, (0.0, kept[0][1] if carried else QUIET_FLOORS[mode]))
        knots[mode] = tuple(kept)
    return NoiseModel(knots, source)


def _allowed_floor(records: Sequence[NoiseRecord]) -> float:
    """The floor at which at most ``floor(OUTSIDE * n)`` of ``records`` stay outside."""
    needed = sorted(r.needed_floor() for r in records)
    allowed_outside = int(OUTSIDE * len(needed))
    return needed[len(needed) - 1 - allowed_outside]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
