"""Typed baseline entries: one accepted measurement of one model in one test, and its history.

An entry's key is its logical identity (test, model, batch and dims, backend, device class), never
the full device fingerprint, so a baseline survives a kernel update or a new CI runner of the same
class.  Entries are read strictly (:mod:`pytest_roofline.schema`): a NaN, negative or missing
figure is a malformed entry, never a silent "pass".  Files of schema 1 are read through
:func:`baseline_file_to_2`.  The ``identity`` block (:mod:`pytest_roofline.gate.identity`) is optional
within schema 2: entries written before it have none and are judged by their stored figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_roofline.device.load import MachineLoad
from pytest_roofline.gate.conditions import Conditions, settings_of
from pytest_roofline.gate.identity import RunIdentity
from pytest_roofline.memory import MemoryRecord
from pytest_roofline.schema import (
    BASELINE_FILE,
    SchemaError,
    as_mapping,
    migration,
    read_float,
    read_floats,
    read_int,
    read_list,
    read_mapping,
    read_optional_float,
    read_str,
    read_str_map,
)

if TYPE_CHECKING:
    from pytest_roofline.serving.types import ScenarioResult

__all__ = [
    "HISTORY_LIMIT",
    "BaselineEntry",
    "ControlRecord",
    "FigureRecord",
    "HistoryPoint",
    "LatencyRecord",
    "LayerRecord",
    "baseline_file_to_2",
    "entry_key",
    "entry_to_2",
    "module_of",
]

HISTORY_LIMIT = 50
MAX_BATCH = 1 << 20


def entry_key(test: str, model: str, batch: int, dims: Mapping[str, int], backend: str, device: str) -> str:
    """The logical identity of a baseline entry."""
    shape = f"b{batch}" + "".join(f",{k}={v}" for k, v in sorted(dims.items()))
    return f"{test}|{model}|{shape}|{backend}|{device}"


def module_of(test: str) -> str:
    """The module path of a node id (``tests/test_x.py::test_y[a]`` → ``tests/test_x.py``)."""
    return test.split("::", 1)[0]


#: The range a stored time may take, in seconds (a picosecond to eleven days): a number beyond it
#: is refused where it is read, before any arithmetic divides by it or raises it to a power.
TIME_RANGE = (1e-12, 1e6)
#: The range a stored probe-normalized figure (a ratio of two times) may take.
RATIO_RANGE = (1e-12, 1e12)


def _checked(value: float, key: str, bounds: tuple[float, float], what: str) -> float:
    low, high = bounds
    if value and not low <= value <= high:
        raise SchemaError(f"{key!r} is {value:.3g}, outside the {low:g} to {high:g} a stored {what} can be")
    return value


def _seconds(data: Mapping[str, Any], key: str, *, positive: bool = False) -> float:
    """``data[key]``: a finite time in seconds within :data:`TIME_RANGE` (or zero, unless ``positive``)."""
    return _checked(read_float(data, key, positive=positive), key, TIME_RANGE, "time in seconds")


def _optional_seconds(data: Mapping[str, Any], key: str) -> float | None:
    value = read_optional_float(data, key)
    return None if value is None else _checked(value, key, TIME_RANGE, "time in seconds")


def _ratio(data: Mapping[str, Any], key: str) -> float:
    """``data[key]``: a positive normalized figure within :data:`RATIO_RANGE`."""
    return _checked(read_float(data, key, positive=True), key, RATIO_RANGE, "normalized figure")


def _many(
    data: Mapping[str, Any], key: str, bounds: tuple[float, float], *, positive: bool
) -> tuple[float, ...]:
    what = "normalized figure" if bounds is RATIO_RANGE else "time in seconds"
    values = read_floats(data, key, positive=positive)
    return tuple(_checked(v, f"{key}[{i}]", bounds, what) for i, v in enumerate(values))


@dataclass(frozen=True)
class ControlRecord:
    """The control probe the stored figures were normalized by: its name, shape and raw p25."""

    name: str
    p25: float
    blocks: dict[str, int] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"name": self.name, "p25": self.p25, "blocks": dict(self.blocks)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ControlRecord:
        """Strict inverse of :meth:`to_dict`."""
        blocks = read_mapping(data, "blocks", {})
        return cls(
            name=read_str(data, "name"),
            p25=_seconds(data, "p25", positive=True),
            blocks={str(k): read_int(blocks, k, maximum=1 << 16) for k in blocks},
        )


@dataclass(frozen=True)
class LatencyRecord:
    """Raw latency statistics beside the normalized figure (seconds)."""

    median: float
    mean: float
    min: float
    p25: float
    p75: float
    p90: float
    std: float
    gate_p25: float
    session_medians: tuple[float, ...] = ()
    alone_p25: float | None = None  # one session run back to back: what an unchanged run measures

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``alone_p25`` only when measured)."""
        data: dict[str, Any] = {
            "median": self.median,
            "mean": self.mean,
            "min": self.min,
            "p25": self.p25,
            "p75": self.p75,
            "p90": self.p90,
            "std": self.std,
            "gate_p25": self.gate_p25,
            "session_medians": list(self.session_medians),
        }
        if self.alone_p25 is not None:
            data["alone_p25"] = self.alone_p25
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyRecord:
        """Strict inverse of :meth:`to_dict`."""
        return cls(
            median=_seconds(data, "median"),
            mean=_seconds(data, "mean"),
            min=_seconds(data, "min"),
            p25=_seconds(data, "p25"),
            p75=_seconds(data, "p75"),
            p90=_seconds(data, "p90"),
            std=_seconds(data, "std"),
            gate_p25=_seconds(data, "gate_p25", positive=True),
            session_medians=_many(data, "session_medians", TIME_RANGE, positive=False),
            alone_p25=_optional_seconds(data, "alone_p25"),
        )


