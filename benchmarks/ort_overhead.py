"""Does the tool's timing add overhead? Its e2e median vs a bare onnxruntime loop, interleaved.

Both subjects load the same MobileNetV2-size model (``zoo.mobilenet_v2()``, else a comparable
CNN built here) with the same session options, and are measured in one run with the project's
interleaved design (fresh session pairs × alternating rounds), so machine drift hits both alike:

- tool: ``OnnxRuntimeBackend.open(...).time(n)`` (IOBinding with inputs and outputs pre-bound);
- bare: ``InferenceSession.run(None, {name: ndarray})`` timed with ``perf_counter_ns`` per call,
  what a user would write by hand.

Prints both medians and tool/bare (target: within 2 %, i.e. 0.98-1.02 or faster).

``--tiny`` times a one-Relu model of a few microseconds instead, where any per-call cost of the
tool's loop shows in full (its RunOptions, which a timeout uses to stop a runaway run, must cost
nothing: onnxruntime 1.32's wrapper added ~30 us per call until ``gpu_graph_id`` was set).

Usage: ``python benchmarks/ort_overhead.py [--tiny] [--sessions 5] [--rounds 40] [--iterations 5]
[--option K=V]...``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import onnx

from pytest_roofline.backends.base import BackendSession, KernelProfile, get_backend
from pytest_roofline.measure.rounds import sample_interleaved
from pytest_roofline.model import ModelSpec, bind_input_shapes, make_inputs


def mobilenet_like() -> onnx.ModelProto:
    """``zoo.mobilenet_v2()`` when the zoo is installed, else a CNN of similar cost."""
    try:
        from pytest_roofline import zoo

        return zoo.mobilenet_v2(batch=1)
    except ImportError:
        from onnx import TensorProto, helper
        from onnx import numpy_helper as nh

        rng = np.random.default_rng(0)
        nodes, inits, x, channels = [], [], "input", 3
        plan = [
            (32, 2, 1),
            (32, 1, 32),
            (64, 1, 1),
            (64, 2, 64),
            (128, 1, 1),
            (128, 1, 128),
            (128, 1, 1),
            (128, 2, 128),
            (256, 1, 1),
        ]  # (out channels, stride, groups)
        for i, (out, stride, group) in enumerate(plan):
            w = nh.from_array(rng.standard_normal((out, channels // group, 3, 3)).astype(np.float32), f"w{i}")
            inits.append(w)
            nodes += [
                helper.make_node(
                    "Conv",
                    [x, w.name],
                    [f"c{i}"],
                    name=f"Conv_{i}",
                    pads=[1] * 4,
                    strides=[stride] * 2,
                    group=group,
                ),
                helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"Relu_{i}"),
            ]
            x, channels = f"r{i}", out
        graph = helper.make_graph(
            nodes,
            "cnn",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
            inits,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def tiny_relu() -> onnx.ModelProto:
    """One Relu on [1, 64] floats: a few microseconds, nearly all of it per-call overhead."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["input"], ["y"], name="relu")],
        "tiny_relu",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


class BareSession(BackendSession):
    """The loop a user writes by hand: numpy feeds, ``session.run``, perf_counter_ns per call."""

    def __init__(self, payload: bytes, options, providers, feeds) -> None:  # noqa: ANN001
        import onnxruntime as ort

        self.session = ort.InferenceSession(payload, options, providers=providers)
        self.feeds = feeds

    def time(self, iterations: int) -> list[float]:
        samples = []
        for _ in range(iterations):
            start = time.perf_counter_ns()
            self.session.run(None, self.feeds)
            samples.append((time.perf_counter_ns() - start) * 1e-9)
        return samples

    def profile(self, iterations: int) -> KernelProfile:
        raise NotImplementedError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--option", action="append", default=[], metavar="K=V")
    parser.add_argument("--tiny", action="store_true", help="a one-Relu model: per-call overhead in full")
    args = parser.parse_args()
    options = dict(item.split("=", 1) for item in args.option)
    model = tiny_relu() if args.tiny else mobilenet_like()
    payload = model.SerializeToString()
    inputs = make_inputs(model, bind_input_shapes(model, 1))
    backend = get_backend("onnxruntime", options)
    spec = ModelSpec.create(model, 1)
    openers = [
        lambda: backend.open(spec, inputs),
        lambda: BareSession(payload, backend.session_options(), backend.providers, inputs),
    ]
    start = time.perf_counter()
    tool, bare = sample_interleaved(
        openers, sessions=args.sessions, rounds=args.rounds, iterations=args.iterations, warmup=5
    )
    elapsed = time.perf_counter() - start
    tool_median = statistics.median(x for s in tool for x in s)
    bare_median = statistics.median(x for s in bare for x in s)
    per_session = [statistics.median(t) / statistics.median(b) for t, b in zip(tool, bare, strict=True)]
    print(f"model: {model.graph.name}  onnxruntime {backend.version()}  options {options or 'default'}")
    print(
        f"design: {args.sessions} session pairs x {args.rounds} interleaved rounds x {args.iterations} "
        f"inferences each, {elapsed:.1f} s"
    )
    print(f"tool median  {tool_median * 1e6:.2f} us  (IOBinding, inputs and outputs pre-bound)")
    print(f"bare median  {bare_median * 1e6:.2f} us  (InferenceSession.run with numpy)")
    print(f"ratio tool/bare  {tool_median / bare_median:.4f}  (target <= 1.02)")
    print("per-session-pair ratios  " + " ".join(f"{r:.3f}" for r in per_session))
    return 0


if __name__ == "__main__":
    sys.exit(main())
