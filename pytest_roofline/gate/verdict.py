"""The regression gate: a pure :func:`compare` of per-session figures, and its statistics.

Two modes share one decision rule:

* ``stored``: the figure is a model's time normalized by a control probe measured interleaved
  with it (``p25(model) / p25(probe)`` per fresh session).  The current sessions are compared
  with the sessions stored in the baseline; the ratio is ``median(current) / median(baseline)``.
* ``paired``: the figure is already a ratio per session, the two models measured interleaved in
  the same sessions (the median of per-round ratios, :func:`round_ratios`); it is compared with 1.

The confidence interval of the ratio is a deterministic percentile bootstrap over sessions,
widened in log space (so it stays positive) by a between-process ``drift`` floor (sessions inside
one process share drift that only a new process reveals; see docs/plugin.md, "The gate").  The
verdict is :func:`judge_ratio`'s, the one place the rule is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_roofline.fmt import fmt_pct, text_table
from pytest_roofline.fmt import fmt_seconds_fixed as _sec

__all__ = [
    "DEFAULT_DRIFT",
    "LayerDelta",
    "Verdict",
    "balanced_ratios",
    "bootstrap_ratio_ci",
    "compare",
    "judge_ratio",
    "needs_more",
    "new_verdict",
    "one_sided_bound",
    "round_ratios",
    "session_ratios",
    "small_sample_half",
    "verdict_table",
]

#: Between-process drift floor (relative standard deviation) per mode.  Stored figures drift
#: ~5 % peak-to-peak between processes here; paired A/A ratios stay within ±0.8 %.
DEFAULT_DRIFT = {"stored": 0.015, "paired": 0.003}

#: A pass must rule out a slowdown beyond the tolerance at 95 % one-sided: the upper bound is
#: ``ratio · exp(1.645 σ)`` where the CI's half-width is ``1.96 σ`` in log space.
ONE_SIDED = 1.645 / 1.96
#: A regression must be shown at 99 % (two-sided; 0.5 % one-sided): 2.576 σ against the CI's 1.96.
REGRESSION_WIDENING = 2.576 / 1.96

STATUSES = (
    "pass",
    "regression",
    "inconclusive",
    "new",
    "improved",
    "not-compared",
    "incomparable",
    "unchanged",
)


@dataclass(frozen=True)
class LayerDelta:
    """One layer's time in the baseline and now (raw seconds) and their ratio.

    ``status`` is ``compared``, ``new`` (no such layer in the baseline: time 0 there, no ratio)
    or ``gone`` (the baseline's layer no longer runs): a regression often comes from layers that
    were added, which a comparison of common layers alone would hide.
    """

    name: str
    baseline_time: float
    current_time: float
    ratio: float | None
    status: str = "compared"

    @property
    def growth(self) -> float:
        """Seconds this layer added (negative: saved)."""
        return self.current_time - self.baseline_time

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "name": self.name,
            "baseline_time": self.baseline_time,
            "current_time": self.current_time,
            "ratio": self.ratio,
            "status": self.status,
        }


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for one metric of one profiled model."""

    status: str
    mode: str
    metric: str
    current: float
    tolerance: float
    baseline: float | None = None
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    noise: float | None = None
    message: str = ""
    raw: dict[str, float | None] = field(default_factory=dict, hash=False)
    layers: tuple[LayerDelta, ...] = ()
    sessions: int = 0
    reasons: tuple[str, ...] = ()
    explanation: str = ""  # what changed in the graph, and whether it explains the ratio
    #: The part of ``noise`` no further sampling removes (drift and load floors, probe drift);
    #: the sampling loop stops when even that floor leaves the verdict open.  Not serialized.
    floor: float = field(default=0.0, compare=False)

    @property
    def failed(self) -> bool:
        """Whether this verdict is a regression."""
        return self.status == "regression"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the results-schema ``verdict`` object)."""
        return {
            "status": self.status,
            "mode": self.mode,
            "metric": self.metric,
            "baseline": self.baseline,
            "current": self.current,
            "ratio": self.ratio,
            "ci": list(self.ci) if self.ci else None,
            "noise": self.noise,
            "tolerance": self.tolerance,
            "message": self.message,
            "raw": dict(self.raw),
            "layers": [layer.to_dict() for layer in self.layers],
            "sessions": self.sessions,
            "reasons": list(self.reasons),
            "explanation": self.explanation,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        """Inverse of :meth:`to_dict`."""
        return cls(
            status=data["status"],
            mode=data.get("mode", "stored"),
            metric=data.get("metric", "latency"),
            current=math.nan if data.get("current") is None else float(data["current"]),
            tolerance=data.get("tolerance", 0.0),
            baseline=data.get("baseline"),
            ratio=data.get("ratio"),
            ci=(float(data["ci"][0]), float(data["ci"][1])) if data.get("ci") else None,
            noise=data.get("noise"),
            message=data.get("message", ""),
            raw=dict(data.get("raw") or {}),
            layers=tuple(LayerDelta(**la) for la in data.get("layers", [])),
            sessions=data.get("sessions", 0),
            reasons=tuple(str(r) for r in data.get("reasons", ())),
            explanation=str(data.get("explanation") or ""),
        )


def session_ratios(subject: Sequence[Sequence[float]], control: Sequence[Sequence[float]]) -> list[float]:
    """Per-session ``p25(subject) / p25(control)`` for sessions measured interleaved.

    Args:
        subject: samples (seconds) of the measured model, one list per session.
        control: samples of the control (probe or reference model), same sessions.

    Returns:
        One ratio per session where both sides have samples.
    """
    ratios = []
    for a, b in zip(subject, control, strict=False):
        if len(a) and len(b):
            low = float(np.percentile(b, 25))
            if low > 0:
                ratios.append(float(np.percentile(a, 25)) / low)
    return ratios


def round_ratios(subject: Sequence[Sequence[float]], control: Sequence[Sequence[float]]) -> list[float]:
    """Per-session median of the per-round ratios ``subject[i] / control[i]`` (paired mode).

    The two were timed in the same rounds of one session set, one beside the other (the order
    alternating between rounds), so each round's ratio cancels what the machine did during that
    round: a slower moment, another speed state, a busy neighbour.  Measured on the 2-core VM
    (ViT-B/16 and its 8.6 % slower variant, 4 sessions x 10 rounds, 2 threads): the per-session
    ``p25 / p25`` ratios read 1.02-1.48, the medians of per-round ratios 1.098-1.136.

    Args:
        subject: samples (seconds) of the new model, one list per session, one sample per round
            (or ``iterations`` per round: paired by position).
        control: the reference model's samples, same sessions and rounds.

    Returns:
        One figure per session where both sides have samples.
    """
    figures = []
    for a, b in zip(subject, control, strict=False):
        count = min(len(a), len(b))
        if count:
            new, old = np.asarray(a[:count], dtype=float), np.asarray(b[:count], dtype=float)
            keep = (old > 0) & (new > 0)
            if keep.any():
                figures.append(float(np.median(new[keep] / old[keep])))
    return figures


def balanced_ratios(subject: Sequence[Sequence[float]], control: Sequence[Sequence[float]]) -> list[float]:
    """Paired mode's figures: per pair of consecutive sessions (0 and 1, 2 and 3, ...), the
    geometric mean of their :func:`round_ratios`.

    :func:`~pytest_roofline.measure.rounds.sample_interleaved` opens the two models in the other
    order in every other session, and the opening order moves a session's ratio: beside one busy
    process, timed by CPU time, GPT-2 with KV cache against an identical copy read 1.11, 1.06,
    1.15, 0.98 (sessions opened new-first, old-first, new-first, old-first), LLaMA 1.02, 0.94,
    1.01, 0.88.  A median over such sessions lands between the two orders' clusters wherever the
    draw puts it (the "per-pairing effect": an identical file read 0.952-1.023 in three pairings
    whose own errors were ~1 %).  A pair holds each order once, so the effect cancels inside it.
    A session without samples leaves its pair out; a last unpaired session is left out.
    """
    figures = []
    for first in range(0, min(len(subject), len(control)) - 1, 2):
        both = round_ratios(subject[first : first + 2], control[first : first + 2])
        if len(both) == 2:
            figures.append(math.sqrt(both[0] * both[1]))
    return figures


def bootstrap_ratio_ci(
    current: Sequence[float],
    baseline: Sequence[float] | None = None,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap CI of ``median(current) / median(baseline)`` (baseline 1 if None).

    Deterministic: the generator is seeded, so the same samples give the same interval.
    """
    rng = np.random.default_rng(seed)
    cur = np.asarray(current, dtype=float)
    idx = rng.integers(0, len(cur), size=(resamples, len(cur)))
    top = np.median(cur[idx], axis=1)
    if baseline is None:
        bottom = np.ones(resamples)
    else:
        base = np.asarray(baseline, dtype=float)
        bottom = np.median(base[rng.integers(0, len(base), size=(resamples, len(base)))], axis=1)
    ratios = top / bottom
    alpha = (1.0 - confidence) / 2.0
    return float(np.quantile(ratios, alpha)), float(np.quantile(ratios, 1.0 - alpha))


