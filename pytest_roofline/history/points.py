"""One measured result of one run, as the history keeps it.

A :class:`HistoryPoint` is read from a :class:`~pytest_roofline.results.ProfileRecord` of a
:class:`~pytest_roofline.results.RunResults` (the run's figures: the gate's control-normalized
figure per session, raw latency, per-layer seconds, verdict and mode, conditions, model hash).
Its ``id`` is a hash of what identifies the measurement (key, commit, time, figures), so importing
the same results file twice adds nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.schema import (
    SchemaError,
    read_float,
    read_floats,
    read_int,
    read_optional_float,
    read_str,
)

if TYPE_CHECKING:
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.results import ProfileRecord, RunResults

__all__ = [
    "POINT_VERSION",
    "ROUND_RATIOS",
    "SESSION_RATIOS",
    "HistoryPoint",
    "Paired",
    "points_of",
    "series_of",
]

POINT_VERSION = 1


#: ``Paired.figure`` of points whose figures are the gate's per-round ratios (the median of each
#: session's old-beside-new round ratios); points recorded before hold per-session ``p25 / p25``.
ROUND_RATIOS = "round-ratio"
SESSION_RATIOS = "session-p25"
#: Session pairs a pairing needs before its opening order is taken out of its figures: 4 of each
#: order (fewer, and the order's estimate is noise; the session figures are judged as they are).
MIN_ORDERED = 8
#: The noise model's modes a pairing is judged with (``gate.paired.floor_mode``).
PAIRED_MODES = ("paired", "paired-thread")


@dataclass(frozen=True)
class Paired:
    """The new model over the previous point's model, timed interleaved in one process.

    Its ratio, interval and noise are the gate's paired statistics
    (:func:`~pytest_roofline.gate.verdict.compare` in ``paired`` mode: the median over sessions, a
    seeded bootstrap interval widened in log space by the paired drift floor).
    """

    figures: tuple[float, ...]  # per fresh session pair: the median of its round ratios new / previous
    against: str  # the previous point's identity digest
    reference: str = ""  # where the previous model came from (or the gate's own paired run)
    figure: str = ROUND_RATIOS  # what a figure is: ROUND_RATIOS, or SESSION_RATIOS (older points)
    pressure: float = 0.0  # the share of the CPUs others took while it was timed (gate.noise)
    #: the noise model's mode its floor is read from, as the gate's pairing: ``paired-thread``
    #: when its runs were timed by their thread's CPU time (``gate.paired.floor_mode``)
    mode: str = "paired"

    @functools.cached_property
    def judged(self) -> tuple[float, ...]:
        """The figures the ratio and its interval are read from: the session figures with their
        opening order taken out.  Consecutive session pairs open their two sessions in opposite
        orders (``measure.rounds.sample_interleaved``) and the first-opened session runs slower on
        this VM (by 3.3 % for the zoo's MoE), so the figures alternate high and low; half the
        log-median difference between the two orders is divided out of each (what it did on the
        zoo: docs/history.md, "Opening order").  The session figures as they are below
        :data:`MIN_ORDERED` session pairs, at an odd count, or older per-session ones."""
        import numpy as np

        count = len(self.figures)
        if self.figure != ROUND_RATIOS or count % 2 or count < MIN_ORDERED:
            return self.figures
        logs = np.log(np.asarray(self.figures, dtype=float))
        order = (float(np.median(logs[0::2])) - float(np.median(logs[1::2]))) / 2.0
        logs[0::2] -= order
        logs[1::2] += order
        return tuple(float(x) for x in np.exp(logs))

    @property
    def ratio(self) -> float:
        import numpy as np

        return float(np.median(self.judged))

    @property
    def floor(self) -> float:
        """The gate's floor of this pairing's mode at the load it ran under (``gate.noise``)."""
        from pytest_roofline.gate.noise import noise_model

        return noise_model().floor(self.mode, self.pressure)

    def verdict(self, tolerance: float = 0.0, metric: str = "latency") -> Verdict:
        """The gate's paired verdict of these figures at ``tolerance``: the one place a pairing is
        judged (its interval here, a verdict in ``pairing.judged_by_pairing``), with :attr:`floor`."""
        from pytest_roofline.gate.verdict import compare

        return compare(self.judged, None, tolerance=tolerance, mode="paired", metric=metric, drift=self.floor)

    @functools.cached_property
    def _judged(self) -> tuple[tuple[float, float], float] | None:
        """The gate's 95 % interval of the ratio and its log half-width (None with one pair)."""
        if len(self.figures) < 2:
            return None
        verdict = self.verdict()
        assert verdict.ci is not None and verdict.noise is not None
        return verdict.ci, verdict.noise

    def ci(self, confidence: float = 0.95) -> tuple[float, float] | None:
        """The gate's interval of the median ratio at ``confidence`` (None with one pair).

        95 % is the gate's own; another level scales its log half-width by the normal quantiles
        (the gate's convention for its one-sided bound, ``verdict.one_sided_bound``)."""
        judged = self._judged
        if judged is None:
            return None
        (low, high), noise = judged
        if confidence == 0.95:
            return (low, high)
        from statistics import NormalDist

        half = noise * NormalDist().inv_cdf(0.5 + confidence / 2.0) / 1.96
        wider = confidence > 0.95  # never narrower than the gate's own 95 % interval
        return (
            min(low, self.ratio * math.exp(-half)) if wider else self.ratio * math.exp(-half),
            max(high, self.ratio * math.exp(half)) if wider else self.ratio * math.exp(half),
        )

    def scaled(self, factor: float) -> Paired:
        """These figures times ``factor`` (the benchmark's injected step on a real A/A pairing)."""
        figures = tuple(f * factor for f in self.figures)
        return Paired(figures, self.against, self.reference, self.figure, self.pressure, self.mode)

    def to_dict(self) -> dict[str, Any]:
        ci = self.ci()
        return {
            "ratio": self.ratio,
            "ci": list(ci) if ci else None,
            "figures": list(self.figures),
            "against": self.against,
            "reference": self.reference,
            "figure": self.figure,
            "pressure": self.pressure,
            "mode": self.mode,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Paired | None:
        """The pairing of a stored point (None when absent or malformed)."""
        if not isinstance(data, dict):
            return None
        figures = data.get("figures")
        if not isinstance(figures, list):
            return None
        values = tuple(
            float(f)
            for f in figures
            if isinstance(f, (int, float)) and not isinstance(f, bool) and math.isfinite(f) and f > 0
        )
        if not values:
            return None
        kind = str(data.get("figure") or SESSION_RATIOS)  # absent: recorded before round ratios
        load = data.get("pressure")
        busy = float(load) if isinstance(load, (int, float)) and not isinstance(load, bool) else 0.0
        busy = min(max(busy, 0.0), 1.0) if math.isfinite(busy) else 0.0
        mode = str(data.get("mode")) if data.get("mode") in PAIRED_MODES else "paired"  # absent: older points
        return cls(values, str(data.get("against") or ""), str(data.get("reference") or ""), kind, busy, mode)


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class HistoryPoint:
    """One result of one run.

    ``value`` is the figure the gate compares (the model's p25 over the control probe's, median
    over fresh sessions; dimensionless), ``ci`` its 95 % interval over sessions; ``median`` the
    raw median latency (seconds); ``layers`` per-layer seconds and ``scale`` the factor that puts
    a layer's seconds in the figure's units (``value / gate_p25``: 1 / the probe's p25), so layer
    series share the figure's immunity to the machine's speed.
    """

    id: str
    test: str
    key: str
    device_class: str
    conditions: str  # hash of the conditions (backend version, settings, control probe, figure)
    commit: str | None
    time: str
    value: float
    ci: tuple[float, float] | None = None
    median: float | None = None
    sessions: tuple[float, ...] = ()
    scale: float | None = None
    layers: dict[str, float] = field(default_factory=dict, hash=False)
    verdict: str = ""
    mode: str = ""
    parent: str | None = None
    branch: str | None = None
    model: str = ""
    model_hash: str = ""
    backend: str = ""
    batch: int = 1
    detail: dict[str, Any] = field(default_factory=dict, hash=False)  # the conditions themselves
    recorded: float = 0.0  # when it was stored (Unix seconds): orders runs within one second of ``time``
    identity: str = ""  # digest of what ran (model content, inputs, backend build, options, env); "" unknown
    content: str = ""  # the model's content hash (model file and external data): the model store's key
    paired: Paired | None = None  # the model timed beside the previous point's, where it changed
    probe: dict[str, int] = field(default_factory=dict, hash=False)  # control-probe blocks of ``value``
    unpaired: str = ""  # why the model changed since the previous point but was not timed beside it
    memory: int | None = None  # one inference's peak bytes (prof.memory), where the backend reports it
    layer_memory: dict[str, int] = field(default_factory=dict, hash=False)  # bytes each layer allocated

    @property
    def runs(self) -> str:
        """What ran: the identity digest, else (points recorded before it was kept) the model hash."""
        return self.identity or self.model_hash

    @property
    def order(self) -> tuple[str, float, str]:
        """Sort key of a series: the run's time, then when it was stored, then the id."""
        return (self.time, self.recorded, self.id)

    @property
    def series(self) -> str:
        """The series this point belongs to: key (test, model, shape, backend, device class) × conditions."""
        return f"{self.key}#{self.conditions[:12]}"

    def layer_values(self) -> dict[str, float]:
        """Per-layer times in the figure's units (raw seconds when no scale was recorded)."""
        scale = self.scale or 1.0
        return {name: t * scale for name, t in self.layers.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (one line of the embedded store, one ``data`` of PostgreSQL)."""
        return {
            "v": POINT_VERSION,
            "id": self.id,
            "test": self.test,
            "key": self.key,
            "device_class": self.device_class,
            "conditions": self.conditions,
            "commit": self.commit,
            "parent": self.parent,
            "branch": self.branch,
            "time": self.time,
            "value": self.value,
            "ci": list(self.ci) if self.ci else None,
            "median": self.median,
            "sessions": list(self.sessions),
            "scale": self.scale,
            "layers": dict(self.layers),
            "verdict": self.verdict,
            "mode": self.mode,
            "model": self.model,
            "model_hash": self.model_hash,
            "backend": self.backend,
            "batch": self.batch,
            "detail": dict(self.detail),
            "recorded": self.recorded,
            "identity": self.identity,
            "content": self.content,
            "paired": self.paired.to_dict() if self.paired else None,
            "probe": dict(self.probe),
            "unpaired": self.unpaired,
            **(
                {"memory": self.memory, "layer_memory": dict(self.layer_memory)}
                if self.memory is not None
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HistoryPoint:
        """Strict inverse of :meth:`to_dict` (raises SchemaError)."""
        if not isinstance(data, Mapping):
            raise SchemaError(f"a history point must be an object, got {type(data).__name__}")
        version = data.get("v", 1)
        if not isinstance(version, int) or version > POINT_VERSION:
            raise SchemaError(f"history point version {version!r} is newer than this version reads")
        ci = data.get("ci")
        if ci is not None and (not isinstance(ci, list) or len(ci) != 2):
            raise SchemaError("'ci' must be [low, high] or null")
        layers = data.get("layers") or {}
        if not isinstance(layers, Mapping):
            raise SchemaError("'layers' must be an object")
        for name in ("commit", "parent", "branch"):
            if data.get(name) is not None and not isinstance(data.get(name), str):
                raise SchemaError(f"'{name}' must be a string or null")
        detail = data.get("detail") or {}
        return cls(
            id=read_str(data, "id"),
            test=read_str(data, "test"),
            key=read_str(data, "key"),
            device_class=read_str(data, "device_class", ""),
            conditions=read_str(data, "conditions", ""),
            commit=data.get("commit"),
            parent=data.get("parent"),
            branch=data.get("branch"),
            time=read_str(data, "time", ""),
            value=read_float(data, "value", positive=True),
            ci=(float(ci[0]), float(ci[1])) if ci else None,
            median=read_optional_float(data, "median"),
            sessions=read_floats(data, "sessions", positive=True),
            scale=read_optional_float(data, "scale"),
            layers={str(k): float(v) for k, v in layers.items() if _finite(v)},
            verdict=read_str(data, "verdict", ""),
            mode=read_str(data, "mode", ""),
            model=read_str(data, "model", ""),
            model_hash=read_str(data, "model_hash", ""),
            backend=read_str(data, "backend", ""),
            batch=int(data.get("batch") or 1),
            detail=dict(detail) if isinstance(detail, Mapping) else {},
            recorded=float(read_optional_float(data, "recorded") or 0.0),
            identity=read_str(data, "identity", ""),
            content=read_str(data, "content", ""),
            paired=Paired.from_dict(data.get("paired")),
            probe=_blocks(data.get("probe")),
            unpaired=read_str(data, "unpaired", ""),
            memory=read_int(data, "memory") if data.get("memory") is not None else None,
            layer_memory=_layer_memory(data.get("layer_memory")),
        )


def _blocks(data: Any) -> dict[str, int]:
    """Control-probe block counts (``{"compute": n, "memory": m}``; empty when absent or malformed)."""
    if not isinstance(data, Mapping):
        return {}
    return {
        str(k): int(v) for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _sessions_ci(sessions: tuple[float, ...]) -> tuple[float, float] | None:
    """The 95 % interval of the median over sessions (distribution-free order statistics)."""
    if len(sessions) < 2:
        return None
    import numpy as np

    from pytest_roofline.measure.stats import median_ci

    low, high = median_ci(np.asarray(sessions, dtype=float))
    return (low, high)


def _conditions(record: ProfileRecord) -> dict[str, Any]:
    """What the series' figures depend on, from the profile (the same with or without an entry)."""
    from pytest_roofline.gate.conditions import settings_of

    prof = record.profile
    release = ".".join(prof.backend_version.split(".")[:2])
    return {
        "backend": prof.backend,
        "backend_release": release,
        "settings": settings_of(prof.fingerprint, prof.options),
        # paired runs' figure is a ratio to the reference: another currency, another series
        "figure": "ratio" if record.verdict.mode == "paired" else "normalized",
    }


def point_of(
    record: ProfileRecord,
    *,
    commit: str | None,
    time: str,
    parent: str | None = None,
    branch: str | None = None,
    rootdir: Path | None = None,
) -> HistoryPoint | None:
    """The history point of one measured record (None when nothing was timed: static runs).

    The figure is the gate's own (``profile.extra["gate"]``: per-session model p25 over control
    p25), so a run that recorded no baseline (a busy machine, a regression) is kept all the same.
    """
    if record.outcome == "skipped":
        return None
    prof = record.profile
    gate = prof.extra.get("gate") if isinstance(prof.extra, Mapping) else None
    sessions = tuple(float(f) for f in (gate or {}).get("figures") or () if _finite(f) and f > 0)
    if not sessions:
        return None
    import numpy as np

    value = float(np.median(sessions))
    subject: Any = (gate or {}).get("subject_p25")
    scale = value / float(subject) if _finite(subject) and float(subject) > 0 else None
    conditions = _conditions(record)
    ran = prof.extra.get("history") if isinstance(prof.extra, Mapping) else None
    ran = ran if isinstance(ran, Mapping) else {}
    device = record.entry.device_class if record.entry else record.key.rsplit("|", 1)[-1]
    ident = {"key": record.key, "commit": commit, "time": time, "sessions": list(sessions), "c": conditions}
    return HistoryPoint(
        id=_digest(ident)[:32],
        test=record.test,
        key=record.key,
        device_class=device,
        conditions=_digest(conditions)[:16],
        commit=commit,
        parent=parent,
        branch=branch,
        time=time,
        value=value,
        ci=_sessions_ci(sessions),
        median=prof.latency.median,
        sessions=sessions,
        scale=scale,
        layers={layer.name: float(layer.time) for layer in prof.layers if _finite(layer.time)},
        verdict=record.verdict.status,
        mode=record.verdict.mode,
        model=record.entry.model if record.entry else _relative(prof.model_path or "", rootdir),
        model_hash=prof.model_hash,
        backend=prof.backend,
        batch=prof.batch,
        detail=conditions,
        identity=str(ran.get("identity") or ""),
        content=str(ran.get("content") or ""),
        paired=Paired.from_dict(ran.get("paired")),
        probe=_blocks((gate or {}).get("probe")),
        unpaired=str(ran.get("unpaired") or ""),
        memory=prof.memory.peak if prof.memory is not None else None,
        layer_memory={la.name: la.memory.allocated for la in prof.layers if la.memory is not None},
    )


def _layer_memory(data: Any) -> dict[str, int]:
    """A point's ``layer_memory`` (layer -> bytes allocated, may be negative), strictly read."""
    if data is None:
        return {}
    if not isinstance(data, Mapping) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in data.values()
    ):
        raise SchemaError("'layer_memory' must map layer names to whole bytes")
    return {str(k): int(v) for k, v in data.items()}


def _relative(path: str, rootdir: Path | None) -> str:
    """``path`` relative to ``rootdir`` (posix) when inside it: the key git finds it by."""
    if not path or rootdir is None or not Path(path).is_absolute():
        return path
    try:
        return Path(path).resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        return path


def points_of(
    results: RunResults, parent: str | None = None, rootdir: Path | None = None
) -> list[HistoryPoint]:
    """One point per measured record of a run (records without figures are left out)."""
    points = []
    for record in results.records:
        point = point_of(
            record,
            commit=results.commit,
            time=results.created,
            parent=parent,
            branch=results.branch,
            rootdir=rootdir,
        )
        if point is not None:
            points.append(point)
    return points


def series_of(points: list[HistoryPoint]) -> dict[str, list[HistoryPoint]]:
    """Points grouped by series, each in time order."""
    grouped: dict[str, list[HistoryPoint]] = {}
    for point in points:
        grouped.setdefault(point.series, []).append(point)
    return {name: sorted(items, key=lambda p: p.order) for name, items in sorted(grouped.items())}


def iter_lines(points: list[HistoryPoint]) -> Iterator[str]:
    """Each point as one JSON line (export, the embedded store)."""
    for point in points:
        yield json.dumps(point.to_dict(), sort_keys=True, allow_nan=False)
