"""Small residual CNNs built with onnx.helper for the diff tests, in exporter-like variants.

Names are either renumbered like an exporter that counts nodes (``Conv_7``: every name after an
inserted block shifts) or scoped like the legacy PyTorch exporter (``/stage0/stage0.1/conv1/Conv``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["Variant", "conv_net"]


@dataclass(frozen=True)
class Variant:
    """What differs from the base network; ``(stage, block)`` positions."""

    blocks: tuple[int, ...] = (2, 2)
    widen: tuple[int, int] | None = None
    fp16: tuple[int, int] | None = None
    sigmoid: tuple[int, int] | None = None  # the block's last Relu becomes a Sigmoid
    skip_from_stage_input: tuple[int, int] | None = None  # the block's Add reads the stage input


def conv_net(
    variant: Variant = Variant(), *, scoped: bool = False, seed: int = 0, width: int = 8
) -> onnx.ModelProto:
    """A residual CNN on 1x3x16x16: stem, stages of blocks (doubling channels), pool, Gemm."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    count = [0]

    def weight(shape: list[int], dtype: type = np.float32) -> str:
        name = f"w{len(inits)}"
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(dtype) * 0.1, name))
        return name

    def node(op: str, inputs: list[str], scope: list[str], local: str, **attrs: object) -> str:
        name = "/" + "/".join([*scope, local]) if scoped else f"{op}_{count[0]}"
        count[0] += 1
        out = f"t{count[0]}"
        nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def conv(
        x: str, cin: int, cout: int, scope: list[str], local: str, stride: int = 1, half: bool = False
    ) -> str:
        dtype = np.float16 if half else np.float32
        w, b = weight([cout, cin, 3, 3], dtype), weight([cout], dtype)
        return node(
            "Conv",
            [x, w, b],
            [*scope, local],
            "Conv",
            kernel_shape=[3, 3],
            pads=[1] * 4,
            strides=[stride] * 2,
        )

    x = node("Relu", [conv("input", 3, width, ["stem"], "stem")], [], "Relu")
    channels = width
    for stage, count_blocks in enumerate(variant.blocks):
        if stage:
            x = node(
                "Relu",
                [conv(x, channels, channels * 2, [f"down{stage}"], f"down{stage}", stride=2)],
                [],
                f"Relu_{stage}",
            )
            channels *= 2
        stage_input = x
        for index in range(count_blocks):
            here = (stage, index)
            scope = [f"stage{stage}", f"stage{stage}.{index}"]
            half = variant.fp16 == here
            inner = channels * 2 if variant.widen == here else channels
            h = node("Cast", [x], scope, "Cast", to=TensorProto.FLOAT16) if half else x
            y = node("Relu", [conv(h, channels, inner, scope, "conv1", half=half)], scope, "Relu")
            y = conv(y, inner, channels, scope, "conv2", half=half)
            skip = stage_input if variant.skip_from_stage_input == here else h
            y = node("Add", [skip, y], scope, "Add")
            y = node("Sigmoid" if variant.sigmoid == here else "Relu", [y], scope, "Relu_1")
            x = node("Cast", [y], scope, "Cast_1", to=TensorProto.FLOAT) if half else y
    pooled = node("Flatten", [node("GlobalAveragePool", [x], [], "GlobalAveragePool")], [], "Flatten", axis=1)
    logits = node("Gemm", [pooled, weight([10, channels]), weight([10])], ["fc"], "Gemm", transB=1)
    nodes.append(helper.make_node("Identity", [logits], ["output"], name="output_identity"))
    graph = helper.make_graph(
        nodes,
        "conv_net",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
