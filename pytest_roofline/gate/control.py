"""Gate measurements: the control probe and the interleaved, budgeted sampling loop.

Stored mode times the model interleaved with a small control probe (convolutions and a GEMM,
the work mix of a vision/transformer model) in fresh sessions; the per-session ratio of their
p25s is the machine-normalized figure stored in baselines.  Paired mode times the working-tree
model interleaved with the model at a git reference.  Either way, when the gate answers
``inconclusive`` more sessions are sampled until the time budget is spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_roofline.gate.verdict import LayerDelta, Verdict, compare, needs_more, session_ratios

if TYPE_CHECKING:
    import onnx

    from pytest_roofline.backends.base import Backend, BackendSession

__all__ = ["GateDesign", "GateRun", "fit_probe", "memory_share", "probe_model", "probe_opener", "run_gate"]

PROBE_NAME = "control-probe-v3"


@dataclass(frozen=True)
class GateDesign:
    """How many fresh sessions, interleaved rounds and warm-up runs one batch of sampling uses."""

    sessions: int = 5
    rounds: int = 20
    iterations: int = 1
    warmup: int = 3
    budget: float = 10.0  # seconds of measuring before an inconclusive answer stands
    max_batches: int = 8


@dataclass(frozen=True)
class GateRun:
    """What the gate sampled: per-session figures, the subject's and control's raw p25s."""

    figures: tuple[float, ...]
    subject_p25: float
    control_p25: float
    seconds: float
    verdict: Verdict | None = None
    probe_blocks: dict[str, int] | None = None


@lru_cache(maxsize=8)
def probe_model(compute: int = 1, memory: int = 0) -> onnx.ModelProto:
    """The control probe, shaped like the model it normalizes.

    ``compute`` × (3×3 Conv 32→32 + Relu) on 1×32×28×28 (compute-bound) and ``memory`` ×
    (3×3 depthwise Conv + Relu) on 1×32×112×112 (memory-bound); both branches pooled, added and
    fed to a Gemm.  :func:`fit_probe` picks the counts so the probe's time and its compute/memory
    split match the model's; the counts are stored in the baseline and reused.
    """
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1234)

    def init(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32), name)

    nodes, inits = [], []

    def chain(prev: str, count: int, tag: str, shape: tuple[int, ...], group: int) -> str:
        for i in range(count):
            inits.append(init(f"{tag}_w{i}", shape))
            conv = helper.make_node(
                "Conv",
                [prev, f"{tag}_w{i}"],
                [f"{tag}_c{i}"],
                name=f"probe_{tag}_conv{i}",
                pads=[1] * 4,
                group=group,
            )
            nodes.extend(
                [
                    conv,
                    helper.make_node("Relu", [f"{tag}_c{i}"], [f"{tag}_r{i}"], name=f"probe_{tag}_relu{i}"),
                ]
            )
            prev = f"{tag}_r{i}"
        nodes.append(helper.make_node("GlobalAveragePool", [prev], [f"{tag}_g"], name=f"probe_{tag}_pool"))
        return f"{tag}_g"

    left = chain("x", compute, "compute", (32, 32, 3, 3), 1)
    right = chain("m", memory, "memory", (32, 1, 3, 3), 32)
    inits.append(init("wg", (32, 256)))
    nodes += [
        helper.make_node("Add", [left, right], ["s"], name="probe_add"),
        helper.make_node("Flatten", ["s"], ["f"], name="probe_flatten"),
        helper.make_node("Gemm", ["f", "wg"], ["y"], name="probe_gemm"),
    ]
    graph = helper.make_graph(
        nodes,
        PROBE_NAME,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 28, 28]),
            helper.make_tensor_value_info("m", TensorProto.FLOAT, [1, 32, 112, 112]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def probe_opener(backend: Backend, compute: int, memory: int = 0) -> Callable[[], BackendSession]:
    """A callable opening a fresh session of the probe of that shape on ``backend``."""
    from pytest_roofline.model import ModelSpec, bind_input_shapes, make_inputs

    probe = probe_model(compute, memory)
    spec = ModelSpec.create(probe)
    feeds = make_inputs(probe, bind_input_shapes(probe))
    return lambda: backend.open(spec, feeds)


def _probe_time(backend: Backend, compute: int, memory: int) -> float:
    with probe_opener(backend, compute, memory)() as session:
        session.time(3)
        return float(np.percentile(session.time(15), 25))


def fit_probe(
    backend: Backend, target: float, memory_share: float = 0.0, max_blocks: int = 256
) -> dict[str, int]:
    """Probe block counts whose time is about ``target`` seconds, ``memory_share`` of it memory-bound.

    Short measurements: 1 and 5 compute blocks (and 1 compute + 5 memory blocks) give a first
    estimate; the probe of that size is then timed and its counts rescaled to the target (twice).
    """
    if not math.isfinite(target) or target <= 0:
        return {"compute": 1, "memory": 0}
    base = _probe_time(backend, 1, 0)
    per_compute = max((_probe_time(backend, 5, 0) - base) / 4.0, 1e-12)
    share = min(max(memory_share, 0.0), 1.0)
    per_memory = max((_probe_time(backend, 1, 5) - base) / 5.0, 1e-12) if share > 0 else 1.0
    fixed = max(base - per_compute, 0.0)

    def counts(scale: float) -> dict[str, int]:
        work = max(target - fixed, 0.0) * scale
        compute = int(min(max(round(work * (1 - share) / per_compute), 1), max_blocks))
        memory = int(min(max(round(work * share / per_memory), 0), max_blocks)) if share > 0 else 0
        return {"compute": compute, "memory": memory}

    scale, blocks = 1.0, counts(1.0)
    for _ in range(2):  # rescale by what the probe of that size takes
        if blocks["compute"] + blocks["memory"] <= 5:
            break
        measured = _probe_time(backend, blocks["compute"], blocks["memory"])
        scale *= max(target - fixed, 0.0) / max(measured - fixed, 1e-12)
        blocks = counts(scale)
    return blocks


def memory_share(layers: Sequence[Any]) -> float:
    """Share of the layers' time spent in memory-bound layers (0 when bounds are unknown)."""
    total = sum(la.time for la in layers if la.bound)
    memory = sum(la.time for la in layers if la.bound == "memory")
    return memory / total if total > 0 else 0.0


