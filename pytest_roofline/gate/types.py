"""The gate's values, a leaf of the gate: one request, its outcome, and what it needs of the model store.

:func:`~pytest_roofline.gate.request.build_request` makes a :class:`GateRequest`,
:func:`~pytest_roofline.gate.runner.run_model_gate` turns it into a :class:`GateOutcome`, and
:mod:`~pytest_roofline.gate.order` routes it; they all read these types from here, so that none of
them imports another for its types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend
    from pytest_roofline.gate.baseline import BaselineEntry, HistoryPoint
    from pytest_roofline.gate.change import ChangeReport
    from pytest_roofline.gate.memory import MemoryTolerance
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.model import ModelSpec
    from pytest_roofline.pipeline import Binding, PreparedModel
    from pytest_roofline.profile import ModelProfile

__all__ = ["GateOutcome", "GateRequest", "ModelStoreLike"]


class ModelStoreLike(Protocol):
    """What the gate needs of the content-addressed model store (its ``root`` is named when present)."""

    def put(self, model_path: Path) -> str:
        """Keep ``model_path`` (and its external data); returns its content hash."""

    def get(self, digest: str) -> Path | None:
        """A verified copy of the model of content hash ``digest``, or None."""


@dataclass(frozen=True)
class GateRequest:
    """Everything the gate needs to judge one model in one test."""

    test: str
    key: str
    model: Path
    model_rel: str
    batch: int
    backend: Backend
    device_class: str
    tolerance: float
    budget: float
    dims: Mapping[str, int] = field(default_factory=dict, hash=False)
    inputs: Any = None
    metrics: tuple[str, ...] = ("latency",)
    baseline: BaselineEntry | None = None
    reference: ModelSpec | None = None  # paired mode: the model at the git reference
    new_at_ref: str = ""  # paired mode, the model absent at the reference: why (measured, not compared)
    commit: str | None = None
    trips: Mapping[str, int] | None = field(default=None, hash=False)  # Loop trip counts to bind
    prepared: PreparedModel | None = field(default=None, hash=False)  # the model already loaded and bound
    bound: Binding | None = field(default=None, hash=False)  # --roofline-disable: what the call binds
    retime: bool = False  # a timed comparison even when nothing that runs changed
    # a figure timed every run, as a stored comparison (the history's series needs one), while
    # identity still decides: nothing that runs changed is ``unchanged``, however the timing reads
    timed: bool = False
    models: ModelStoreLike | None = field(default=None, hash=False)  # where the baseline's model is kept
    other_device: str | None = None  # no baseline here, but one of another device class
    # control-probe blocks when no comparable baseline fixes them (the history series' own fit)
    probe: Mapping[str, int] | None = field(default=None, hash=False)
    memory_tolerance: MemoryTolerance | None = None  # the memory verdict's (None: gate.memory's default)
    update: bool = False  # --roofline-update: the entry is rewritten, its figure timed as a new one's


@dataclass(frozen=True)
class GateOutcome:
    """What the gate found: the profile, its verdicts, what changed, and the baseline candidate."""

    profile: ModelProfile
    verdict: Verdict
    extra_verdicts: tuple[Verdict, ...] = ()
    entry: BaselineEntry | None = None
    history: tuple[HistoryPoint, ...] = ()
    change: ChangeReport | None = None