def compare(
    current: Sequence[float],
    baseline: Sequence[float] | None = None,
    *,
    tolerance: float,
    mode: str = "stored",
    metric: str = "latency",
    drift: float | None = None,
    raw: dict[str, float | None] | None = None,
    layers: Sequence[LayerDelta] = (),
    extra_noise: float = 0.0,
) -> Verdict:
    """Decide pass / regression / inconclusive / improved from per-session figures.

    Args:
        current: this run's figure per session (normalized time, or paired ratio).
        baseline: the stored figure per session (``stored`` mode); None in ``paired`` mode.
        tolerance: relative slowdown allowed, e.g. 0.05.
        mode: ``stored`` or ``paired``.
        metric: what the figures are, for messages (``latency``, ``layer:<name>``).
        drift: the relative standard deviation no sampling removes, folded into the CI: the
            noise model's floor at the measured load (:mod:`pytest_roofline.gate.noise`; default
            :data:`DEFAULT_DRIFT` of the mode, its quiet floor).
        raw: raw seconds to report beside normalized figures.
        layers: per-layer deltas to carry into the verdict.
        extra_noise: a relative standard deviation known beyond the samples' own (the control
            probe ran at another speed than when the baseline was recorded), folded in like drift.

    A busy machine does not veto a verdict: its load is in ``drift`` (a wider interval), and
    the verdict is decided whenever that interval clears the tolerance band.

    Returns:
        The verdict; a pure function of its arguments.
    """
    if mode not in DEFAULT_DRIFT:
        raise ValueError(f"unknown gate mode {mode!r}")
    if tolerance < 0:
        raise ValueError("tolerance must be >= 0")
    current = [float(x) for x in current if math.isfinite(x) and x > 0]
    if mode == "stored" and not baseline:
        return new_verdict(current, tolerance=tolerance, metric=metric, raw=raw)
    if not current:
        raise ValueError("compare() needs at least one current figure")
    base = [float(x) for x in baseline] if baseline else None
    base_fig = float(np.median(base)) if base else 1.0
    cur_fig = float(np.median(current))
    ratio = cur_fig / base_fig
    low, high = bootstrap_ratio_ci(current, base)
    drift = DEFAULT_DRIFT[mode] if drift is None else drift
    spread = math.hypot(drift, extra_noise)
    # widened in log space: a ratio's interval stays positive however noisy (a linear
    # ``ratio - half`` printed "95% CI -0.178-1.402" under heavy noise); never narrower than a
    # t interval of the log figures, which a bootstrap of a few sessions is (of 4 sessions its
    # interval is their range, which holds the median 87.5 % of the time, not 95 %)
    sampled = max(math.log(high / low) / 2.0, small_sample_half(current, base))
    half = math.hypot(sampled, 1.96 * spread)
    low, high = min(low, ratio * math.exp(-half)), max(high, ratio * math.exp(half))
    noise = half
    limit = 1.0 + tolerance
    what = "time" if mode == "stored" else "time vs reference"
    status = judge_ratio(ratio, (low, high), noise, tolerance)
    if status == "regression":
        why = f"{what} +{_pct(ratio - 1)} exceeds the {_pct(tolerance)} tolerance"
    elif status == "improved":
        why = f"{what} {_pct(ratio - 1)} (faster)"
    elif status == "pass":
        why = f"ratio {ratio:.3f} within {_pct(tolerance)} (noise ±{_pct(noise)})"
    elif noise > tolerance:
        why = f"noise ±{_pct(noise)} is above the {_pct(tolerance)} tolerance"
    elif ratio > limit:
        why = f"{what} +{_pct(ratio - 1)} but within noise ±{_pct(noise)}"
    else:
        why = (
            f"ratio {ratio:.3f}, but a slowdown beyond the {_pct(tolerance)} tolerance is not ruled out "
            f"(95% bound {one_sided_bound(ratio, noise):.3f}, noise ±{_pct(noise)})"
        )
    return Verdict(
        status=status,
        mode=mode,
        metric=metric,
        current=cur_fig,
        tolerance=tolerance,
        baseline=base_fig if base else None,
        ratio=ratio,
        ci=(low, high),
        noise=noise,
        message=f"{metric}: {why}",
        raw=dict(raw or {}),
        layers=tuple(layers),
        sessions=len(current),
        floor=1.96 * spread,
    )