@dataclass(frozen=True)
class LayerRecord:
    """One layer's stored time (seconds), roofline fraction, op type and ONNX nodes.

    The op type and nodes let a later run price a graph change at the efficiencies this layer
    reached (:mod:`pytest_roofline.gate.change`); entries of schema 1 have neither.
    """

    time: float | None
    fraction: float | None = None
    op_type: str = ""
    nodes: tuple[str, ...] = ()
    kind: str = "compute"
    serves: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (kind and serves only when they say something).

        The time keeps 4 significant digits and the fraction 3 decimals: finer figures are noise
        (layer times move by percents between runs) and make a re-recorded baseline's diff unreadable.
        """
        time = None if self.time is None else float(f"{self.time:.4g}")
        fraction = None if self.fraction is None else round(self.fraction, 3)
        data: dict[str, Any] = {"time": time, "fraction": fraction, "op_type": self.op_type}
        data["nodes"] = list(self.nodes)
        if self.kind != "compute":
            data["kind"] = self.kind
        if self.serves:
            data["serves"] = self.serves
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LayerRecord:
        """Strict inverse of :meth:`to_dict`."""
        serves = data.get("serves")
        return cls(
            time=_optional_seconds(data, "time"),
            fraction=read_optional_float(data, "fraction"),
            op_type=read_str(data, "op_type", ""),
            nodes=tuple(str(n) for n in read_list(data, "nodes")),
            kind=read_str(data, "kind", "compute"),
            serves=serves if isinstance(serves, str) else None,
        )


@dataclass(frozen=True)
class FigureRecord:
    """The configured threads' figure, kept beside a single-thread gate figure (per session)."""

    sessions: tuple[float, ...]
    control_p25: float
    subject_p25: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "sessions": list(self.sessions),
            "control_p25": self.control_p25,
            "subject_p25": self.subject_p25,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FigureRecord:
        """Strict inverse of :meth:`to_dict`."""
        return cls(
            sessions=_many(data, "sessions", RATIO_RANGE, positive=True),
            control_p25=_seconds(data, "control_p25", positive=True),
            subject_p25=_seconds(data, "subject_p25", positive=True),
        )


@dataclass(frozen=True)
class HistoryPoint:
    """An earlier accepted value of an entry (for trend charts)."""

    commit: str | None
    time: str
    value: float
    median: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"commit": self.commit, "time": self.time, "value": self.value, "median": self.median}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HistoryPoint:
        """Strict inverse of :meth:`to_dict`."""
        commit = data.get("commit")
        if commit is not None and not isinstance(commit, str):
            raise SchemaError(f"history 'commit' must be a string, got {type(commit).__name__}")
        return cls(
            commit=commit,
            time=read_str(data, "time", ""),
            value=_ratio(data, "value"),
            median=_optional_seconds(data, "median"),
        )


