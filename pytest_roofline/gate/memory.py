"""The memory verdict: one inference's peak against the baseline's, decided on one run.

An allocator's counters read the same bytes run after run (onnxruntime's arena: the same peak in
every session, at 2 threads and at 1), so no sampling is needed: the peak grew past the tolerance
or it did not.  The figure judged is the requested peak where both sides have one (the bytes the
tensors asked for: onnxruntime's BFC arena hands a request a chunk up to twice its size depending
on what earlier runs left free, so its in-use peak can move with no change in what the model
needs: einsum_attention with one more 0.5 MB graph output read 18 % less in use, the same bytes
requested), else the peak.  The tolerance is the larger of a share of the baseline's peak and a number of
bytes (``--roofline-memory-tolerance``, ``--roofline-memory-tolerance-bytes``).  A figure that is
not exact (a helper's peak RSS, to a page) is judged against at least :data:`INEXACT_FLOOR`.  A
growth is explained by the buffers the new graph keeps alive longer than the baseline's
(memory.change.kept_longer over the two graphs' schedules), named by the ONNX node writing them
("+65.5 kB at /enc/attn/Softmax: a 64x256 buffer now kept alive to the end"), where the caller
gives them and one is of about the growth's size; else by the layers whose allocations grew,
largest first (a kept buffer shows there at a later kernel, the one that no longer frees it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_roofline.fmt import fmt_bytes
from pytest_roofline.gate.verdict import Verdict

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pytest_roofline.gate.baseline import BaselineEntry
    from pytest_roofline.memory import LayerMemory, MemoryRecord
    from pytest_roofline.memory.estimate import Lifetime
    from pytest_roofline.profile import ModelProfile

__all__ = [
    "INEXACT_FLOOR",
    "MemoryTolerance",
    "against_entry",
    "compare_memory",
    "grown_layers",
    "memory_record",
    "memory_verdict",
]

#: The least relative tolerance of a figure that is not exact (peak RSS moves by pages).
INEXACT_FLOOR = 0.05
METRIC = "memory"


@dataclass(frozen=True)
class MemoryTolerance:
    """How much the peak may grow before a regression: ``share`` of the baseline's, or ``bytes``."""

    share: float = 0.01
    bytes: int = 0

    def allowed(self, baseline_peak: int, exact: bool) -> float:
        """Bytes of growth still a pass."""
        share = self.share if exact else max(self.share, INEXACT_FLOOR)
        return max(share * baseline_peak, float(self.bytes))


def memory_record(profile: ModelProfile) -> MemoryRecord | None:
    """What a baseline entry keeps of ``profile``'s memory (None where the backend reports none)."""
    from pytest_roofline.memory import MemoryRecord

    if profile.memory is None:
        return None
    layers = {la.name: la.memory for la in profile.layers if la.memory is not None}
    return MemoryRecord(profile.memory, layers)


def grown_layers(
    before: Mapping[str, LayerMemory], after: Mapping[str, LayerMemory], limit: int = 3
) -> list[tuple[str, int]]:
    """Layers whose allocations grew (name, bytes more), largest first; a new layer counts whole."""
    grown = []
    for name, now in after.items():
        was = before.get(name)
        more = now.allocated - (was.allocated if was is not None else 0)
        if more > 0:
            grown.append((name, more))
    return sorted(grown, key=lambda item: -item[1])[:limit]


def _explain(grown: list[tuple[str, int]]) -> str:
    return "; ".join(f"+{fmt_bytes(more)} at {name}" for name, more in grown)


def _explain_kept(kept: Sequence[Lifetime], growth: int) -> str:
    """The buffers kept alive longer of about ``growth``'s size, by their producers ("" for none;
    memory.change is imported only then: a gated test that grew nothing pays no import)."""
    if not kept or growth <= 0:
        return ""
    from pytest_roofline.memory.change import accounting_for, describe_kept

    return "; ".join(map(describe_kept, accounting_for(kept, growth)))


