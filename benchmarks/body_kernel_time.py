"""Does a control-flow body's heavy kernel get its real time? (issue 21: at one thread the zoo's Scan
FusedGemm read 109 % and its Loop body MatMul 108 % of their compute roof.)

For the zoo's Scan (32 steps, [4, 256] x [256, 256]) and Loop (16 trips, [16, 256] x [256, 256]):

* **removed**: the unprofiled run with and without the body's MatMul (replaced by an Identity of
  the state: the same shapes, no FLOPs), the fastest of ``--rounds`` alternating rounds; the
  difference is the MatMul's real time a run, its share of the whole run the reference;
* **per event**: the share ``roofline profile`` gives the MatMul's layer now
  (``profile.profiler_scales``: the profiler's cost charged per event);
* **one factor**: the share the single factor gave it (``profiler_scale`` x the profiled median,
  the rule before).

    python benchmarks/body_kernel_time.py --threads 1 --rounds 40

A share above the reference reads the kernel's fraction low (safe); below it, high.  Figures need
a quiet machine: the removed and full runs alternate, but a busy neighbour still moves them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import onnx


def _without_matmul(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its body's MatMul an Identity of its first input (no FLOPs, same shapes)."""
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    for node in bare.graph.node:
        for attr in node.attribute:
            if attr.type != onnx.AttributeProto.GRAPH:
                continue
            for index, inner in enumerate(attr.g.node):
                if inner.op_type == "MatMul":
                    outputs = list(inner.output)
                    identity = onnx.helper.make_node("Identity", [inner.input[0]], outputs, inner.name)
                    attr.g.node.remove(inner)
                    attr.g.node.insert(index, identity)
    return bare


def _fastest(sessions: list[Any], feeds: dict[str, np.ndarray], rounds: int, runs: int = 20) -> list[float]:
    best = [float("inf")] * len(sessions)
    for _ in range(rounds):
        for index, session in enumerate(sessions):
            started = time.perf_counter()
            for _ in range(runs):
                session.run(None, feeds)
            best[index] = min(best[index], (time.perf_counter() - started) / runs)
    return best


def measure(name: str, model: onnx.ModelProto, threads: int, rounds: int) -> dict[str, float]:
    """The MatMul's share of the run: by removing it, per event (now), by one factor (before)."""
    import onnxruntime as ort

    from pytest_roofline.api import profile_model
    from pytest_roofline.model import bind_input_shapes, make_inputs

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    sessions = [
        ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
        for m in (model, _without_matmul(model))
    ]
    feeds = make_inputs(model, bind_input_shapes(model))
    full, bare = _fastest(sessions, feeds, rounds)
    profile = profile_model(model, options={"intra_op_threads": str(threads)}, sessions=1, rounds=3)
    heavy = max(profile.layers, key=lambda layer: layer.flops)
    total = sum(layer.time for layer in profile.layers)
    raw = sum(statistics.median(layer.times) for layer in profile.layers if layer.times)
    return {
        "removed": (full - bare) / full,
        "per_event": heavy.time / total if total else 0.0,
        "one_factor": statistics.median(heavy.times) / raw if raw else 0.0,
        "full_ms": full * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    from pytest_roofline.zoo import control_flow

    models = {
        "scan": control_flow.scan_model(steps=32, batch=4, width=256),
        "loop": control_flow.loop_model(trips=16, batch=16, width=256),
    }
    print(f"{'model':<6} {'run ms':>7} {'removed':>8} {'per event':>10} {'one factor':>11}")
    for name, model in models.items():
        shares = measure(name, model, args.threads, args.rounds)
        print(
            f"{name:<6} {shares['full_ms']:7.3f} {shares['removed']:8.0%} {shares['per_event']:10.0%} "
            f"{shares['one_factor']:11.0%}"
        )


if __name__ == "__main__":
    main()
