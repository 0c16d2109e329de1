"""One line that says why a verdict came out as it did: the graph, the roofline, the measurement.

>>> explain_verdict(diff, prediction, ratio=1.072, ci=(1.06, 1.085), status="regression").text
... # doctest: +SKIP
'graph changed: +1 block (layer3.2), +4.1 % FLOPs; predicted +6.9 %, measured +7.2 % (consistent)'

The prediction and the measurement are *consistent* when the predicted change lies inside the
measurement's confidence interval widened by :data:`AGREEMENT_ABS` (3 percentage points) or
:data:`AGREEMENT_REL` (25 % of the predicted change), whichever is larger: the roofline prices
each changed layer at the efficiency its type reached in the baseline, which the benchmark
``benchmarks/diff_quality.py`` finds good to about 3 points on onnxruntime CPU.

A measurement whose interval is wider than that band (twice the allowed gap) cannot tell a
right prediction from a wrong one: a prediction inside it is *unmeasurable* here, and the line
says so rather than "consistent".  The 1024-wide MLP's offline-optimised copy, predicted -0.1 %,
measured -4.1 % in [-14.4, +7.5] over 60 fresh session pairs under load (its sessions differ by
about 40 %).  A prediction outside the widened interval is still *inconsistent*.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .changes import GraphDiff
    from .predict import Prediction

__all__ = ["AGREEMENT_ABS", "AGREEMENT_REL", "Explanation", "agreement", "explain_verdict"]

AGREEMENT_ABS = 0.03
AGREEMENT_REL = 0.25


@dataclass(frozen=True)
class Explanation:
    """The figures behind a verdict's explanation, and its one-line ``text``.

    ``graph``: ``changed``, ``unchanged`` or ``unknown`` (no summary of the baseline model).
    ``agreement``: ``consistent``, ``inconsistent``, ``unmeasurable`` (the measured interval is
    too wide to judge the prediction), ``unpredicted`` (no prediction) or ``unmeasured`` (no
    measured ratio).  Changes are fractions (``0.072`` = 7.2 % slower).
    """

    text: str
    graph: str
    status: str
    blocks_added: int = 0
    blocks_removed: int = 0
    blocks_changed: int = 0
    flops_change: float | None = None
    bytes_change: float | None = None
    predicted: float | None = None
    measured: float | None = None
    measured_ci: tuple[float, float] | None = None
    agreement: str = "unpredicted"
    tolerance: float | None = None  # the allowed gap between prediction and measurement

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "text": self.text,
            "graph": self.graph,
            "status": self.status,
            "blocks_added": self.blocks_added,
            "blocks_removed": self.blocks_removed,
            "blocks_changed": self.blocks_changed,
            "flops_change": self.flops_change,
            "bytes_change": self.bytes_change,
            "predicted": self.predicted,
            "measured": self.measured,
            "measured_ci": list(self.measured_ci) if self.measured_ci else None,
            "agreement": self.agreement,
            "tolerance": self.tolerance,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Explanation:
        """Inverse of :meth:`to_dict`."""
        ci = data.get("measured_ci")
        return cls(**{**data, "measured_ci": (float(ci[0]), float(ci[1])) if ci else None})


def agreement(predicted: float, measured: float, ci: tuple[float, float] | None = None) -> tuple[str, float]:
    """``(consistent|inconsistent|unmeasurable, allowed gap)`` of a predicted and a measured change.

    ``unmeasurable``: the prediction lies inside the widened interval, but the interval is wider
    than the band of twice the allowed gap, so the measurement cannot judge it.

    Args:
        predicted: predicted change, a fraction.
        measured: measured change (ratio - 1).
        ci: the measured change's confidence interval (ratio CI - 1); None: the point alone.
    """
    allowed = max(AGREEMENT_ABS, AGREEMENT_REL * abs(predicted))
    low, high = ci if ci is not None else (measured, measured)
    if not low - allowed <= predicted <= high + allowed:
        return "inconsistent", allowed
    return ("unmeasurable" if high - low > 2 * allowed else "consistent"), allowed


def explain_verdict(
    diff: GraphDiff | None,
    prediction: Prediction | None,
    *,
    ratio: float | None,
    status: str,
    ci: tuple[float, float] | None = None,
) -> Explanation:
    """Explain a verdict in one line, with the figures.

    Args:
        diff: the structural diff of the baseline model and the current one; None when the
            baseline has no summary (then the graph is ``unknown``).
        prediction: :func:`~pytest_roofline.diff.predict.predict`'s result; None or unavailable
            when there is no roofline.
        ratio: the measured time ratio current / baseline (the verdict's ``ratio``); None when
            nothing was compared.
        status: the verdict's status (``pass``, ``regression``, ``improved``, ``inconclusive``...).
        ci: the verdict's confidence interval of ``ratio``.
    """
    measured = ratio - 1 if ratio is not None else None
    measured_ci = (ci[0] - 1, ci[1] - 1) if ci is not None else None
    figures: dict[str, Any] = {"status": status, "measured": measured, "measured_ci": measured_ci}
    said_measured = f"measured {_pct(measured)}" if measured is not None else "not measured"
    if diff is None:
        text = f"graph not known (the baseline has no model summary); {said_measured}"
        return Explanation(text=text, graph="unknown", agreement="unpredicted", **figures)
    figures.update(
        blocks_added=len(diff.blocks_of("added")),
        blocks_removed=len(diff.blocks_of("removed")),
        blocks_changed=len(diff.blocks_of("changed")),
        flops_change=diff.flops_change,
        bytes_change=diff.bytes_change,
    )
    if diff.is_unchanged:
        moved = status in ("regression", "improved", "inconclusive") and measured is not None
        cause = ": the runtime or the machine" if moved else ""
        return Explanation(
            text=f"graph unchanged; {said_measured}{cause}",
            graph="unchanged",
            predicted=0.0,
            agreement=_agree(0.0, measured, measured_ci)[0] if measured is not None else "unmeasured",
            tolerance=_agree(0.0, measured, measured_ci)[1] if measured is not None else None,
            **figures,
        )
    head = diff.headline()
    predicted = prediction.fraction if prediction is not None and prediction.available else None
    if predicted is None:
        why = prediction.reason if prediction is not None and prediction.reason else "no device roofline"
        text = f"{head}; no prediction ({why}); {said_measured}"
        return Explanation(text=text, graph="changed", agreement="unpredicted", **figures)
    if measured is None:
        text = f"{head}; predicted {_pct(predicted)}; not measured"
        return Explanation(text=text, graph="changed", predicted=predicted, agreement="unmeasured", **figures)
    verdict, allowed = _agree(predicted, measured, measured_ci)
    text = f"{head}; predicted {_pct(predicted)}, {said_measured} ({verdict}"
    if verdict == "unmeasurable" and measured_ci is not None:
        text = (
            f"{head}; predicted {_pct(predicted)}, {said_measured} (not measurable here: its 95 % "
            f"interval, {_pct(measured_ci[0])} .. {_pct(measured_ci[1])}, is "
            f"{(measured_ci[1] - measured_ci[0]) * 100:.1f} points wide, more than the "
            f"{2 * allowed * 100:.1f} that could judge the prediction"
        )
    elif verdict == "inconsistent":
        more = measured > predicted
        text += (
            ": more than the graph explains, the runtime or the machine too"
            if more
            else (": less than the graph explains")
        )
    text += ")"
    return Explanation(
        text=text, graph="changed", predicted=predicted, agreement=verdict, tolerance=allowed, **figures
    )


def _agree(predicted: float, measured: float | None, ci: tuple[float, float] | None) -> tuple[str, float]:
    return agreement(predicted, measured if measured is not None else 0.0, ci)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f} %"
