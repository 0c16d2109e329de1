"""Exporter-like ONNX models built in memory, for tests, examples and benchmarks.

Full-size builders reproduce torchvision / Hugging Face architectures so that conv + linear
(+ attention matmul) MACs equal the published figures; their weights default to zeros (fast) and
``external_data=True`` makes weightless models that reference a never-written data file.

:data:`ZOO` (``zoo.suite``) is the varied model zoo the gate and roofline benchmarks measure on;
:func:`write_zoo` writes it, :func:`slower_variant` and :func:`resaved_copy` change a model.
"""

from __future__ import annotations

from .builder import GraphBuilder
from .cnn import mobilenet_v2, resnet50, tiny_cnn
from .suite import ZOO, ZooModel, resaved_copy, slower_variant, write_zoo, zoo_model
from .synthetic import synthetic_chain
from .transformer import bert_base, tiny_transformer, vit_b16

__all__ = [
    "PUBLISHED_GMACS",
    "ZOO",
    "GraphBuilder",
    "ZooModel",
    "bert_base",
    "mobilenet_v2",
    "resaved_copy",
    "resnet50",
    "slower_variant",
    "synthetic_chain",
    "tiny_cnn",
    "tiny_transformer",
    "vit_b16",
    "write_zoo",
    "zoo_model",
]

#: Published conv + linear (+ matmul) GMACs at batch 1 (torchvision ``_ops``; BERT at seq 128).
PUBLISHED_GMACS = {"resnet50": 4.089, "mobilenet_v2": 0.301, "vit_b16": 17.564, "bert_base": 11.17}
