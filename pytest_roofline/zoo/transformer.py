"""Transformer encoders: a tiny one, BERT-base (Hugging Face layout) and ViT-B/16 (torchvision)."""

from __future__ import annotations

import onnx
from onnx import TensorProto

from .builder import GraphBuilder, Weights
from .layers import dim_of, encoder_layer, layer_norm, shape_of

__all__ = ["bert_base", "tiny_transformer", "vit_b16"]


def _bert_like(
    name: str,
    *,
    seq: int | str,
    positions: int,
    hidden: int,
    heads: int,
    layers: int,
    ffn: int,
    vocab: int,
    weights: Weights,
    external_data: bool,
    pooler: bool,
) -> onnx.ModelProto:
    """A BERT encoder as the legacy exporter writes it (decomposed LayerNorm, Erf Gelu)."""
    b = GraphBuilder(name, weights=weights, external_data=external_data)
    ids = b.input("input_ids", ["batch", seq], TensorProto.INT64)
    mask_in = b.input("attention_mask", ["batch", seq], TensorProto.INT64)
    token_types = b.input("token_type_ids", ["batch", seq], TensorProto.INT64)
    x = b.op(
        "Gather", [b.weight("embeddings.word_embeddings.weight", [vocab, hidden], fan_in=1), ids], axis=0
    )
    seq_len = dim_of(b, shape_of(b, ids), 1, "embeddings")
    position_table = b.weight("embeddings.position_embeddings.weight", [positions, hidden], fan_in=1)
    positions_used = b.op(
        "Slice", [position_table, b.const("embeddings.start", [0]), seq_len, b.const("embeddings.axis", [0])]
    )
    type_table = b.weight("embeddings.token_type_embeddings.weight", [2, hidden], fan_in=1)
    x = b.op("Add", [b.op("Add", [x, b.op("Gather", [type_table, token_types], axis=0)]), positions_used])
    x = layer_norm(b, x, hidden, "embeddings.LayerNorm")
    mask = b.op("Cast", [b.op("Unsqueeze", [mask_in, b.const("mask.axes", [1, 2])])], to=TensorProto.FLOAT)
    mask = b.op("Mul", [b.op("Sub", [b.const("mask.one", 1.0), mask]), b.const("mask.min", -10000.0)])
    for index in range(layers):
        x = encoder_layer(b, x, hidden, heads, ffn, f"encoder.layer.{index}", mask=mask)
    b.output(x, "last_hidden_state", ["batch", seq, hidden])
    if pooler:
        first = b.op("Gather", [x, b.const("pooler.index", 0)], axis=1)
        w = b.weight("pooler.dense.weight", [hidden, hidden], fan_in=hidden)
        bias = b.weight("pooler.dense.bias", [hidden], fan_in=hidden * 100)
        b.output(b.op("Tanh", [b.op("Gemm", [first, w, bias], transB=1)]), "pooler_output", ["batch", hidden])
    return b.build()


def tiny_transformer(
    seq: int = 16,
    hidden: int = 64,
    heads: int = 4,
    layers: int = 2,
    *,
    weights: Weights = "random",
    external_data: bool = False,
) -> onnx.ModelProto:
    """A small BERT-like encoder with symbolic ``batch`` and ``seq`` dims (bind seq <= ``seq``).

    Heads are split by Reshapes whose target shapes come from Shape -> Gather -> Unsqueeze ->
    Concat chains, as PyTorch's legacy exporter writes them.
    """
    return _bert_like(
        "tiny_transformer",
        seq="seq",
        positions=seq,
        hidden=hidden,
        heads=heads,
        layers=layers,
        ffn=4 * hidden,
        vocab=100,
        weights=weights,
        external_data=external_data,
        pooler=False,
    )


def bert_base(seq: int = 128, *, weights: Weights = "zeros", external_data: bool = False) -> onnx.ModelProto:
    """Hugging Face BERT-base (uncased) with pooler at a static ``seq`` and symbolic ``batch``.

    11.17 GMACs of MatMul/Gemm (attention included) at seq 128.
    """
    return _bert_like(
        "bert_base",
        seq=seq,
        positions=512,
        hidden=768,
        heads=12,
        layers=12,
        ffn=3072,
        vocab=30522,
        weights=weights,
        external_data=external_data,
        pooler=True,
    )


def vit_b16(
    batch: int | None = None, *, weights: Weights = "zeros", external_data: bool = False
) -> onnx.ModelProto:
    """torchvision ViT-B/16 at 224x224 (pre-norm, fused QKV projection); 17.564 GMACs."""
    hidden, patches = 768, 196
    b = GraphBuilder("vit_b16", weights=weights, external_data=external_data)
    x = b.input("input", [batch or "N", 3, 224, 224])
    w = b.weight("conv_proj.weight", [hidden, 3, 16, 16], fan_in=768)
    x = b.op(
        "Conv",
        [x, w, b.weight("conv_proj.bias", [hidden], fan_in=hidden * 100)],
        kernel_shape=[16, 16],
        strides=[16, 16],
    )
    shape = shape_of(b, x)
    batch_dim = dim_of(b, shape, 0, "patches")
    x = b.op("Reshape", [x, b.op("Concat", [batch_dim, b.const("patches.shape", [hidden, patches])], axis=0)])
    x = b.op("Transpose", [x], perm=[0, 2, 1])
    token_shape = b.op("Concat", [batch_dim, b.const("class_token.shape", [1, hidden])], axis=0)
    token = b.op("Expand", [b.weight("class_token", [1, 1, hidden], fan_in=1), token_shape])
    x = b.op("Concat", [token, x], axis=1)
    x = b.op("Add", [x, b.weight("encoder.pos_embedding", [1, patches + 1, hidden], fan_in=1)])
    for index in range(12):
        x = encoder_layer(
            b,
            x,
            hidden,
            12,
            3072,
            f"encoder.layers.{index}",
            pre_norm=True,
            decomposed_ln=False,
            fused_qkv=True,
        )
    x = layer_norm(b, x, hidden, "encoder.ln", decomposed=False)
    x = b.op("Gather", [x, b.const("class_index", 0)], axis=1)
    w = b.weight("heads.head.weight", [1000, hidden], fan_in=hidden)
    b.output(
        b.op("Gemm", [x, w, b.weight("heads.head.bias", [1000], fan_in=100000)], transB=1),
        "output",
        [batch or "N", 1000],
    )
    return b.build()