@dataclass(frozen=True)
class BaselineEntry:
    """One accepted measurement of one model in one test, and its history.

    ``figure`` is the probe-normalized figure (median over ``sessions``), the gate's stored
    currency; ``latency`` keeps the raw statistics beside it; ``conditions`` what the figures
    depend on (a run under other conditions is incomparable).
    """

    key: str
    test: str
    model: str
    batch: int
    backend: str
    device_class: str
    figure: float
    sessions: tuple[float, ...]
    control: ControlRecord
    latency: LatencyRecord
    conditions: Conditions
    dims: dict[str, int] = field(default_factory=dict, hash=False)
    layers: dict[str, LayerRecord] = field(default_factory=dict, hash=False)
    fingerprint: dict[str, Any] = field(default_factory=dict, hash=False)
    backend_version: str = ""
    options: dict[str, str] = field(default_factory=dict, hash=False)
    model_hash: str = ""
    commit: str | None = None
    time: str = ""
    history: tuple[HistoryPoint, ...] = ()
    structure: dict[str, Any] | None = field(default=None, hash=False)
    configured: FigureRecord | None = None  # the configured threads' figure beside a one-thread one
    identity: RunIdentity | None = None  # what ran (optional block: entries before it have none)
    memory: MemoryRecord | None = (
        None  # one inference's memory (optional block: where the backend reports it)
    )
    load: MachineLoad | None = None  # the machine's load while the figures were measured
    #: serving scenarios' LoadGen figures (docs/serving.md; optional: older entries have none)
    scenarios: tuple[ScenarioResult, ...] = ()

    @property
    def pressure(self) -> float:
        """The share of the CPUs others took while this entry was measured (0: quiet or unknown)."""
        from pytest_roofline.gate.noise import pressure

        return pressure(self.load)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "key": self.key,
            "test": self.test,
            "model": self.model,
            "batch": self.batch,
            "dims": dict(self.dims),
            "backend": self.backend,
            "device_class": self.device_class,
            "figure": self.figure,
            "sessions": list(self.sessions),
            "control": self.control.to_dict(),
            "latency": self.latency.to_dict(),
            "conditions": self.conditions.to_dict(),
            "layers": {k: v.to_dict() for k, v in self.layers.items()},
            "fingerprint": dict(self.fingerprint),
            "backend_version": self.backend_version,
            "options": dict(self.options),
            "model_hash": self.model_hash,
            "commit": self.commit,
            "time": self.time,
            "history": [h.to_dict() for h in self.history],
            "structure": self.structure,
            "configured": self.configured.to_dict() if self.configured else None,
            "identity": self.identity.to_dict() if self.identity else None,
            **({"memory": self.memory.to_dict()} if self.memory is not None else {}),
            "load": self.load.to_dict() if self.load else None,
            **({"scenarios": [r.to_dict() for r in self.scenarios]} if self.scenarios else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BaselineEntry:
        """Strict inverse of :meth:`to_dict`.

        Raises:
            SchemaError: a missing or ill-typed field, a NaN, negative or zero figure.
        """
        if not isinstance(data, Mapping):
            raise SchemaError(f"an entry must be an object, got {type(data).__name__}")
        sessions = _many(data, "sessions", RATIO_RANGE, positive=True)
        if not sessions:
            raise SchemaError("'sessions' is empty")
        dims = read_mapping(data, "dims", {})
        layers = read_mapping(data, "layers", {})
        commit = data.get("commit")
        if commit is not None and not isinstance(commit, str):
            raise SchemaError(f"'commit' must be a string, got {type(commit).__name__}")
        structure = data.get("structure")
        if structure is not None and not isinstance(structure, Mapping):
            raise SchemaError(f"'structure' must be an object, got {type(structure).__name__}")
        configured = data.get("configured")
        identity = data.get("identity")
        load = data.get("load")
        return cls(
            key=read_str(data, "key"),
            test=read_str(data, "test"),
            model=read_str(data, "model"),
            batch=read_int(data, "batch", minimum=1, maximum=MAX_BATCH),
            backend=read_str(data, "backend"),
            device_class=read_str(data, "device_class"),
            figure=_ratio(data, "figure"),
            sessions=sessions,
            control=ControlRecord.from_dict(read_mapping(data, "control")),
            latency=LatencyRecord.from_dict(read_mapping(data, "latency")),
            conditions=Conditions.from_dict(read_mapping(data, "conditions")),
            dims={str(k): read_int(dims, k, minimum=0, maximum=1 << 40) for k in dims},
            layers={str(k): LayerRecord.from_dict(read_mapping(layers, k)) for k in layers},
            fingerprint=read_mapping(data, "fingerprint", {}),
            backend_version=read_str(data, "backend_version", ""),
            options=read_str_map(data, "options"),
            model_hash=read_str(data, "model_hash", ""),
            commit=commit,
            time=read_str(data, "time", ""),
            history=tuple(
                HistoryPoint.from_dict(as_mapping(h, "a history point")) for h in read_list(data, "history")
            ),
            structure=dict(structure) if structure is not None else None,
            configured=FigureRecord.from_dict(as_mapping(configured, "'configured'")) if configured else None,
            identity=RunIdentity.from_dict(as_mapping(identity, "'identity'")) if identity else None,
            memory=MemoryRecord.from_dict(data["memory"]) if data.get("memory") is not None else None,
            load=_load(as_mapping(load, "'load'")) if load else None,
            scenarios=_scenarios(read_list(data, "scenarios")),
        )

    def history_point(self) -> HistoryPoint:
        """This entry as one point of a later entry's history."""
        return HistoryPoint(self.commit, self.time, self.figure, self.latency.median)

    def succeed(self, previous: BaselineEntry | None, limit: int = HISTORY_LIMIT) -> BaselineEntry:
        """This entry replacing ``previous``: previous's history plus previous itself, bounded."""
        if previous is None:
            return self
        same = (previous.time, previous.figure, previous.commit) == (self.time, self.figure, self.commit)
        if same and previous.scenarios != self.scenarios:  # serving results joined the same measurement
            return replace(self, history=previous.history)
        history = (*previous.history, previous.history_point())[-limit:]
        return replace(self, history=history)


# --- migrations -----------------------------------------------------------------------------------


def _load(data: Mapping[str, Any]) -> MachineLoad:
    """An entry's ``load`` block, strictly: shares within [0, 1], a sane core count (``throttled``
    is optional: entries written before CPU quotas were read have none)."""
    other, steal = read_float(data, "other"), read_float(data, "steal")
    throttled = read_optional_float(data, "throttled") or 0.0
    if other > 1 or steal > 1 or throttled > 1:
        raise SchemaError(
            f"'load' shares must be within [0, 1], got other={other}, steal={steal}, throttled={throttled}"
        )
    return MachineLoad(
        seconds=read_float(data, "seconds"),
        other=other,
        steal=steal,
        loadavg=read_float(data, "loadavg"),
        cores=read_int(data, "cores", minimum=1, maximum=1 << 16),
        available=bool(data.get("available", True)),
        throttled=throttled,
    )


def entry_to_2(entry: Any) -> Any:
    """A schema-1 entry as schema 2: ``probe`` becomes ``control``; conditions from what it recorded."""
    if not isinstance(entry, Mapping) or "control" in entry:
        return entry  # left for the strict reader to report, or already of schema 2
    data = dict(entry)
    probe = data.pop("probe", None)
    data["control"] = probe if isinstance(probe, Mapping) else {}
    fingerprint = data.get("fingerprint")
    fingerprint = fingerprint if isinstance(fingerprint, Mapping) else {}
    options = data.get("options")
    options = options if isinstance(options, Mapping) else {}
    data["conditions"] = {
        "backend_version": str(data.get("backend_version", "")),
        "settings": settings_of(fingerprint, {str(k): str(v) for k, v in options.items()}),
        "control": str(data["control"].get("name", "")),
    }
    return data


@migration(BASELINE_FILE, 2)
def baseline_file_to_2(document: dict[str, Any]) -> dict[str, Any]:
    """Baseline file schema 1 → 2 (entries' ``probe`` renamed ``control``, ``conditions`` added)."""
    entries = document.get("entries")
    if isinstance(entries, Mapping):
        document["entries"] = {key: entry_to_2(value) for key, value in entries.items()}
    return document


def _scenarios(items: list[Any]) -> tuple[ScenarioResult, ...]:
    """An entry's serving scenario results (serving/ loads only when an entry has some)."""
    if not items:
        return ()
    from pytest_roofline.errors import OptionError
    from pytest_roofline.serving.types import ScenarioResult

    try:
        return tuple(ScenarioResult.from_dict(as_mapping(item, "a scenario result")) for item in items)
    except (KeyError, TypeError, ValueError, OptionError) as exc:
        raise SchemaError(f"a scenario result is malformed: {exc}") from None