#: Student's t 97.5 % quantiles for 1..30 degrees of freedom (the normal 1.96 is reached slowly).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def _t975(df: float) -> float:
    if df < 1:
        return math.inf
    index = int(df)
    return _T975[index - 1] if index <= len(_T975) else 1.96 + 2.4 / df


def small_sample_half(current: Sequence[float], baseline: Sequence[float] | None = None) -> float:
    """The 95 % half-width in log space of a t interval of the (log) figures' mean: of
    ``current`` alone (paired), or of the difference from ``baseline`` (stored, Welch's degrees of
    freedom).  0 where a side has one figure (nothing to estimate a spread from).

    In stored mode each side is taken as spread as the WORSE of the two showed: the two runs are
    the same kind of figure on the same machine, and a side sampled in a short calm window (a new
    baseline stops once its 4 sessions agree) shows less spread than its runs have.  A baseline of 4
    sessions within ±1 % beside 28 current ones spread ±80 % under load read a 5 us model +40 %,
    ``regression``, against its own unchanged file (issue 35); the worse spread makes it
    ``inconclusive``."""
    cur = np.log(np.asarray(current, dtype=float))
    if len(cur) < 2:
        return 0.0
    spread_c = float(np.var(cur, ddof=1))
    var_c = spread_c / len(cur)
    if baseline is None:
        return _t975(len(cur) - 1) * math.sqrt(var_c)
    base = np.log(np.asarray(baseline, dtype=float))
    if len(base) < 2:
        return 0.0
    worse = max(spread_c, float(np.var(base, ddof=1)))
    var_c, var_b = worse / len(cur), worse / len(base)
    total = var_c + var_b
    if total <= 0:
        return 0.0
    df = total**2 / (var_c**2 / (len(cur) - 1) + var_b**2 / (len(base) - 1))
    return _t975(df) * math.sqrt(total)


