"""Models that are neither CNNs nor plain transformers: a tiny MLP, stacked LSTM + GRU, attention
written with Einsum, and a mixture-of-experts layer routed by TopK and NonZero. Weights seeded
random, batch 1, static shapes (the MoE's expert batches depend on the data)."""

from __future__ import annotations

import math

import onnx
from onnx import TensorProto

from .builder import GraphBuilder
from .layers import gelu_erf, layer_norm

__all__ = ["einsum_attention", "lstm_gru", "moe", "tiny_mlp"]


def tiny_mlp(features: int = 64, hidden: int = 128, classes: int = 10) -> onnx.ModelProto:
    """Gemm + Relu + Gemm on one ``features`` vector: microseconds of work."""
    b = GraphBuilder("tiny_mlp")
    x = b.input("input", [1, features])
    for index, (fan_in, fan_out) in enumerate(((features, hidden), (hidden, classes))):
        w = b.weight(f"fc{index}.weight", [fan_out, fan_in], fan_in=fan_in)
        x = b.op("Gemm", [x, w, b.weight(f"fc{index}.bias", [fan_out], fan_in=fan_out * 100)], transB=1)
        if index == 0:
            x = b.op("Relu", [x])
    b.output(x, "output", [1, classes])
    return b.build()


def lstm_gru(seq: int = 64, features: int = 128, hidden: int = 128, classes: int = 10) -> onnx.ModelProto:
    """A bidirectional LSTM (``hidden`` per direction) into a GRU (``2 * hidden``, PyTorch's
    ``linear_before_reset``) over ``seq`` steps at batch 1, the last step through a Gemm."""
    b = GraphBuilder("lstm_gru")
    x = b.input("input", [seq, 1, features])
    w = b.weight("lstm.W", [2, 4 * hidden, features], fan_in=features)
    r = b.weight("lstm.R", [2, 4 * hidden, hidden], fan_in=hidden)
    bias = b.weight("lstm.B", [2, 8 * hidden], fan_in=hidden * 100)
    y = b.op_multi("LSTM", [x, w, r, bias], 3, hidden_size=hidden, direction="bidirectional")[0]
    y = b.op("Transpose", [y], perm=[0, 2, 1, 3])  # (seq, 2, 1, h) -> (seq, 1, 2, h)
    y = b.op("Reshape", [y, b.const("merge_directions", [seq, 1, 2 * hidden])])
    width = 2 * hidden
    w = b.weight("gru.W", [1, 3 * width, width], fan_in=width)
    r = b.weight("gru.R", [1, 3 * width, width], fan_in=width)
    bias = b.weight("gru.B", [1, 6 * width], fan_in=width * 100)
    last = b.op_multi("GRU", [y, w, r, bias], 2, hidden_size=width, linear_before_reset=1)[1]
    last = b.op("Reshape", [last, b.const("last_shape", [1, width])])
    head = b.weight("fc.weight", [classes, width], fan_in=width)
    b.output(
        b.op("Gemm", [last, head, b.weight("fc.bias", [classes], fan_in=classes * 100)], transB=1),
        "output",
        [1, classes],
    )
    return b.build()


