"""Layers as PyTorch's exporters emit them: conv with folded BN, linear, LayerNorm, Gelu, attention."""

from __future__ import annotations

import math

from .builder import GraphBuilder

__all__ = [
    "attention",
    "classifier_head",
    "conv",
    "dim_of",
    "gelu_erf",
    "inverted_residuals",
    "layer_norm",
    "linear",
    "shape_of",
]


def conv(
    b: GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: str = ""
) -> str:
    """Conv (BatchNorm folded into its bias, as export in eval mode does) + optional Relu/Relu6."""
    tag = b.fresh("conv")
    w = b.weight(f"{tag}.weight", [cout, cin // groups, k, k], fan_in=cin // groups * k * k)
    bias = b.weight(f"{tag}.bias", [cout], fan_in=cout * 100)
    pad = k // 2
    y = b.op(
        "Conv", [x, w, bias], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=groups
    )
    if act == "relu":
        y = b.op("Relu", [y])
    elif act == "relu6":
        y = b.op("Clip", [y, b.const(f"{tag}.min", 0.0), b.const(f"{tag}.max", 6.0)])
    return y


def inverted_residuals(
    b: GraphBuilder, x: str, cin: int, stages: tuple[tuple[int, int, int, int], ...]
) -> tuple[str, int]:
    """MobileNetV2 inverted-residual stages ``(expand, cout, repeats, stride)``; returns (x, channels)."""
    for expand, cout, repeats, stride in stages:
        for index in range(repeats):
            s = stride if index == 0 else 1
            hidden = cin * expand
            y = conv(b, x, cin, hidden, 1, act="relu6") if expand != 1 else x
            y = conv(b, y, hidden, hidden, 3, stride=s, groups=hidden, act="relu6")
            y = conv(b, y, hidden, cout, 1)
            x = b.op("Add", [x, y]) if s == 1 and cin == cout else y
            cin = cout
    return x, cin


def classifier_head(
    b: GraphBuilder, x: str, features: int, classes: int, batch: int | None, output: str = "output"
) -> str:
    """GlobalAveragePool -> Flatten -> Gemm (torchvision's avgpool + fc), as graph output ``output``."""
    flat = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    w = b.weight("fc.weight", [classes, features], fan_in=features)
    bias = b.weight("fc.bias", [classes], fan_in=classes * 100)
    return b.output(b.op("Gemm", [flat, w, bias], transB=1), output, [batch or "N", classes])


def linear(b: GraphBuilder, x: str, fan_in: int, fan_out: int, prefix: str) -> str:
    """``x @ W + b`` as MatMul + Add (how a 3-D nn.Linear exports)."""
    w = b.weight(f"{prefix}.weight", [fan_in, fan_out], fan_in=fan_in)
    bias = b.weight(f"{prefix}.bias", [fan_out], fan_in=fan_out * 100)
    return b.op("Add", [b.op("MatMul", [x, w]), bias])


def layer_norm(b: GraphBuilder, x: str, hidden: int, prefix: str, decomposed: bool = True) -> str:
    """LayerNorm over the last axis: the legacy export's ReduceMean/Sub/Pow/Sqrt/Div or the op."""
    gamma = b.weight(f"{prefix}.weight", [hidden], fan_in=1)
    beta = b.weight(f"{prefix}.bias", [hidden], fan_in=hidden * 100)
    if not decomposed:
        return b.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)
    mean = b.op("ReduceMean", [x], axes=[-1])
    centered = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [centered, b.const(f"{prefix}.two", 2.0)])], axes=[-1])
    std = b.op("Sqrt", [b.op("Add", [var, b.const(f"{prefix}.eps", 1e-12)])])
    return b.op("Add", [b.op("Mul", [b.op("Div", [centered, std]), gamma]), beta])


def gelu_erf(b: GraphBuilder, x: str, prefix: str) -> str:
    """``x * 0.5 * (1 + erf(x / sqrt(2)))`` as Div/Erf/Add/Mul/Mul."""
    erf = b.op("Erf", [b.op("Div", [x, b.const(f"{prefix}.sqrt2", math.sqrt(2.0))])])
    one_plus = b.op("Add", [erf, b.const(f"{prefix}.one", 1.0)])
    return b.op("Mul", [b.op("Mul", [x, one_plus]), b.const(f"{prefix}.half", 0.5)])


def shape_of(b: GraphBuilder, x: str) -> str:
    """``Shape(x)``."""
    return b.op("Shape", [x])


