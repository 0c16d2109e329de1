"""Convolutional networks: a tiny residual CNN, ResNet-50 and MobileNetV2 (torchvision layouts)."""

from __future__ import annotations

import onnx

from .builder import GraphBuilder, Weights
from .layers import classifier_head, conv, inverted_residuals

__all__ = ["mobilenet_v2", "resnet50", "tiny_cnn"]


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