def einsum_attention(seq: int = 128, hidden: int = 256, heads: int = 4, layers: int = 2) -> onnx.ModelProto:
    """Pre-LN encoder layers whose projections and attention are Einsum equations
    (``bsd,dhe->bhse``, ``bhqe,bhke->bhqk``, ``bhqk,bhke->bqhe``, ``bqhe,hed->bqd``) and whose MLP
    is MatMul + GELU, at batch 1."""
    head_dim = hidden // heads
    b = GraphBuilder("einsum_attention")
    x = b.input("input", [1, seq, hidden])
    for index in range(layers):
        prefix = f"layers.{index}"
        h = layer_norm(b, x, hidden, f"{prefix}.ln_1", decomposed=False)
        q, k, v = (
            b.op(
                "Einsum",
                [h, b.weight(f"{prefix}.{n}", [hidden, heads, head_dim], fan_in=hidden)],
                equation="bsd,dhe->bhse",
            )
            for n in ("wq", "wk", "wv")
        )
        scores = b.op("Einsum", [q, k], equation="bhqe,bhke->bhqk")
        scores = b.op("Mul", [scores, b.const("scale", 1.0 / math.sqrt(head_dim))])
        context = b.op("Einsum", [b.op("Softmax", [scores], axis=-1), v], equation="bhqk,bhke->bqhe")
        wo = b.weight(f"{prefix}.wo", [heads, head_dim, hidden], fan_in=hidden)
        x = b.op("Add", [x, b.op("Einsum", [context, wo], equation="bqhe,hed->bqd")])
        h = layer_norm(b, x, hidden, f"{prefix}.ln_2", decomposed=False)
        h = b.op("MatMul", [h, b.weight(f"{prefix}.w1", [hidden, 4 * hidden], fan_in=hidden)])
        h = b.op(
            "MatMul",
            [gelu_erf(b, h, "gelu"), b.weight(f"{prefix}.w2", [4 * hidden, hidden], fan_in=4 * hidden)],
        )
        x = b.op("Add", [x, h])
    b.output(x, "output", [1, seq, hidden])
    return b.build()


def moe(
    tokens: int = 64, hidden: int = 256, experts: int = 8, top_k: int = 2, ffn: int = 512
) -> onnx.ModelProto:
    """A mixture-of-experts FFN layer (Mixtral-like routing) on ``tokens`` tokens: router MatMul,
    Softmax, TopK; per expert the tokens routed to it are found by Equal/ReduceMax/NonZero,
    gathered (GatherND), run through the expert's SiLU MLP, scaled by their routing weight and
    added back with ScatterND (reduction add). Expert batches depend on the data."""
    b = GraphBuilder("moe")
    x = b.input("input", [tokens, hidden])
    h = layer_norm(b, x, hidden, "norm", decomposed=False)
    router = b.op(
        "Softmax", [b.op("MatMul", [h, b.weight("router.weight", [hidden, experts], fan_in=hidden)])], axis=-1
    )
    weights, chosen = b.op_multi("TopK", [router, b.const("top_k", [top_k])], 2, axis=-1)
    weights = b.op("Div", [weights, b.op("ReduceSum", [weights, b.const("axes1", [1])], keepdims=1)])
    out = b.op("ConstantOfShape", [b.op("Shape", [h])])
    for expert in range(experts):
        prefix = f"experts.{expert}"
        hit = b.op("Cast", [b.op("Equal", [chosen, b.const(f"{prefix}.id", expert)])], to=TensorProto.FLOAT)
        gate = b.op("ReduceSum", [b.op("Mul", [weights, hit]), b.const("axes1", [1])], keepdims=0)
        routed = b.op("NonZero", [b.op("Greater", [gate, b.const("zero", 0.0)])])
        index = b.op("Transpose", [routed], perm=[1, 0])  # (n, 1) token indices
        selected = b.op("GatherND", [h, index])
        up = b.op("MatMul", [selected, b.weight(f"{prefix}.w1", [hidden, ffn], fan_in=hidden)])
        silu = b.op("Mul", [up, b.op("Sigmoid", [up])])
        silu = b.op(
            "Mul", [silu, b.op("MatMul", [selected, b.weight(f"{prefix}.w3", [hidden, ffn], fan_in=hidden)])]
        )
        down = b.op("MatMul", [silu, b.weight(f"{prefix}.w2", [ffn, hidden], fan_in=ffn)])
        scaled = b.op(
            "Mul", [down, b.op("Unsqueeze", [b.op("GatherND", [gate, index]), b.const("axes1", [1])])]
        )
        out = b.op("ScatterND", [out, index, scaled], reduction="add")
    b.output(b.op("Add", [x, out]), "output", [tokens, hidden])
    return b.build()
