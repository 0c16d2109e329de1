"""Convolutional networks: a tiny residual CNN, ResNet-50, MobileNetV2 and EfficientNet-B0
(torchvision layouts), a small UNet and a dilated temporal convolution network (Conv1d)."""

from __future__ import annotations

import onnx

from .builder import GraphBuilder, Weights
from .layers import classifier_head, conv, inverted_residuals

__all__ = ["efficientnet_b0", "mobilenet_v2", "resnet50", "tcn", "tiny_cnn", "unet"]


def tiny_cnn(
    batch: int | None = None, *, weights: Weights = "random", external_data: bool = False
) -> onnx.ModelProto:
    """A small residual CNN on 3x32x32 images: Conv/Relu/MaxPool, one residual block, GAP, Gemm.

    Args:
        batch: a static batch size; None keeps the symbolic batch dim ``N``.
        weights: "random" (seeded) or "zeros".
        external_data: weights as references to a never-written ``tiny_cnn.data`` (analysis only).
    """
    b = GraphBuilder("tiny_cnn", weights=weights, external_data=external_data)
    x = b.input("input", [batch or "N", 3, 32, 32])
    x = conv(b, x, 3, 16, 3, act="relu")
    x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    y = conv(b, x, 16, 16, 3, act="relu")
    y = conv(b, y, 16, 16, 3)
    x = b.op("Relu", [b.op("Add", [y, x])])
    x = conv(b, x, 16, 32, 3, stride=2, act="relu")
    classifier_head(b, x, 32, 10, batch)
    return b.build()


def resnet50(
    batch: int | None = None, *, weights: Weights = "zeros", external_data: bool = False
) -> onnx.ModelProto:
    """torchvision ResNet-50 (v1.5: stride on the 3x3 conv), BN folded; 4.089 GMACs at 224x224.

    Args:
        batch: a static batch size; None keeps the symbolic batch dim ``N``.
        weights: "zeros" (fast, default) or "random".
        external_data: weights as references to a never-written ``resnet50.data`` (analysis only).
    """
    b = GraphBuilder("resnet50", weights=weights, external_data=external_data)
    x = b.input("input", [batch or "N", 3, 224, 224])
    x = conv(b, x, 3, 64, 7, stride=2, act="relu")
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for index in range(blocks):
            s = stride if index == 0 else 1
            y = conv(b, x, cin, width, 1, act="relu")
            y = conv(b, y, width, width, 3, stride=s, act="relu")
            y = conv(b, y, width, 4 * width, 1)
            shortcut = conv(b, x, cin, 4 * width, 1, stride=s) if index == 0 else x
            x = b.op("Relu", [b.op("Add", [y, shortcut])])
            cin = 4 * width
    classifier_head(b, x, 2048, 1000, batch)
    return b.build()


_MOBILENET_V2 = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(
    batch: int | None = None, *, weights: Weights = "zeros", external_data: bool = False
) -> onnx.ModelProto:
    """torchvision MobileNetV2 (width 1.0), BN folded, ReLU6 as Clip; 0.301 GMACs at 224x224.

    Args:
        batch: a static batch size; None keeps the symbolic batch dim ``N``.
        weights: "zeros" (fast, default) or "random".
        external_data: weights as references to a never-written ``mobilenet_v2.data`` (analysis only).
    """
    b = GraphBuilder("mobilenet_v2", weights=weights, external_data=external_data)
    x = b.input("input", [batch or "N", 3, 224, 224])
    x = conv(b, x, 3, 32, 3, stride=2, act="relu6")
    x, cin = inverted_residuals(b, x, 32, _MOBILENET_V2)
    x = conv(b, x, cin, 1280, 1, act="relu6")
    classifier_head(b, x, 1280, 1000, batch)
    return b.build()


# expand ratio, kernel, stride, out channels, repeats (torchvision efficientnet_b0)
_EFFICIENTNET_B0 = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)


def _swish(b: GraphBuilder, x: str) -> str:
    """SiLU as exported: ``x * Sigmoid(x)``."""
    return b.op("Mul", [x, b.op("Sigmoid", [x])])


