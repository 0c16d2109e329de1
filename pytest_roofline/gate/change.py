"""What changed between the baseline's model and this run's, and whether it explains the verdict.

Stored mode keeps a compact structural summary of the model in every baseline entry
(:func:`pytest_roofline.diff.summarize`), so a later run diffs its own model against it without
the old file; paired mode has both files.  The diff is priced on the roofline at the efficiencies
the baseline's layers reached (the entry keeps each layer's time, op type and ONNX nodes), and the
verdict gets one line: "graph changed: +1 block (layer3.2), +4.1 % FLOPs; predicted +6.9 %,
measured +7.2 % (consistent)", or "graph unchanged; measured +7.2 %: the runtime or the machine".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_roofline.diff import GraphDiff, ModelSummary, Prediction
    from pytest_roofline.gate.baseline import BaselineEntry
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.profile import ModelProfile
    from pytest_roofline.roofline import DeviceRoofline

__all__ = ["ChangeReport", "baseline_profile", "explain_change"]


@dataclass(frozen=True)
class ChangeReport:
    """The diff, its prediction and the verdict's explanation, as JSON-ready dicts (for reports)."""

    explanation: dict[str, Any]
    diff: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """The one-line explanation."""
        return str(self.explanation.get("text", ""))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"explanation": dict(self.explanation), "diff": self.diff, "prediction": self.prediction}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChangeReport:
        """Inverse of :meth:`to_dict`."""
        return cls(dict(data.get("explanation") or {}), data.get("diff"), data.get("prediction"))


def baseline_profile(entry: BaselineEntry) -> ModelProfile | None:
    """The baseline's per-layer times as a profile the prediction can read (None without them)."""
    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.profile import Layer, ModelProfile

    layers = tuple(
        Layer(
            name,
            record.op_type,
            record.nodes,
            record.time or 0.0,
            0,
            0,
            kind=record.kind,
            serves=record.serves,
        )
        for name, record in entry.layers.items()
        if record.nodes or record.kind == "layout"
    )
    if not layers:
        return None  # an entry of schema 1 kept no op types or nodes
    nan = math.nan
    median = entry.latency.median
    latency = LatencyStats(1, median, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan)
    return ModelProfile(
        model_name=entry.model,
        model_path=None,
        model_hash=entry.model_hash,
        backend=entry.backend,
        backend_version=entry.backend_version,
        options=dict(entry.options),
        batch=entry.batch,
        input_shapes={},
        latency=latency,
        layers=layers,
        attributed_fraction=1.0,
        total_flops=0,
        total_macs=0,
        total_bytes=0,
    )


def explain_change(
    verdict: Verdict,
    old: ModelSummary | None,
    new: ModelSummary,
    roofline: DeviceRoofline | None,
    old_profile: ModelProfile | None,
    same_model: bool = False,
) -> ChangeReport:
    """Diff ``old`` and ``new``, price the difference and explain ``verdict`` with it.

    ``old`` None means the baseline kept no summary: the graph is then unknown, unless
    ``same_model`` (equal content hashes) says it is unchanged.
    """
    from pytest_roofline.diff import diff_summaries, explain_verdict, predict

    diff: GraphDiff | None = None
    prediction: Prediction | None = None
    if old is not None or same_model:
        diff = diff_summaries(old or new, new)
        if not diff.is_unchanged:
            prediction = predict(diff, roofline, old_profile)
    explanation = explain_verdict(diff, prediction, ratio=verdict.ratio, ci=verdict.ci, status=verdict.status)
    return ChangeReport(
        explanation.to_dict(),
        diff.to_dict() if diff is not None else None,
        prediction.to_dict() if prediction is not None else None,
    )


def stored_summary(entry: BaselineEntry) -> ModelSummary | None:
    """The model summary an entry keeps (None for schema-1 entries or an unreadable one)."""
    from pytest_roofline.diff import ModelSummary
    from pytest_roofline.errors import RooflineError

    if not entry.structure:
        return None
    try:
        return ModelSummary.from_dict(entry.structure)
    except (RooflineError, KeyError, TypeError, ValueError):
        return None