def judge_ratio(ratio: float, ci: tuple[float, float], noise: float, tolerance: float) -> str:
    """The gate's decision rule: the one place it is written (docs/plugin.md, "Decision").

    ``ratio`` is new / old, ``ci`` its widened 95 % interval, ``noise`` the interval's half-width
    in log space (relative to the ratio), ``tolerance`` the allowed slowdown (0.05).  Stored mode,
    paired mode, layer metrics and ``roofline baseline diff``'s re-judgement all decide here:

    * ``regression``: the ratio is above ``1 + tol`` and its 99 % interval (``ratio ·
      exp(±2.576 σ)``) above 1, with the noise within the tolerance; or that whole interval above
      ``1 + tol``, however noisy (a 95 % bound let an A/A pairing of 4 sessions on a busy machine,
      1.039-1.088, read as a regression: a false alarm in one of 60);
    * ``improved``: the ratio below ``1 - tol`` and the CI and the 99 % interval below 1 with the
      noise within the tolerance; or that whole interval below ``1 - tol``, however noisy (the
      mirror of a regression's: an improvement is never claimed on less than a regression needs);
    * ``inconclusive``: otherwise, when the noise is above the tolerance;
    * ``pass``: the one-sided 95 % bound ``ratio · exp(1.645 σ)`` is within ``1 + tol``;
    * ``inconclusive``: anything else (a slowdown beyond the tolerance neither shown nor ruled out).
    """
    low, high = ci
    limit = 1.0 + tolerance
    shown = min(low, ratio * math.exp(-noise * REGRESSION_WIDENING))  # the 99 % interval's low end
    if ratio > limit and shown > 1.0 and (noise <= tolerance or shown > limit):
        return "regression"
    top = max(high, ratio * math.exp(noise * REGRESSION_WIDENING))  # the 99 % interval's high end
    if ratio < 1.0 - tolerance and top < 1.0 and (noise <= tolerance or top < 1.0 - tolerance):
        return "improved"
    if noise > tolerance:
        return "inconclusive"
    if one_sided_bound(ratio, noise) > limit:
        return "inconclusive"
    return "pass"


