"""Small graphs in the patterns real exporters write, built here with onnx.helper.

Each reproduces a trait of a model shipped on the registry that this project's zoo builder never
writes: Silero-VAD's scalar ``sr`` input, recurrent ``state`` ``[2, ?, H]`` and an ``If`` on the
sample rate (torch.onnx); Paddle2ONNX's ``?`` naming every dynamic axis, so H and W share one name
(PP-OCR's recognizer, 1x3x48x192); tf2onnx / jax2tf's unnamed dynamic dims (``dim_param`` empty),
``:0`` tensor names and ``unk__`` dims.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 18)]


def _weight(name: str, shape: tuple[int, ...], seed: int) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)


def _save(model: onnx.ModelProto, path: Path | None) -> onnx.ModelProto:
    model.ir_version = 8
    onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, str(path))
    return model


def vad_like(path: Path | None = None, hidden: int = 16, frame: int = 64) -> onnx.ModelProto:
    """Silero-VAD's interface: ``input [?, frame]``, ``state [2, ?, hidden]``, ``sr`` a 0-d int64.

    The sample rate picks a branch (``If sr == 16000``): the 16 kHz branch is one MatMul of
    ``frame x hidden``, the other resamples first (a ``frame x frame`` MatMul more), so the
    branch taken changes the work. Output ``prob`` is declared ``[?, 1]``.
    """
    w16 = _weight("w16", (frame, hidden), 1)
    w8 = _weight("w8", (frame, hidden), 2)
    resample = _weight("resample", (frame, frame), 3)

    def branch(name: str, nodes: list[onnx.NodeProto], out: str) -> onnx.GraphProto:
        return helper.make_graph(
            nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)]
        )

    then_graph = branch("at_16k", [helper.make_node("MatMul", ["input", "w16"], ["h16"])], "h16")
    else_graph = branch(
        "at_8k",
        [
            helper.make_node("MatMul", ["input", "resample"], ["up"]),
            helper.make_node("MatMul", ["up", "w8"], ["h8"]),
        ],
        "h8",
    )
    nodes = [
        helper.make_node("Equal", ["sr", "k16000"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["features"], then_branch=then_graph, else_branch=else_graph),
        helper.make_node("ReduceMean", ["state", "axes0"], ["state_mean"], keepdims=0),  # [?, hidden]
        helper.make_node("Add", ["features", "state_mean"], ["mixed"]),
        helper.make_node("Tanh", ["mixed"], ["h"]),
        helper.make_node("Unsqueeze", ["h", "axes0"], ["h1"]),
        helper.make_node("Concat", ["h1", "h1"], ["stateN"], axis=0),
        helper.make_node("ReduceMean", ["h", "axes1"], ["prob"], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "vad",
        [
            helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, frame]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, None, hidden]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, [None, 1]),
            helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, None, hidden]),
        ],
        [
            w16,
            w8,
            resample,
            numpy_helper.from_array(np.array(16000, np.int64), "k16000"),
            numpy_helper.from_array(np.array([0], np.int64), "axes0"),
            numpy_helper.from_array(np.array([1], np.int64), "axes1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="pytorch", producer_version="2.1.0")
    return _save(model, path)


def vad_inputs(batch: int = 1, hidden: int = 16, frame: int = 64, sr: int = 16000) -> dict[str, np.ndarray]:
    """What a user feeds the VAD: one frame, a zero state, the sample rate as a 0-d array."""
    rng = np.random.default_rng(0)
    return {
        "input": rng.standard_normal((batch, frame)).astype(np.float32),
        "state": np.zeros((2, batch, hidden), np.float32),
        "sr": np.array(sr, np.int64),
    }


def ocr_like(path: Path | None = None, channels: int = 8) -> onnx.ModelProto:
    """Paddle2ONNX's naming: ``x [?, 3, ?, ?]`` (every dynamic axis ``?``), a Conv, a pool over
    H, then a MatMul over W's positions, as PP-OCR's recognizer reads a 48 x W text line."""
    nodes = [
        helper.make_node("Conv", ["x", "conv_w"], ["conv"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("ReduceMean", ["relu", "axes2"], ["pooled"], keepdims=0),  # [?, C, W/2]
        helper.make_node("Transpose", ["pooled"], ["seq"], perm=[0, 2, 1]),  # [?, W/2, C]
        helper.make_node("MatMul", ["seq", "fc_w"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["softmax_0.tmp_0"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "paddle_ocr_rec",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?", "?"])],
        [helper.make_tensor_value_info("softmax_0.tmp_0", TensorProto.FLOAT, ["?", "?", 10])],
        [
            _weight("conv_w", (channels, 3, 3, 3), 4),
            _weight("fc_w", (channels, 10), 5),
            numpy_helper.from_array(np.array([2], np.int64), "axes2"),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=OPSET, producer_name="PaddlePaddle", producer_version="2.5"
    )
    return _save(model, path)


def tf_like(path: Path | None = None, features: int = 12) -> onnx.ModelProto:
    """tf2onnx / jax2tf's habits: unnamed dynamic dims (``dim_param`` empty, no value) on both
    axes of ``serving_default_x:0``, ``unk__`` names on the output, ``:0`` tensor names."""
    nodes = [
        helper.make_node("MatMul", ["serving_default_x:0", "dense/kernel:0"], ["dense/MatMul:0"]),
        helper.make_node("Add", ["dense/MatMul:0", "dense/bias:0"], ["dense/BiasAdd:0"]),
        helper.make_node("Relu", ["dense/BiasAdd:0"], ["StatefulPartitionedCall:0"]),
    ]
    x = helper.make_tensor_value_info("serving_default_x:0", TensorProto.FLOAT, [None, None, features])
    out = helper.make_tensor_value_info(
        "StatefulPartitionedCall:0", TensorProto.FLOAT, ["unk__7", "unk__8", 4]
    )
    graph = helper.make_graph(
        nodes,
        "tf2onnx",
        [x],
        [out],
        [_weight("dense/kernel:0", (features, 4), 6), _weight("dense/bias:0", (4,), 7)],
    )
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="tf2onnx", producer_version="1.16.1")
    return _save(model, path)


def sklearn_like(path: Path | None = None, zipmap: bool = True) -> onnx.ModelProto:
    """skl2onnx's classifier layout: ``LinearClassifier`` then ``ZipMap`` (ai.onnx.ml), whose
    output is a sequence of maps (``output_probability``), the declared type OpenVINO refuses."""
    nodes = [
        helper.make_node(
            "LinearClassifier",
            ["float_input"],
            ["label", "probabilities"],
            domain="ai.onnx.ml",
            coefficients=[0.1] * 8,
            intercepts=[0.0, 0.1],
            classlabels_ints=[0, 1],
            post_transform="LOGISTIC",
        )
    ]
    outputs = [helper.make_tensor_value_info("label", TensorProto.INT64, [None])]
    if zipmap:
        nodes.append(
            helper.make_node(
                "ZipMap",
                ["probabilities"],
                ["output_probability"],
                domain="ai.onnx.ml",
                classlabels_int64s=[0, 1],
            )
        )
        scalar = helper.make_tensor_type_proto(TensorProto.FLOAT, [])
        seq_of_maps = helper.make_sequence_type_proto(helper.make_map_type_proto(TensorProto.INT64, scalar))
        outputs.append(helper.make_value_info("output_probability", seq_of_maps))
    else:
        outputs.append(helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 2]))
    features = helper.make_tensor_value_info("float_input", TensorProto.FLOAT, [None, 4])
    graph = helper.make_graph(nodes, "sklearn", [features], outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="skl2onnx")
    return _save(model, path)
