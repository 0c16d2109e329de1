"""The control probe: a small model shaped like the measured one, timed interleaved with it.

Stored mode times the model interleaved with this probe (convolutions and a GEMM, the work mix of
a vision/transformer model) in fresh sessions; the per-session ratio of their p25s is the
machine-normalized figure stored in baselines (:mod:`pytest_roofline.gate.sampling`).  Not to be
confused with the *roof probes* of :mod:`pytest_roofline.roofline.probes`, which measure the
device's peaks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

    from pytest_roofline.backends.base import Backend
    from pytest_roofline.measure.rounds import SessionOpener

__all__ = ["PROBE_NAME", "fit_probe", "memory_share", "probe_model", "probe_opener"]

PROBE_NAME = "control-probe-v3"


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


def probe_opener(backend: Backend, compute: int, memory: int = 0) -> SessionOpener:
    """A callable opening a fresh session of the probe of that shape on ``backend``."""
    from pytest_roofline.measure.rounds import SessionOpener
    from pytest_roofline.model import ModelSpec, bind_input_shapes, make_inputs

    probe = probe_model(compute, memory)
    spec = ModelSpec.create(probe)
    return SessionOpener(backend, spec, make_inputs(probe, bind_input_shapes(probe)))


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
    """Share of the layers' time spent in memory-bound layers (0 when bounds are unknown).

    Overhead-bound layers (the dispatch floor's: views, one-float ops) count with the memory-bound
    ones, as they did before the floor made them a bound of their own: the probe's mix stays."""
    total = sum(la.time for la in layers if la.bound)
    memory = sum(la.time for la in layers if la.bound in ("memory", "overhead"))
    return memory / total if total > 0 else 0.0