def one_sided_bound(ratio: float, noise: float) -> float:
    """The one-sided 95 % upper bound of ``ratio`` whose relative (log) 95 % half-width is ``noise``."""
    return ratio * math.exp(noise * ONE_SIDED)


def new_verdict(
    current: Sequence[float],
    *,
    tolerance: float,
    metric: str = "latency",
    raw: dict[str, float | None] | None = None,
    status: str = "new",
    message: str = "no baseline yet; this run's figure becomes the baseline",
) -> Verdict:
    """The verdict of a figure with nothing to compare against (``new`` or ``not-compared``).

    ``noise`` is the half-width of the figure's own bootstrap CI, relative (None below 2 sessions):
    a new baseline is sampled until it is well inside the tolerance.
    """
    values = [float(x) for x in current if math.isfinite(x)]
    figure = float(np.median(values)) if values else math.nan
    noise = None
    if len(values) >= 2 and figure > 0:
        low, high = bootstrap_ratio_ci(values, None)
        noise = (high - low) / 2.0 / figure
    return Verdict(
        status=status,
        mode="stored",
        metric=metric,
        current=figure,
        tolerance=tolerance,
        noise=noise,
        message=f"{metric}: {message}",
        raw=dict(raw or {}),
        sessions=len(values),
    )


def needs_more(verdict: Verdict) -> bool:
    """Whether sampling more sessions could sharpen ``verdict``: inconclusive, or a new baseline
    whose own noise exceeds half the tolerance."""
    if verdict.status == "inconclusive":
        return True
    return verdict.status == "new" and verdict.noise is not None and verdict.noise > verdict.tolerance / 2


def verdict_table(verdict: Verdict) -> list[str]:
    """The lines of a regression table: metric, baseline, current, ratio, CI, noise (+ layers)."""
    ci = f"[{verdict.ci[0]:.3f}, {verdict.ci[1]:.3f}]" if verdict.ci else "-"
    base = "1 (reference)" if verdict.mode == "paired" else _num(verdict.baseline)
    header = ("metric", "baseline", "current", "ratio", "95% CI", "noise", "tolerance")
    rows = [
        (
            verdict.metric,
            base,
            _num(verdict.current),
            f"{verdict.ratio:.3f}" if verdict.ratio is not None else "-",
            ci,
            f"±{_pct(verdict.noise)}" if verdict.noise is not None else "-",
            _pct(verdict.tolerance),
        ),
    ]
    raw = verdict.raw or {}
    if raw.get("baseline") is not None or raw.get("current") is not None:
        rows.append(("raw seconds", _sec(raw.get("baseline")), _sec(raw.get("current")), "", "", "", ""))
    lines = text_table(header, rows, left=len(header))
    for layer in sorted(verdict.layers, key=lambda la: la.growth, reverse=True)[:10]:
        change = f"x{layer.ratio:.3f}" if layer.ratio is not None else layer.status
        lines.append(
            f"  layer {layer.name}: {_sec(layer.baseline_time)} -> {_sec(layer.current_time)} ({change})"
        )
    return lines


def _pct(value: float | None) -> str:
    return fmt_pct(value, 2, missing="-", trim=True)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
