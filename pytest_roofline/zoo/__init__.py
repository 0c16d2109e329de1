"""Exporter-like ONNX models built in memory, for tests, examples and benchmarks.

Full-size builders reproduce torchvision / Hugging Face architectures so that conv + linear
(+ attention matmul) MACs equal the published figures; their weights default to zeros (fast) and
``external_data=True`` makes weightless models that reference a never-written data file.
"""

from __future__ import annotations

from .builder import GraphBuilder
from .cnn import mobilenet_v2, resnet50, tiny_cnn
from .synthetic import synthetic_chain
from .transformer import bert_base, tiny_transformer, vit_b16

__all__ = [
    "PUBLISHED_GMACS",
    "GraphBuilder",
    "bert_base",
    "mobilenet_v2",
    "resnet50",
    "synthetic_chain",
    "tiny_cnn",
    "tiny_transformer",
    "vit_b16",
]

#: Published conv + linear (+ matmul) GMACs at batch 1 (torchvision ``_ops``; BERT at seq 128).
PUBLISHED_GMACS = {"resnet50": 4.089, "mobilenet_v2": 0.301, "vit_b16": 17.564, "bert_base": 11.17}