def dim_of(b: GraphBuilder, shape: str, index: int, prefix: str) -> str:
    """``Unsqueeze(Gather(shape, index), 0)``: one dim as a 1-element tensor, as legacy export does."""
    gathered = b.op("Gather", [shape, b.const(f"{prefix}.idx{index}", index)], axis=0)
    return b.op("Unsqueeze", [gathered, b.const(f"{prefix}.axes0", [0])])


def _split_heads(b: GraphBuilder, x: str, heads: int, head_dim: int, perm: list[int], prefix: str) -> str:
    shape = shape_of(b, x)
    target = b.op(
        "Concat",
        [
            dim_of(b, shape, 0, prefix),
            dim_of(b, shape, 1, prefix),
            b.const(f"{prefix}.heads", [heads, head_dim]),
        ],
        axis=0,
    )
    return b.op("Transpose", [b.op("Reshape", [x, target])], perm=perm)


def attention(
    b: GraphBuilder,
    x: str,
    hidden: int,
    heads: int,
    prefix: str,
    mask: str | None = None,
    fused_qkv: bool = False,
) -> str:
    """Multi-head self-attention with the output projection, heads split by Shape-driven Reshapes.

    ``fused_qkv`` uses one (hidden, 3*hidden) projection and a Split (torchvision ViT); otherwise
    separate query/key/value projections (Hugging Face BERT). ``mask`` is an additive score mask.
    """
    head_dim = hidden // heads
    if fused_qkv:
        qkv = linear(b, x, hidden, 3 * hidden, f"{prefix}.in_proj")
        split = b.const(f"{prefix}.split", [hidden] * 3)
        q, k, v = b.op_multi("Split", [qkv, split], 3, axis=-1)
    else:
        q, k, v = (linear(b, x, hidden, hidden, f"{prefix}.{n}") for n in ("query", "key", "value"))
    q = _split_heads(b, q, heads, head_dim, [0, 2, 1, 3], f"{prefix}.q")
    k = _split_heads(b, k, heads, head_dim, [0, 2, 3, 1], f"{prefix}.k")
    v = _split_heads(b, v, heads, head_dim, [0, 2, 1, 3], f"{prefix}.v")
    scores = b.op("Div", [b.op("MatMul", [q, k]), b.const(f"{prefix}.scale", math.sqrt(head_dim))])
    if mask is not None:
        scores = b.op("Add", [scores, mask])
    context = b.op("Transpose", [b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])], perm=[0, 2, 1, 3])
    shape = shape_of(b, x)
    merged = b.op(
        "Concat",
        [
            dim_of(b, shape, 0, f"{prefix}.o"),
            dim_of(b, shape, 1, f"{prefix}.o"),
            b.const(f"{prefix}.hidden", [hidden]),
        ],
        axis=0,
    )
    return linear(b, b.op("Reshape", [context, merged]), hidden, hidden, f"{prefix}.output")


def encoder_layer(
    b: GraphBuilder,
    x: str,
    hidden: int,
    heads: int,
    ffn: int,
    prefix: str,
    *,
    mask: str | None = None,
    pre_norm: bool = False,
    decomposed_ln: bool = True,
    fused_qkv: bool = False,
) -> str:
    """A transformer encoder layer: post-norm (BERT) or pre-norm (ViT)."""
    norm = lambda t, name: layer_norm(b, t, hidden, f"{prefix}.{name}", decomposed_ln)  # noqa: E731
    if pre_norm:
        x = b.op("Add", [x, attention(b, norm(x, "ln_1"), hidden, heads, f"{prefix}.attn", mask, fused_qkv)])
        mlp = linear(b, norm(x, "ln_2"), hidden, ffn, f"{prefix}.mlp.0")
        mlp = linear(b, gelu_erf(b, mlp, f"{prefix}.mlp"), ffn, hidden, f"{prefix}.mlp.3")
        return b.op("Add", [x, mlp])
    x = norm(b.op("Add", [x, attention(b, x, hidden, heads, f"{prefix}.attn", mask, fused_qkv)]), "ln_1")
    mlp = linear(b, x, hidden, ffn, f"{prefix}.intermediate")
    mlp = linear(b, gelu_erf(b, mlp, f"{prefix}.intermediate"), ffn, hidden, f"{prefix}.output.dense")
    return norm(b.op("Add", [x, mlp]), "ln_2")
