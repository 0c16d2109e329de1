"""Views of a run's results that several report formats share (labels, status words, sweeps).

Reports take :class:`~pytest_roofline.results.RunResults` objects; a saved run is read back with
:func:`pytest_roofline.results.load_results`.  The unit formatters live in
:mod:`pytest_roofline.fmt`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pytest_roofline.fmt import fmt_pct, fmt_seconds, is_finite

if TYPE_CHECKING:
    from pytest_roofline.gate.verdict import LayerDelta, Verdict
    from pytest_roofline.profile import Layer, ModelProfile
    from pytest_roofline.results import ProfileRecord, RunResults

__all__ = [
    "FLOP_CONVENTION",
    "accepted_message",
    "layer_headroom",
    "overhead_line",
    "peak_memory",
    "result_label",
    "status_word",
    "sweeps",
    "was_accepted",
    "worst_layers",
]

FLOP_CONVENTION = "FLOPs count 2 per multiply-accumulate (MAC); MACs are reported alongside."


def peak_memory(prof: ModelProfile) -> str:
    """One inference's peak memory (the backend's figure), ``-`` where it reports none."""
    from pytest_roofline.fmt import fmt_bytes

    return fmt_bytes(prof.memory.peak) if prof.memory is not None else "-"


def status_word(record: ProfileRecord) -> str:
    """Upper-case verdict word (PASS, REGRESSION, ...), or the pytest outcome without a verdict."""
    status = record.verdict.status
    if status and status != "not-compared":
        return status.upper()
    return (record.outcome or "not-compared").upper()


def was_accepted(results: RunResults, record: ProfileRecord) -> bool:
    """Whether ``--roofline-update`` wrote this record's figures as its baseline."""
    return results.accepted and record.entry is not None and record.outcome != "skipped"


def accepted_message(verdict: Verdict) -> str:
    """After ``--roofline-update``: what was written in place of the verdict's former baseline."""
    if verdict.status == "incomparable":
        former = "; ".join(verdict.reasons) or "other conditions"
        return (
            f"{verdict.metric}: written as the baseline under this run's conditions "
            f"(the former baseline's: {former})"
        )
    if verdict.status == "new":
        return f"{verdict.metric}: written as the first baseline"
    ratio = f" x{verdict.ratio:.3f}" if verdict.ratio is not None else ""
    return f"{verdict.metric}: written as the baseline (was {verdict.status}{ratio} against the former one)"


def result_label(record: ProfileRecord) -> str:
    """``model b8 onnxruntime``: how a result is named in reports."""
    profile = record.profile
    dims = "".join(f" {k}={v}" for k, v in sorted(profile.dims.items()))
    return f"{profile.model_name} b{profile.batch}{dims} {profile.backend}".strip()


def overhead_line(profile: ModelProfile) -> str | None:
    """What the dispatch floor costs the model, in one line; None when the roofline has no floor.

    ``dispatch floor 0.31 µs a kernel: 112 layers overhead-bound, 39% of kernel time; without it
    0.42 ms less`` (the profile's :attr:`~pytest_roofline.profile.ModelProfile.overhead`).
    A layer that read 0 on its timer counts as the interval it is: ``3 layers overhead-bound (1 under
    its timer's step, < 1.0 us), 39%-41% of kernel time; without the floor at most 0.43 ms less``."""
    overhead = profile.overhead
    if not overhead["dispatch_floor"]:
        return None
    under = int(overhead.get("under_step", 0.0))
    head = f"dispatch floor {fmt_seconds(overhead['dispatch_floor'])} a kernel: "
    if not under:
        return (
            f"{head}{overhead['layers']:.0f} layers overhead-bound, {fmt_pct(overhead['share'])} of kernel "
            f"time; without the floor {fmt_seconds(overhead['seconds'])} less"
        )
    whose, below = "its" if under == 1 else "their", fmt_seconds(overhead["under_step_seconds"])
    return (
        f"{head}{overhead['layers'] + under:.0f} layers overhead-bound ({under} under {whose} timer's step, "
        f"< {below}), {fmt_pct(overhead['share'])}-{fmt_pct(overhead['share_at_most'])} of kernel time; "
        f"without the floor at most {fmt_seconds(overhead['seconds_at_most'])} less"
    )


def layer_headroom(layer: Layer) -> float:
    """Seconds this layer would save at its roof (0 when no roof is known)."""
    fraction = layer.roofline_fraction
    if fraction is None or not is_finite(fraction) or fraction <= 0:
        return 0.0
    return layer.time - layer.roof_time


def worst_layers(record: ProfileRecord, limit: int = 5, threshold: float = 1.0) -> list[LayerDelta]:
    """Layers of the verdict whose time ratio exceeds ``threshold``, slowest-grown first."""
    slower = [
        la
        for la in record.verdict.layers
        if la.status == "new" or (la.ratio is not None and is_finite(la.ratio) and la.ratio > threshold)
    ]
    slower.sort(key=lambda la: la.growth, reverse=True)
    return slower[:limit]


def sweeps(records: Iterable[ProfileRecord]) -> list[dict[str, Any]]:
    """Results of one model and backend at several batch sizes (a batch sweep).

    Returns one entry per sweep: ``model``, ``backend``, ``precision``, ``points`` (batch,
    median s, throughput samples/s, p25, p75), ordered by batch.
    """
    groups: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = {}
    for record in records:
        profile = record.profile
        latency = profile.latency
        if not is_finite(latency.median) or latency.median <= 0:
            continue
        key = (profile.model_name, profile.backend, profile.precision)
        groups.setdefault(key, {})[profile.batch] = {
            "batch": profile.batch,
            "median": latency.median,
            "p25": latency.p25,
            "p75": latency.p75,
            "throughput": profile.throughput,
        }
    return [
        {"model": model, "backend": backend, "precision": precision, "points": [p[b] for b in sorted(p)]}
        for (model, backend, precision), p in groups.items()
        if len(p) > 1
    ]