def _p25(samples: Sequence[Sequence[float]]) -> float:
    pooled = [x for session in samples for x in session]
    return float(np.percentile(pooled, 25)) if pooled else float("nan")


def run_gate(
    openers: Sequence[Callable[[], BackendSession]],
    decide: Callable[[list[float], float, float], Verdict] | None,
    design: GateDesign,
    *,
    sampler: Callable[..., list[list[list[float]]]] | None = None,
) -> GateRun:
    """Sample ``openers[0]`` (subject) interleaved with ``openers[1]`` (control) until decided.

    Args:
        openers: two callables opening a fresh backend session each: subject, control.
        decide: builds a verdict from (figures, subject p25, control p25); None samples once.
        design: sessions, rounds and the time budget.
        sampler: :func:`pytest_roofline.measure.sample_interleaved` (injectable for tests).

    Returns:
        The figures (subject/control per session) and the last verdict.
    """
    if sampler is None:
        from pytest_roofline.measure import sample_interleaved as sampler
    start = time.perf_counter()
    subject: list[list[float]] = []
    control: list[list[float]] = []
    verdict = None
    for _ in range(design.max_batches):
        result = sampler(
            list(openers),
            sessions=design.sessions,
            rounds=design.rounds,
            iterations=design.iterations,
            warmup=design.warmup,
        )
        subject.extend(result[0])
        control.extend(result[1])
        figures = session_ratios(subject, control)
        if decide is None:
            break
        verdict = decide(figures, _p25(subject), _p25(control))
        elapsed = time.perf_counter() - start
        per_batch = elapsed / (len(subject) / design.sessions)
        if not needs_more(verdict) or elapsed + per_batch > design.budget:
            break
    return GateRun(
        figures=tuple(session_ratios(subject, control)),
        subject_p25=_p25(subject),
        control_p25=_p25(control),
        seconds=time.perf_counter() - start,
        verdict=verdict,
    )


def stored_decider(
    baseline_sessions: Sequence[float] | None,
    baseline_raw: float | None,
    tolerance: float,
) -> Callable[[list[float], float, float], Verdict]:
    """A ``decide`` callable for stored mode against a baseline's per-session figures."""

    def decide(figures: list[float], subject_p25: float, control_p25: float) -> Verdict:
        return compare(
            figures,
            list(baseline_sessions) if baseline_sessions else None,
            tolerance=tolerance,
            mode="stored",
            raw={"baseline": baseline_raw, "current": subject_p25},
        )

    return decide


def paired_decider(tolerance: float) -> Callable[[list[float], float, float], Verdict]:
    """A ``decide`` callable for paired mode (figures are new/reference ratios)."""

    def decide(figures: list[float], subject_p25: float, control_p25: float) -> Verdict:
        return compare(
            figures,
            None,
            tolerance=tolerance,
            mode="paired",
            raw={"baseline": control_p25, "current": subject_p25},
        )

    return decide


def layer_deltas(
    baseline_layers: dict[str, dict[str, float | None]], current: dict[str, float]
) -> list[LayerDelta]:
    """Per-layer raw time deltas: layers in both, layers new since the baseline, layers gone."""
    deltas = []
    for name, now in current.items():
        before = (baseline_layers.get(name) or {}).get("time")
        if before and now:
            deltas.append(LayerDelta(name, float(before), float(now), float(now) / float(before)))
        elif now and name not in baseline_layers:
            deltas.append(LayerDelta(name, 0.0, float(now), None, status="new"))
    for name, entry in baseline_layers.items():
        before = (entry or {}).get("time")
        if before and name not in current:
            deltas.append(LayerDelta(name, float(before), 0.0, None, status="gone"))
    return deltas