def efficientnet_b0(size: int = 224, *, weights: Weights = "random") -> onnx.ModelProto:
    """torchvision EfficientNet-B0 at batch 1 (BN folded): MBConv blocks with squeeze-and-excitation
    (GlobalAveragePool, 1x1 convs, Sigmoid, Mul) and swish as Sigmoid + Mul; 0.39 GMACs at 224."""
    b = GraphBuilder("efficientnet", weights=weights)
    x = _swish(b, conv(b, b.input("input", [1, 3, size, size]), 3, 32, 3, stride=2))
    cin = 32
    for expand, k, stride, cout, repeats in _EFFICIENTNET_B0:
        for index in range(repeats):
            s = stride if index == 0 else 1
            hidden = cin * expand
            y = _swish(b, conv(b, x, cin, hidden, 1)) if expand != 1 else x
            y = _swish(b, conv(b, y, hidden, hidden, k, stride=s, groups=hidden))
            squeezed = max(1, cin // 4)
            scale = _swish(b, conv(b, b.op("GlobalAveragePool", [y]), hidden, squeezed, 1))
            y = b.op("Mul", [y, b.op("Sigmoid", [conv(b, scale, squeezed, hidden, 1)])])
            y = conv(b, y, hidden, cout, 1)
            x = b.op("Add", [y, x]) if s == 1 and cin == cout else y
            cin = cout
    x = _swish(b, conv(b, x, cin, 1280, 1))
    classifier_head(b, x, 1280, 1000, 1)
    return b.build()


def unet(size: int = 64, widths: tuple[int, ...] = (32, 64, 128, 256), classes: int = 2) -> onnx.ModelProto:
    """A small UNet at batch 1: double 3x3 conv + ReLU per level, MaxPool down; up by ConvTranspose
    2x2 stride 2 (the deepest level by nearest Resize + 1x1 conv), skip Concat, double conv; 1x1 head."""
    b = GraphBuilder("unet")
    x = b.input("input", [1, 3, size, size])

    def double(x: str, cin: int, cout: int) -> str:
        return conv(b, conv(b, x, cin, cout, 3, act="relu"), cout, cout, 3, act="relu")

    skips = []
    cin = 3
    for width in widths[:-1]:
        x = double(x, cin, width)
        skips.append((x, width))
        x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        cin = width
    x = double(x, cin, widths[-1])
    cin = widths[-1]
    for level, (skip, width) in enumerate(reversed(skips)):
        if level == 0:
            scales = b.const("up.scales", [1.0, 1.0, 2.0, 2.0])
            x = conv(b, b.op("Resize", [x, "", scales], mode="nearest"), cin, width, 1)
        else:
            w = b.weight(b.fresh("up") + ".weight", [cin, width, 2, 2], fan_in=cin * 4)
            x = b.op("ConvTranspose", [x, w], kernel_shape=[2, 2], strides=[2, 2])
        x = double(b.op("Concat", [skip, x], axis=1), 2 * width, width)
        cin = width
    head = conv(b, x, cin, classes, 1)
    b.output(head, "output", [1, classes, size, size])
    return b.build()


def tcn(
    length: int = 1024, channels: int = 64, inputs: int = 32, levels: int = 8, classes: int = 10
) -> onnx.ModelProto:
    """A dilated temporal convolution network at batch 1: a 1x1 Conv1d in, ``levels`` residual blocks
    of two causal kernel-3 Conv1d (dilation 1, 2, 4, ..., left padding 2 * dilation) with ReLU, a
    1x1 Conv1d out to ``classes``."""
    b = GraphBuilder("tcn")

    def conv1d(x: str, cin: int, cout: int, k: int, dilation: int = 1) -> str:
        tag = b.fresh("conv1d")
        w = b.weight(f"{tag}.weight", [cout, cin, k], fan_in=cin * k)
        bias = b.weight(f"{tag}.bias", [cout], fan_in=cout * 100)
        pads = [(k - 1) * dilation, 0]
        return b.op("Conv", [x, w, bias], kernel_shape=[k], dilations=[dilation], pads=pads)

    x = conv1d(b.input("input", [1, inputs, length]), inputs, channels, 1)
    for level in range(levels):
        dilation = 2**level
        y = b.op("Relu", [conv1d(x, channels, channels, 3, dilation)])
        y = b.op("Relu", [conv1d(y, channels, channels, 3, dilation)])
        x = b.op("Relu", [b.op("Add", [x, y])])
    b.output(conv1d(x, channels, classes, 1), "output", [1, classes, length])
    return b.build()