def memory_verdict(
    profile: ModelProfile,
    baseline: MemoryRecord | None,
    tolerance: MemoryTolerance,
    explicit: bool = False,
    kept: Sequence[Lifetime] = (),
) -> Verdict | None:
    """The memory verdict of ``profile`` against ``baseline``; None where the backend reports no
    memory and the test did not ask for it (``explicit``: the marker's metrics name ``memory``);
    ``kept``: the buffers the new graph keeps alive longer (memory.change.kept_longer)."""
    current = memory_record(profile)
    if current is None:
        if not explicit:
            return None
        why = f"{METRIC}: the {profile.backend} backend reported no memory for {profile.model_name}"
        return Verdict("not-compared", "stored", METRIC, float("nan"), tolerance.share, message=why)
    return compare_memory(current, baseline, tolerance, kept)


def compare_memory(
    current: MemoryRecord,
    baseline: MemoryRecord | None,
    tolerance: MemoryTolerance,
    kept: Sequence[Lifetime] = (),
) -> Verdict:
    """``current``'s peak against ``baseline``'s: new, incomparable (another source), regression,
    improved or pass; the plugin's memory verdict and ``roofline baseline diff``'s re-judgement.
    A growth is explained by the buffers of ``kept`` of about its size, else by the layers whose
    allocations grew."""
    peak = current.memory.peak
    # raw keys name their unit: the regression table prints a verdict's raw "baseline"/"current" as seconds
    raw: dict[str, float | None] = {"current_bytes": float(peak), "tolerance_bytes": float(tolerance.bytes)}
    if baseline is None:
        message = f"{METRIC}: no baseline yet; this run's peak ({fmt_bytes(peak)}) becomes the baseline"
        return Verdict("new", "stored", METRIC, float(peak), tolerance.share, message=message, raw=raw)
    if baseline.memory.source != current.memory.source:
        message = f"{METRIC}: measured by {current.memory.source}, the baseline by {baseline.memory.source}"
        return Verdict(
            "incomparable",
            "stored",
            METRIC,
            float(peak),
            tolerance.share,
            float(baseline.memory.peak),
            message=message,
        )
    before, figure = baseline.memory.peak, "peak"
    if current.memory.requested_peak and baseline.memory.requested_peak:
        peak, before, figure = current.memory.requested_peak, baseline.memory.requested_peak, "requested peak"
        raw["current_bytes"] = float(peak)
    exact = current.memory.exact and baseline.memory.exact
    allowed = tolerance.allowed(before, exact)
    ratio = peak / before if before > 0 else None
    raw = {**raw, "baseline_bytes": float(before), "allowed_bytes": allowed}
    growth = peak - before
    explained = _explain_kept(kept, growth) or _explain(grown_layers(baseline.layers, current.layers))
    change = (
        f"{fmt_bytes(before)} → {fmt_bytes(peak)} ({'+' if growth >= 0 else '-'}{fmt_bytes(abs(growth))})"
    )
    if growth > allowed:
        status, what = "regression", f"{figure} grew {change}, past the {fmt_bytes(allowed)} allowed"
    elif -growth > allowed:
        status, what = "improved", f"{figure} shrank {change}"
    else:
        status, what = "pass", f"{figure} {change}, within the {fmt_bytes(allowed)} allowed"
    return Verdict(
        status=status,
        mode="stored",
        metric=METRIC,
        current=float(peak),
        tolerance=tolerance.share,
        baseline=float(before),
        ratio=ratio,
        noise=0.0 if exact else INEXACT_FLOOR,
        message=f"{METRIC}: {what}" + (f"; {explained}" if explained and growth > 0 else ""),
        raw=raw,
        sessions=1,
        explanation=explained,
    )


def against_entry(
    verdict: Verdict, baseline: BaselineEntry | None, differences: Sequence[str], tolerance: MemoryTolerance
) -> Verdict:
    """``verdict`` as the baseline entry allows it: ``not-compared`` against an entry recorded before
    memory was measured (no missing baseline either), ``incomparable`` under other conditions."""
    from pytest_roofline.gate.judge import incomparable

    if baseline is not None and baseline.memory is None and verdict.status == "new":
        why = f"{METRIC}: the baseline entry holds no memory figures (recorded before they were measured)"
        return dataclasses.replace(
            verdict, status="not-compared", message=f"{why}; --roofline-update adds them"
        )
    if differences and verdict.status != "new":
        return dataclasses.replace(
            incomparable(differences, [verdict.current], tolerance.share), metric=METRIC
        )
    return verdict
